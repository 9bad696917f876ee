"""Held-out checkpoint selection: candidates, the pick rule, RUN@selected, and never reading test data."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from helpers import fake_model_folder

from trlvr.cli.main import main as cli
from trlvr.data import holdout_split, load_problems
from trlvr.errors import UserError
from trlvr.eval.api import resolve_senior
from trlvr.experiments.selection import (
    default_direction,
    list_checkpoints,
    pick,
    suite_for,
)
from trlvr.toy.task import make_splits
from trlvr.toy.world import ASSETS_DIR, _rows, _write_jsonl


def test_pick_breaks_ties_towards_the_earliest_step_and_honours_direction():
    table = [{"step": 10, "value": 0.5}, {"step": 20, "value": 0.7}, {"step": 30, "value": 0.7}]
    assert pick(table, "max")["step"] == 20
    assert pick(table, "min")["step"] == 10
    with pytest.raises(UserError, match="direction"):
        pick(table, "up")


def test_metric_names_map_to_suites_and_directions():
    assert suite_for("handoff/pass@1") == ["handoff"]
    assert suite_for("dose-0.5/pass@1") == ["dose"]
    assert default_direction("legibility/junior_ce") == "min"
    assert default_direction("solo/pass@4") == "max"
    with pytest.raises(UserError, match="expected a results.json metric"):
        suite_for("accuracy")


def test_candidates_skip_checkpoints_without_weights(tmp_path):
    for step, weights in ((5, True), (10, False), (15, True)):
        d = tmp_path / f"checkpoint-{step}"
        d.mkdir()
        if weights:
            fake_model_folder(d)
    (tmp_path / "checkpoint-junk").mkdir()
    assert [c.step for c in list_checkpoints(tmp_path)] == [5, 15]
    with pytest.raises(UserError, match="no checkpoint with weights"):
        list_checkpoints(tmp_path / "checkpoint-10")


def test_preemption_checkpoints_are_resume_points_not_candidates(tmp_path):
    for step in (16, 50, 100):
        fake_model_folder(tmp_path / f"checkpoint-{step}")
    (tmp_path / "checkpoint-16" / "preempted.json").write_text('{"signal": "SIGTERM", "step": 16}')
    assert [c.step for c in list_checkpoints(tmp_path)] == [50, 100]
    for step in (50, 100):
        shutil.rmtree(tmp_path / f"checkpoint-{step}")
    with pytest.raises(UserError, match=r"only pre-emption checkpoints \(checkpoint-16\); resume the run"):
        list_checkpoints(tmp_path)


def test_holdout_split_is_content_based_and_order_free():
    problems = load_problems_rows(make_splits(60, 4)[0])
    train, held = holdout_split(problems, 10, seed=3)
    _, held_rev = holdout_split(problems[::-1], 10, seed=3)
    assert {p.problem for p in held} == {p.problem for p in held_rev}
    assert not {p.problem for p in held} & {p.problem for p in train}
    assert len(train) + len(held) == len(problems)


def load_problems_rows(toy_problems):
    import tempfile

    path = Path(tempfile.mkdtemp()) / "rows.jsonl"
    _write_jsonl(path, _rows(toy_problems))
    return list(load_problems(str(path)))


@pytest.fixture
def fake_run(tmp_path):
    """A run folder whose checkpoint-10 is the toy junior (weak) and checkpoint-20 the toy senior (strong)."""
    run = tmp_path / "run"
    run.mkdir()
    shutil.copytree(ASSETS_DIR / "junior", run / "checkpoint-10")
    shutil.copytree(ASSETS_DIR / "senior", run / "checkpoint-20")
    train, test = make_splits(200, 40, seed=0)
    _write_jsonl(tmp_path / "val.jsonl", _rows(train[:12]))
    _write_jsonl(tmp_path / "test.jsonl", _rows(test))
    record = {
        "tandem": {"senior": str(ASSETS_DIR / "senior"), "junior": str(ASSETS_DIR / "junior"), "holdout": 0}
    }
    (run / "trlvr_run.json").write_text(json.dumps(record))
    return run


def select_args(run, val):
    return [
        "select",
        str(run),
        "--val",
        str(val),
        "--metric",
        "solo/pass@1",
        "--n",
        "2",
        "--max-new-tokens",
        "64",
        "--no-progress",
    ]


def test_select_picks_the_stronger_checkpoint_and_never_reads_test_data(fake_run, monkeypatch, capsys):
    import trlvr.data.loaders as loaders

    read = []
    real = loaders.load_problems

    def spy(source, *a, **kw):
        read.append(str(source))
        return real(source, *a, **kw)

    monkeypatch.setattr(loaders, "load_problems", spy)
    monkeypatch.setattr("trlvr.data.load_problems", spy)
    val = fake_run.parent / "val.jsonl"
    assert cli(select_args(fake_run, val)) == 0
    first = json.loads((fake_run / "selected.json").read_text())
    assert first["step"] == 20 and first["metric"] == "solo/pass@1"
    assert first["table"][0]["value"] < first["table"][1]["value"]
    assert (fake_run / "select" / "val" / "curve.png").stat().st_size > 0

    # Poison the test file (answers rotated): selection must not change, and never opened it.
    test = fake_run.parent / "test.jsonl"
    rows = [json.loads(line) for line in test.read_text().splitlines()]
    answers = [r["answer"] for r in rows]
    for r, a in zip(rows, answers[1:] + answers[:1], strict=True):
        r["answer"] = a
    test.write_text("".join(json.dumps(r) + "\n" for r in rows))
    shutil.rmtree(fake_run / "select")
    assert cli(select_args(fake_run, val)) == 0
    second = json.loads((fake_run / "selected.json").read_text())
    assert (second["step"], second["table"]) == (first["step"], first["table"])
    assert all("test" not in Path(p).name for p in read)

    path, record = resolve_senior(f"{fake_run}@selected")
    assert (
        path == str(fake_run / "checkpoint-20")
        and record["val"]["fingerprint"] == first["val"]["fingerprint"]
    )


def test_select_split_needs_a_run_that_held_out(fake_run, capsys):
    assert cli(["select", str(fake_run), "--val", "split:50", "--no-progress"]) == 2
    assert "held out no training problems; train with --holdout 50" in capsys.readouterr().err
    with pytest.raises(UserError, match="no selection recorded"):
        resolve_senior(f"{fake_run}@selected")


def test_training_curves_read_the_log_history_and_the_selection_table(tmp_path):
    """A run's curves: logged metrics from trainer_state.json, and `trlvr select`'s metric over steps."""
    from trlvr.errors import UserError
    from trlvr.experiments.curves import SELECTION, load_curves

    history = [{"step": s, "reward": 0.1 * s, "tandem/senior_share": 0.5} for s in (1, 2, 3)] + [{"step": 3}]
    (tmp_path / "checkpoint-3").mkdir()
    (tmp_path / "checkpoint-3" / "trainer_state.json").write_text(json.dumps({"log_history": history}))
    curves = load_curves(tmp_path)
    assert curves["reward"].steps.tolist() == [1, 2, 3] and curves["reward"].values.tolist() == [
        0.1,
        0.2,
        0.30000000000000004,
    ]
    assert SELECTION not in curves and "KL" not in curves  # never logged: no curve
    table = [{"step": 3, "value": 0.7}, {"step": 1, "value": 0.5}]
    (tmp_path / "selected.json").write_text(json.dumps({"step": 3, "table": table}))
    sel = load_curves(tmp_path)[SELECTION]
    assert sel.steps.tolist() == [1, 3] and sel.values.tolist() == [0.5, 0.7]
    (tmp_path / "selected.json").write_text(json.dumps({"step": 3}))
    with pytest.raises(UserError, match="selected.json: not a selection record"):
        load_curves(tmp_path)

"""Issue 29, rule 3: every input is checked before work starts, the same way everywhere.

`trlvr eval` refuses golds the grader cannot parse as `data check` and training do; `trlvr study plan`
and `study run` check every stage's command line with that command's own checks before any stage
runs; `trlvr select` checks its metric name before evaluating a checkpoint. (Tandem training at
p = 0.99: tests/test_trust_rules_mask.py; a study identified by its meaning: tests/test_trust_rules_study.py.)
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_study import TINY, FakeStages, write

from trlvr.cli.main import main as cli
from trlvr.toy.task import make_splits
from trlvr.toy.world import ASSETS_DIR, _rows, _write_jsonl

SENIOR, JUNIOR = ASSETS_DIR / "senior", ASSETS_DIR / "junior"
UNPARSEABLE = "\\frac{1}"  # a gold no grader reads (one part of a fraction, braces balanced): check_golds: "unparseable"


def _data_with_gold(path: Path, bad_gold: str) -> Path:
    rows = _rows(make_splits(50, 8, seed=0)[1])[:6]
    rows[2] = {**rows[2], "answer": bad_gold}
    _write_jsonl(path, rows)
    return path


def test_eval_refuses_golds_the_grader_cannot_parse_naming_file_and_row(tmp_path, capsys):
    """The issue's case: a gold the grader cannot read scored every sample 0 (pass@1 0%, exit 0, no console line).
    (The issue's gold was `\\$18`, which the grader now reads as 18: an unclosed fraction stands in for it.)"""
    data = _data_with_gold(tmp_path / "test.jsonl", UNPARSEABLE)
    argv = [
        "eval",
        "--senior",
        str(SENIOR),
        "--junior",
        str(JUNIOR),
        "--data",
        f"toy={data}",
        "--n",
        "2",
        "--k",
        "1",
        "--suite",
        "solo",
        "--max-new-tokens",
        "16",
        "--out",
        str(tmp_path / "e"),
        "--no-progress",
    ]
    assert cli(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and str(data) in err[0] and "row 3" in err[0] and "not parseable" in err[0]
    assert not (tmp_path / "e").exists()  # refused before anything was written
    # `trlvr data check` reports the same row the same way
    assert cli(["data", "check", str(data)]) != 0
    assert "row 3" in capsys.readouterr().out


def test_select_checks_the_metric_name_before_evaluating_a_checkpoint(tmp_path, capsys, monkeypatch):
    from trlvr.experiments import select_run

    run = tmp_path / "run"
    (run / "checkpoint-5").mkdir(parents=True)
    (run / "trlvr_run.json").write_text(
        json.dumps({"tandem": {"senior": str(SENIOR), "junior": str(JUNIOR)}})
    )
    _write_jsonl(tmp_path / "val.jsonl", _rows(make_splits(50, 8, seed=0)[1])[:4])
    called = []
    monkeypatch.setattr(select_run, "select_checkpoint", lambda *a, **k: called.append(a))
    for metric, shown in (
        ("handoff/pass@l", "is not a metric this selection's evaluation produces"),
        (
            "handoff/pass@8",
            "is not a metric this selection's evaluation produces (suite handoff, k [1, 2, 4])",
        ),
        ("handof/pass@1", "expected a results.json metric"),
    ):
        assert (
            cli(["select", str(run), "--val", str(tmp_path / "val.jsonl"), "--metric", metric, "--n", "4"])
            == 2
        )
        assert shown in capsys.readouterr().err
    assert called == []


# ---- the whole study, before any stage ------------------------------------------------------------------


def _bad(tmp_path: Path, name: str) -> dict[str, tuple]:
    missing = tmp_path / "missing" / "test.jsonl"
    bad_gold = _data_with_gold(tmp_path / "gold.jsonl", UNPARSEABLE)
    return {  # (edit of TINY, the key the one line names, text it holds)
        "metric misspelt": (
            ("metric: handoff/pass@1", "metric: handoff/pass@l"),
            "selection.metric",
            "is not a metric this selection's evaluation produces",
        ),
        "metric unknown": (
            ("metric: handoff/pass@1", "metric: handof/pass@1"),
            "selection.metric",
            "expected a results.json metric",
        ),
        "split vs holdout": (
            ('val: "split:20"', 'val: "split:80"'),
            "selection.val",
            "--val split:80: the run held out 20 problems, not 80; use --val split:20",
        ),
        "selection n 0": (
            ("metric: handoff/pass@1, n: 2", "metric: handoff/pass@1, n: 0"),
            "selection.n",
            "--n/--samples: expected an integer in [1, 10000], got '0'",
        ),
        "dtype": (("limit: 30}", "limit: 30, dtype: fp16}"), "evaluation.dtype", "invalid choice: 'fp16'"),
        "missing evaluation file": (
            ("data: test,", f"data: toy={missing},"),
            "evaluation.data",
            str(missing),
        ),
        "unparseable gold": (
            ("data: test,", f"data: toy={bad_gold},"),
            "evaluation.data",
            "row 3: answer not parseable",
        ),
        "eval budget": (
            ("limit: 30}", "limit: 30, max_new_tokens: 0}"),
            "evaluation.max_new_tokens",
            "--max-new-tokens: expected an integer in [1, 2**63 - 1], got '0'",
        ),
        "train value": (
            ("max_gap: 32, baseline: grpo-spaced", "max_gap: 32, p: 1.5, baseline: grpo-spaced"),
            "variants.word-spaced",
            "p",
        ),
    }


CASES = [
    "metric misspelt",
    "metric unknown",
    "split vs holdout",
    "selection n 0",
    "dtype",
    "missing evaluation file",
    "unparseable gold",
    "eval budget",
    "train value",
]


@pytest.mark.parametrize("case", CASES)
def test_study_plan_and_run_check_the_whole_study_before_any_stage(tmp_path, capsys, monkeypatch, case):
    """The issue's cases: `study plan` accepted all of these, and `study run` found out after every variant trained."""
    from trlvr.cli import study_cmd

    (old, new), key, text = _bad(tmp_path, case)[case]
    assert old in TINY
    p = write(tmp_path, TINY.replace(old, new, 1))
    assert cli(["study", "plan", str(p), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"trlvr study: error: study {p}: {key}"), err
    assert text in err[0], err
    fake = FakeStages()
    monkeypatch.setattr(study_cmd, "execute", fake)
    assert cli(["study", "run", str(p), "--out", str(tmp_path / "out"), "--no-report"]) == 2
    assert fake.calls == [] and not (tmp_path / "out").exists()  # nothing ran, nothing was claimed


def test_the_shipped_studies_pass_the_stage_checks(tmp_path, capsys):
    """The checks accept what the shipped studies ask for (hub models and data are checked when their stage runs)."""
    from trlvr.cli.study_cmd import validate
    from trlvr.experiments.study_spec import load_study

    root = Path(__file__).resolve().parents[1] / "studies"
    for name in ("toy-granularity.yaml", "toy-cross.yaml", "paper-table2.yaml"):
        validate(load_study(root / name), tmp_path / name)


def test_the_stand_in_gold_is_one_the_grader_cannot_read():
    from trlvr.rewards import check_golds

    assert check_golds([UNPARSEABLE, "\\$18"]) == ["unparseable", None]  # the issue's `\$18` is read now


def test_a_study_evaluation_may_skip_bad_rows_and_its_eval_stage_says_so(tmp_path, capsys):
    """`skip_bad_rows: true` in a study's evaluation: its eval stages run `trlvr eval --skip-bad-rows`, so the whole-
    study check accepts a gold the grader cannot read (the stage lists it in results.json); not a bool: one line."""
    bad_gold = _data_with_gold(tmp_path / "gold.jsonl", UNPARSEABLE)
    text = TINY.replace("data: test,", f"data: toy={bad_gold}, skip_bad_rows: true,", 1)
    p = write(tmp_path, text)
    assert cli(["study", "plan", str(p), "--out", str(tmp_path / "out")]) == 0
    printed = capsys.readouterr().out
    evals = [ln for ln in printed.splitlines() if " eval " in ln and "--data" in ln]
    assert evals and all("--skip-bad-rows" in ln for ln in evals)
    p = write(tmp_path, text.replace("skip_bad_rows: true", "skip_bad_rows: 1"))
    assert cli(["study", "plan", str(p), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "evaluation.skip_bad_rows: expected bool, got 1" in err[0], err

"""A run's identity is its whole resolved configuration, and a selection covers the checkpoints it saw (issue 52).

every GRPOConfig field but the documented few (run_record.NOT_IDENTITY_GRPO) is compared on resume,
and a difference is one line naming the field, from the run and from its dry run alike
a record of the older format (a hand-picked list) is compared on the fields it holds: still resumable
RUN@selected refuses a selection made before the run trained on
"""

from __future__ import annotations

import dataclasses
import json
import shutil

import pytest
from trl import GRPOConfig

from trlvr import rundir
from trlvr.cli.main import main


def _world(tmp_path):
    from helpers import save_tiny_models, write_sum_problems

    save_tiny_models(tmp_path, {"senior": 0, "junior": 1})
    write_sum_problems(tmp_path / "train.jsonl", 20)
    return [
        "train",
        "--config",
        "toy",
        "--holdout",
        "0",
        "--senior",
        str(tmp_path / "senior"),
        "--junior",
        str(tmp_path / "junior"),
        "--dataset",
        str(tmp_path / "train.jsonl"),
        "--output_dir",
        str(tmp_path / "run"),
        "--max_steps",
        "4",
    ]


def test_the_identity_is_every_grpo_field_but_the_documented_few():
    """The exclusions name real fields (a renamed TRL field cannot leave the list stale), and every other
    field of TRL's GRPOConfig is in the record: a setting TRL adds is compared the day it appears."""
    from trlvr.training.run_record import NOT_IDENTITY_GRPO, grpo_identity

    fields = {f.name for f in dataclasses.fields(GRPOConfig)}
    assert NOT_IDENTITY_GRPO <= fields | {"overwrite_output_dir", "logging_dir"}, NOT_IDENTITY_GRPO - fields
    args = GRPOConfig(output_dir="x", use_cpu=True, bf16=False, report_to="none")
    assert set(grpo_identity(args)) == fields - NOT_IDENTITY_GRPO
    for name in (
        "learning_rate",
        "beta",
        "delta",
        "importance_sampling_level",
        "disable_dropout",
        "shuffle_dataset",
        "data_seed",
        "lr_scheduler_kwargs",
        "reward_weights",
        "cast_lm_head_to_fp32",
        "seed",
    ):
        assert name in grpo_identity(args), name


# settings outside the hand-picked list of earlier records: each changes what is trained
CHANGED = [
    ("delta", "2.0"),
    ("importance_sampling_level", "sequence"),
    ("disable_dropout", "true"),
    ("shuffle_dataset", "false"),
    ("data_seed", "7"),
    ("top_entropy_quantile", "0.5"),
]


@pytest.mark.parametrize(("field", "value"), CHANGED, ids=[f for f, _ in CHANGED])
def test_resume_with_any_changed_setting_is_refused_naming_it_by_the_run_and_its_dry_run(
    tmp_path, monkeypatch, capsys, field, value
):
    """Before: a resume with a TRL setting outside the hand-picked list trained on, unrefused and unrecorded."""
    import trlvr.training.run as run_module
    from trlvr.config import parse_run_args
    from trlvr.training.run_record import run_record, write_record

    monkeypatch.chdir(tmp_path)
    argv = _world(tmp_path)
    tandem, grpo, _ = parse_run_args([*argv[1:], "--use_cpu", "true", "--bf16", "false"])
    run = tmp_path / "run"
    write_record(run, run_record(tandem, grpo))  # the run as it started
    shutil.copytree(tmp_path / "senior", run / "checkpoint-2")
    monkeypatch.setattr(
        run_module, "build_trainer", lambda *a, **k: pytest.fail("the run got past its checks")
    )
    before = {p.name: p.read_bytes() for p in run.rglob("*") if p.is_file()}
    lines = []
    for dry in ([], ["--dry-run"]):
        capsys.readouterr()
        code = main([*argv, "--use_cpu", "true", "--bf16", "false", "--resume", f"--{field}", value, *dry])
        err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
        assert code == 2 and len(err) == 1, err
        lines.append(err[0])
    assert lines[0] == lines[1]
    assert f"{run} holds a different run ({field}: " in lines[0], lines[0]
    assert {p.name: p.read_bytes() for p in run.rglob("*") if p.is_file()} == before


def test_a_record_of_the_older_format_is_compared_on_the_fields_it_holds(tmp_path, monkeypatch):
    """A run started by a trlvr that recorded a hand-picked list resumes: the fields it never recorded are
    not differences (they would refuse every such run), the ones it recorded still are."""
    from trlvr.config import parse_run_args
    from trlvr.training.run_record import check_output_dir, run_record

    monkeypatch.chdir(tmp_path)
    argv = _world(tmp_path)
    tandem, grpo, _ = parse_run_args([*argv[1:], "--use_cpu", "true", "--bf16", "false"])
    new = run_record(tandem, grpo)
    old = {**new, "format": 2, "grpo": {k: new["grpo"][k] for k in ("learning_rate", "beta", "seed")}}
    rundir.write_record(tmp_path / "run" / rundir.RUN_FILE, old)
    assert check_output_dir(tmp_path / "run", new, resume=True, force=False) == []
    changed = {**new, "grpo": {**new["grpo"], "learning_rate": 1.0}}
    with pytest.raises(Exception, match="learning_rate: "):
        check_output_dir(tmp_path / "run", changed, resume=True, force=False)


def _selected_run(tmp_path, steps=(1, 2)):
    """A run with checkpoints at `steps` and a selection made over them (`select_checkpoint`, the writer)."""
    from helpers import save_tiny_models

    from trlvr.data import Problem
    from trlvr.experiments.selection import select_checkpoint

    save_tiny_models(tmp_path, {"senior": 0})
    run = tmp_path / "run"
    for s in steps:
        shutil.copytree(tmp_path / "senior", run / f"checkpoint-{s}")
    metric = {"value": 0.5, "ci_low": 0.4, "ci_high": 0.6}
    select_checkpoint(
        run,
        [Problem("p", "1+1", "2", "v.jsonl", {})],
        metric="solo/pass@1",
        evaluate_checkpoint=lambda *a: {"macro": {"metrics": {"solo/pass@1": metric}}},
    )
    return run


def test_a_selection_records_the_run_s_newest_step(tmp_path):
    run = _selected_run(tmp_path)
    rec = json.loads((run / rundir.SELECTED_FILE).read_text())
    assert rec["newest_step"] == 2 and [r["step"] for r in rec["table"]] == [1, 2]


def test_run_at_selected_refuses_a_selection_older_than_the_newest_checkpoint(tmp_path, monkeypatch, capsys):
    """Before: a selection made before a resume was used after it, as if it covered the new checkpoints."""
    from trlvr.eval.api import resolve_senior

    run = _selected_run(tmp_path)
    assert resolve_senior(f"{run}@selected")[0].endswith("checkpoint-1")  # ties go to the earliest step
    shutil.copytree(tmp_path / "senior", run / "checkpoint-3")  # the run trained on
    with pytest.raises(
        Exception,
        match=r"covers the run's checkpoints up to step 2, but the run has trained on "
        r"to step 3; select again",
    ):
        resolve_senior(f"{run}@selected")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "d.jsonl").write_text(json.dumps({"problem": "1+1", "answer": "2"}) + "\n")
    code = main(
        [
            "eval",
            "--senior",
            f"{run}@selected",
            "--junior",
            str(tmp_path / "senior"),
            "--data",
            f"toy={tmp_path / 'd.jsonl'}",
            "--suite",
            "solo",
            "--n",
            "1",
            "--k",
            "1",
            "--out",
            str(tmp_path / "e"),
        ]
    )
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert code == 2 and len(err) == 1 and "select again" in err[0], err
    assert not (tmp_path / "e").exists()


def test_an_older_selection_without_newest_step_is_judged_by_its_table(tmp_path):
    from trlvr.eval.api import resolve_senior

    run = _selected_run(tmp_path)
    rec = json.loads((run / rundir.SELECTED_FILE).read_text())
    del rec["newest_step"]
    (run / rundir.SELECTED_FILE).write_text(json.dumps(rec))
    assert resolve_senior(f"{run}@selected")[1]["step"] == 1  # still current
    shutil.copytree(tmp_path / "senior", run / "checkpoint-5")
    with pytest.raises(Exception, match="up to step 2, but the run has trained on to step 5"):
        resolve_senior(f"{run}@selected")


@pytest.mark.parametrize("key", ["max_steps", "holdout", "output_dir", "report_to"])
def test_smoke_refuses_a_set_key_it_would_override_and_so_never_records_it(
    tmp_path, monkeypatch, capsys, key
):
    """Before: `trlvr smoke --set max_steps=50` trained --steps steps and recorded max_steps 50 in smoke.json
    (a setting it did not use). Now one line, before anything is written."""
    import trlvr.experiments.smoke as smoke

    monkeypatch.chdir(tmp_path)
    argv = _world(tmp_path)
    monkeypatch.setattr(smoke, "run_smoke", lambda *a, **k: pytest.fail("the smoke started"))
    value = {"max_steps": "50", "holdout": "3", "output_dir": "elsewhere", "report_to": "tensorboard"}[key]
    code = main(
        [
            "smoke",
            "--config",
            "toy",
            "--out",
            str(tmp_path / "smoke"),
            "--set",
            f"senior={argv[4]}",
            "--set",
            f"junior={argv[6]}",
            "--set",
            f"dataset={argv[8]}",
            "--set",
            f"{key}={value}",
        ]
    )
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert code == 2 and err == [
        f"trlvr smoke: error: --set {key}={value}: the smoke sets {key} itself "
        f"({smoke.OWN_KEYS[key]}) and would not use this value; drop it"
    ], err
    assert not (tmp_path / "smoke").exists()


def _refusal(capsys, argv) -> str:
    capsys.readouterr()
    code = main(argv)
    err = [
        ln
        for ln in capsys.readouterr().err.splitlines()
        if ln.strip() and "it/s]" not in ln and "%|" not in ln
    ]
    assert code == 2 and len(err) == 1, (code, err)
    return err[0]


def test_eval_dry_run_checks_the_folder_s_samples_as_the_run_does(tmp_path, monkeypatch, capsys):
    """Before: `eval --dry-run` said "config ok" into a folder whose samples were made under other settings,
    which the run refuses; now both refuse with the same line, and --fresh passes both."""
    from helpers import save_tiny_models, write_sum_problems

    monkeypatch.chdir(tmp_path)
    save_tiny_models(tmp_path, {"senior": 0, "junior": 1})
    write_sum_problems(tmp_path / "d.jsonl", 2)
    argv = [
        "eval",
        "--senior",
        str(tmp_path / "senior"),
        "--junior",
        str(tmp_path / "junior"),
        "--data",
        f"toy={tmp_path / 'd.jsonl'}",
        "--suite",
        "solo",
        "--n",
        "1",
        "--k",
        "1",
        "--max-new-tokens",
        "2",
        "--no-progress",
        "--out",
        str(tmp_path / "e"),
    ]
    assert main(argv) == 0
    before = {p.name: p.read_bytes() for p in (tmp_path / "e").iterdir() if p.is_file()}
    other = [*argv, "--temperature", "0.5"]
    dry, real = _refusal(capsys, [*other, "--dry-run"]), _refusal(capsys, other)
    assert dry == real and "holds samples of another evaluation" in real, (dry, real)
    assert {p.name: p.read_bytes() for p in (tmp_path / "e").iterdir() if p.is_file()} == before
    capsys.readouterr()
    assert main([*other, "--fresh", "--dry-run"]) == 0 and capsys.readouterr().out.startswith("config ok")


def test_train_dry_run_checks_the_output_folder_s_state_as_the_run_does(tmp_path, monkeypatch, capsys):
    """Before: `train --dry-run` into a folder holding this run without --resume (or a finished run with another
    --max_steps under --resume) said "config ok"; the run refused. Now the same line from both."""
    import trlvr.training.run as run_module
    from trlvr.config import parse_run_args
    from trlvr.training.run_record import run_record, write_record

    monkeypatch.chdir(tmp_path)
    argv = [*_world(tmp_path), "--use_cpu", "true", "--bf16", "false"]
    tandem, grpo, _ = parse_run_args(argv[1:])
    run = tmp_path / "run"
    write_record(run, run_record(tandem, grpo))
    shutil.copytree(tmp_path / "senior", run / "checkpoint-2")
    monkeypatch.setattr(
        run_module, "build_trainer", lambda *a, **k: pytest.fail("the run got past its checks")
    )
    dry, real = _refusal(capsys, [*argv, "--dry-run"]), _refusal(capsys, argv)
    assert dry == real and "already holds this run (checkpoint-2): pass --resume" in real, (dry, real)

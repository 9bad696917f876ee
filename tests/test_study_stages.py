"""A study's stages are typed commands (trlvr.experiments.study); each stage's argv, the study's record, is
rendered from its command, and the stage checks (trlvr.experiments.study_check) read the command's fields."""

from __future__ import annotations

import argparse

import pytest

from trlvr.cli import eval_cmd
from trlvr.cli.eval_cmd import parse_sources
from trlvr.config import override_flags
from trlvr.errors import UserError
from trlvr.eval.spec import EvalSpec
from trlvr.experiments import study as S
from trlvr.experiments import study_check as C
from trlvr.experiments.study_spec import Variant, load_study

STUDY = """
name: stages
base: toy
worlds: {w: {jargon: compact, seed: 3}}
seeds: [0, 1]
selection: {val: "split:20", metric: handoff/pass@1, n: 2, grader: trlvr}
evaluation: {data: test, suite: [solo, dose], n: 4, k: [1, 4], dose_shares: [0.5], limit: 3, skip_bad_rows: true}
variants:
  grpo: {arm: grpo, world: w, max_steps: 2}
  tandem: {arm: tandem, world: w, baseline: grpo, evaluation: {n: 2, k: [1, 2]}}
"""


@pytest.fixture
def study(tmp_path):
    p = tmp_path / "study.yaml"
    p.write_text(STUDY)
    return load_study(p)


def eval_spec_of(argv: list[str]) -> EvalSpec:
    parser = argparse.ArgumentParser()
    eval_cmd.make_parser(parser.add_subparsers())
    return eval_cmd.settings_from_args(parser.parse_args(argv))


def test_every_stage_records_the_argv_of_its_command(study, tmp_path):
    out = tmp_path / "out"
    stages = S.world_stages(study, out) + [st for unit in S.units(study, out) for st in unit]
    assert [st.kind for st in stages] == ["world"] + ["train", "select", "eval"] * 4
    for st in stages:
        assert st.argv == st.command.argv()
    assert stages[1].settings == S.settings_hash(
        stages[1].argv, out, stages[0].settings
    )  # built on the world
    world, train, select, ev = stages[0].command, stages[1].command, stages[2].command, stages[3].command
    assert (
        world == S.WorldCommand(out / "worlds" / "w", "compact", 3) and world.argv()[-1] == "--from-scratch"
    )
    assert S.WorldCommand(out, "spaced", 0).argv()[-1] == "--no-progress"
    assert train.config == "toy" and train.overrides["output_dir"] == str(out / "train" / "grpo" / "seed-0")
    assert train.argv() == ["train", "--config", "toy", *override_flags(train.overrides)]
    assert select.run == out / "train" / "grpo" / "seed-0"
    assert select.argv()[2:] == [
        "--val",
        "split:20",
        "--metric",
        "handoff/pass@1",
        "--n",
        "2",
        "--grader",
        "trlvr",
        "--no-progress",
    ]
    assert ev.senior == f"{select.run}@selected" and ev.out == out / "eval" / "grpo" / "seed-0"
    assert ev.data == f"toy={out / 'worlds' / 'w' / 'data' / 'test.jsonl'}"


def test_an_eval_command_reads_its_settings_as_trlvr_eval_reads_its_recorded_flags(study, tmp_path):
    for unit in S.units(study, tmp_path):
        ev = unit[-1]
        assert ev.command.spec() == eval_spec_of(ev.argv)  # the typed command and its record agree
    tandem = S.units(study, tmp_path)[1][-1].command.spec()
    assert (tandem.n, tandem.ks, tandem.suite, tandem.dose_shares) == (2, (1, 2), ("solo", "dose"), (0.5,))


def test_a_stage_error_names_the_study_key_its_flag_sets(study, tmp_path):
    train, select, ev = S.units(study, tmp_path)[0]
    assert (
        C.study_key(ev, "argument --n/--samples: expected an integer in [1, 10000], got '0'")
        == "evaluation.n"
    )
    assert C.study_key(ev, "--k: every k must be in [1, n = 4], got [1, 8]") == "evaluation.k"
    assert C.study_key(ev, "--grader: trlvr,authors: ...") == "evaluation.grader"
    assert (
        C.study_key(ev, "--data: x.jsonl: row 3 has no gold; pass --skip-bad-rows to use the rest")
        == "evaluation.data"
    )
    assert C.study_key(select, "split:500 is more than the run's holdout") == "selection.val"
    assert C.study_key(train, "max_steps: must be an integer >= 1") == "variants.grpo (with train:)"
    err = C.restate(study, ev, UserError("--k: every k\n  must be <= n"))
    assert str(err) == (
        f"study {study.path}: evaluation.k: --k: every k must be <= n (the eval stage of grpo seed 0)"
    )


def test_the_eval_check_reads_the_commands_junior_data_and_out(study, tmp_path):
    command = S.units(study, tmp_path / "out")[0][-1].command
    spec = command.spec()
    missing = S.EvalCommand(
        command.senior, str(tmp_path / "nope"), command.data, command.out, command.evaluation
    )
    with pytest.raises(UserError, match=r"^--junior"):
        C.check_eval(missing, spec, parse_sources(missing.data), tmp_path / "out", set())
    C.check_eval(command, spec, parse_sources(command.data), tmp_path / "out", set())  # all made by stages
    (tmp_path / "file").write_text("")
    in_a_file = S.EvalCommand(command.senior, command.junior, command.data, tmp_path / "file" / "e", {})
    with pytest.raises(UserError, match=r"^--out"):
        C.check_eval(in_a_file, spec, parse_sources(command.data), tmp_path / "out", set())


def test_missing_inputs_are_the_local_paths_no_stage_makes(study, tmp_path):
    out = tmp_path / "out"
    assert C.missing_inputs(study, out, parse_sources) == []  # the world stage makes every one
    base = Variant("base", "toy", {"senior": str(tmp_path / "s")}, "w", None, "base", trained=False)
    study.variants["base"] = base  # evaluated as it is: its senior is read, not made
    found = dict(C.missing_inputs(study, out, parse_sources))
    assert found == {str(tmp_path / "s"): "variants.base.senior"}

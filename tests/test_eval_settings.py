"""Each evaluation setting is declared once, on its EvalSpec field (`trlvr.eval.spec.SETTINGS`): `trlvr eval`'s
flag, the study key under `evaluation:` and the eval command line a study records all come from it."""

from __future__ import annotations

import argparse
import dataclasses

import pytest

from trlvr.cli import eval_cmd
from trlvr.errors import UserError
from trlvr.eval.spec import SETTINGS, EvalSpec, from_flags
from trlvr.experiments.study import eval_flags
from trlvr.experiments.study_spec import EVALUATION_KEYS, EVALUATION_RUN_KEYS

# one legitimate value per setting, other than its default (a new setting must add one here)
VALUES = {
    "n": "16",
    "ks": "1,2,4",
    "suite": "solo,dose",
    "dose_shares": "0.5,0.125",
    "prefix_ks": "0,50",
    "max_new_tokens": "64",
    "context_length": "512",
    "max_prompt_tokens": "100",
    "temperature": "0.5",
    "top_p": "0.9",
    "top_k": "5",
    "handoff_max_rounds": "3",
    "include_eos": None,  # a switch
    "seed": "7",
    "batch_size": "2",
    "score_batch_size": "3",
    "grading": "boxed_or_tail",
    "prompt_template": "authors",
    "graders": "trlvr,authors-paper",
    "decode": "eager",
}
REQUIRED = ["eval", "--senior", "s", "--junior", "j", "--data", "d.jsonl", "--out", "o"]


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="trlvr")
    eval_cmd.make_parser(p.add_subparsers(dest="command"))
    return p


def spec_of(*flags: str) -> EvalSpec:
    return eval_cmd.settings_from_args(parser().parse_args([*REQUIRED, *flags]))


def flag_argv(name: str) -> list[str]:
    s = SETTINGS[name]
    return [s.flag] if VALUES[name] is None else [s.flag, VALUES[name]]


def to_study(name: str, value):
    """A field's value as a study file writes its key (the inverse of the flag's `parse`)."""
    return ",".join(value) if name == "graders" else list(value) if isinstance(value, tuple) else value


def test_every_setting_has_exactly_one_eval_flag_and_at_most_one_study_key():
    actions = parser()._subparsers._group_actions[0].choices["eval"]._actions
    for name, s in SETTINGS.items():
        mine = [a for a in actions if set(a.option_strings) & set(s.flags)]
        assert len(mine) == 1 and tuple(mine[0].option_strings) == s.flags and mine[0].dest == s.dest, name
    assert set(VALUES) == set(SETTINGS)
    assert {f.name for f in dataclasses.fields(EvalSpec)} - set(SETTINGS) == {"num_resamples", "extra"}
    keys = [s.study for s in SETTINGS.values() if s.study]
    assert len(keys) == len(set(keys)) and not set(keys) & set(EVALUATION_RUN_KEYS)
    assert EVALUATION_KEYS == EVALUATION_RUN_KEYS | {
        s.study: s.study_type for s in SETTINGS.values() if s.study
    }


@pytest.mark.parametrize("name", sorted(SETTINGS))
def test_each_flag_sets_its_field_and_a_study_key_round_trips_through_the_recorded_command(name):
    spec = spec_of(*flag_argv(name))
    assert getattr(spec, name) != getattr(EvalSpec(), name)  # the flag reached its field
    assert spec == EvalSpec(**{name: getattr(spec, name)})  # and no other
    s = SETTINGS[name]
    if s.study is None:
        return
    value = to_study(name, getattr(spec, name))
    assert isinstance(value, s.study_type)
    argv = eval_flags({s.study: value})
    assert argv == [s.flag, s.render(value)]
    assert spec_of(*argv) == spec  # flag -> EvalSpec -> study key -> recorded flag -> the same EvalSpec


def test_from_flags_names_the_flag_and_keeps_the_default_of_a_flag_it_is_not_given():
    with pytest.raises(UserError, match=r"^--k: every k must be in \[1, n = 2\], got \[1, 4\]$"):
        spec_of("--n", "2", "--k", "1,4")
    with pytest.raises(
        UserError, match=r"^--prefix-ks: expected integer percents in \[0, 100\], got \[0, 200\]$"
    ):
        spec_of("--prefix-ks", "0,200")
    with pytest.raises(
        UserError, match=r"^--grader: trlvr,authors-paper: the authors' graders read the last"
    ):
        spec_of("--grading", "boxed_or_tail", "--grader", "trlvr,authors-paper")  # a rule between two fields
    assert from_flags(argparse.Namespace(n=2, k=[1, 2])) == EvalSpec(n=2, ks=(1, 2))
    assert spec_of("--context-length", "0").context_length is None  # 0: a flat budget
    assert spec_of().max_prompt_tokens == "auto" and spec_of() == EvalSpec()


def test_the_study_writes_its_eval_flags_in_the_order_of_its_records():
    every = {
        "suite": ["solo"],
        "k": [1],
        "dose_shares": [0.25],
        "skip_bad_rows": True,
        "prompt_template": "trlvr",
        "backend": "hf",
        "context_length": 0,
        "grader": "trlvr",
        "grading": "boxed",
        "seed": 1,
        "dtype": "float32",
        "batch_size": 2,
        "max_new_tokens": 3,
        "limit": 4,
        "n": 5,
        "split": "test",
        "data": "d.jsonl",
        "junior": "j",
        "jargon_regex": "x",
    }
    flags = [a for a in eval_flags(every) if a.startswith("--")]
    assert flags == [
        "--split",
        "--n",
        "--limit",
        "--max-new-tokens",
        "--batch-size",
        "--dtype",
        "--seed",
        "--grading",
        "--grader",
        "--context-length",
        "--backend",
        "--prompt-template",
        "--skip-bad-rows",
        "--dose-shares",
        "--k",
        "--suite",
    ]
    assert eval_flags({"skip_bad_rows": False, "dose_shares": [0.123456789, 1]}) == [
        "--dose-shares",
        "0.123457,1",
    ]


def test_a_settings_text_is_read_as_its_flag_reads_it():
    from trlvr.eval.spec import from_texts

    names = [n for n in SETTINGS if n != "grading"]  # (boxed_or_tail is trlvr's grader's alone)
    texts = {name: VALUES[name] for name in names}
    assert from_texts(texts) == spec_of(*(a for name in names for a in flag_argv(name)))
    for name, bad in (("n", "0"), ("ks", "x"), ("grading", "boxy"), ("decode", "lazy")):
        with pytest.raises(argparse.ArgumentTypeError, match=f"got '{bad}'"):
            from_texts({name: bad})

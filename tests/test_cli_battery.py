"""The generated bad-input battery (issue 38): every option of every command, fed the values users get wrong.

The cases are generated from the code, not written by hand: the battery walks `trlvr`'s argparse
parser (`build_parser()`: every subcommand and option) and, for `trlvr train`, the run-config
dataclass fields (`trlvr.config.FIELD_KINDS`: every TandemConfig field) and the trl.GRPOConfig
fields trlvr documents (`trlvr.config.TRL_KINDS`). Each option declares its kind (`trlvr.kinds`:
a count, a seed, a share, a directory to write, ...); an option without one fails
`test_every_option_declares_a_kind`, so a new option is checked the day it is added. Each kind's
base ("int", "float", "text", "dir", ...) chooses the values fed to it (VALUES): negative, zero and
huge numbers, NaN and inf; an empty string and a non-number; a missing path; a file where a folder
goes and a folder where a file goes; a read-only folder; a path under a file.

Each case runs the real command (`trlvr.cli.main.main(argv)`, in-process, in its own folder) on the
toy world below: two tiny models, a 3-problem data file, two finished evaluations and a fake
training run. It asserts one of two outcomes:
    refused    a non-zero exit (2: the input; 74: the machine refused) with ONE error line on stderr
               ("trlvr CMD: error: ..."), and no traceback
    accepted   exit 0 and the right result (`_verify`: the command's output exists and records the value)
A value is expected to be accepted only where LEGIT (by kind) or OPTION_LEGIT (by option) lists it,
with the reason; everything else must be refused. The expensive commands (demo, study run, toy
prepare from scratch, smoke) stop at a stub where their work would start (`Reached`): accepted = every
check passed and the work was handed the value.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from trlvr import kinds as K
from trlvr.cli.main import build_parser, main

ROOT = Path(__file__).resolve().parents[1]
HUGE = str(10**12)
HUGER = "9" * 30

# What each base of kind is fed: label -> text ({missing}, {file}, {dir}, {ro} are filled per case).
NUMBERS = {
    "negative": "-1",
    "zero": "0",
    "huge": HUGE,
    "huger": HUGER,
    "nan": "nan",
    "inf": "inf",
    "empty": "",
    "not a number": "abc",
}
VALUES = {
    "int": {**NUMBERS, "fraction": "1.5"},
    "float": {**NUMBERS, "overflow": "1e400", "minus inf": "-inf", "tiny": "1e-300"},
    "ints": {
        "negative": "-1",
        "zero": "0",
        "huge": HUGER,
        "empty": "",
        "not a number": "a,b",
        "repeated": "1,1",
        "one": "1",
    },
    "floats": {"negative": "-1", "huge": "1e400", "nan": "nan", "empty": "", "not a number": "x"},
    "text": {
        "empty": "",
        "blank": " ",
        "missing path": "{missing}",
        "a file": "{file}",
        "a folder": "{dir}",
        "under a file": "{file}/x",
        "read-only folder": "{ro}/x",
    },
    "dir": {
        "empty": "",
        "missing path": "{missing}",
        "a file": "{file}",
        "under a file": "{file}/x",
        "read-only folder": "{ro}/x",
        "existing empty folder": "{empty}",
    },
    "file": {
        "empty": "",
        "missing path": "{missing}",
        "a folder": "{dir}",
        "under a file": "{file}/x",
        "read-only folder": "{ro}/x.html",
        "existing file": "{file}",
    },
    "choice": {"empty": "", "unknown": "no-such-value"},
    "switch": {"empty": "", "unknown": "maybe"},
}

# Values a kind takes by design, with the reason (checked: these must be ACCEPTED with the right result).
LEGIT = {
    ("count", "huge"): "a cap or a size: larger than needed is all of it (the data has 3 problems)",
    (
        "non-negative integer",
        "zero",
    ): "0 = off / none (top-k 0 = no top-k, --show 0 = counts only, holdout 0)",
    ("non-negative integer", "huge"): "a cap: larger than needed is all of it",
    ("seed", "zero"): "seed 0 is the default seed",
    ("integer", "negative"): "holdout_seed seeds a content hash: any integer is one",
    ("integer", "zero"): "as negative",
    ("integer", "huge"): "as negative",
    ("integer", "huger"): "as negative",
    ("share", "zero"): "a junior share of 0 is the senior alone",
    ("share", "tiny"): "in [0, 1]",
    ("dropout", "zero"): "no dropout",
    ("dropout", "tiny"): "in [0, 1)",
    ("fraction", "tiny"): "in (0, 1]",
    ("non-negative number", "zero"): "temperature 0 is greedy decoding; beta 0 = no KL term; weight decay 0",
    ("non-negative number", "huge"): "finite and >= 0: the kind takes it",
    ("non-negative number", "huger"): "as huge",
    ("non-negative number", "tiny"): "finite and >= 0",
    ("positive number", "huge"): "finite and > 0: the kind takes it",
    ("positive number", "huger"): "as huge",
    ("positive number", "tiny"): "finite and > 0",
    ("max steps", "negative"): "-1 = train num_train_epochs (TRL's own default)",
    ("max steps", "huge"): "a step count: the dry run takes it",
    ("counts", "one"): "pass@1 alone",
    ("counts", "repeated"): "a set of k: a repeated k is the same k",
    ("seeds", "zero"): "seed 0",
    ("output directory", "missing path"): "a new directory is created",
    ("output directory", "existing empty folder"): "an empty directory is written into",
    ("output file", "missing path"): "a new file is written",
    ("output file", "existing file"): "a report is rewritten in place, as any output file",
    ("context length", "zero"): "0 = a flat budget (no context rule)",
    ("context length", "huge"): "a context longer than the budget changes nothing",
}
# Per option (command, option, label): accepted, with the reason; or refused (None) against the kind's LEGIT.
READ_ONLY_INPUT = "an input read from a read-only folder: reading needs no write access"
OPTION_LEGIT = {
    **{
        (c, o, "read-only folder"): READ_ONLY_INPUT
        for c, o in [
            ("eval", "--senior"),
            ("eval", "--junior"),
            ("eval", "--tokenizer"),
            ("eval", "--data"),
            ("compare", "dir_a"),
            ("compare", "dir_b"),
            ("report", "dirs"),
            ("report", "--compare"),
            ("data check", "source"),
            ("select", "--val"),
            ("select", "--junior"),
            ("study plan", "study"),
            ("study run", "study"),
            ("train", "senior"),
            ("train", "junior"),
            ("train", "dataset"),
        ]
    },
    ("eval", "--seed", "huge"): None,
    ("select", "--seed", "huge"): None,  # seeds are [0, 2**32 - 1] everywhere
    ("eval", "--seeds", "zero"): None,  # a group needs two seeds (one line: UserError)
    ("eval", "--out", "existing empty folder"): "an empty directory is written into",
    ("train", "p", "zero"): None,  # tandem p = 0 lets the senior write nothing (TandemConfig's own rule)
    ("train", "temperature", "zero"): None,  # training divides the logits by it (trlvr.config.TRL_KINDS)
    ("demo", "--seeds", "one"): "one training seed (seed 1)",
    ("train", "num_generations", "huge"): None,  # TRL: the generation batch must divide into groups
    ("smoke", "--problems", "huge"): None,  # held out of both arms' data: more than the data has is refused
    ("train", "holdout", "huge"): None,  # the dry run reads the data: more held out than it has is refused
    # the dry run reads the data: a generation batch of more prompts than it has leaves an epoch with no step
    ("train", "per_device_train_batch_size", "huge"): None,
    ("train", "gradient_accumulation_steps", "huge"): None,  # = steps_per_generation by default: as above
    ("train", "max_completion_length", "huge"): None,  # the longest prompt plus it passes the models' context
    ("train", "vllm_tensor_parallel_size", "huge"): None,  # backend vllm's: refused on the base's backend hf
    ("study plan", "--out", "read-only folder"): "plan prints the commands and writes nothing",
    ("train", "dataset", "missing path"): "the dry run plans runs whose data an earlier stage makes (it says "
    "'dataset not checked (not there yet)'); training refuses it in one line",
    **{
        (
            "train",
            role,
            "missing path",
        ): "as dataset: a study's world makes the models (the dry run says 'pairing "
        "not checked (a model folder is not there yet)')"
        for role in ("senior", "junior")
    },
    **{
        ("train", "dataset_split", label): "as --split: a local dataset has no splits"
        for label in ("missing path", "a file", "a folder", "under a file", "read-only folder")
    },
    **{
        ("train", "lora_target_modules", label): "module names are matched when the model loads (the dry run "
        "loads none); unused without use_peft"
        for label in ("missing path", "a file", "a folder", "under a file", "read-only folder")
    },
    (
        "train",
        "output_dir",
        "read-only folder",
    ): "the dry run writes nothing; training itself is refused by the machine in one line (exit 74)",
    **{
        (
            c,
            "--split",
            label,
        ): "--split names a hub dataset's split; a local file has none, so any name is ignored "
        "(--data may mix hub and local sources under one --split)"
        for c in ("eval", "data check")
        for label in ("missing path", "a file", "a folder", "under a file", "read-only folder")
    },
}


class Reached(Exception):  # noqa: N818 - not an error: where an expensive command's work would start
    """Raised by a stub where an expensive command's work starts; carries what it was handed."""


# ---- the toy world -------------------------------------------------------------------------------------


def _read_only(path: Path) -> bool:
    """Make `path` and everything in it read-only (chmod; as root, which chmod cannot stop, chattr +i);
    whether it worked."""
    subprocess.run(["chmod", "-R", "a-w", str(path)], capture_output=True)
    if os.geteuid() == 0:
        subprocess.run(["chattr", "-R", "+i", str(path)], capture_output=True)
    probe = next(p for p in sorted(path.rglob("*")) if p.is_dir()) / ".probe"
    try:
        probe.write_text("x")
    except OSError:
        return True
    probe.unlink()
    return False


def _writable(path: Path) -> None:
    if os.geteuid() == 0:
        subprocess.run(["chattr", "-R", "-i", str(path)], capture_output=True)
    subprocess.run(["chmod", "-R", "u+w", str(path)], capture_output=True)


TINY_STUDY = """
name: battery
base: toy
train: {{max_steps: 2, save_steps: 1, holdout: 0, senior: {tmp}/senior, junior: {tmp}/junior, dataset: {tmp}/train.jsonl}}
seeds: [0]
selection: {{val: {tmp}/d.jsonl, metric: solo/pass@1, n: 1}}
evaluation: {{data: "toy={tmp}/d.jsonl", suite: [solo, handoff], n: 1, k: [1], limit: 1}}
variants:
  grpo: {{arm: grpo}}
"""


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """Tiny seniors and a junior, a 3-problem file, a 20-problem training file (an epoch of the toy recipe
    draws 16 prompts: `check_steps_per_epoch`), two finished evaluations (A, B), a fake training run
    (two checkpoints and its record), a study file, and a read-only folder holding copies of the inputs."""
    from helpers import save_tiny_models, write_sum_problems

    tmp = tmp_path_factory.mktemp("battery")
    save_tiny_models(tmp, {"senior": 0, "other": 2, "junior": 1})
    write_sum_problems(tmp / "d.jsonl", 3)
    write_sum_problems(tmp / "train.jsonl", 20)
    common = [
        "eval",
        "--junior",
        str(tmp / "junior"),
        "--data",
        f"toy={tmp / 'd.jsonl'}",
        "--n",
        "1",
        "--k",
        "1",
        "--suite",
        "solo,handoff",
        "--max-new-tokens",
        "2",
        "--no-progress",
    ]
    for name, senior in (("A", "senior"), ("B", "other")):
        assert main([*common, "--senior", str(tmp / senior), "--out", str(tmp / name)]) == 0
    run = tmp / "run"
    for step, model in ((1, "senior"), (2, "other")):
        shutil.copytree(tmp / model, run / f"checkpoint-{step}")
    (run / "trlvr_run.json").write_text(
        json.dumps({"tandem": {"senior": str(tmp / "senior"), "junior": str(tmp / "junior"), "holdout": 0}})
    )
    (tmp / "study.yaml").write_text(TINY_STUDY.format(tmp=tmp))
    (tmp / "file").write_text("a file\n")
    ro = tmp / "ro"
    ro.mkdir()
    for name in ("senior", "junior", "A", "run"):
        shutil.copytree(tmp / name, ro / name)
    for name in ("d.jsonl", "train.jsonl", "study.yaml"):
        shutil.copy(tmp / name, ro / name)
    read_only = _read_only(ro)
    yield {"tmp": tmp, "ro": ro, "read_only": read_only}
    _writable(ro)


def _bases(tmp: Path) -> dict[str, list[str]]:
    """Each command's smallest good command line ({out} is the case's own folder)."""
    t = str(tmp)
    return {
        "eval": [
            "eval",
            "--senior",
            f"{t}/senior",
            "--junior",
            f"{t}/junior",
            "--data",
            f"toy={t}/d.jsonl",
            "--limit",
            "1",
            "--n",
            "1",
            "--k",
            "1",
            "--suite",
            "solo,handoff",
            "--max-new-tokens",
            "2",
            "--no-progress",
            "--out",
            "{out}/eval",
        ],
        "compare": ["compare", f"{t}/A", f"{t}/B", "--out", "{out}/cmp", "--resamples", "20"],
        "report": ["report", f"{t}/A", "--out", "{out}/r.html", "--max-problems", "1"],
        "data check": ["data", "check", f"{t}/d.jsonl"],
        "select": [
            "select",
            "{out}/run",
            "--val",
            f"{t}/d.jsonl",
            "--metric",
            "handoff/pass@1",
            "--n",
            "1",
            "--max-new-tokens",
            "2",
            "--limit",
            "1",
            "--no-progress",
        ],
        "demo": ["demo", "--out", "{out}/demo"],
        "toy prepare": ["toy", "prepare", "--out", "{out}/toy", "--no-progress"],
        "study plan": ["study", "plan", f"{t}/study.yaml", "--out", "{out}/study"],
        "study run": ["study", "run", f"{t}/study.yaml", "--out", "{out}/study", "--no-report"],
        "study report": ["study", "report", "{out}/study"],
        "train": [
            "train",
            "--config",
            "toy",
            "--holdout",
            "0",
            "--senior",
            f"{t}/senior",
            "--junior",
            f"{t}/junior",
            "--dataset",
            f"{t}/train.jsonl",
            "--output_dir",
            "{out}/train",
            "--dry-run",
        ],
        "smoke": [
            "smoke",
            "--config",
            "toy",
            "--out",
            "{out}/smoke",
            "--problems",
            "1",
            "--set",
            f"senior={t}/senior",
            "--set",
            f"junior={t}/junior",
            "--set",
            f"dataset={t}/train.jsonl",
        ],
        "recipes": ["recipes", "--path", "toy"],
        "env": ["env"],
    }


# Commands whose options are not run (none now; `trlvr smoke` stops at a stub where its training would start):
# name -> why.
NOT_RUN: dict[str, str] = {}
# Options whose values the battery does not feed, with the reason.
NOT_FED = {
    ("study report", "dir"): "needs a finished study directory: tests/test_study.py",
    ("study report", "--study"): "as dir",
    ("train", "rest"): "the run config: fed field by field below (FIELD_KINDS, TRL_KINDS)",
    **{
        (
            "data build-evals",
            o,
        ): "reads the hub (unreachable here): tests/test_data.py builds the panels from "
        "fixtures, and its offline refusal is one line"
        for o in ("--out", "--sets", "--olympiad-src")
    },
}


# ---- walking the parser ---------------------------------------------------------------------------


def _walk(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _walk(sub, (*path, name))
        elif not isinstance(action, argparse._HelpAction | argparse._VersionAction):  # --version: no value
            yield " ".join(path), action


def _option_name(action: argparse.Action) -> str:
    return action.option_strings[0] if action.option_strings else action.dest


def parser_options() -> list[tuple[str, str, argparse.Action]]:
    """(command, option, action) for every option of every command (subcommands as "data check")."""
    return [(cmd, _option_name(a), a) for cmd, a in _walk(build_parser())]


def config_options() -> list[tuple[str, str, K.Kind]]:
    from trlvr.config import FIELD_KINDS, TRL_KINDS

    return [("train", name, kind) for name, kind in {**FIELD_KINDS, **TRL_KINDS}.items()]


def _kind_name(kind) -> str:
    return kind if isinstance(kind, str) else kind.name


def _cases():
    out = []
    for cmd, opt, action in parser_options():
        if cmd.split()[0] in NOT_RUN or (cmd, opt) in NOT_FED:
            continue
        kind = K.kind_of(action)
        if kind in (None, "switch"):  # a flag takes no value (None: test_every_option_declares_a_kind fails)
            continue
        base = "choice" if kind == "choice" else kind.base
        for label, text in VALUES[base].items():
            out.append((cmd, opt, _kind_name(kind), label, text))
    for cmd, opt, kind in config_options():
        for label, text in VALUES[kind.base].items():
            out.append((cmd, opt, kind.name, label, text))
    return out


CASES = _cases()


def expected_accepted(cmd: str, opt: str, kind: str, label: str) -> str | None:
    """The reason this value is accepted by design, or None when it must be refused."""
    if (cmd, opt, label) in OPTION_LEGIT:
        return OPTION_LEGIT[(cmd, opt, label)]
    return LEGIT.get((kind, label))


# ---- what the default suite runs end to end ------------------------------------------------------------
# Every case runs under `make test-slow`. The default suite (`make test`) runs a case end to end where no faster
# test decides its outcome: every value of a path kind (text, dir, file: each command's own checks decide), every
# value accepted by design (LEGIT, OPTION_LEGIT: its result is verified), every refusal that is the option's own
# rule rather than its kind's, and one refused value per option (its wiring, end to end). For the other refused
# numbers and choices, the kind decides: `test_every_kind_takes_exactly_its_legit_values` feeds every kind
# every value of its base, and `test_every_option_refuses_what_its_kind_refuses` runs each option's parser on
# each of them. A run-config key of `trlvr train` reaches its kind through TRL's parser and the config's own
# conversion, not argparse's `type=`: each (kind, value) runs end to end there once more.
PATH_BASES = ("text", "dir", "file")


@functools.cache
def _option_kinds() -> dict[tuple[str, str], K.Kind | str | None]:
    return {
        **{(c, o): k for c, o, k in config_options()},
        **{(c, o): K.kind_of(a) for c, o, a in parser_options()},
    }


def option_kind(cmd: str, opt: str) -> K.Kind | str | None:
    """The kind an option or run-config key declares (`K.kind_of`; "choice" for argparse's choices=)."""
    return _option_kinds()[(cmd, opt)]


def kind_takes(kind: K.Kind, text: str) -> bool:
    try:
        kind(text)
    except argparse.ArgumentTypeError:
        return False
    return True


def _end_to_end_ids(cases) -> set[str]:
    """The ids of the cases the default suite runs end to end (the comment above says which)."""
    keep, refused_once, config_once = set(), set(), set()
    argparse_options = {(c, o) for c, o, _ in parser_options()}
    for case in cases:
        cmd, opt, kind_name, label, text = case
        kind = option_kind(cmd, opt)
        base = "choice" if kind == "choice" else kind.base
        config_key = cmd == "train" and (cmd, opt) not in argparse_options
        refused = expected_accepted(cmd, opt, kind_name, label) is None
        if (
            base in PATH_BASES
            or not refused
            or (cmd, opt, label) in OPTION_LEGIT
            or (kind != "choice" and kind_takes(kind, text))
            or (cmd, opt) not in refused_once
            or (config_key and (kind_name, label) not in config_once)
        ):
            keep.add(_id(case))
            if refused:
                refused_once.add((cmd, opt))
            if config_key:
                config_once.add((kind_name, label))
    return keep


def test_every_option_declares_a_kind():
    """The battery can only check what an option declares: a new option without a kind fails here."""
    from trlvr.config import FIELD_KINDS, TandemConfig

    missing = [
        f"{cmd} {opt}"
        for cmd, opt, a in parser_options()
        if K.kind_of(a) is None and (cmd, opt) not in NOT_FED and cmd.split()[0] not in NOT_RUN
    ]
    assert not missing, f"options without a kind (trlvr.kinds) for the battery: {missing}"
    fields = {f.name for f in dataclasses.fields(TandemConfig)}
    assert fields == set(FIELD_KINDS), (
        f"TandemConfig fields without a kind: {sorted(fields - set(FIELD_KINDS))}"
    )


def test_the_battery_is_generated_from_every_command():
    commands = {c for c, *_ in CASES}
    assert commands >= {
        "eval",
        "compare",
        "report",
        "data check",
        "select",
        "demo",
        "toy prepare",
        "study plan",
        "study run",
        "train",
        "smoke",
    }, commands
    assert len(CASES) > 1000, len(CASES)


def test_the_default_suite_runs_every_accepted_value_and_a_refused_one_per_option_end_to_end():
    """`make test`'s share of the battery (`_end_to_end_ids`): every value accepted by design and every path
    value, and at least one refused value of each option; the rest are left to the kinds' tests and `make test-slow`."""
    refused_run = {
        (c, o)
        for c, o, k, label, _ in CASES
        if expected_accepted(c, o, k, label) is None and _id((c, o, k, label, _)) in END_TO_END
    }
    assert refused_run == {(c, o) for c, o, *_ in CASES}
    must = [
        _id(c)
        for c in CASES
        if expected_accepted(*c[:4]) is not None
        or c[2] != "choice"
        and option_kind(c[0], c[1]) != "choice"
        and option_kind(c[0], c[1]).base in PATH_BASES
    ]
    assert set(must) <= END_TO_END and len(END_TO_END) < len(CASES)


# ---- one case --------------------------------------------------------------------------------------


def _argv(world, case_dir: Path, cmd: str, opt: str, text: str) -> tuple[list[str], str]:
    tmp, ro = world["tmp"], world["ro"]
    (case_dir / "file").write_text("a file\n")
    (case_dir / "empty").mkdir()
    (case_dir / "folder").mkdir()  # a folder where a file (or another kind of folder) goes
    (case_dir / "folder" / "notes.txt").write_text("not data, not a model, not an evaluation\n")
    if cmd == "select":
        shutil.copytree(tmp / "run", case_dir / "run")
    ro_value = {
        "--senior": "senior",
        "--junior": "junior",
        "--tokenizer": "senior",
        "--data": "d.jsonl",
        "dir_a": "A",
        "dir_b": "A",
        "dirs": "A",
        "--compare": "A",
        "source": "d.jsonl",
        "--val": "d.jsonl",
        "study": "study.yaml",
        "run": "run",
        "senior": "senior",
        "junior": "junior",
        "dataset": "train.jsonl",
    }.get(opt, "x")
    fill = {
        "{missing}": str(case_dir / "missing"),
        "{file}": str(case_dir / "file"),
        "{dir}": str(case_dir / "folder"),
        "{empty}": str(case_dir / "empty"),
        "{ro}/x": str(ro / ro_value),
        "{ro}": str(ro),
    }
    value = text
    for k, v in fill.items():
        value = value.replace(k, v)
    argv = [a.replace("{out}", str(case_dir)) for a in _bases(tmp)[cmd]]
    if cmd == "train":  # a run-config field: `--key value` on the command line
        flag = f"--{opt}"
        if flag in argv:
            i = argv.index(flag)
            argv[i + 1] = value
        else:
            argv[-1:-1] = [flag, value]
        return argv, value
    action = next(a for c, o, a in parser_options() if c == cmd and o == opt)
    if action.option_strings:
        if opt in argv:
            i = argv.index(opt)
            del argv[i : i + 2]
        argv.append(f"{opt}={value}")  # `=`: "-1" and "-inf" are values, not flags
        if cmd == "eval" and opt == "--seeds":  # a seed group names {seed} in --senior
            argv[argv.index("--senior") + 1] = str(tmp / "senior") + "{seed}"
    else:
        argv[len(cmd.split()) + _positionals(cmd).index(opt)] = value
    return argv, value


def _positionals(cmd: str) -> list[str]:
    return [o for c, o, a in parser_options() if c == cmd and not a.option_strings]


def _stubs(monkeypatch) -> None:
    """Where demo, study run, toy prepare and smoke would start their minutes of work: `Reached` instead."""
    import trlvr.cli.study_cmd as study_cmd
    import trlvr.experiments.smoke as smoke
    import trlvr.toy.world as toy_world

    def reached(*args, **kw):
        raise Reached(args, kw)

    def prepare(out_dir, *args, **kw):  # its first write is its folder (a read-only parent refuses it)
        Path(out_dir).mkdir(parents=True, exist_ok=True)
        raise Reached(out_dir, args, kw)

    real_run = study_cmd.run

    def study_run(args):
        if str(args.study).endswith("demo.yaml"):  # `trlvr demo` hands its study to `study run`
            raise Reached(args)
        return real_run(args)

    monkeypatch.setattr(study_cmd, "run", study_run)
    import trlvr.experiments.study as study

    monkeypatch.setattr(study, "run_stage", reached)  # a study's first stage (a world, or a unit's train)
    monkeypatch.setattr(study, "run_unit", reached)
    monkeypatch.setattr(toy_world, "prepare_world", prepare)

    def smoke_run(
        opts, command, *args, **kw
    ):  # its first write is its folder, after every check of both arms
        Path(opts.out).mkdir(parents=True, exist_ok=True)
        raise Reached(opts)

    monkeypatch.setattr(smoke, "run_smoke", smoke_run)


def _verify(cmd: str, opt: str, value: str, case_dir: Path, out: str, reached: Reached | None) -> None:
    """The right result of an accepted case: the command's output exists (and records the value)."""
    if cmd == "eval":
        out_dir = Path(value) if opt == "--out" else case_dir / "eval"
        res = json.loads((out_dir / "results.json").read_text())
        recorded = {
            "--seed": res["config"].get("seed"),
            "--top-k": res["config"]["decoding"]["top_k"],
            "--temperature": res["config"]["decoding"]["temperature"],
        }.get(opt)
        if recorded is not None:
            assert recorded == type(recorded)(value), (opt, value, recorded)
    elif cmd == "compare":
        out_dir = Path(value) if opt == "--out" else case_dir / "cmp"
        cmp = json.loads((out_dir / "compare.json").read_text())
        assert cmp["macro"], cmp
    elif cmd == "report":
        path = Path(value) if opt == "--out" else case_dir / "r.html"
        assert path.read_text().lstrip().startswith("<!"), path
    elif cmd == "data check":
        assert "3 rows, 3 usable" in out or "1 rows" in out or "rows" in out, out
    elif cmd == "select":
        assert json.loads((case_dir / "run" / "selected.json").read_text())["step"] in (1, 2)
    elif cmd == "train":
        assert out.startswith("config ok"), out
    elif cmd == "study plan":
        assert "trlvr train" in out and "trlvr eval" in out, out
    else:  # demo, study run, toy prepare: stopped where the work starts, every check passed
        assert reached is not None, out


def run_case(world, tmp_path, monkeypatch, capsys, cmd, opt, kind, label, text) -> tuple[bool, str]:
    """Run one case; (accepted, what happened). Asserts the refused outcome's shape here."""
    case_dir = tmp_path / "case"
    case_dir.mkdir()
    monkeypatch.chdir(case_dir)  # "" and relative paths land here, never in the repository
    _stubs(monkeypatch)
    argv, value = _argv(world, case_dir, cmd, opt, text)
    before = {root: tree(root) for root in (case_dir, world["tmp"])}
    capsys.readouterr()
    reached = None
    try:
        code = main(argv)
    except Reached as r:
        code, reached = 0, r
    except BaseException as e:  # noqa: BLE001 - a traceback is the defect this battery looks for
        raise AssertionError(f"{argv}: traceback {type(e).__name__}: {e}") from e
    out, err = capsys.readouterr()
    assert "Traceback" not in err, err
    if code == 0:
        _verify(cmd, opt, value, case_dir, out, reached)
        return True, out
    lines = [ln for ln in err.splitlines() if ln.strip() and not _progress(ln)]
    assert code in (2, 74), (argv, code, err)
    assert len(lines) == 1, (argv, err)
    assert lines[0].startswith("trlvr ") and ": error: " in lines[0], lines[0]
    for root, was in before.items():  # check, then write: a refusal leaves every folder as it found it
        now = tree(root)
        changed = sorted(set(was) ^ set(now) | {k for k in set(was) & set(now) if was[k] != now[k]})
        assert not changed, f"{argv}: refused ({lines[0]}) but changed {root}: {changed[:5]}"
    return False, lines[0]


def tree(root: Path) -> dict[str, bytes | None]:
    """Every path under `root` (itself included) -> its bytes (None: a folder; "<unreadable>": no read
    access); mtimes are not compared. A refused case must leave this unchanged."""
    root = Path(root)
    if not root.exists():
        return {}
    out: dict[str, bytes | None] = {".": None}
    for p in root.rglob("*"):
        key = str(p.relative_to(root))
        if p.is_symlink():
            out[key] = b"-> " + os.readlink(p).encode()
        elif p.is_dir():
            out[key] = None
        else:
            try:
                out[key] = p.read_bytes()
            except OSError:
                out[key] = b"<unreadable>"
    return out


def _progress(line: str) -> bool:
    """A library's progress bar on stderr (transformers' "Loading weights"), not an error line."""
    return "it/s]" in line or "%|" in line


def _id(case) -> str:
    cmd, opt, kind, label, text = case
    return f"{cmd} {opt}={label}"


def _slow(case) -> bool:
    """Accepted selections (two checkpoints evaluated each) and the full-budget generation: seconds each; and
    the refused values whose outcome the kind decides (not in `_end_to_end_ids`)."""
    cmd, opt, kind, label, _ = case
    accepted = expected_accepted(cmd, opt, kind, label) is not None
    return (accepted and (cmd == "select" or (cmd, opt) == ("eval", "--max-new-tokens"))) or _id(
        case
    ) not in END_TO_END


END_TO_END = _end_to_end_ids(CASES)


@pytest.mark.parametrize(
    "case",
    [pytest.param(c, marks=pytest.mark.slow) if _slow(c) else c for c in CASES],
    ids=[_id(c) for c in CASES],
)
def test_battery(world, tmp_path, monkeypatch, capsys, case):
    cmd, opt, kind, label, text = case
    if label == "read-only folder" and not world["read_only"]:
        pytest.skip("this machine cannot make a read-only folder (neither chmod nor chattr took)")
    why = expected_accepted(cmd, opt, kind, label)
    accepted, said = run_case(world, tmp_path, monkeypatch, capsys, cmd, opt, kind, label, text)
    if why is None:
        assert not accepted, f"accepted a value that must be refused: {said[:300]}"
    else:
        assert accepted, f"refused a legitimate value ({why}): {said}"


def test_every_kind_takes_exactly_its_legit_values():
    """Each kind any option or run-config key declares, fed every value of its base (numbers, lists, choices,
    switches; the path kinds are judged by each command end to end): it takes a value iff LEGIT lists it for
    the kind. One exception, decided per option: a single seed (demo takes one; eval's group needs two)."""
    by_option = {
        "seeds one": "demo --seeds takes one seed, eval --seeds refuses it (OPTION_LEGIT; the group's check)"
    }
    kinds = {
        id(k): k
        for k in [K.kind_of(a) for _, _, a in parser_options()] + [k for *_, k in config_options()]
        if isinstance(k, K.Kind) and k.base not in PATH_BASES
    }
    assert len(kinds) > 15, kinds
    wrong = [
        f"{k.name} {label}={text!r}: {'takes' if kind_takes(k, text) else 'refuses'} it"
        for k in kinds.values()
        for label, text in VALUES[k.base].items()
        if kind_takes(k, text) != ((k.name, label) in LEGIT) and f"{k.name} {label}" not in by_option
    ]
    assert not wrong, wrong


def test_every_option_refuses_what_its_kind_refuses(tmp_path, capsys):
    """The wiring of every command-line option to its kind, for every value the battery feeds it that its kind
    refuses (the cases the default suite leaves to `make test-slow` included): the command's parser refuses it
    with exit 2 and one line naming the option and the kind's rule, before the command starts."""
    checked, actions, parser, bases = (
        0,
        {(c, o): a for c, o, a in parser_options()},
        build_parser(),
        _bases(tmp_path),
    )
    for cmd, opt, _kind, label, text in CASES:
        kind, action = option_kind(cmd, opt), actions.get((cmd, opt))
        if (
            action is None
            or kind == "choice"
            and text in action.choices
            or kind != "choice"
            and (kind.base in PATH_BASES or kind_takes(kind, text))
        ):
            continue  # a run-config key (end to end), a value the kind takes, or a path (end to end)
        argv = [
            a.replace("{out}", str(tmp_path)) for a in bases[cmd]
        ]  # as `_argv` makes it, without the files
        if action.option_strings:
            argv = [a for i, a in enumerate(argv) if opt not in (a, argv[i - 1] if i else None)] + [
                f"{opt}={text}"
            ]
        else:
            argv[
                len(cmd.split())
                + [o for c, o in actions if c == cmd and not actions[c, o].option_strings].index(opt)
            ] = text
        with pytest.raises(SystemExit) as stop:
            parser.parse_args(argv)
        err = capsys.readouterr().err.strip().splitlines()
        rule = f"invalid choice: {text!r}" if kind == "choice" else f"expected {kind.expected}"
        assert (
            stop.value.code == 2
            and f"error: argument {opt if action.option_strings else action.dest}" in err[-1]
            and rule in err[-1]
        ), (cmd, opt, label, err)
        checked += 1
    assert checked > 250, checked


# ---- regressions the battery found, kept explicit ----------------------------------------------------


def test_machine_memory_error_is_one_line(monkeypatch, capsys):
    """Python's MemoryError (numpy asking for 24 TiB for --resamples 10**12, before its kind bounded
    it) is the machine's refusal: one line, exit 74. Before: a traceback."""
    import trlvr.cli.compare_cmd as compare_cmd

    def fail(args):
        raise MemoryError("Unable to allocate 21.8 TiB for an array with shape (1000000000000, 3)")

    monkeypatch.setattr(compare_cmd, "main", fail)
    assert main(["compare", "a", "b"]) == 74
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        "trlvr compare: error: out of memory: Unable to allocate 21.8 TiB for an array with shape "
        "(1000000000000, 3)"
    ]


@pytest.mark.parametrize(
    ("argv", "fragment"),
    [
        (
            ["compare", "A", "B", "--resamples", "0"],
            "argument --resamples: expected an integer in [1, 1000000]",
        ),
        (["compare", "A", "B", "--seed=-1"], "argument --seed: expected an integer seed in [0, 4294967295]"),
        (
            ["eval", "--senior", "s", "--junior", "j", "--data", "d", "--out", "o", "--n", str(10**12)],
            "expected an integer in [1, 10000], got '1000000000000'",
        ),  # the process was OOM-killed before
        (
            ["eval", "--senior", "s", "--junior", "j", "--data", "d", "--out", ""],
            "argument --out: expected a directory",
        ),
        (
            ["eval", "--senior", "s", "--junior", "j", "--data", "d", "--out", "o", "--context-length=-5"],
            "argument --context-length: expected an integer in [0, 2**63 - 1] or 'auto'",
        ),  # silently flat before
        (
            ["select", "run", "--val", "v", "--device", "gpu0"],
            "argument --device: 'gpu0' is not a device name",
        ),
        (["data", "check", "d.jsonl", "--show=-1"], "argument --show: expected an integer in [0, 2**63 - 1]"),
        (
            ["report", "A", "--max-problems=-1"],
            "argument --max-problems: expected an integer in [0, 2**63 - 1]",
        ),
        (
            ["train", "--config", "toy", "--holdout", "0", "--num_generations", "0", "--dry-run"],
            "num_generations: must be an integer in [1, 2**63 - 1] (got '0')",
        ),  # ZeroDivisionError inside TRL before
        (
            ["train", "--config", "toy", "--holdout", "0", "--lora_dropout", "nan", "--dry-run"],
            "lora_dropout: must be a number in [0, 1)",
        ),
        (
            ["train", "--config", "toy", "--holdout", "0", "--temperature", "0", "--dry-run"],
            "temperature: must be a finite number > 0",
        ),
        (
            ["train", "--config", "toy", "--holdout", "0", "--seed=-1", "--dry-run"],
            "seed: must be an integer seed in [0, 4294967295]",
        ),
    ],
    ids=lambda v: " ".join(v[:3]) if isinstance(v, list) else None,
)
def test_battery_regressions(tmp_path, monkeypatch, capsys, argv, fragment):
    """Shrunk cases of defects the battery found (each was a traceback, a kill, or a wrong exit 0)."""
    monkeypatch.chdir(tmp_path)
    code = main(argv)
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and fragment in err[0], err


@pytest.mark.parametrize("command", ["eval", "select"])
def test_a_junior_device_for_a_suite_without_a_junior_is_not_a_traceback(
    world, tmp_path, monkeypatch, capsys, command
):
    """`--junior-device cpu` with `--suite solo` (eval) or a solo/* metric (select): the junior is not
    loaded, so its device is unused. Before: ValueError 'junior_device was given but there is no junior
    model' from the engine, a traceback."""
    tmp = world["tmp"]
    monkeypatch.chdir(tmp_path)
    if command == "eval":
        argv = [
            "eval",
            "--senior",
            f"{tmp}/senior",
            "--junior",
            f"{tmp}/junior",
            "--data",
            f"toy={tmp}/d.jsonl",
            "--suite",
            "solo",
            "--n",
            "1",
            "--k",
            "1",
            "--max-new-tokens",
            "2",
            "--no-progress",
            "--junior-device",
            "cpu",
            "--out",
            str(tmp_path / "e"),
        ]
    else:
        shutil.copytree(tmp / "run", tmp_path / "run")
        argv = [
            "select",
            str(tmp_path / "run"),
            "--val",
            f"{tmp}/d.jsonl",
            "--metric",
            "solo/pass@1",
            "--n",
            "1",
            "--limit",
            "1",
            "--max-new-tokens",
            "2",
            "--no-progress",
            "--junior-device",
            "cpu",
        ]
    assert main(argv) == 0, capsys.readouterr().err


# ---- the dry run is the run's check list --------------------------------------------------------------

# Where `trlvr train --dry-run` says "config ok" and the run itself refuses, by design: a dry run plans runs
# whose data and models an earlier study stage makes (it says so), and the machine's refusals (exit 74: a
# read-only folder) come when the run writes, which a dry run never does.
NOT_THERE_YET = "not there yet"


def _run_to_first_weights(argv, capsys) -> tuple[int, str, str, list[str]]:
    """(exit code, stdout, stderr, stderr's lines but progress bars) of one command line; reaching the first
    weight load (a stubbed loader raises Reached) counts as exit 0."""
    capsys.readouterr()
    try:
        code = main(argv)
    except Reached:
        code = 0
    out, err = capsys.readouterr()
    return code, out, err, [ln for ln in err.splitlines() if ln.strip() and not _progress(ln)]


def _train_outcome(world, case_dir, monkeypatch, capsys, argv) -> tuple[str, str]:
    """("ok" | "refused" | "machine", the output line) of one `trlvr train` or `trlvr eval` command line."""
    code, out, err, lines = _run_to_first_weights(argv, capsys)
    if code == 0:
        return "ok", out.splitlines()[0] if out.strip() else ""
    assert len(lines) == 1 and "Traceback" not in err, (argv, err)
    return ("machine" if code == 74 else "refused"), lines[0]


DRY_RUN_CASES = [c for c in CASES if c[0] in ("train", "eval")]
# The agreement is structural (one check list for both), so the default suite runs it on the first case of each
# (command, kind, accepted or refused by design); the full cross product runs under `make test-slow`.
DRY_RUN_DEFAULT = {
    _id(c)
    for c in {(c[0], c[2], expected_accepted(*c[:4]) is None): c for c in reversed(DRY_RUN_CASES)}.values()
}


@pytest.mark.parametrize(
    "case",
    [c if _id(c) in DRY_RUN_DEFAULT else pytest.param(c, marks=pytest.mark.slow) for c in DRY_RUN_CASES],
    ids=[_id(c) for c in DRY_RUN_CASES],
)
def test_dry_run_agrees_with_the_run(world, tmp_path, monkeypatch, capsys, case):
    """Over the battery's `trlvr train` and `trlvr eval` cases: --dry-run says "config ok" iff the run itself
    gets past its checks (to its first weight load: the model loaders, stubbed here), and where the run
    refuses, the dry run refuses with the same line (one check list: `trlvr.training.preflight.check_run_start`;
    `trlvr.eval.api.evaluate_specs(check_only=True)`)."""
    from trlvr.team import Team

    cmd, opt, kind, label, text = case
    if label == "read-only folder" and not world["read_only"]:
        pytest.skip("this machine cannot make a read-only folder")
    case_dir = tmp_path / "case"
    case_dir.mkdir()
    monkeypatch.chdir(case_dir)

    def first_weights(*args, **kw):
        raise Reached(args, kw)

    monkeypatch.setattr(Team, "load", first_weights)  # the one place a pair's weights load
    argv, _ = _argv(world, case_dir, cmd, opt, text)
    real_argv = [a for a in argv if a != "--dry-run"]
    before = tree(case_dir)
    dry = _train_outcome(world, case_dir, monkeypatch, capsys, [*real_argv, "--dry-run"])
    assert tree(case_dir) == before, "the dry run wrote"
    real = _train_outcome(world, case_dir, monkeypatch, capsys, real_argv)
    if dry[0] == "ok" and (NOT_THERE_YET in dry[1] or real[0] == "machine"):
        return  # by design (NOT_THERE_YET's comment)
    assert dry[0] == real[0], f"dry run {dry}, run {real}"
    if real[0] == "refused":
        assert dry[1] == real[1]


# ---- check, then write, before any move: --force, --fresh and folders of another kind ------------------

KIND_FOLDERS = ("training run", "evaluation", "study", "smoke", "model")


def _kind_folder(world, case_dir: Path, kind: str) -> Path:
    """A folder of `kind` holding finished work, made in the case's folder (copies of the world's)."""
    tmp, target = world["tmp"], case_dir / "target"
    if kind in ("training run", "evaluation", "model"):
        shutil.copytree(tmp / {"training run": "run", "evaluation": "A", "model": "senior"}[kind], target)
    else:
        target.mkdir()
        name = {"study": "study.json", "smoke": "smoke.json"}[kind]
        (target / name).write_text(json.dumps({"name": "earlier", "runs": [], "checks": {}}) + "\n")
        (target / "notes.txt").write_text("earlier work\n")
    return target


# command -> (the kind of folder it writes, its flag for that folder, its start-over flag or None)
WRITERS = {
    "train": ("training run", "--output_dir", "--force"),
    "train --dry-run": ("training run", "--output_dir", "--force"),
    "eval": ("evaluation", "--out", "--fresh"),
    "eval --dry-run": ("evaluation", "--out", "--fresh"),
    "study run": ("study", "--out", None),
    "study plan": ("study", "--out", None),
    "smoke": ("smoke", "--out", None),
    "demo": ("study", "--out", "--fresh"),
    "compare": ("comparison", "--out", None),
    "toy prepare": ("toy world", "--out", None),
}


def _writer_argv(world, case_dir: Path, writer: str, target: Path, extra: list[str]) -> list[str]:
    cmd, dry = writer.removesuffix(" --dry-run"), writer.endswith("--dry-run")
    argv = [a.replace("{out}", str(case_dir)) for a in _bases(world["tmp"])[cmd]]
    argv = [a for a in argv if a != "--dry-run"] + (["--dry-run"] if dry else [])
    flag = WRITERS[writer][1]
    argv[argv.index(flag) + 1] = str(target)
    return argv + extra


def _refused_untouched(world, case_dir, monkeypatch, capsys, argv) -> str:
    """Run `argv` (the expensive commands stubbed where their work starts, training at its first weight load);
    assert it is refused in one line and that no folder changed, byte for byte; return the line."""
    from trlvr.team import Team

    def first_weights(*args, **kw):
        raise Reached(args, kw)

    _stubs(monkeypatch)
    monkeypatch.setattr(Team, "load", first_weights)  # the one place a pair's weights load
    before = {root: tree(root) for root in (case_dir, world["tmp"])}
    code, out, err, lines = _run_to_first_weights(argv, capsys)
    assert code == 2 and len(lines) == 1 and "Traceback" not in err, (argv, code, out[-500:], err)
    for root, was in before.items():
        now = tree(root)
        changed = sorted(set(was) ^ set(now) | {k for k in set(was) & set(now) if was[k] != now[k]})
        assert not changed, f"{argv}: refused ({lines[0]}) but changed {root}: {changed[:5]}"
    return lines[0]


WRONG_KIND_CASES = [
    (w, kind, again)
    for w, (own, _, flag) in WRITERS.items()
    for kind in KIND_FOLDERS
    if kind != own
    for again in ((False, True) if flag else (False,))
]


@pytest.mark.parametrize(
    ("writer", "kind", "again"),
    WRONG_KIND_CASES,
    ids=[f"{w} into {k}{' ' + WRITERS[w][2] if a else ''}" for w, k, a in WRONG_KIND_CASES],
)
def test_a_folder_of_another_kind_is_refused_before_anything_is_written_or_moved(
    world, tmp_path, monkeypatch, capsys, writer, kind, again
):
    """Every command that writes a folder, pointed at another command's folder (an evaluation into a training
    run, a training run into a study, ...), with and without --force/--fresh: one line naming what the folder
    holds, and every folder byte for byte as it was (`trlvr.rundir.prepare_output`). Before: an eval wrote
    into the run, and --fresh moved the training run's checkpoints aside."""
    case_dir = tmp_path / "case"
    case_dir.mkdir()
    monkeypatch.chdir(case_dir)
    target = _kind_folder(world, case_dir, kind)
    extra = [WRITERS[writer][2]] if again else []
    line = _refused_untouched(
        world, case_dir, monkeypatch, capsys, _writer_argv(world, case_dir, writer, target, extra)
    )
    assert f"{target} holds a{'n' if kind[0] in 'aeiou' else ''} {kind} (" in line, line


@pytest.mark.parametrize(
    ("kind", "name"),
    [("evaluation", "results.json"), ("evaluation", "per_problem.json"), ("training run", "trlvr_run.json")],
)
def test_a_report_over_a_file_of_trlvr_work_is_refused_and_changes_nothing(
    world, tmp_path, monkeypatch, capsys, kind, name
):
    """`trlvr report --out` naming a file of an evaluation or a run (not a report): one line, every folder byte
    for byte as it was. Before: the report's HTML replaced the evaluation's results.json."""
    case_dir = tmp_path / "case"
    case_dir.mkdir()
    monkeypatch.chdir(case_dir)
    target = _kind_folder(world, case_dir, kind)
    argv = [a.replace("{out}", str(case_dir)) for a in _bases(world["tmp"])["report"]]
    argv[argv.index("--out") + 1] = str(target / name)
    line = _refused_untouched(world, case_dir, monkeypatch, capsys, argv)
    assert f"--out {target / name} is a file of a{'n' if kind[0] in 'aeiou' else ''} {kind}" in line, line


def _group(world, case_dir: Path) -> Path:
    target = case_dir / "target"
    shutil.copytree(world["tmp"] / "A", target / "seed-0")
    shutil.copytree(world["tmp"] / "B", target / "seed-1")
    (target / "group.json").write_text(
        json.dumps({"seeds": [0, 1], "senior": "x{seed}", "complete": True}) + "\n"
    )
    return target


# (writer, the kind of earlier work it starts over from, the start-over flag and an input that fails a check)
FAILING_START_OVER = [
    ("train", "training run", ["--force", "--holdout", "1000"]),  # more held out than the data has
    ("train --dry-run", "training run", ["--force", "--holdout", "1000"]),
    ("train", "training run", ["--force", "--reward", "no_such_module:reward"]),
    ("eval", "evaluation", ["--fresh", "--suite", "no-such-protocol"]),
    ("eval --dry-run", "evaluation", ["--fresh", "--suite", "no-such-protocol"]),
    ("eval", "evaluation", ["--fresh", "--junior", "{missing}"]),
    ("eval --seeds", "evaluation seed group", ["--fresh", "--seeds", "0,1"]),  # no senior0/, senior1/
    ("smoke", "smoke", ["--problems", "1000"]),  # an earlier smoke is always set aside: after the checks
    ("select", "training run", ["--fresh", "--junior", "{missing}"]),
    # checkpoint-2 lost its tokenizer: refused before step-1's folder is set aside (before: step-1 moved, then
    # step-2 refused)
    ("select", "training run", ["--fresh", "{checkpoint-2 without tokenizer}"]),
]


def _selected_run(world, case_dir: Path) -> Path:
    """A copy of the world's training run whose checkpoints were evaluated for selection (RUN/select/d/step-N/,
    copies of the evaluations A and B): what `trlvr select --fresh` sets aside."""
    run = case_dir / "run"
    shutil.copytree(world["tmp"] / "run", run)
    for step, name in ((1, "A"), (2, "B")):
        shutil.copytree(world["tmp"] / name, run / "select" / "d" / f"step-{step}")
    return run


def _start_over_argv(
    world, case_dir: Path, writer: str, kind: str, extra: list[str]
) -> tuple[Path, list[str]]:
    """(the folder of earlier work, the command line that starts over in it)."""
    if writer == "select":
        target = _selected_run(world, case_dir)
        if "{checkpoint-2 without tokenizer}" in extra:
            for name in ("tokenizer.json", "tokenizer_config.json"):
                (target / "checkpoint-2" / name).unlink()
        argv = [a.replace("{out}", str(case_dir)) for a in _bases(world["tmp"])["select"]]
        return target, argv + [e for e in extra if e != "{checkpoint-2 without tokenizer}"]
    target = (
        _group(world, case_dir) if kind == "evaluation seed group" else _kind_folder(world, case_dir, kind)
    )
    argv = _writer_argv(world, case_dir, writer.removesuffix(" --seeds"), target, extra)
    if writer == "eval --seeds":
        argv[argv.index("--senior") + 1] = str(world["tmp"] / "senior") + "{seed}"
    return target, argv


@pytest.mark.parametrize(
    ("writer", "kind", "extra"),
    FAILING_START_OVER,
    ids=[f"{w} {' '.join(e)}" for w, _, e in FAILING_START_OVER],
)
def test_start_over_with_an_input_that_fails_a_check_moves_nothing(
    world, tmp_path, monkeypatch, capsys, writer, kind, extra
):
    """--force, --fresh (and smoke's own start over) into a folder of earlier work, with an input that fails
    a check: refused in one line, and the earlier work stays where it was, byte for byte. Before: `train
    --force` set the run aside, then its data check refused, leaving the finished run moved out of place."""
    case_dir = tmp_path / "case"
    case_dir.mkdir()
    monkeypatch.chdir(case_dir)
    extra = [e.replace("{missing}", str(case_dir / "missing")) for e in extra]
    _, argv = _start_over_argv(world, case_dir, writer, kind, extra)
    _refused_untouched(world, case_dir, monkeypatch, capsys, argv)


@pytest.mark.parametrize("writer", ["eval", "select"])
def test_start_over_that_passes_every_check_sets_the_earlier_work_aside(
    world, tmp_path, monkeypatch, capsys, writer
):
    """`eval --fresh` and `select --fresh` whose every check passes: each evaluation folder's earlier work is
    now in its replaced-<time>/, byte for byte (nothing deleted), and a new evaluation stands in its place."""
    case_dir = tmp_path / "case"
    case_dir.mkdir()
    monkeypatch.chdir(case_dir)
    target, argv = _start_over_argv(world, case_dir, writer, "evaluation", ["--fresh"])
    folders = [target / "select" / "d" / f"step-{s}" for s in (1, 2)] if writer == "select" else [target]
    locks = {".lock", ".lock.pid"}  # the held lock stays (`trlvr.rundir.set_aside`'s keep)
    before = {f: {k: v for k, v in tree(f).items() if k not in locks} for f in folders}
    assert main(argv) == 0, capsys.readouterr().err[-500:]
    for folder, was in before.items():
        aside = [p for p in folder.iterdir() if p.name.startswith("replaced-")]
        assert len(aside) == 1, (folder, sorted(p.name for p in folder.iterdir()))
        assert tree(aside[0]) == was, folder
        assert (folder / "results.json").is_file() and (folder / "samples.jsonl").is_file()

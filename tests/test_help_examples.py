"""Every example command line of every `--help` page works in a fresh folder, in the order the page gives
them, or an earlier line of the same page makes what it needs.

Each page's example lines (indented lines that start with a command; on `trlvr --help`, its backticked
commands) are taken in order, in a new empty folder. Cheap ones run as written (`trlvr toy prepare`,
`trlvr recipes`, `trlvr env`, `trlvr study plan`, `cp "$(trlvr recipes --path ...)"`); the ones that train run
as their own dry run (`trlvr train ... --dry-run`, a torchrun/accelerate launch as `--processes N` or
`--config_file FILE`, `study run` as `study plan`, `smoke` as its checks before the first step), which reads
the config's models and data (so the toy world must be there); the rest are parsed by the real parser and
what they read must be an earlier line's output (`--resume`, `study report DIR`). A line with a placeholder
(PATH, FILE) is parsed only.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import io
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from trlvr.cli.main import COMMANDS, build_parser, main
from trlvr.cli.smoke_cmd import check_arms, check_device
from trlvr.config import load_run_config, parse_run_args, resolve_config_path
from trlvr.errors import UserError
from trlvr.experiments.smoke import arm_keys

ROOT = Path(__file__).resolve().parents[1]
PLACEHOLDER = re.compile(r"^[A-Z][A-Z_]*(\|[A-Z]+)*$")  # PATH, FILE, DIR, FILE|NAME
RECIPE_PATH = re.compile(r'"\$\(trlvr recipes --path ([\w.-]+)\)"')
CPU = [
    "--use_cpu",
    "true",
    "--bf16",
    "false",
    "--fp16",
    "false",
]  # a GPU config parsed here (as the dry run does)
STARTS = ("trlvr ", "torchrun ", "accelerate launch ", "cp ")


def pages() -> list[list[str]]:
    """Every help page: `trlvr`, each command, each subcommand of a command."""
    found = [[]]
    for action in build_parser()._subparsers._group_actions:
        for name, sub in action.choices.items():
            found.append([name])
            for inner in [a for a in sub._actions if isinstance(a, argparse._SubParsersAction)]:
                found += [[name, n] for n in inner.choices]
    return found


# `trlvr toy prepare` (about a minute of CPU: it scores the shipped pair for its card) runs for real once per
# session for each command line; a later test's same line gets a copy of that world in its own --out (the world
# holds no path of its folder) and the same output.
_PREPARED: dict[tuple[str, ...], tuple[Path, int, str, str]] = {}


def _toy_prepare(argv: list[str]) -> tuple[int, str, str]:
    i = argv.index("--out")
    key, out = tuple(argv[:i] + argv[i + 2 :]), Path(argv[i + 1])
    if key in _PREPARED and not out.exists():
        world, code, said, err = _PREPARED[key]
        shutil.copytree(world, out)
        return code, said, err
    code, said, err = run(argv, memo=False)
    if code == 0:
        world = Path(tempfile.mkdtemp(prefix="toy-prepare-")) / "world"
        atexit.register(shutil.rmtree, world.parent, True)
        shutil.copytree(out, world)
        _PREPARED[key] = (world, code, said, err)
    return code, said, err


def run(argv: list[str], memo: bool = True) -> tuple[int, str, str]:
    if memo and argv[:2] == ["toy", "prepare"] and "--out" in argv:
        return _toy_prepare(argv)
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as e:  # --help
            code = e.code
    return code, out.getvalue(), err.getvalue()


def help_text(page: list[str]) -> str:
    code, out, _ = run([*page, "--help"])
    assert code == 0, page
    return out


def examples(page: list[str], text: str) -> list[str]:
    """The page's example lines, continuation lines joined."""
    if not page:  # the top page: its prose names commands in backticks
        return [c for c in re.findall(r"`([^`]+)`", " ".join(text.split())) if c.startswith("trlvr ")]
    lines, joined = [], ""
    for line in text.splitlines():
        stripped = line.strip()
        if joined:
            joined += " " + stripped
        elif stripped.startswith(STARTS):
            joined = stripped
        if joined and not joined.endswith("\\"):
            lines.append(joined)
            joined = ""
        elif joined:
            joined = joined[:-1].rstrip()
    return lines


def split(line: str) -> tuple[list[str], str]:
    """(tokens without the comment, the comment)."""
    tokens = shlex.split(line, comments=True)
    comment = line.split(" # ", 1)[1] if " # " in line else ""
    return tokens, comment


def recipe_path(name: str) -> str:
    code, out, _ = run(["recipes", "--path", name])
    assert code == 0, name
    return out.strip()


def as_trlvr(tokens: list[str]) -> list[str] | None:
    """The `trlvr` argv of a line (a launcher's own settings as the dry run's), or None for a shell line."""
    if tokens[0] == "trlvr":
        return tokens[1:]
    if tokens[0] in ("torchrun", "accelerate"):
        m = tokens.index("-m")
        assert tokens[m + 1] == "trlvr.cli.main", tokens
        rest = tokens[m + 2 :]
        if "--nproc_per_node" in tokens:
            rest += ["--processes", tokens[tokens.index("--nproc_per_node") + 1]]
        if "--config_file" in tokens[:m]:
            rest += ["--config_file", tokens[tokens.index("--config_file") + 1]]
        return rest
    return None


def flag(argv: list[str], name: str, default=None):
    return argv[argv.index(name) + 1] if name in argv else default


def without(argv: list[str], *flags: str) -> list[str]:
    """argv less these flags and their values (the switches `trlvr train` reads before TRL's parser)."""
    drop = {i + k for i, a in enumerate(argv) if a in flags for k in (0, 1)}
    return [a for i, a in enumerate(argv) if i not in drop]


def missing(tandem, made: set[str]) -> str | None:
    """The run's local models and data that are neither here nor made by an earlier line (the dry run only
    notes them: a study's stage makes them), or None. A hub id (owner/name) is not local."""
    local = [
        p
        for p in (tandem.senior, tandem.junior, tandem.dataset)
        if p and (str(p).startswith(("runs/", ".", "/")) or str(p).endswith((".jsonl", ".json", ".parquet")))
    ]
    gone = [
        p for p in local if not Path(p).exists() and not any(Path(p).is_relative_to(m) for m in made if m)
    ]
    return f"reads {', '.join(gone)}: not here, and no earlier line makes it" if gone else None


def check_line(line: str, made: set[str]) -> str | None:
    """Run or check one example line in the cwd; None when it worked, else what went wrong. `made`: the
    folders earlier lines write (added to here)."""
    line = RECIPE_PATH.sub(lambda m: shlex.quote(recipe_path(m.group(1))), line)
    tokens, comment = split(line)
    argv = as_trlvr(tokens)
    if argv is None:  # a shell line: cheap ones only
        assert tokens[0] == "cp", line
        done = subprocess.run(tokens, capture_output=True, text=True)
        return None if done.returncode == 0 else done.stderr
    if any(PLACEHOLDER.match(t) for t in argv):  # a template: parsed, not run
        if argv[0] == "train":
            parse_run_args(
                [t if not PLACEHOLDER.match(t) else "x" for t in argv[1:] if t != "--dry-run"] + CPU
            )
        else:
            build_parser().parse_args(argv)
        return None
    command = argv[0]
    if command == "train":
        argv = [a for a in argv if a != "--dry-run"]
        tandem, grpo, options = parse_run_args(
            without(argv[1:], "--seeds", "--processes", "--config_file") + CPU
        )
        if options.resume:  # reads the checkpoints of an earlier line's run
            return None if grpo.output_dir in made else f"--resume: nothing earlier trains {grpo.output_dir}"
        code, out, err = run([*argv, "--dry-run"])
        made.add(grpo.output_dir)
        return (err or "failed") if code != 0 else missing(tandem, made)
    ns = build_parser().parse_args(argv)  # every other line parses
    if command == "smoke":
        config, overrides = str(resolve_config_path(ns.config)), dict(ns.set)
        try:
            check_device(ns.config, config, overrides)
            check_arms(config, ns.out, ns.steps, ns.problems, overrides)
        except UserError as e:
            if "on the GPU" in comment and "no CUDA device" in str(e):
                return None  # a GPU line, said so, on a machine without one: its one-line refusal
            return str(e)
        made.add(ns.out)
        return missing(
            load_run_config(config, arm_keys(ns.out, "tandem", ns.steps, ns.problems, overrides))[0], made
        )
    if command == "study" and ns.study_command in ("run", "plan"):
        out = ns.out or f"runs/{ns.study}"
        code, _, err = run(["study", "plan", ns.study, "--out", out])
        if ns.study_command == "run":
            made.add(out)
        return None if code == 0 else err
    if command == "study" and ns.study_command == "report":
        return None if ns.dir in made else f"study report: nothing earlier runs the study into {ns.dir}"
    if command == "demo":  # minutes of training: parsed, and its folder is its own
        made.add(ns.out)
        return None
    if command in ("toy", "recipes", "env"):
        code, _, err = run(argv)
        made.add(flag(argv, "--out", ""))
        return None if code == 0 else err
    return f"no rule for `trlvr {command}` examples: add one to tests/test_help_examples.py"


def test_every_command_has_a_help_page_here():
    names = {p[0] for p in pages() if p}
    assert names == set(COMMANDS)


@pytest.mark.parametrize("page", pages(), ids=lambda p: " ".join(p) or "trlvr")
def test_help_examples_work_in_a_fresh_folder(page, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    bin_dir = str(Path(sys.executable).parent)
    monkeypatch.setenv("PATH", bin_dir + os.pathsep + os.environ.get("PATH", ""))
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    made: set[str] = set()
    problems = []
    for line in examples(page, help_text(page)):
        said = check_line(line, made)
        if said is not None:
            problems.append(f"{line}\n    -> {said.strip()[-400:]}")
    assert not problems, "\n".join(problems)


def test_the_examples_are_found():
    """The extraction finds what the pages hold (so the test above cannot pass by finding nothing)."""
    train = examples(["train"], help_text(["train"]))
    assert train[0].startswith("trlvr toy prepare --out runs/toy ")
    assert any(
        ln.startswith("accelerate launch") and "train --config qwen3-4b-deepscaler --arm tandem " in ln
        for ln in train
    )  # the continuation line joined
    assert len(train) >= 10
    assert {"trlvr recipes", "trlvr env"} <= set(examples([], help_text([])))
    assert len(examples(["smoke"], help_text(["smoke"]))) >= 2


def test_the_toy_train_line_without_the_world_is_caught(tmp_path, monkeypatch):
    """The check reads the config's models and data: the train line alone, in a fresh folder, fails."""
    monkeypatch.chdir(tmp_path)
    said = check_line("trlvr train --config toy --arm tandem", set())
    assert (
        said
        == "reads runs/toy/senior, runs/toy/junior, runs/toy/data/train.jsonl: not here, and no earlier line makes it"
    )
    assert check_line("trlvr train --config toy --arm tandem --resume", set()).startswith(
        "--resume: nothing earlier"
    )


def guide_toy_chain() -> list[str]:
    """The training guide's toy block, one stage at a time: prepare, the tandem run, its select and its eval."""
    text = (ROOT / "docs" / "guides" / "training-cli.md").read_text()
    block = text.split("## The toy world, one stage at a time")[1].split("```bash")[1].split("```")[0]
    lines = [" ".join(part.split()) for part in block.replace("\\\n", " ").splitlines() if part.strip()]
    wanted = (
        "trlvr toy prepare",
        "trlvr train --config toy --arm tandem",
        "trlvr select runs/toy-tandem ",
        "trlvr eval --senior runs/toy-tandem@selected",
    )
    return [next(ln for ln in lines if ln.startswith(w)) for w in wanted]


def test_the_guides_toy_chain_train_select_eval_runs_in_a_fresh_folder(tmp_path, monkeypatch):
    """As written, but smaller (two steps, a few problems): the train line holds out what select's split:200 reads,
    because the toy config holds out 200 problems."""
    monkeypatch.chdir(tmp_path)
    smaller = {
        "train": [
            "--max_steps",
            "2",
            "--save_steps",
            "1",
            "--per_device_train_batch_size",
            "16",
            "--max_completion_length",
            "48",
        ],
        "select": ["--limit", "4", "--n", "1", "--max-new-tokens", "48"],
        "eval": ["--limit", "4", "--n", "1", "--k", "1", "--max-new-tokens", "48"],
    }
    for line in guide_toy_chain():
        argv = split(line)[0][1:]
        assert "--holdout" not in argv, line  # the config's own holdout is what chains
        code, _, err = run([*argv, *smaller.get(argv[0], [])])
        assert code == 0, f"{line}\n{err[-2000:]}"
    assert (tmp_path / "runs" / "toy-tandem" / "holdout.jsonl").read_text().count("\n") == 200
    assert (tmp_path / "runs" / "eval-tandem" / "results.json").is_file()

"""One lock for every command that writes a folder (issue 58): a second command into a folder in use is
refused at once, in one line naming the first's pid and command. One helper process holds every lock (as
`trlvr.rundir.lock` holds it for each command; tests/test_rundir.py takes each kind's lock from two
processes, tests/test_train_owns_dir.py runs two real trainings); each real command is then refused by it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from helpers import (
    cli_errors,
    fake_eval_outputs,
    fake_select_output,
    fake_train_output,
    save_tiny_models,
    write_sum_problems,
)

from trlvr import rundir
from trlvr.cli.main import main
from trlvr.errors import UserError
from trlvr.eval.api import resolve_senior

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def held(tmp_path_factory):
    """Folders, and one other process holding each one's lock as the named command."""
    root = tmp_path_factory.mktemp("locks")
    run = root / "run"
    fake_train_output(run)
    fake_select_output(run)
    (run / "trlvr_run.json").write_text(json.dumps({"tandem": {"junior": str(root / "m" / "junior")}}))
    save_tiny_models(root / "m", {"senior": 0, "junior": 1})
    write_sum_problems(root / "data.jsonl", 3)
    for name in ("A", "B", "EVAL"):
        fake_eval_outputs(root / name)
    held = {
        "trlvr train": run,
        "trlvr eval": root / "EVAL",
        "trlvr compare": root / "cmp",
        "trlvr toy prepare": root / "toy",
        "trlvr study run": root / "study",
        "trlvr smoke": root / "smoke",
        "trlvr report": root / "B",
    }
    code = textwrap.dedent(f"""
        import contextlib, time
        from trlvr import rundir
        with contextlib.ExitStack() as stack:
            for by, path in {[(by, str(p)) for by, p in held.items()]!r}:
                stack.enter_context(rundir.lock(path, by=by))
            print("held", flush=True)
            time.sleep(300)
    """)
    proc = subprocess.Popen(
        [sys.executable, "-c", code],
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env=dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1"),
    )
    assert proc.stdout.readline().strip() == "held"
    yield root, proc.pid
    proc.kill()
    proc.wait()


def refused(argv, capsys, by: str, pid: int) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err
    (line,) = cli_errors(err)
    assert "Traceback" not in err and f"being written by another {by} (pid {pid})" in line, line
    return line


@pytest.mark.parametrize(
    "command", ["eval", "select", "compare", "report", "toy prepare", "study run", "smoke"]
)
def test_a_second_command_into_a_folder_in_use_is_refused_at_once(held, command, capsys):
    root, pid = held
    m = root / "m"
    argv, by = {
        "eval": (
            [
                "eval",
                "--senior",
                str(m / "senior"),
                "--junior",
                str(m / "junior"),
                "--data",
                str(root / "data.jsonl"),
                "--out",
                str(root / "EVAL"),
                "--suite",
                "solo",
            ],
            "trlvr eval",
        ),
        "select": (["select", str(root / "run"), "--val", str(root / "data.jsonl")], "trlvr train"),
        "compare": (
            ["compare", str(root / "A"), str(root / "B"), "--out", str(root / "cmp")],
            "trlvr compare",
        ),
        "report": (["report", str(root / "B")], "trlvr report"),  # writes B/report.html: into an evaluation
        "toy prepare": (["toy", "prepare", "--out", str(root / "toy")], "trlvr toy prepare"),
        "study run": (
            ["study", "run", str(root / "no-study.yaml"), "--out", str(root / "study")],
            "trlvr study run",
        ),
        "smoke": (["smoke", "--config", "toy", "--out", str(root / "smoke")], "trlvr smoke"),
    }[command]
    before = sorted(
        p.name for p in Path(argv[argv.index("--out") + 1] if "--out" in argv else argv[1]).iterdir()
    )
    refused(argv, capsys, by, pid)
    after = sorted(
        p.name for p in Path(argv[argv.index("--out") + 1] if "--out" in argv else argv[1]).iterdir()
    )
    assert after == before  # nothing written


def test_eval_of_run_at_selected_is_refused_while_the_run_is_trained(held):
    root, pid = held
    with pytest.raises(UserError, match=rf"--senior .*being written by another trlvr train \(pid {pid}\)"):
        resolve_senior(f"{root / 'run'}@selected")


def test_select_and_train_exclude_each_other(tmp_path):
    with rundir.lock(tmp_path / "run", by="trlvr select"):
        with pytest.raises(
            UserError, match=rf"being written by another trlvr select \(pid {os.getpid()}\).*--output_dir"
        ):
            with rundir.lock(tmp_path / "run", by="trlvr train"):
                pass


def test_a_refused_lock_leaves_no_folder_and_a_folder_it_made_goes_on_a_refusal(tmp_path):
    with pytest.raises(UserError, match="boom"):
        with rundir.lock(tmp_path / "new", by="trlvr compare"):
            raise UserError("boom")
    assert not (tmp_path / "new").exists()
    rundir.check_unlocked(tmp_path / "none", "trlvr train", "--senior")  # no lock file: nothing made
    assert not (tmp_path / "none").exists()

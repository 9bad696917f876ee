"""Every command ends a user's mistake or the machine's refusal in one line (trlvr/cli/main.py, the one
place): exit 2 for the user's input (a UserError, an output path that is a file or under one, a bad
flag), 74 when the machine refuses (permission, read-only or full file system), 130 on Ctrl-C, a quiet
exit when stdout is closed (`| head -1`); tracebacks only with --verbose (or --debug)."""

from __future__ import annotations

import errno
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import save_tiny_models, write_sum_problems

from trlvr.cli.main import EXIT_INTERRUPTED, EXIT_REFUSED, main

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """Two finished evaluations A and B (two seniors, one junior, the same settings) and the eval argv."""
    tmp = tmp_path_factory.mktemp("world")
    save_tiny_models(tmp, {"senior": 0, "other": 2, "junior": 1}, hidden=32)
    data = write_sum_problems(tmp / "d.jsonl", 3)
    common = [
        "eval",
        "--junior",
        str(tmp / "junior"),
        "--data",
        f"toy={data}",
        "--n",
        "2",
        "--k",
        "1",
        "--suite",
        "solo,handoff",
        "--max-new-tokens",
        "4",
        "--no-progress",
    ]
    for name, senior in (("A", "senior"), ("B", "other")):
        assert main([*common, "--senior", str(tmp / senior), "--out", str(tmp / name)]) == 0
    (tmp / "file").write_text("not a directory\n")
    return tmp, common


def one_line(capsys, code: int, expected_code: int, command: str, *fragments: str) -> str:
    out, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert code == expected_code, err
    assert len(lines) == 1 and "Traceback" not in err, err
    # "trlvr study: error: ..." (trlvr.cli.main), or "trlvr study run: error: ..." (the subcommand's parser)
    assert lines[0].startswith(f"trlvr {command}") and ": error: " in lines[0], lines[0]
    for f in fragments:
        assert f in lines[0], lines[0]
    return lines[0]


# Each command with an output path pointed at a file, or under one (the seven and the rest).
OUT_AT_A_FILE = [
    ("compare", ["compare", "{A}", "{B}", "--out", "{file}"]),
    ("compare", ["compare", "{A}", "{B}", "--out", "{file}/cmp"]),
    ("report", ["report", "{A}", "--out", "{file}/report.html"]),
    ("report", ["report", "{A}", "--out", "{A}"]),  # a directory where the HTML file goes
    ("report", ["report", "{A}", "{B}", "--out", "{file}/report.html"]),
    ("study", ["study", "run", str(ROOT / "studies" / "toy-seeds.yaml"), "--out", "{file}"]),
    ("toy", ["toy", "prepare", "--out", "{file}"]),
    ("demo", ["demo", "--out", "{file}"]),
    ("train", ["train", "--config", "toy", "--holdout", "0", "--output_dir", "{file}"]),
    ("train", ["train", "--config", "toy", "--holdout", "0", "--output_dir", "{file}/run", "--dry-run"]),
    ("eval", ["{eval}", "--senior", "{tmp}/senior", "--out", "{file}"]),
    ("select", ["select", "{file}", "--val", "split:20", "--metric", "solo/pass@1"]),
]


@pytest.mark.parametrize(
    ("command", "argv"), OUT_AT_A_FILE, ids=[" ".join(a[:1] + a[-2:]) for _, a in OUT_AT_A_FILE]
)
def test_an_output_path_at_a_file_is_one_line(world, capsys, command, argv):
    tmp, common = world
    real = []
    for a in argv:
        if a == "{eval}":
            real += common
        else:
            real.append(a.format(A=tmp / "A", B=tmp / "B", file=tmp / "file", tmp=tmp))
    capsys.readouterr()
    line = one_line(capsys, main(real), 2, command)
    assert str(tmp / "file") in line or str(tmp / "A") in line, line


def test_a_closed_stdout_ends_quietly(world):
    """`trlvr compare A B | head -1`: the reader is gone before the table is written. Before, a
    BrokenPipeError traceback; now nothing on stderr and exit 1 (Python's SIGPIPE recipe)."""
    tmp, _ = world
    argv = [
        sys.executable,
        "-m",
        "trlvr.cli.main",
        "compare",
        str(tmp / "A"),
        str(tmp / "B"),
        "--out",
        str(tmp / "c"),
    ]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.close()  # as `head -1` does once it has its line
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=300) == 1 and err == "", err
    assert (tmp / "c" / "compare.json").is_file()  # the work was done; only the printing was cut


def _failing(monkeypatch, exc: BaseException, command: str = "compare") -> None:
    import importlib

    from trlvr.cli.main import COMMANDS

    def fail(args):
        raise exc

    monkeypatch.setattr(importlib.import_module(f"trlvr.cli.{COMMANDS[command]}"), "main", fail)


@pytest.mark.parametrize(
    ("exc", "code", "fragment"),
    [
        (
            OSError(errno.ENOSPC, "No space left on device", "runs/x/samples.jsonl"),
            EXIT_REFUSED,
            "runs/x/samples.jsonl: No space left on device",
        ),
        (
            OSError(errno.EROFS, "Read-only file system", "runs/x/.lock"),
            EXIT_REFUSED,
            "the file system is read-only",
        ),
        (
            PermissionError(errno.EACCES, "Permission denied", "/root/x"),
            EXIT_REFUSED,
            "/root/x: Permission denied",
        ),
        (OSError(errno.EDQUOT, "Disk quota exceeded", "runs/x"), EXIT_REFUSED, "Disk quota exceeded"),
        (
            RuntimeError("Error while serializing: I/O error: No space left on device (os error 28)"),
            EXIT_REFUSED,
            "No space left on device (os error 28)",
        ),  # a Rust library's io::Error (safetensors, tokenizers)
        (FileExistsError(errno.EEXIST, "File exists", "{file}"), 2, "is a file, where a directory is needed"),
        (IsADirectoryError(errno.EISDIR, "Is a directory", "runs/x"), 2, "a directory is in the way"),
        (KeyboardInterrupt(), EXIT_INTERRUPTED, "interrupted"),
    ],
    ids=["ENOSPC", "EROFS", "EACCES", "EDQUOT", "rust-os-error", "EEXIST", "EISDIR", "ctrl-c"],
)
def test_machine_refusals_and_interrupts_are_one_line(world, monkeypatch, capsys, exc, code, fragment):
    tmp, _ = world
    if getattr(exc, "filename", None) == "{file}":
        exc.filename = str(tmp / "file")
    _failing(monkeypatch, exc)
    assert one_line(capsys, main(["compare", "a", "b"]), code, "compare", fragment)


def test_ctrl_c_in_a_command_run_by_another_stops_the_outer_one(monkeypatch, capsys):
    """A study runs its stages through `main`: Ctrl-C in a stage must stop the study (exit 130, one
    line), not become one failed stage while the other pipelines go on."""
    _failing(monkeypatch, KeyboardInterrupt(), "compare")

    def outer(args):
        main(["compare", "a", "b"])  # the stage
        raise AssertionError("the study went on after Ctrl-C")

    import trlvr.cli.data_cmd as data_cmd

    monkeypatch.setattr(data_cmd, "main", outer)
    one_line(capsys, main(["data", "check", "x"]), EXIT_INTERRUPTED, "data", "interrupted")


def test_a_wrapped_os_error_is_found_through_its_cause(monkeypatch, capsys):
    try:
        try:
            raise OSError(errno.ENOSPC, "No space left on device", "runs/x/checkpoint-3")
        except OSError as inner:
            raise RuntimeError("could not save the checkpoint") from inner
    except RuntimeError as e:
        wrapped = e
    _failing(monkeypatch, wrapped)
    one_line(capsys, main(["compare", "a", "b"]), EXIT_REFUSED, "compare", "runs/x/checkpoint-3")


@pytest.mark.parametrize("switch", ["--verbose", "--debug"])
def test_verbose_keeps_the_traceback_and_bugs_always_do(monkeypatch, switch):
    _failing(monkeypatch, OSError(errno.ENOSPC, "No space left on device", "x"))
    with pytest.raises(OSError):
        main(["compare", "a", "b", switch])
    _failing(monkeypatch, RuntimeError("a bug"))  # not the user's, not the machine's: the traceback stays
    with pytest.raises(RuntimeError, match="a bug"):
        main(["compare", "a", "b"])


def test_train_keeps_its_own_verbose_option(monkeypatch):
    """`--verbose` is also train's own option (libraries' console output): it reaches TRL's parser."""
    seen = {}

    def record(args):
        seen["rest"] = args.rest
        return 0

    import trlvr.cli.train_cmd as train_cmd

    monkeypatch.setattr(train_cmd, "main", record)
    assert main(["train", "--config", "toy", "--verbose", "--debug"]) == 0
    assert seen["rest"] == ["--config", "toy", "--verbose"]


def test_a_bad_flag_is_one_line(capsys):
    assert main(["compare", "a", "b", "--resamples", "many"]) == 2  # argparse's exit code, returned
    err = capsys.readouterr().err.strip().splitlines()
    assert (
        len(err) == 1
        and err[0].startswith("trlvr compare: error: argument --resamples")
        and "--help" in err[0]
    )


def test_eval_over_a_complete_evaluation_takes_no_lock_and_writes_nothing(world, monkeypatch, capsys):
    """On a read-only file system (here: every write and lock refused with EROFS) rerunning a finished
    evaluation reports its results. Before, it took the write lock first and died on EROFS."""
    import trlvr.eval.store as store

    tmp, common = world
    argv = [*common, "--senior", str(tmp / "senior"), "--out", str(tmp / "A")]
    before = {p.name: p.stat().st_mtime_ns for p in (tmp / "A").iterdir()}

    def refused(*a, **kw):
        raise OSError(errno.EROFS, "Read-only file system", str(tmp / "A"))

    for name in ("lock", "append", "rewrite", "write", "clear", "repair_tail"):
        monkeypatch.setattr(store.EvalDir, name, refused)
    monkeypatch.setattr(store, "write_json", refused)
    capsys.readouterr()
    assert main(argv) == 0, capsys.readouterr().err
    assert "solo/pass@1" in capsys.readouterr().out
    assert {p.name: p.stat().st_mtime_ns for p in (tmp / "A").iterdir()} == before
    # with something to write (a third sample per problem), the refusal is one line and exit 74
    line = one_line(capsys, main([*argv, "--n", "3"]), EXIT_REFUSED, "eval", "Read-only file system")
    assert str(tmp / "A") in line

"""Clean interrupts: Ctrl-C (SIGINT to the terminal's foreground process group) ends a command that grades
in its worker pool in one line and exit code 130, and no grading worker prints a traceback. Before: the
workers, in the command's process group, got the SIGINT too and each printed a KeyboardInterrupt
traceback (mid-import or mid-job) under the command's line."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WORKER = b"trlvr.rewards._worker"


def _workers_of(pid: int) -> list[int]:
    out = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            ppid = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
            if ppid == pid and WORKER in (d / "cmdline").read_bytes():
                out.append(int(d.name))
        except (OSError, IndexError, ValueError):
            continue
    return out


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "gone"


def _ctrl_c(argv: list[str], tmp_path: Path) -> tuple[int, str, list[int]]:
    """Run `trlvr ARGV` as a terminal would (its own process group), send the group SIGINT once its grading
    workers run; (exit code, stderr, the workers still alive 5 s after the command ended)."""
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    # Ctrl-C's default action in the command, as a terminal gives it: a test run started in the background by a
    # shell (`pytest &`) inherits SIGINT ignored, and an ignored signal stays ignored across exec
    proc = subprocess.Popen(
        [sys.executable, "-m", "trlvr.cli.main", *argv],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        deadline = time.monotonic() + 300
        while not (workers := _workers_of(proc.pid)):
            assert proc.poll() is None, proc.stderr.read().decode()
            assert time.monotonic() < deadline, "no grading worker started"
            time.sleep(0.05)
        time.sleep(1.0)  # workers importing math-verify, or grading: either way mid-work
        os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C in a terminal does
        _, err = proc.communicate(timeout=60)
        end, alive = time.monotonic() + 5, workers
        while alive and time.monotonic() < end:
            alive = [w for w in workers if _state(w) not in ("gone", "Z")]
            time.sleep(0.1)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    return proc.returncode, err.decode(), alive


def test_ctrl_c_in_data_check_is_one_line_and_leaves_no_worker(tmp_path):
    rows = [{"problem": f"p{i}?", "answer": f"x^{{{i}}} + \\sqrt{{{i + 2}}} y"} for i in range(20_000)]
    (tmp_path / "golds.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    code, err, alive = _ctrl_c(["data", "check", "golds.jsonl"], tmp_path)
    assert (code, err) == (130, "trlvr data: error: interrupted\n"), err[-2000:]
    assert not alive

"""Code that runs inside a grading worker process: math-verify parse + verify, one job at a time.

math-verify's own timeouts use SIGALRM, which only works in a process's main thread; here
they are switched off (``parsing_timeout=None``, ``timeout_seconds=None``) because the parent's
watchdog kills a worker that overruns. Only floats and short input substrings go back
to the parent: a parsed sympy object can be an integer with millions of digits whose
``str`` alone would stall the trainer.

A worker dies with its parent: on Linux the kernel sends it SIGKILL when the thread that
started it exits (``PR_SET_PDEATHSIG``), which works even while sympy holds the GIL in one
huge integer operation; elsewhere a watcher thread polls the parent pid.
"""

from __future__ import annotations

import ctypes
import functools
import logging
import os
import signal
import sys
import threading
import time

_REPR_CHARS = 200
_PR_SET_PDEATHSIG = 1  # from <linux/prctl.h>
PARENT_POLL_S = 0.5


def _parse(text: str) -> list:
    from math_verify import parse

    return parse(text, parsing_timeout=None)


@functools.lru_cache(maxsize=4096)
def parse_gold(gold: str) -> tuple:
    """Parsed gold answer; the same gold is graded against every rollout of its group.

    Raw gold strings ("\\frac{1}{2}", "[1,2)") are wrapped in \\boxed{} so math-verify reads
    them as one answer; strings already carrying $ or \\boxed are parsed as given.
    """
    # math-verify's fallback returns the raw matched string alone when it could not build
    # a sympy object ("\\boxed{\\frac{}" -> ['\\frac{']): that is not a parse.
    texts = [gold] if ("\\boxed" in gold or "$" in gold) else [f"\\boxed{{{gold}}}", f"${gold}$", gold]
    for text in texts:
        parsed = _parse(text)
        if any(not isinstance(x, str) for x in parsed):
            return tuple(parsed)
    return ()


def grade_pair(pred: str, gold: str) -> tuple[float, str]:
    """(score, extracted prediction) for a prediction string against a gold answer string.

    ``pred`` is either the content of the final box (already wrapped as \\boxed{...} by the
    caller) or the tail of a box-less completion.
    """
    from math_verify import verify

    g = parse_gold(gold)
    if not g:
        raise ValueError(f"gold answer not parseable by math-verify: {gold[:80]!r}")
    p = _parse(pred)
    if not p:
        return 0.0, ""
    shown = str(p[-1]) if isinstance(p[-1], str) else ""
    ok = verify(list(g), p, timeout_seconds=None)
    return float(bool(ok)), shown[:_REPR_CHARS]


def check_gold(gold: str) -> tuple[float, str]:
    """(1.0, "") when math-verify can parse ``gold``, (0.0, reason) otherwise."""
    return (1.0, "") if parse_gold(gold) else (0.0, "unparseable")


def _shown(parsed: tuple) -> str:
    if not parsed:
        return "nothing"
    try:
        return str(parsed[0])[:60]
    except ValueError:  # an integer too long to print
        return "a number too long to print"


def reading_change(raw: str, normalized: str) -> tuple[float, str]:
    """(1.0, "") when the gold ``raw`` and its normalised text read as one value (or the normalised
    text does not parse: `check_gold` says so), else (0.0, "reads X raw, Y normalised")."""
    from math_verify import verify

    r, n = parse_gold(raw), parse_gold(normalized)
    if not n or (r and verify(list(n), list(r), timeout_seconds=None) and verify(list(r), list(n), timeout_seconds=None)):
        return 1.0, ""
    return 0.0, f"reads {_shown(r)} raw, {_shown(n)} normalised"


OPS = {"grade": grade_pair, "check_gold": check_gold, "reading": reading_change}


def warm_up() -> None:
    """Import and exercise math-verify once (first calls build grammars and caches: ~1 s)."""
    logging.getLogger("math_verify").setLevel(logging.ERROR)  # "timeout disabled" warning
    grade_pair("\\boxed{\\frac{1}{2}}", "0.5")
    grade_pair("\\boxed{[1,2)}", "[1,2]")


def die_with_parent(parent_pid: int) -> None:
    """Exit when ``parent_pid`` is no longer this process's parent (it died; we were reparented)."""
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent_pid:  # the parent died before the line above took effect
        os._exit(0)

    def watch() -> None:
        while os.getppid() == parent_pid:
            time.sleep(PARENT_POLL_S)
        os._exit(0)

    threading.Thread(target=watch, name="trlvr-parent-watch", daemon=True).start()


def worker_main(conn_in, conn_out) -> None:
    """Serve jobs ``(job_id, op, a, b)`` from ``conn_in`` until EOF or ``None``.

    Replies ``(job_id, "ok", score, info)`` or ``(job_id, "error", 0.0, message)``; sends
    ``("ready",)`` first, once math-verify is warm, so start-up never counts toward a job's timeout.
    """
    warm_up()
    conn_out.send(("ready",))
    while True:
        try:
            msg = conn_in.recv()
        except (EOFError, OSError):
            return
        if msg is None:
            return
        job_id, op, a, b = msg
        try:
            score, info = OPS[op](a) if op == "check_gold" else OPS[op](a, b)
            conn_out.send((job_id, "ok", score, info))
        except Exception as exc:  # reported and counted by the parent, never swallowed
            conn_out.send((job_id, "error", 0.0, f"{type(exc).__name__}: {exc}"[:_REPR_CHARS]))


if __name__ == "__main__":
    # Started by trlvr.rewards.pool as `python -m trlvr.rewards._worker READ_FD WRITE_FD PARENT_PID`.
    from multiprocessing.connection import Connection

    die_with_parent(int(sys.argv[3]))
    worker_main(Connection(int(sys.argv[1]), writable=False), Connection(int(sys.argv[2]), readable=False))

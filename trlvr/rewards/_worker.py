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
import math
import os
import signal
import sys
import threading
import time
from fractions import Fraction

from trlvr.rewards import authors, authors_paper
from trlvr.rewards.equivalence import REL_TOL, exact_verdict, mark_numbers, number_of, symbolic_form

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


def _gold(gold: str) -> tuple:
    g = parse_gold(symbolic_form(gold))
    if not g:
        raise ValueError(f"gold answer not parseable by math-verify: {gold[:80]!r}")
    return g


NUMERIC_DIGITS = 40  # working precision (decimal digits) of the numeric comparison: far below REL_TOL


def _complex(x) -> complex:
    """A sympy number's value (at ``NUMERIC_DIGITS``) or a plain number's; TypeError for anything else."""
    import sympy

    if isinstance(x, sympy.Basic):
        x = sympy.N(x.doit(), NUMERIC_DIGITS)
    return complex(x)


def numeric_verdict(gold, pred) -> bool | None:
    """True/False when math-verify read both sides as numbers (sympy expressions without free symbols:
    10^{-7}, \\sqrt{2}, 2^{-30}, \\pi), compared exactly where both are rational, else to a relative
    ``REL_TOL`` (never math-verify's 6 decimal places, under which 10^{-7} equals 10^{-8}); None for anything
    else (sets, intervals, equations, expressions in a variable), which math-verify's ``verify`` decides."""
    import sympy

    a, b = gold[0] if gold else None, pred[0] if pred else None
    if not all(isinstance(x, sympy.Expr) for x in (a, b)):
        return None
    a, b = a.doit(), b.doit()  # math-verify keeps 5\\% as 5*UnevaluatedExpr(1/100)
    if not (a.is_number and b.is_number):
        return None
    if a.is_Rational and b.is_Rational:
        return bool(a == b)
    try:
        x, y = _complex(a), _complex(b)
    except (TypeError, ValueError, OverflowError, ZeroDivisionError, AttributeError):
        return None  # math-verify's turn (nan, zoo, a value sympy cannot evaluate)
    if x == y:
        return True
    scale = max(abs(x), abs(y))
    return bool(scale and math.isfinite(scale) and abs(x - y) <= REL_TOL * scale)


def grade_pair(answer: str, gold: str) -> tuple[float, str]:
    """(score, answer shown) for a boxed answer's content against a gold: the one rule
    (`trlvr.rewards.equivalence`), math-verify comparing the two :func:`symbolic_form` texts."""
    from math_verify import verify

    quick = exact_verdict(answer, gold)
    if quick is not None:
        return float(quick), answer[:_REPR_CHARS]
    g = _gold(gold)
    p = _parse(f"\\boxed{{{symbolic_form(answer)}}}")
    if not p:
        return 0.0, ""
    numeric = numeric_verdict(g, p)
    if numeric is not None:
        return float(numeric), answer[:_REPR_CHARS]
    return float(bool(verify(list(g), p, timeout_seconds=None))), answer[:_REPR_CHARS]


def _reads_as(parsed, value) -> bool:
    """Whether math-verify's value ``parsed`` is the exact number ``value`` (to float precision)."""
    try:
        a, b = _complex(parsed), complex(Fraction(value))
    except (TypeError, ValueError, OverflowError, ZeroDivisionError, AttributeError):
        return False
    return a == b or (math.isfinite(abs(b)) and abs(a - b) <= 1e-9 * abs(b))


def grade_tail(text: str, gold: str) -> tuple[float, str]:
    """(score, extracted answer) for the tail of a box-less completion: math-verify finds its final
    answer (numbers first rewritten by :func:`mark_numbers`, so ``1.0e3`` is read whole), then the
    one rule decides: exactly where the answer it found and the gold are both numbers."""
    from math_verify import verify

    g = _gold(gold)
    p = _parse(mark_numbers(text))
    if not p:
        return 0.0, ""
    shown = p[-1] if isinstance(p[-1], str) else ""
    value = number_of(shown) if shown else None
    if shown and (value is None or _reads_as(p[0], value)):
        quick = exact_verdict(shown, gold)
        if quick is not None:
            return float(quick), shown[:_REPR_CHARS]
    numeric = numeric_verdict(g, p)
    if numeric is not None:
        return float(numeric), shown[:_REPR_CHARS]
    return float(bool(verify(list(g), p, timeout_seconds=None))), shown[:_REPR_CHARS]


def check_gold(gold: str) -> tuple[float, str]:
    """(1.0, "") when the grader can read ``gold``: math-verify parses its :func:`symbolic_form`, and the
    gold written as an answer grades equal to itself; (0.0, reason) otherwise."""
    from math_verify import verify

    form = symbolic_form(gold)
    g = parse_gold(form)
    if not g:
        return 0.0, "unparseable"
    p = _parse(f"\\boxed{{{form}}}")
    if not p or not verify(list(g), p, timeout_seconds=None):
        return 0.0, "not equal to itself when graded"
    return 1.0, ""


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
    if not n or (
        r
        and verify(list(n), list(r), timeout_seconds=None)
        and verify(list(r), list(n), timeout_seconds=None)
    ):
        return 1.0, ""
    return 0.0, f"reads {_shown(r)} raw, {_shown(n)} normalised"


def grade_authors(text: str, gold: str) -> tuple[float, str]:
    """(score, extracted answer or "no_box"): the ``authors`` grader (`trlvr.rewards.authors`) on a whole
    completion; its own sympy and math-verify calls run here, under the pool's watchdog."""
    return authors.score(text, gold)


def grade_authors_paper(text: str, gold: str) -> tuple[float, str]:
    """(score, extracted answer or "no_box"): the ``authors-paper`` grader (`trlvr.rewards.authors_paper`)."""
    score, shown = authors_paper.score(text, gold)
    return score, "no_box" if shown is None else shown[:_REPR_CHARS]


# The op names the grader: "authors" and "authors-paper" are the authors' graders (a whole completion and its
# gold); the others are the trlvr grader's steps.
OPS = {
    "grade": grade_pair,
    "tail": grade_tail,
    "check_gold": check_gold,
    "reading": reading_change,
    "authors": grade_authors,
    "authors-paper": grade_authors_paper,
}


def warm_up() -> None:
    """Import and exercise math-verify once (first calls build grammars and caches: ~1 s)."""
    logging.getLogger("math_verify").setLevel(logging.ERROR)  # "timeout disabled" warning
    grade_pair("\\frac{x}{2}", "0.5x")
    grade_pair("[1,2)", "[1,2]")
    grade_tail("The answer is 1.0e3.", "1000")


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

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the command's to report (trlvr.rewards.pool)
    die_with_parent(int(sys.argv[3]))
    worker_main(Connection(int(sys.argv[1]), writable=False), Connection(int(sys.argv[2]), readable=False))

"""Grading pool processes: workers die with a SIGKILLed parent, concurrent callers share the
workers, a warm spare replaces a killed worker at once; the rewards modules' doctests hold."""

from __future__ import annotations

import doctest
import importlib
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest

from trlvr.rewards.pool import GraderPool

ROOT = Path(__file__).resolve().parents[1]
STALL = ("grade", r"\boxed{9^{9^{9^{9}}}}", "3")  # unscreened: sympy sits in one huge integer op

linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")

CHILD = """
import threading, time
from trlvr.rewards.pool import GraderPool
pool = GraderPool(2)
pool.run([("grade", "1", "1")], timeout=60)
threading.Thread(target=pool.run, args=([STALL] * 2, 120.0), daemon=True).start()
time.sleep(1.0)
print("busy", flush=True)
time.sleep(600)
""".replace("STALL", repr(STALL))


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _workers_of(pid: int) -> list[int]:
    return [c.pid for c in psutil.Process(pid).children() if "trlvr.rewards._worker" in " ".join(c.cmdline())]


@linux_only
def test_workers_die_with_a_sigkilled_parent():
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD], cwd=ROOT, stdout=subprocess.PIPE, text=True, env=dict(os.environ)
    )
    workers: list[int] = []
    try:
        assert child.stdout.readline().strip() == "busy"
        workers = _workers_of(child.pid)
        assert len(workers) == 3  # two running the stalling jobs, one warm spare
        # Busy, not idle in recv(): an idle worker would also exit on its pipe's EOF.
        busy = [p for p in workers if psutil.Process(p).cpu_percent(interval=0.5) > 10]
        assert len(busy) >= 2, "the stalling jobs should hold two workers"
        os.kill(child.pid, signal.SIGKILL)
        child.wait(timeout=10)
        deadline = time.monotonic() + 5.0
        while any(_alive(p) for p in workers) and time.monotonic() < deadline:
            time.sleep(0.1)
        orphans = [p for p in workers if _alive(p)]
        assert not orphans, f"workers outlived their parent: {orphans}"
    finally:
        child.kill()
        for p in workers:
            if _alive(p):
                os.kill(p, signal.SIGKILL)


def test_worker_whose_parent_is_already_gone_exits_at_once():
    # The start-up race: a worker whose expected parent pid is not its parent must not run.
    r1, w1 = os.pipe()
    r2, w2 = os.pipe()
    proc = subprocess.Popen(
        [sys.executable, "-m", "trlvr.rewards._worker", str(r1), str(w2), str(os.getpid() + 10_000_000)],
        pass_fds=(r1, w2),
        cwd=ROOT,
    )
    try:
        assert proc.wait(timeout=20) == 0
        os.close(w2)
        assert os.read(r2, 100) == b""  # it never announced itself ready
    finally:
        for fd in (r1, w1, r2):
            os.close(fd)


def test_concurrent_callers_do_not_queue_behind_a_stall():
    pool = GraderPool(2)
    try:
        pool.run([("grade", r"\boxed{1}", "1")], timeout=30)  # start the workers
        stalled: list = []
        th = threading.Thread(target=lambda: stalled.extend(pool.run([STALL], timeout=4.0)))
        th.start()
        time.sleep(0.3)
        t = time.monotonic()
        quick = pool.run([("grade", rf"\boxed{{{k}/7}}", f"\\frac{{{k}}}{{7}}") for k in range(1, 9)], 30)
        waited = time.monotonic() - t
        th.join(timeout=30)
        assert [r.score for r in quick] == [1.0] * 8
        assert waited < 2.5, f"a fast batch waited {waited:.2f} s behind another thread's stall"
        assert [r.status for r in stalled] == ["timeout"]
    finally:
        pool.close()


def test_warm_spare_replaces_a_killed_worker_at_once():
    pool = GraderPool(1)  # one running worker and one spare
    try:
        pool.run([("grade", r"\boxed{1}", "1")], timeout=30)
        assert [r.status for r in pool.run([STALL], timeout=3.0)] == ["timeout"]  # the spare warms meanwhile
        t = time.monotonic()
        res = pool.run([("grade", r"\boxed{0.25}", "1/4")], timeout=30)
        assert res[0].score == 1.0 and pool.restarts == 1
        assert time.monotonic() - t < 0.8, "the next job waited for a replacement to start"
    finally:
        pool.close()


def test_closed_pool_starts_again_on_demand():
    pool = GraderPool(1, spares=0)
    pool.run([("grade", r"\boxed{1}", "1")], timeout=30)
    pool.close()
    pool.close()
    assert pool.run([("grade", r"\boxed{2}", "2")], timeout=30)[0].score == 1.0
    pool.close()


@pytest.mark.parametrize(
    "module",
    ["boxed", "screen", "math_reward", "equivalence", "mathtext", "graders", "authors_paper", "authors"],
)
def test_doctests(module):
    from trlvr.rewards.graders import missing_for

    grader = module.replace("_", "-")
    if module in ("authors", "authors_paper") and missing_for(grader):
        pytest.skip(f"grader {grader!r}: {missing_for(grader)}")
    mod = importlib.import_module(f"trlvr.rewards.{module}")
    result = doctest.testmod(mod)
    assert result.failed == 0 and result.attempted > 0

"""A pool of grading worker processes with a hard per-job wall-clock timeout.

Why processes, and why a watchdog: math-verify's timeout uses SIGALRM, which only works in
the main thread of a process (TRL may call reward functions from others), and sympy can sit
in C code that ignores signals. Here each worker grades one job at a time; the parent waits
on the workers' pipes and, when a job passes its deadline, kills that worker (SIGKILL),
records the job as timed out and starts a replacement. The calling thread can be any thread.

Workers are fresh interpreters (`python -m trlvr.rewards._worker`) talking over pipes, not
multiprocessing children: fork is unsafe once torch has started threads, and spawn/forkserver
re-run the caller's __main__ script in every worker (slow with torch imports, a fork bomb
without a main guard). A replacement takes about a second to start (math-verify import).
This module knows nothing about answers; jobs are opaque ``(op, a, b)`` tuples.
"""

from __future__ import annotations

import atexit
import os
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from pathlib import Path

START_TIMEOUT_S = 120.0  # a worker that cannot even start is a broken install: fail loudly


@dataclass(frozen=True)
class JobResult:
    """Outcome of one job. ``status`` is "ok", "timeout" or "error"; ``info`` a short string."""

    status: str
    score: float
    info: str


def _worker_env() -> dict[str, str]:
    # The worker must import this same trlvr, installed or not; one thread is plenty.
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
    return env


class _Slot:
    """One worker process and the job it is running (index into the batch, deadline)."""

    def __init__(self) -> None:
        to_child_r, to_child_w = os.pipe()
        from_child_r, from_child_w = os.pipe()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "trlvr.rewards._worker", str(to_child_r), str(from_child_w)],
            pass_fds=(to_child_r, from_child_w),
            stdin=subprocess.DEVNULL,
            env=_worker_env(),
        )
        os.close(to_child_r)
        os.close(from_child_w)
        self.conn = Connection(from_child_r, writable=False)  # results; what wait() watches
        self.out = Connection(to_child_w, readable=False)  # jobs
        self.started = time.monotonic()
        self.ready = False
        self.job: int | None = None
        self.deadline = 0.0

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait(timeout=10)
        self.conn.close()
        self.out.close()


class GraderPool:
    """``n_workers`` processes; :meth:`run` grades a batch in parallel, any thread may call it.

    >>> pool = GraderPool(2)                                      # doctest: +SKIP
    >>> pool.run([("grade", "\\\\boxed{0.5}", "1/2")], timeout=2.0)  # doctest: +SKIP
    [JobResult(status='ok', score=1.0, info='0.5')]
    """

    def __init__(self, n_workers: int | None = None) -> None:
        self.n_workers = n_workers or min(4, os.cpu_count() or 1)
        self._slots: list[_Slot] = []
        self._lock = threading.Lock()  # one batch at a time; batches are internally parallel
        self.restarts = 0

    def _fill(self) -> None:
        while len(self._slots) < self.n_workers:
            self._slots.append(_Slot())

    def _replace(self, slot: _Slot) -> None:
        slot.kill()
        self._slots[self._slots.index(slot)] = _Slot()
        self.restarts += 1

    def run(self, jobs: list[tuple[str, str, str]], timeout: float) -> list[JobResult]:
        """Run ``jobs`` (``(op, a, b)``) and return one :class:`JobResult` each, in order.

        Each job gets ``timeout`` seconds of wall clock from the moment a worker takes it.
        """
        if not jobs:
            return []
        with self._lock:
            self._fill()
            results: list[JobResult | None] = [None] * len(jobs)
            todo = list(range(len(jobs)))[::-1]  # stack: pop() hands out jobs in order
            pending = len(jobs)
            while pending:
                now = time.monotonic()
                for slot in list(self._slots):
                    if slot.ready and slot.job is None and todo:
                        i = todo.pop()
                        op, a, b = jobs[i]
                        slot.out.send((i, op, a, b))
                        slot.job, slot.deadline = i, time.monotonic() + timeout
                    elif not slot.ready and now - slot.started > START_TIMEOUT_S:
                        raise RuntimeError(f"grading worker did not start within {START_TIMEOUT_S:.0f} s")
                busy = [s.deadline for s in self._slots if s.job is not None]
                wait_s = max(0.0, min(busy) - time.monotonic()) if busy else 1.0
                ready_conns = wait([s.conn for s in self._slots], timeout=wait_s)
                for slot in list(self._slots):
                    if slot.conn in ready_conns:
                        try:
                            msg = slot.conn.recv()
                        except (EOFError, OSError):  # worker died (e.g. out of memory)
                            if slot.job is not None:
                                results[slot.job] = JobResult("error", 0.0, "worker died")
                                pending -= 1
                            self._replace(slot)
                            continue
                        if msg[0] == "ready":
                            slot.ready = True
                            continue
                        i, status, score, info = msg
                        results[i] = JobResult(status, float(score), info)
                        slot.job = None
                        pending -= 1
                    elif slot.job is not None and time.monotonic() > slot.deadline:
                        results[slot.job] = JobResult("timeout", 0.0, f"over {timeout:g} s")
                        pending -= 1
                        self._replace(slot)
            return results  # type: ignore[return-value]

    def close(self) -> None:
        """Stop all workers (idempotent)."""
        with self._lock:
            for slot in self._slots:
                try:
                    slot.out.send(None)
                except OSError:
                    pass
            for slot in self._slots:
                try:
                    slot.proc.wait(timeout=1)
                except subprocess.TimeoutExpired:
                    slot.proc.kill()
                    slot.proc.wait(timeout=10)
                slot.conn.close()
                slot.out.close()
            self._slots = []


_POOLS: dict[int, GraderPool] = {}
_POOLS_LOCK = threading.Lock()


def shared_pool(n_workers: int | None = None) -> GraderPool:
    """The process-wide pool for ``n_workers`` (created lazily, closed at exit)."""
    n = n_workers or min(4, os.cpu_count() or 1)
    with _POOLS_LOCK:
        if n not in _POOLS:
            _POOLS[n] = GraderPool(n)
        return _POOLS[n]


@atexit.register
def shutdown_pools() -> None:
    """Close every shared pool; registered with atexit, safe to call by hand."""
    with _POOLS_LOCK:
        for pool in _POOLS.values():
            pool.close()
        _POOLS.clear()

"""A pool of grading worker processes with a hard per-job wall-clock timeout.

Why processes, and why a watchdog: math-verify's timeout uses SIGALRM, which only works in
the main thread of a process (TRL may call reward functions from others), and sympy can sit
in C code that ignores signals. Each worker grades one job at a time; when a job passes its
deadline the pool kills that worker (SIGKILL), records the job as timed out and starts a
replacement.

One dispatcher thread per pool owns the workers: callers from any number of threads put
their jobs on one queue and wait for their own results, so concurrent batches share the
workers instead of queueing behind each other. The pool keeps ``spares`` warm workers beyond
the ``n_workers`` that may run at once, so a killed worker is replaced by a ready one at
once; the replacement's start-up (about a second, the math-verify import) happens off the
critical path. Workers are started by the dispatcher thread, which lives as long as the pool:
Linux's parent-death signal (see ``_worker.die_with_parent``) fires when the starting thread
exits, so they must not be started by a short-lived caller thread.

Workers are fresh interpreters (`python -m trlvr.rewards._worker`) talking over pipes, not
multiprocessing children: fork is unsafe once torch has started threads, and spawn/forkserver
re-run the caller's __main__ script in every worker (slow with torch imports, a fork bomb
without a main guard). Each worker runs in its own process group and ignores SIGINT, so Ctrl-C
interrupts only the command (one line: ``trlvr.cli.main``), never a worker. This module knows nothing
about answers; jobs are opaque ``(op, a, b)`` tuples.
"""

from __future__ import annotations

import atexit
import os
import subprocess
import sys
import threading
import time
from collections import deque
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


class _Batch:
    """One caller's jobs: results fill in as workers finish; ``done`` is set when all are in."""

    def __init__(self, n: int) -> None:
        self.results: list[JobResult | None] = [None] * n
        self.left = n
        self.error: str | None = None
        self.done = threading.Event()

    def put(self, i: int, result: JobResult) -> None:
        self.results[i] = result
        self.left -= 1  # only the dispatcher thread calls put
        if self.left == 0:
            self.done.set()

    def fail(self, error: str) -> None:
        self.error = error
        self.done.set()


@dataclass
class _Job:
    batch: _Batch
    index: int
    op: str
    a: str
    b: str
    timeout: float


def _worker_env() -> dict[str, str]:
    # The worker must import this same trlvr, installed or not; one thread is plenty.
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
    return env


class _Slot:
    """One worker process and the job it is running (with its deadline)."""

    def __init__(self) -> None:
        to_child_r, to_child_w = os.pipe()
        from_child_r, from_child_w = os.pipe()
        argv = [sys.executable, "-m", "trlvr.rewards._worker", str(to_child_r), str(from_child_w)]
        self.proc = subprocess.Popen(
            [*argv, str(os.getpid())],
            pass_fds=(to_child_r, from_child_w),
            stdin=subprocess.DEVNULL,
            env=_worker_env(),
            # its own process group: a terminal's Ctrl-C (SIGINT to the foreground group) reaches the
            # command, which ends in one line, and never a worker (which would print a traceback); the
            # worker still dies with the command (`_worker.die_with_parent`) or is stopped at its exit
            process_group=0,
        )
        os.close(to_child_r)
        os.close(from_child_w)
        self.conn = Connection(from_child_r, writable=False)  # results; what wait() watches
        self.out = Connection(to_child_w, readable=False)  # jobs
        self.started = time.monotonic()
        self.ready = False
        self.job: _Job | None = None
        self.deadline = 0.0

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait(timeout=10)
        self.conn.close()
        self.out.close()

    def stop(self) -> None:
        """Ask the worker to exit; kill it if it does not within a second."""
        try:
            self.out.send(None)
        except OSError:
            pass
        try:
            self.proc.wait(timeout=1)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)
        self.conn.close()
        self.out.close()


class GraderPool:
    """``n_workers`` concurrent jobs plus ``spares`` warm workers; any thread may call :meth:`run`.

    >>> pool = GraderPool(2)                                      # doctest: +SKIP
    >>> pool.run([("grade", "\\\\boxed{0.5}", "1/2")], timeout=2.0)  # doctest: +SKIP
    [JobResult(status='ok', score=1.0, info='0.5')]
    """

    def __init__(self, n_workers: int | None = None, spares: int = 1) -> None:
        self.n_workers = n_workers or min(4, os.cpu_count() or 1)
        self.spares = spares
        self.restarts = 0  # workers killed for overrunning (or found dead) and replaced
        self._lock = threading.Lock()  # guards the queue and the dispatcher's lifecycle
        self._queue: deque[_Job] = deque()
        self._thread: threading.Thread | None = None
        self._pid = -1
        self._closing = False
        self._wake_fds: tuple[int, int] | None = None  # (read, write): new jobs or close

    def run(self, jobs: list[tuple[str, str, str]], timeout: float) -> list[JobResult]:
        """Run ``jobs`` (``(op, a, b)``) and return one :class:`JobResult` each, in order.

        Each job gets ``timeout`` seconds of wall clock from the moment a worker takes it.
        Jobs of concurrent callers are served first come, first served.
        """
        if not jobs:
            return []
        batch = _Batch(len(jobs))
        with self._lock:
            self._start_locked()
            self._queue.extend(_Job(batch, i, op, a, b, timeout) for i, (op, a, b) in enumerate(jobs))
            self._wake_locked()
        batch.done.wait()
        if batch.error is not None:
            raise RuntimeError(batch.error)
        return batch.results  # type: ignore[return-value]

    def close(self) -> None:
        """Stop the dispatcher and all workers (idempotent); queued jobs fail."""
        with self._lock:
            thread = self._thread if self._pid == os.getpid() else None
            self._closing = True
            self._wake_locked()
        if thread is not None:
            thread.join(timeout=30)
        with self._lock:
            if thread is None or not thread.is_alive():
                self._thread = None
                self._close_wake_locked()
            self._closing = False

    # -- dispatcher side -------------------------------------------------------------------

    def _start_locked(self) -> None:
        if self._pid != os.getpid():  # first call, or a forked child: the parent's dispatcher is not ours
            self._thread, self._queue, self._wake_fds, self._pid = None, deque(), None, os.getpid()
        if self._thread is None or not self._thread.is_alive():
            self._close_wake_locked()
            r, w = os.pipe()
            os.set_blocking(r, False)
            os.set_blocking(w, False)
            self._wake_fds = (r, w)
            self._thread = threading.Thread(
                target=self._serve, args=(r,), name="trlvr-grader-pool", daemon=True
            )
            self._thread.start()

    def _wake_locked(self) -> None:
        if self._wake_fds is None:
            return
        try:
            os.write(self._wake_fds[1], b"\0")
        except BlockingIOError:  # pipe full: the dispatcher has wake-ups pending anyway
            pass

    def _close_wake_locked(self) -> None:
        # Only here, under the lock and with the dispatcher gone, so no write hits a reused fd.
        if self._wake_fds is not None:
            for fd in self._wake_fds:
                os.close(fd)
            self._wake_fds = None

    def _serve(self, wake_r: int) -> None:
        slots: list[_Slot] = []
        try:
            self._loop(slots, wake_r)
        except Exception as exc:  # a broken install or OS failure: every waiting caller hears it
            self._fail_all(slots, f"grading pool failed: {type(exc).__name__}: {exc}")
            raise
        finally:
            for slot in slots:  # a busy or starting worker would not answer the stop request
                if slot.job is not None or not slot.ready:
                    slot.kill()
                else:
                    slot.stop()

    def _fail_all(self, slots: list[_Slot], error: str) -> None:
        with self._lock:
            queued, self._queue = list(self._queue), deque()
        for job in queued + [s.job for s in slots if s.job is not None]:
            if not job.batch.done.is_set():
                job.batch.fail(error)

    def _loop(self, slots: list[_Slot], wake_r: int) -> None:
        while True:
            with self._lock:
                closing = self._closing
            if closing:
                self._fail_all(slots, "grading pool closed")
                return
            while len(slots) < self.n_workers + self.spares:
                slots.append(_Slot())
            now = time.monotonic()
            for slot in slots:
                if not slot.ready and now - slot.started > START_TIMEOUT_S:
                    raise RuntimeError(f"grading worker did not start within {START_TIMEOUT_S:.0f} s")
            self._hand_out(slots)
            busy = [s.deadline for s in slots if s.job is not None]
            if busy:
                wait_s: float | None = max(0.0, min(busy) - time.monotonic())
            else:
                wait_s = 1.0 if any(not s.ready for s in slots) else None
            ready_conns = wait([s.conn for s in slots] + [wake_r], timeout=wait_s)
            if wake_r in ready_conns:
                try:
                    while os.read(wake_r, 4096):
                        pass
                except BlockingIOError:
                    pass
            for slot in list(slots):
                if slot.conn in ready_conns:
                    self._receive(slot, slots)
                elif slot.job is not None and time.monotonic() > slot.deadline:
                    job = slot.job
                    job.batch.put(job.index, JobResult("timeout", 0.0, f"over {job.timeout:g} s"))
                    self._drop(slot, slots)

    def _hand_out(self, slots: list[_Slot]) -> None:
        """Give queued jobs to ready idle workers, at most ``n_workers`` running at once."""
        running = sum(s.job is not None for s in slots)
        for slot in slots:
            if running >= self.n_workers:
                return
            if not slot.ready or slot.job is not None:
                continue
            with self._lock:
                if not self._queue:
                    return
                job = self._queue.popleft()
            try:
                slot.out.send((job.index, job.op, job.a, job.b))
            except OSError:  # it died since its last message: the job goes back, the loop refills
                with self._lock:
                    self._queue.appendleft(job)
                self._drop(slot, slots)
                return
            slot.job, slot.deadline = job, time.monotonic() + job.timeout
            running += 1

    def _receive(self, slot: _Slot, slots: list[_Slot]) -> None:
        try:
            msg = slot.conn.recv()
        except (EOFError, OSError):  # worker died (e.g. out of memory)
            if slot.job is not None:
                slot.job.batch.put(slot.job.index, JobResult("error", 0.0, "worker died"))
            self._drop(slot, slots)
            return
        if msg[0] == "ready":
            slot.ready = True
            return
        _, status, score, info = msg
        job, slot.job = slot.job, None
        if job is not None:
            job.batch.put(job.index, JobResult(status, float(score), info))

    def _drop(self, slot: _Slot, slots: list[_Slot]) -> None:
        """Kill a worker; the loop starts a replacement while a warm spare takes the next job."""
        slot.kill()
        slots.remove(slot)
        self.restarts += 1


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

"""A training run owns its output_dir: one exclusive lock, so two `trlvr train` never write it at once.

    with training_lock(output_dir):        # a second holder is refused: UserError naming the first's pid
        ...

    output_dir/.train.lock, .train.lock.pid   the lock (filelock, as evaluation's `trlvr.eval.store`)
                                              and its holder's pid

Only the main process locks (the other ranks of one torchrun / accelerate job share the directory by
design and never wait on the lock, so nothing deadlocks). The OS drops the lock when its holder
dies, even by SIGKILL: a stale `.train.lock.pid` never blocks a new run.

What this file does not know: training. It locks a folder.
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from pathlib import Path

from trlvr.errors import UserError

LOCK = ".train.lock"
PID = LOCK + ".pid"


def holder_pid(output_dir: str | Path) -> str:
    """The pid written by the lock's holder ("unknown" when it cannot be read)."""
    try:
        return (Path(output_dir) / PID).read_text().strip() or "unknown"
    except OSError:
        return "unknown"


@contextmanager
def training_lock(output_dir: str | Path, *, main_process: bool | None = None):
    """Hold `output_dir`'s training lock for the block (main process only; other ranks pass through).

    main_process: None asks accelerate's PartialState (the launcher's rank 0).
    """
    if main_process is None:
        from accelerate import PartialState

        main_process = PartialState().is_main_process
    if not main_process:
        yield
        return
    from filelock import FileLock, Timeout

    out = Path(output_dir)
    out.mkdir(parents=True, exist_ok=True)
    lock = FileLock(str(out / LOCK), timeout=0)
    try:
        lock.acquire()
    except Timeout:
        raise UserError(
            f"{out} is being trained into by another trlvr train (pid {holder_pid(out)}); "
            "wait for it to finish or choose another --output_dir"
        ) from None
    (out / PID).write_text(str(os.getpid()))
    try:
        yield
    finally:
        (out / PID).unlink(missing_ok=True)
        lock.release()

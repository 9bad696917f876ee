"""Pre-emption: on SIGTERM or SIGUSR1 the run finishes its step, saves a checkpoint and stops.

    with Preemption(grace_s=120) as pre:          # installs the handlers (main thread), restores them after
        trainer.add_callback(pre.callback)
        trainer.train()
    pre.signal_name                                # "SIGTERM" / "SIGUSR1" / None

Clusters pre-empt a job with SIGTERM (SLURM, Kubernetes), and SLURM can send SIGUSR1 ahead of it
(`#SBATCH --signal=USR1@180`). The handler only records the signal. `PreemptCallback` reads it at
the end of each optimizer step (all processes agree: the flag is max-reduced over ranks, so every
rank stops at the same step) and asks the Trainer to log, save a checkpoint (the Trainer's own
`_save_checkpoint`: weights, optimizer, scheduler, RNG, trainer_state.json, as `--resume` needs)
and stop. A watchdog thread bounds the whole: if the process has not finished within `grace_s`
seconds of the signal (a step far longer than the scheduler's kill wait), it prints one line and
exits with EXIT_PREEMPTED without a new checkpoint; `--resume` then takes the newest complete one.
A second signal changes nothing. A checkpoint saved only because of the signal (off the save_steps
schedule) gets a `preempted.json` mark: it is a resume point, not a candidate for `trlvr select`,
so a run that was killed and resumed offers selection the same checkpoints as one never killed.

What this file does not know: what is trained, or the command line (the caller words the resume line).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading

import torch
from tqdm.auto import tqdm
from transformers import TrainerCallback

from trlvr.errors import UserError
from trlvr.rundir import checkpoint_dir
from trlvr.training.checkpoints import PREEMPT_MARK

EXIT_PREEMPTED = 143  # 128 + SIGTERM, for SIGTERM and SIGUSR1 alike: "stopped early, resumable"
SIGNALS = tuple(getattr(signal, name) for name in ("SIGTERM", "SIGUSR1") if hasattr(signal, name))


def on_schedule(step: int, save_steps, max_steps: int) -> bool:
    """Whether the Trainer would have saved `step` without a signal (every `save_steps`, and the last).

    >>> [on_schedule(s, 50, 100) for s in (16, 50, 100)]
    [False, True, True]
    """
    every = int(save_steps) if save_steps and save_steps >= 1 else 0
    return step == max_steps or (every > 0 and step % every == 0)


class Preempted(UserError):
    """The run stopped on a signal (a checkpoint was saved, or the grace time ran out)."""

    exit_code = EXIT_PREEMPTED


class PreemptCallback(TrainerCallback):
    """At each step end: when a signal came (on any rank), log, save a checkpoint and stop."""

    def __init__(self, preemption: Preemption):
        self.preemption = preemption
        self.stop_step: int | None = None
        self.saved_step: int | None = None

    def _any_rank_signalled(self, args) -> bool:
        flag = self.preemption.signal_name is not None
        if not (torch.distributed.is_available() and torch.distributed.is_initialized()):
            return flag
        t = torch.tensor([1.0 if flag else 0.0], device=args.device)
        torch.distributed.all_reduce(t, op=torch.distributed.ReduceOp.MAX)
        return bool(t.item())

    def on_step_end(self, args, state, control, **kwargs):
        if self.stop_step is None and self._any_rank_signalled(args):
            self.stop_step = state.global_step
            control.should_log = True  # logged first, so the NaN guard sees the step it would save
            control.should_save = True
            control.should_training_stop = True
        return control

    def on_save(self, args, state, control, **kwargs):
        if self.stop_step is not None:
            self.saved_step = step = state.global_step
            ckpt = checkpoint_dir(args.output_dir, step)
            if (
                state.is_world_process_zero
                and ckpt.is_dir()
                and not on_schedule(step, args.save_steps, state.max_steps)
            ):
                (ckpt / PREEMPT_MARK).write_text(
                    json.dumps({"signal": self.preemption.signal_name, "step": step}) + "\n"
                )


def _console(message: str) -> None:
    """`[trlvr] message` on stderr, above the progress bar (tqdm.write: from the watchdog thread too)."""
    tqdm.write(f"[trlvr] {message}", file=sys.stderr)
    sys.stderr.flush()


class Preemption:
    """Signal handlers + watchdog for one training run. The watchdog prints the notice on the signal and,
    when the grace time runs out, `exit_line` (main process only: `log` is None elsewhere)."""

    def __init__(self, grace_s: float, exit_line: str = "", log=_console, main_process: bool = True):
        if not grace_s > 0:
            raise UserError(f"preempt_grace_s: must be > 0 (got {grace_s!r})")
        self.grace_s = float(grace_s)
        self.exit_line = exit_line
        self.log = log if main_process else (lambda message: None)
        self.signal_name: str | None = None
        self.callback = PreemptCallback(self)
        self._signalled = threading.Event()
        self._done = threading.Event()
        self._previous: dict = {}

    def _handler(self, signum, frame) -> None:  # only records: no I/O, no locks taken in a signal handler
        if self.signal_name is None:
            self.signal_name = signal.Signals(signum).name
        self._signalled.set()

    def _watch(self) -> None:
        self._signalled.wait()
        if self._done.is_set():
            return
        self.log(
            f"{self.signal_name}: finishing the current step and saving a checkpoint "
            f"(exit within preempt_grace_s = {self.grace_s:g} s)"
        )
        if not self._done.wait(self.grace_s):
            self.log(
                f"{self.signal_name}: the step did not end within preempt_grace_s = {self.grace_s:g} s; "
                f"exiting without a new checkpoint. {self.exit_line}".rstrip()
            )
            os._exit(EXIT_PREEMPTED)

    def __enter__(self) -> Preemption:
        if threading.current_thread() is threading.main_thread():  # signal.signal works there only
            for s in SIGNALS:
                self._previous[s] = signal.signal(s, self._handler)
        threading.Thread(target=self._watch, name="trlvr-preempt-watchdog", daemon=True).start()
        return self

    def __exit__(self, *exc) -> None:
        self._done.set()
        self._signalled.set()  # wakes the watchdog, which sees `done` and returns
        for s, previous in self._previous.items():
            signal.signal(s, previous)
        self._previous.clear()

    @property
    def stopped_early(self) -> bool:
        return self.callback.stop_step is not None

"""Stop a run whose loss or gradient norm is no longer a number, before it is saved.

`NonFiniteGuard` is a TrainerCallback: every logged `loss` and `grad_norm` must be finite; after
`patience` consecutive logs that are not, it raises `NonFiniteError` naming the step. It raises
from `on_log`, which the Trainer calls before it writes that step's checkpoint, and it turns
every checkpoint step into a logged step, so no checkpoint is written past a non-finite value.
`weights_are_finite` is the last check before `final/` is written.

TRL's default `logging_nan_inf_filter=True` replaces a NaN loss by the running mean in the logs;
the guard needs it off (the configs set it; the trainer refuses it on) to see the loss. The
grad norm is never filtered.

What this file does not know: where the NaN came from.
"""

from __future__ import annotations

import math

import torch
from transformers import TrainerCallback

from trlvr.errors import UserError

WATCHED = ("loss", "grad_norm")


class NonFiniteError(UserError):
    """Training produced a NaN/inf loss or gradient norm; nothing was saved past it."""


class NonFiniteGuard(TrainerCallback):
    def __init__(self, patience: int = 1):
        if patience < 1:
            raise ValueError("patience must be >= 1")
        self.patience = patience
        self.bad_in_a_row = 0

    def on_train_begin(self, args, state, control, **kwargs):
        if args.logging_nan_inf_filter:
            raise UserError(
                "logging_nan_inf_filter: must be false (TRL's filter hides a NaN loss, and trlvr stops on "
                "one)"
            )

    def on_step_end(self, args, state, control, **kwargs):
        if control.should_save:  # the check runs at log time, which precedes the save
            control.should_log = True

    def on_log(self, args, state, control, logs=None, **kwargs):
        bad = {k: logs[k] for k in WATCHED if k in (logs or {}) and not math.isfinite(float(logs[k]))}
        if not bad:
            self.bad_in_a_row = 0
            return
        self.bad_in_a_row += 1
        control.should_save = False  # tolerated (patience > 1) or not, a non-finite step is never saved
        if self.bad_in_a_row >= self.patience:
            what = ", ".join(f"{k} = {v}" for k, v in bad.items())
            last = f"the newest checkpoint before step {state.global_step}"
            raise NonFiniteError(
                f"step {state.global_step}: {what} ({self.bad_in_a_row} logged step(s) in a row, "
                f"nonfinite_patience = {self.patience}); stopped without saving. Check the models and the "
                f"learning rate; --resume restarts from {last}"
            )


def weights_are_finite(model) -> bool:
    """True when every parameter of `model` is finite (one host sync)."""
    flags = [torch.isfinite(p.detach()).all() for p in model.parameters()]
    return bool(torch.stack(flags).all()) if flags else True

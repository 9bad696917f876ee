"""Which checkpoint `--resume` continues from: the newest COMPLETE one.

A kill during a save leaves a half-written `checkpoint-N/` (the Trainer writes weights, then
optimizer, scheduler and RNG state, and `trainer_state.json` last). What complete means (every file
resume reads is there and loads; sizes as the save recorded them) is `trlvr.artifacts`' one definition
(`CHECKPOINT` to resume from, `WEIGHTS` to read a model from); this file asks it.

What this file does not know: the Trainer. It reads folders.
"""

from __future__ import annotations

from pathlib import Path

from trlvr import artifacts

# the layout (checkpoint-N/, the pre-emption mark) is trlvr.rundir's; re-exported for trlvr.training.preempt
from trlvr.rundir import PREEMPT_MARK, checkpoints

__all__ = ["PREEMPT_MARK", "WEIGHT_FILES", "checkpoint_problem", "checkpoints", "pick_checkpoint", "weights_problem"]
WEIGHT_FILES = artifacts.WEIGHT_FILES


def weights_problem(ckpt: str | Path) -> str | None:
    """Why the model in `ckpt` (a checkpoint or final/) does not load, or None (`trlvr.artifacts.WEIGHTS`)."""
    return artifacts.problem(ckpt, artifacts.WEIGHTS)


def checkpoint_problem(ckpt: str | Path) -> str | None:
    """Why `ckpt` cannot be resumed from, or None when it is complete (`trlvr.artifacts.CHECKPOINT`)."""
    return artifacts.problem(ckpt, artifacts.CHECKPOINT)


def pick_checkpoint(output_dir: str | Path) -> tuple[Path | None, list[tuple[Path, str]]]:
    """(newest complete checkpoint or None, [(newer incomplete checkpoint, why), ...])."""
    skipped = []
    for ckpt in checkpoints(output_dir):
        problem = checkpoint_problem(ckpt)
        if problem is None:
            return ckpt, skipped
        skipped.append((ckpt, problem))
    return None, skipped

"""Which checkpoint `--resume` continues from: the newest COMPLETE one.

A kill during a save leaves a half-written `checkpoint-N/` (the Trainer writes weights, then
optimizer, scheduler and RNG state, and `trainer_state.json` last). What complete means (every file
resume reads is there and loads; sizes as the save recorded them) is `trlvr.artifacts`' one definition
(`CHECKPOINT` to resume from, `WEIGHTS` to read a model from); this file asks it.

Only the `KEEP_RESUME` newest complete checkpoints keep the resume state (optimizer, scheduler, RNG,
DeepSpeed's `global_step*/`): the newest, and one to fall back on should the newest be found torn later.
After each save, `prune_resume_state` removes it from the older ones and marks them "weights only"
(`WEIGHTS_ONLY_MARK`, recording what was removed), so `--resume` skips them and selection (which needs only
weights) still evaluates them. A 2-GPU ZeRO-2 run of a 4B model writes ~64 GB per
checkpoint, ~8 GB of it weights.

What this file does not know: the Trainer (`PruneResumeState` is the one callback that runs the pruning after
each save). It reads folders.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from transformers import TrainerCallback

from trlvr import artifacts

# the layout (checkpoint-N/, the pre-emption and weights-only marks) is trlvr.rundir's; re-exported for
# trlvr.training.preempt
from trlvr.rundir import PREEMPT_MARK, WEIGHTS_ONLY_MARK, checkpoints

__all__ = [
    "PREEMPT_MARK",
    "WEIGHTS_ONLY_MARK",
    "WEIGHT_FILES",
    "PruneResumeState",
    "checkpoint_problem",
    "checkpoints",
    "is_weights_only",
    "pick_checkpoint",
    "prune_resume_state",
    "weights_problem",
]
WEIGHT_FILES = artifacts.WEIGHT_FILES
KEEP_RESUME = 2  # complete checkpoints that keep their resume state: the newest and one to fall back on


def weights_problem(ckpt: str | Path) -> str | None:
    """Why the model in `ckpt` (a checkpoint or final/) does not load, or None (`trlvr.artifacts.WEIGHTS`)."""
    return artifacts.problem(ckpt, artifacts.WEIGHTS)


def checkpoint_problem(ckpt: str | Path) -> str | None:
    """Why `ckpt` cannot be resumed from, or None when it is complete (`trlvr.artifacts.CHECKPOINT`); a
    checkpoint pruned to its weights says so."""
    if is_weights_only(ckpt):
        return "weights only (its resume state was removed: only the newest complete checkpoint keeps it)"
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


def is_weights_only(ckpt: str | Path) -> bool:
    """Whether `prune_resume_state` removed `ckpt`'s resume state (selection may use it; resume may not)."""
    return (Path(ckpt) / WEIGHTS_ONLY_MARK).is_file()


def prune_resume_state(output_dir: str | Path) -> list[Path]:
    """Remove the resume state (`trlvr.artifacts.RESUME_STATE`) from every checkpoint older than the
    `KEEP_RESUME` newest complete ones and mark it weights only; returns those pruned now. Never touches
    those, one newer than them (a save in progress, or a broken one `--resume` reports), or one whose weights
    do not load. The mark is written before anything is removed, so a kill in between leaves a checkpoint
    resume skips."""
    found = checkpoints(output_dir)
    kept = [i for i, ckpt in enumerate(found) if checkpoint_problem(ckpt) is None][:KEEP_RESUME]
    if len(kept) < KEEP_RESUME:
        return []
    newest, last = kept[0], kept[-1]
    pruned = []
    for ckpt in found[last + 1 :]:
        if is_weights_only(ckpt) or weights_problem(ckpt) is not None:
            continue
        doomed = sorted(
            {p for pattern in artifacts.RESUME_STATE if "/" not in pattern for p in ckpt.glob(pattern)}
        )
        mark = {
            "weights_only": True,
            "removed": [p.name for p in doomed],
            "resume_state_in": found[newest].name,
        }
        (ckpt / WEIGHTS_ONLY_MARK).write_text(json.dumps(mark) + "\n")
        for p in doomed:
            shutil.rmtree(p) if p.is_dir() and not p.is_symlink() else p.unlink()
        pruned.append(ckpt)
    return pruned


class PruneResumeState(TrainerCallback):
    """After each save (main process; the others wait at the next save's barrier): `prune_resume_state`."""

    def on_save(self, args, state, control, **kwargs):
        if state.is_world_process_zero:
            prune_resume_state(args.output_dir)
        return control

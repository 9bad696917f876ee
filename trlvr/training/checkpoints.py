"""Which checkpoint `--resume` continues from: the newest COMPLETE one.

A kill during a save leaves a half-written `checkpoint-N/` (the Trainer writes weights, then
optimizer, scheduler and RNG state, and `trainer_state.json` last). A checkpoint is complete when
its weights load (safetensors headers cover their files; every shard of an index is there), the
optimizer state (`optimizer.pt`, or DeepSpeed's `global_step*/`), `scheduler.pt`, a parseable
`trainer_state.json` and the RNG state files are present.

What this file does not know: the Trainer. It reads folders.
"""

from __future__ import annotations

import json
from pathlib import Path

# the layout (checkpoint-N/, the pre-emption mark) is trlvr.rundir's; re-exported for trlvr.training.preempt
from trlvr.rundir import PREEMPT_MARK, checkpoints

__all__ = ["PREEMPT_MARK", "WEIGHT_FILES", "checkpoint_problem", "checkpoints", "pick_checkpoint", "weights_problem"]
WEIGHT_FILES = ("model.safetensors", "adapter_model.safetensors", "pytorch_model.bin")
INDEX_FILES = ("model.safetensors.index.json",)


def _safetensors_problem(path: Path) -> str | None:
    from safetensors import safe_open

    try:
        with safe_open(str(path), framework="pt") as f:
            f.keys()
    except Exception as e:  # safetensors raises its own error type for truncated or corrupt files
        return f"{path.name} does not load ({' '.join(str(e).split())})"
    return None


def weights_problem(ckpt: str | Path) -> str | None:
    """Why the weights in `ckpt` (a checkpoint or final/) do not load, or None (`trlvr select` asks it of
    every candidate before it evaluates the first)."""
    ckpt = Path(ckpt)
    for name in INDEX_FILES:
        index = ckpt / name
        if index.exists():
            try:
                shards = sorted(set(json.loads(index.read_text())["weight_map"].values()))
            except (json.JSONDecodeError, KeyError, TypeError):
                return f"{name} is not a valid weight index"
            for shard in shards:
                if not (ckpt / shard).exists():
                    return f"weight shard {shard} is missing"
                if problem := _safetensors_problem(ckpt / shard):
                    return problem
            return None
    for name in WEIGHT_FILES:
        path = ckpt / name
        if path.exists():
            if name.endswith(".safetensors"):
                return _safetensors_problem(path)
            return None if path.stat().st_size > 0 else f"{name} is empty"
    return "no weights file"


def checkpoint_problem(ckpt: str | Path) -> str | None:
    """Why `ckpt` cannot be resumed from, or None when it is complete."""
    ckpt = Path(ckpt)
    if problem := weights_problem(ckpt):
        return problem
    has_optimizer = (ckpt / "optimizer.pt").is_file() or any(ckpt.glob("global_step*"))
    if not has_optimizer:
        return "no optimizer state (optimizer.pt)"
    if not (ckpt / "scheduler.pt").is_file():
        return "no scheduler.pt"
    try:
        json.loads((ckpt / "trainer_state.json").read_text())
    except FileNotFoundError:
        return "no trainer_state.json"
    except (json.JSONDecodeError, UnicodeDecodeError):
        return "trainer_state.json does not parse"
    if not ((ckpt / "rng_state.pth").is_file() or any(ckpt.glob("rng_state_*.pth"))):
        return "no RNG state (rng_state*.pth)"
    return None


def pick_checkpoint(output_dir: str | Path) -> tuple[Path | None, list[tuple[Path, str]]]:
    """(newest complete checkpoint or None, [(newer incomplete checkpoint, why), ...])."""
    skipped = []
    for ckpt in checkpoints(output_dir):
        problem = checkpoint_problem(ckpt)
        if problem is None:
            return ckpt, skipped
        skipped.append((ckpt, problem))
    return None, skipped

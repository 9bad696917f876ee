"""Giving a finished stage's device memory back before the next stage starts.

`trlvr smoke` trains two arms, then selects and evaluates, in one process; selection evaluates one
checkpoint after another; evaluation closes one engine before it builds the next. vLLM refuses to start an
engine when the device's free memory is below its share (`gpu_memory_utilization` x total), so whatever
an earlier stage held (an engine, a trainer kept alive by its reference cycles, torch's cached blocks)
must be gone first: the stage drops its objects, then calls `free_memory()`.
"""

from __future__ import annotations

import gc

import torch


def free_memory() -> None:
    """Collect garbage (reference cycles included: a trainer and its callbacks hold each other) and hand
    torch's cached CUDA blocks back to the device."""
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()

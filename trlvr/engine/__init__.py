"""The tandem engine, and its public face: `from trlvr.engine import TandemGenerator, WordSchedule, ...`.

`make_pair` builds the one object training and evaluation generate through (`pair.py`: lockstep or
text pairing on HF models, or vLLM). Lockstep decoding of two causal LMs over one shared token history
(`generator.py`), each model's forward with its KV cache on its own device (`runners.py`: eager DynamicCache,
or preallocated static buffers from `kv.py`, optionally compiled), authorship schedules (`schedules.py`),
sampling (`sampling.py`) and what a generation returns (`output.py`).
No tokenization, prompts or training here.

The names below load on first use (PEP 562), so `trlvr.engine.options` and `trlvr.engine.schedules`,
which `trlvr.config` checks settings with, import without torch.
"""

from __future__ import annotations

import importlib

_WHERE = {
    "options": ("DECODE_MODES", "DecodeOptions", "Sampling", "check_decoding"),
    "generator": ("TandemGenerator",),
    "output": ("FINISH_REASONS", "TandemOutput"),
    "pair": ("LockstepPair", "Pair", "TextPair", "make_pair", "pair_class", "unsupported_schedule"),
    "sampling": ("draw_uniforms", "filter_logits", "sample_tokens", "sample_with_uniforms"),
    "schedules": (
        "SCHEDULES",
        "BoundarySchedule",
        "ChunkSchedule",
        "Schedule",
        "SoloSchedule",
        "StepSchedule",
        "TokenSchedule",
        "VocabTables",
        "WordSchedule",
        "register_schedule",
        "vocab_tables",
    ),
}
_MODULE_OF = {name: module for module, names in _WHERE.items() for name in names}
__all__ = sorted(_MODULE_OF)


def __getattr__(name: str):
    if name not in _MODULE_OF:
        raise AttributeError(f"module 'trlvr.engine' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"trlvr.engine.{_MODULE_OF[name]}"), name)
    globals()[name] = value  # the next lookup is a plain attribute
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})

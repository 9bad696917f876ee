"""The tandem engine, and its public face: `from trlvr.engine import TandemGenerator, WordSchedule, ...`.

`make_pair` builds the one object training and evaluation generate through (`pair.py`: lockstep or
text pairing on HF models, or vLLM). Lockstep decoding of two causal LMs over one shared token history (`generator.py`), each model's
forward with its KV cache on its own device (`runners.py`: eager DynamicCache, or preallocated
static buffers from `kv.py`, optionally compiled), authorship schedules (`schedules.py`), sampling
(`sampling.py`) and what a generation returns (`output.py`).
No tokenization, prompts or training here.
"""

from trlvr.engine.generator import DECODE_MODES, TandemGenerator
from trlvr.engine.output import FINISH_REASONS, TandemOutput
from trlvr.engine.pair import (
    LockstepPair,
    Pair,
    Sampling,
    TextPair,
    make_pair,
    pair_class,
    unsupported_schedule,
)
from trlvr.engine.sampling import (
    check_decoding,
    draw_uniforms,
    filter_logits,
    sample_tokens,
    sample_with_uniforms,
)
from trlvr.engine.schedules import (
    SCHEDULES,
    BoundarySchedule,
    ChunkSchedule,
    Schedule,
    SoloSchedule,
    StepSchedule,
    TokenSchedule,
    VocabTables,
    WordSchedule,
    register_schedule,
    vocab_tables,
)

__all__ = [
    "Pair",
    "Sampling",
    "make_pair",
    "pair_class",
    "unsupported_schedule",
    "LockstepPair",
    "TextPair",
    "TandemGenerator",
    "DECODE_MODES",
    "TandemOutput",
    "FINISH_REASONS",
    "Schedule",
    "SCHEDULES",
    "register_schedule",
    "WordSchedule",
    "BoundarySchedule",
    "TokenSchedule",
    "StepSchedule",
    "ChunkSchedule",
    "SoloSchedule",
    "VocabTables",
    "vocab_tables",
    "check_decoding",
    "filter_logits",
    "sample_tokens",
    "draw_uniforms",
    "sample_with_uniforms",
]

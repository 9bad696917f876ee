"""The tandem engine, and its public face: `from trlvr.engine import TandemGenerator, WordSchedule, ...`.

Lockstep decoding of two causal LMs over one shared token history (`generator.py`), authorship
schedules (`schedules.py`), sampling (`sampling.py`) and what a generation returns (`output.py`).
No tokenization, prompts or training here.
"""

from trlvr.engine.generator import TandemGenerator
from trlvr.engine.output import FINISH_REASONS, TandemOutput
from trlvr.engine.sampling import check_decoding, filter_logits, sample_tokens
from trlvr.engine.schedules import (
    SCHEDULES,
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
    "TandemGenerator",
    "TandemOutput",
    "FINISH_REASONS",
    "Schedule",
    "SCHEDULES",
    "register_schedule",
    "WordSchedule",
    "TokenSchedule",
    "StepSchedule",
    "ChunkSchedule",
    "SoloSchedule",
    "VocabTables",
    "vocab_tables",
    "check_decoding",
    "filter_logits",
    "sample_tokens",
]

"""The public face of the engine: `from trlvr.tandem import TandemGenerator, WordSchedule, ...`."""

from trlvr.engine import FINISH_REASONS, TandemGenerator, TandemOutput
from trlvr.schedules import (
    ChunkSchedule,
    SoloSchedule,
    StepSchedule,
    TokenSchedule,
    VocabTables,
    WordSchedule,
    make_schedule,
    vocab_tables,
)

__all__ = [
    "TandemGenerator",
    "TandemOutput",
    "FINISH_REASONS",
    "WordSchedule",
    "TokenSchedule",
    "StepSchedule",
    "ChunkSchedule",
    "SoloSchedule",
    "VocabTables",
    "make_schedule",
    "vocab_tables",
]

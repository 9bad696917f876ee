"""Problem datasets in one row schema: loaders, checks, reasoning-gym, prompt building."""

from trlvr.data.check import CheckReport, check_source
from trlvr.data.loaders import BadRow, ProblemList, load_problems, reasoning_gym
from trlvr.data.jsonl import read_jsonl
from trlvr.data.prompts import DEFAULT_TEMPLATE, INSTRUCTION, build_prompt, encode_prompt, prompt_for
from trlvr.data.schema import SCHEMAS, DataError, Problem, Schema, detect_schema

__all__ = [
    "DEFAULT_TEMPLATE",
    "INSTRUCTION",
    "SCHEMAS",
    "BadRow",
    "CheckReport",
    "DataError",
    "Problem",
    "ProblemList",
    "Schema",
    "build_prompt",
    "check_source",
    "detect_schema",
    "encode_prompt",
    "read_jsonl",
    "load_problems",
    "prompt_for",
    "reasoning_gym",
]

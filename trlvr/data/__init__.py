"""Problem datasets in one row schema: the one path from a source to problems, checks, prompts.

    from trlvr.data import load_problems, problem_key, encode_prompt, prompt_for
    probs = load_problems("gsm8k-test.jsonl")                # DataError names file, row and field
    ids = encode_prompt(prompt_for(probs[0], tok), tok)      # the one problem -> prompt ids path

Imports no grader: pass ``check_gold=trlvr.rewards.check_golds`` to have golds parsed by math-verify.
"""

from trlvr.data.check import CheckReport, Duplicate, check_source, find_duplicates
from trlvr.data.jsonl import read_jsonl
from trlvr.data.loaders import ProblemList, load_problems
from trlvr.data.prompts import DEFAULT_TEMPLATE, build_prompt, encode_prompt, prompt_for
from trlvr.data.rows import BadRow
from trlvr.data.schema import SCHEMAS, DataError, Problem, Schema, detect_schema, gsm8k_gold, problem_key
from trlvr.data.splits import holdout_split

__all__ = [
    "DEFAULT_TEMPLATE",
    "SCHEMAS",
    "BadRow",
    "CheckReport",
    "DataError",
    "Duplicate",
    "Problem",
    "ProblemList",
    "Schema",
    "build_prompt",
    "check_source",
    "detect_schema",
    "encode_prompt",
    "holdout_split",
    "find_duplicates",
    "gsm8k_gold",
    "load_problems",
    "problem_key",
    "prompt_for",
    "read_jsonl",
]

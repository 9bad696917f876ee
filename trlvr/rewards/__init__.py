"""Verifiable math reward: boxed-answer extraction and math-verify grading under a hard timeout.

``math_reward`` is the TRL reward function (strict: no ``\\boxed{}`` scores 0); ``MathReward``
configures it (``require_box=False`` for the lenient mode); ``normalize_math`` is the one reading of
Unicode/typographic math text (gold and answer alike); ``grading_mode`` names the mode
for results files; ``equivalent`` is the one equality of answers (`trlvr.rewards.equivalence`); ``GRADERS``
names the graders (``trlvr``, ``authors``, ``authors-paper``: `trlvr.rewards.graders`),
``MathReward(grader=...)`` picks one, ``grader_of`` names it for results files, ``require_grader`` refuses a
name or a missing dependency in one line; ``check_golds`` / ``gold_parses`` let ``trlvr data check`` verify
golds.
"""

from trlvr.rewards.boxed import extract_boxed
from trlvr.rewards.graders import DEFAULT_GRADER, GRADERS, check_grader, require_grader
from trlvr.rewards.math_reward import (
    BOXED,
    BOXED_OR_TAIL,
    GradeResult,
    MathReward,
    check_golds,
    equivalent,
    gold_parses,
    gold_reading_changes,
    grade,
    grader_of,
    grading_mode,
    math_reward,
    reward_stats,
)
from trlvr.rewards.mathtext import normalize_math
from trlvr.rewards.screen import screen

__all__ = [
    "DEFAULT_GRADER",
    "GRADERS",
    "check_grader",
    "grader_of",
    "require_grader",
    "BOXED",
    "BOXED_OR_TAIL",
    "GradeResult",
    "MathReward",
    "check_golds",
    "equivalent",
    "extract_boxed",
    "gold_parses",
    "gold_reading_changes",
    "grade",
    "grading_mode",
    "math_reward",
    "normalize_math",
    "reward_stats",
    "screen",
]

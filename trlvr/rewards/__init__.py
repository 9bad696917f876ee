"""Verifiable math reward: boxed-answer extraction and math-verify grading under a hard timeout.

``math_reward`` is the TRL reward function (strict: no ``\\boxed{}`` scores 0); ``MathReward``
configures it (``require_box=False`` for the lenient mode); ``grading_mode`` names the mode
for results files; ``check_golds`` / ``gold_parses`` let ``trlvr data check`` verify golds.
"""

from trlvr.rewards.boxed import extract_boxed
from trlvr.rewards.math_reward import (
    BOXED,
    BOXED_OR_TAIL,
    GradeResult,
    MathReward,
    check_golds,
    gold_parses,
    grade,
    grading_mode,
    math_reward,
    reward_stats,
)
from trlvr.rewards.screen import screen

__all__ = [
    "BOXED",
    "BOXED_OR_TAIL",
    "GradeResult",
    "MathReward",
    "check_golds",
    "extract_boxed",
    "gold_parses",
    "grade",
    "grading_mode",
    "math_reward",
    "reward_stats",
    "screen",
]

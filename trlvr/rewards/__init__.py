"""Verifiable math reward: boxed-answer extraction and math-verify grading under a hard timeout."""

from trlvr.rewards.boxed import extract_boxed, gold_answer, normalize, screen
from trlvr.rewards.math_reward import (
    GradeResult,
    MathReward,
    check_golds,
    completion_text,
    grade,
    math_reward,
    reward_stats,
)
from trlvr.rewards.pool import GraderPool, shutdown_pools

__all__ = [
    "GradeResult",
    "GraderPool",
    "MathReward",
    "check_golds",
    "completion_text",
    "extract_boxed",
    "gold_answer",
    "grade",
    "math_reward",
    "normalize",
    "reward_stats",
    "screen",
    "shutdown_pools",
]

"""The ``authors`` grader: the Tandem RLVR release's ``boxed_reward_fn(fast=False)`` (being written)."""

from __future__ import annotations


def score(text: str, gold: str) -> tuple[float, str]:
    """(score, the extracted answer or "no_box") for a completion ``text`` against ``gold``."""
    raise NotImplementedError("the 'authors' grader is not implemented yet")

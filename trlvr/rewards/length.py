"""Length penalties on the reward, from the literature: one option of every arm
(`TandemConfig.length_penalty`).

Both arms get the same penalty, computed on the whole completion (the team's response in tandem, the
senior's alone in grpo: what the verifier grades), added to the first reward function's value and
logged every step as `reward/length_penalty` (the batch mean of what was added; 0.0 when off).

    none      no penalty (the paper's runs)
    kimi      Kimi k1.5's length reward (Kimi Team, "Kimi k1.5: Scaling Reinforcement Learning with
              LLMs", arXiv 2501.12599, Sec. 2.3.3 "Length Penalty"): among the K sampled responses to
              one problem, lambda_i = 0.5 - (len_i - min_len) / (max_len - min_len); a correct response
              gets lambda_i, a wrong one min(0, lambda_i). The shortest correct response gains 0.5, the
              longest loses 0.5. The report adds it to the reward without a stated weight: weight 1.0.
    overlong  DAPO's soft overlong punishment (Yu et al., "DAPO: An Open-Source LLM Reinforcement
              Learning System at Scale", arXiv 2503.14476, Sec. 3.4, Eq. 13): 0 up to L_max - L_cache
              tokens, then falling linearly to -1 at L_max; DAPO's L_cache = 4,096 of L_max = 20,480,
              i.e. one fifth of the completion budget (here L_max = max_completion_length). TRL ships
              it (`trl.rewards.get_soft_overlong_punishment`), and it is used as is.

A group (for kimi) is the completions of one prompt in the reward call, as TRL hands them over: every
generation of a prompt when the per-process generation batch holds whole groups (the shipped configs
do). A group whose lengths are all equal gets no penalty (Kimi's formula divides by zero there).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence

LENGTH_PENALTIES = ("none", "kimi", "overlong")
METRIC = "reward/length_penalty"
# DAPO's soft punish cache as a share of its generation budget: 4,096 of 20,480 tokens
OVERLONG_CACHE_SHARE = 4096 / 20480


def kimi_length_reward(lengths: Sequence[int], correct: Sequence[bool]) -> list[float]:
    """Kimi k1.5's length reward for the responses to ONE problem (arXiv 2501.12599, Sec. 2.3.3).

    >>> kimi_length_reward([10, 20, 30], [True, True, False])
    [0.5, 0.0, -0.5]
    >>> kimi_length_reward([10, 30], [False, True])
    [0.0, -0.5]
    """
    if len(lengths) != len(correct):
        raise ValueError(f"{len(lengths)} lengths but {len(correct)} correctness flags")
    if not lengths:
        return []
    lo, hi = min(lengths), max(lengths)
    if hi == lo:
        return [0.0] * len(lengths)
    lams = [0.5 - (n - lo) / (hi - lo) for n in lengths]
    return [lam if ok else min(0.0, lam) for lam, ok in zip(lams, correct, strict=True)]


def overlong_cache(max_completion_length: int) -> int:
    """DAPO's L_cache for a budget: one fifth of it (4,096 of 20,480), at least 1 token.

    >>> overlong_cache(20480), overlong_cache(3000), overlong_cache(64)
    (4096, 600, 12)
    """
    return max(1, int(max_completion_length * OVERLONG_CACHE_SHARE))


def length_penalties(
    mode: str, lengths: Sequence[int], correct: Sequence[bool], groups: Sequence, max_completion_length: int
) -> list[float]:
    """The unweighted penalty of each completion. `groups`: one key per completion (its prompt); kimi
    compares lengths within a key only."""
    if mode not in LENGTH_PENALTIES:
        raise ValueError(f"length_penalty must be one of {LENGTH_PENALTIES}, got {mode!r}")
    if mode == "none":
        return [0.0] * len(lengths)
    if mode == "overlong":
        from trl.rewards import get_soft_overlong_punishment

        punish = get_soft_overlong_punishment(max_completion_length, overlong_cache(max_completion_length))
        return [float(v) for v in punish(completion_ids=[[0] * n for n in lengths])]
    out = [0.0] * len(lengths)
    members: dict = {}
    for i, key in enumerate(groups):
        members.setdefault(key, []).append(i)
    for idx in members.values():
        for i, v in zip(
            idx, kimi_length_reward([lengths[i] for i in idx], [correct[i] for i in idx]), strict=True
        ):
            out[i] = v
    return out


def _key(prompt) -> str:
    return prompt if isinstance(prompt, str) else repr(prompt)  # chat prompts: lists of messages


def with_length_penalty(
    reward_func: Callable, mode: str, weight: float, max_completion_length: int
) -> Callable:
    """Wrap a TRL reward function: its reward + weight x the penalty (a completion is correct when its
    reward is > 0), and `reward/length_penalty` logged through TRL's `log_metric`. None rewards (TRL's
    "not scored by this function") stay None."""

    @functools.wraps(reward_func)
    def reward(*args, **kwargs):
        rewards = reward_func(*args, **kwargs)
        ids = kwargs.get("completion_ids")
        if mode == "none" or ids is None:
            added = [0.0] * len(rewards)
        else:
            groups = [_key(p) for p in kwargs.get("prompts") or [None] * len(ids)]
            correct = [r is not None and r > 0 for r in rewards]
            pen = length_penalties(mode, [len(x) for x in ids], correct, groups, max_completion_length)
            added = [weight * v for v in pen]
        log_metric = kwargs.get("log_metric")
        if log_metric is not None and rewards:
            log_metric(METRIC, sum(added) / len(added))
        return [r if r is None else r + a for r, a in zip(rewards, added, strict=True)]

    return reward

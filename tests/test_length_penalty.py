"""The length penalty (trlvr.rewards.length): Kimi k1.5's group length reward and DAPO's soft overlong
punishment as pure functions, the reward wrapper both arms get, and the config field."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trlvr.config import TandemConfig
from trlvr.errors import UserError
from trlvr.rewards.length import (
    METRIC,
    kimi_length_reward,
    length_penalties,
    overlong_cache,
    with_length_penalty,
)


def test_kimi_formula_by_hand():
    # lambda = 0.5 - (len - 10) / (50 - 10): 0.5, 0.25, 0.0, -0.5; wrong ones get min(0, lambda)
    assert kimi_length_reward([10, 20, 30, 50], [True, True, True, True]) == [0.5, 0.25, 0.0, -0.5]
    assert kimi_length_reward([10, 20, 30, 50], [False, False, False, False]) == [0.0, 0.0, 0.0, -0.5]
    assert kimi_length_reward([7, 7, 7], [True, False, True]) == [0.0, 0.0, 0.0]  # no spread: no penalty


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.integers(1, 3000), st.booleans()), min_size=1, max_size=16))
def test_kimi_invariants(rows):
    lengths, correct = [r[0] for r in rows], [r[1] for r in rows]
    out = kimi_length_reward(lengths, correct)
    assert all(-0.5 - 1e-12 <= v <= 0.5 + 1e-12 for v in out)
    assert all(
        v <= 0.0 for v, ok in zip(out, correct, strict=True) if not ok
    )  # never a bonus for a wrong answer
    # among correct responses, shorter is never worse
    pairs = sorted((n, v) for n, v, ok in zip(lengths, out, correct, strict=True) if ok)
    assert all(a[1] >= b[1] - 1e-12 for a, b in zip(pairs, pairs[1:], strict=False))
    # a shift of every length changes nothing (only differences within the group count)
    assert kimi_length_reward([n + 100 for n in lengths], correct) == pytest.approx(out)


def test_kimi_groups_are_per_prompt():
    # two prompts interleaved: each group's own min and max
    pen = length_penalties("kimi", [10, 100, 20, 200], [True, True, True, True], ["a", "b", "a", "b"], 3000)
    assert pen == [0.5, 0.5, -0.5, -0.5]


def test_overlong_is_dapo_eq13():
    # DAPO: L_max = 20480, L_cache = 4096 -> 0 up to 16384, linear to -1 at 20480
    assert overlong_cache(20480) == 4096
    pen = length_penalties("overlong", [16384, 16385, 18432, 20480], [True] * 4, [0] * 4, 20480)
    assert pen == pytest.approx([0.0, -1 / 4096, -0.5, -1.0])


def test_none_is_zero():
    assert length_penalties("none", [1, 99], [True, False], [0, 0], 100) == [0.0, 0.0]
    with pytest.raises(ValueError, match="length_penalty must be one of"):
        length_penalties("short", [1], [True], [0], 100)


def test_wrapper_adds_weighted_penalty_and_logs_it():
    logged = []

    def base(completions, **kwargs):
        return [1.0, 1.0, 0.0, None]

    f = with_length_penalty(base, "kimi", 0.5, 64)
    out = f(
        completions=["a", "b", "c", "d"],
        prompts=["p"] * 4,
        completion_ids=[[0] * 10, [0] * 30, [0] * 20, [0]],
        log_metric=lambda k, v: logged.append((k, v)),
    )
    # group lengths 10, 30, 20, 1: lambda = 0.5 - (n - 1) / 29
    lam = [0.5 - (n - 1) / 29 for n in (10, 30, 20)]
    assert out[:3] == pytest.approx([1.0 + 0.5 * lam[0], 1.0 + 0.5 * lam[1], 0.5 * min(0.0, lam[2])])
    assert out[3] is None  # "not scored" stays not scored
    assert logged == [(METRIC, pytest.approx(0.5 * (lam[0] + lam[1] + min(0.0, lam[2])) / 4))]
    assert f.__name__ == "base"  # TRL names the reward's metrics after the function


def test_wrapper_off_logs_zero_and_changes_nothing():
    logged = []
    f = with_length_penalty(lambda completions, **kw: [1.0, 0.0], "none", 1.0, 64)
    assert f(
        completions=["a", "b"], completion_ids=[[0], [0, 0]], log_metric=lambda k, v: logged.append((k, v))
    ) == [1.0, 0.0]
    assert logged == [(METRIC, 0.0)]


def test_config_field_names_the_key():
    with pytest.raises(UserError, match=r"^length_penalty: must be one of \('none', 'kimi', 'overlong'\)"):
        TandemConfig(length_penalty="short")
    with pytest.raises(UserError, match="^length_penalty_weight: "):
        TandemConfig(length_penalty_weight=-1.0)
    assert TandemConfig(arm="grpo", length_penalty="kimi").length_penalty == "kimi"

"""Statistics invariants: pass@k against brute force, bootstrap coverage, paired detection."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from trlvr.eval.stats import bootstrap_ci, paired_bootstrap, pass_at_k, ratio_stat


def brute_force_pass_at_k(outcomes: list[bool], k: int) -> float:
    """Share of all k-subsets of the n samples that contain at least one correct sample."""
    subsets = list(itertools.combinations(range(len(outcomes)), k))
    return sum(any(outcomes[i] for i in s) for s in subsets) / len(subsets)


@given(n=st.integers(1, 9), data=st.data())
def test_pass_at_k_equals_brute_force(n, data):
    c = data.draw(st.integers(0, n))
    k = data.draw(st.integers(1, n))
    outcomes = [True] * c + [False] * (n - c)
    assert pass_at_k(n, c, k) == pytest.approx(brute_force_pass_at_k(outcomes, k), abs=1e-12)


def test_pass_at_k_edges_and_large_n():
    assert pass_at_k(8, 0, 4) == 0.0
    assert pass_at_k(8, 8, 1) == 1.0
    assert pass_at_k(8, 3, 1) == pytest.approx(3 / 8)
    # n = 1000: the binomials overflow floats, the product form does not.
    assert 0.0 < pass_at_k(1000, 1, 500) == pytest.approx(0.5)
    with pytest.raises(ValueError, match="k <= n"):
        pass_at_k(4, 1, 5)


def test_bootstrap_ci_covers_true_mean_at_nominal_rate():
    rng = np.random.default_rng(0)
    covered = 0
    for rep in range(200):
        x = rng.exponential(1.0, size=60)  # skewed, true mean 1
        iv = bootstrap_ci(x, num_resamples=1000, seed=rep)
        covered += iv.lo <= 1.0 <= iv.hi
    assert 0.90 <= covered / 200 <= 0.99


def test_macro_bootstrap_is_mean_of_benchmark_means():
    a, b = np.array([1.0, 0.0, 1.0, 1.0]), np.array([0.0, 0.0])
    iv = bootstrap_ci([a, b], num_resamples=500)
    assert iv.value == pytest.approx((0.75 + 0.0) / 2)
    assert iv.lo <= iv.value <= iv.hi


def test_ratio_statistic_and_ci():
    x = np.stack([np.full(30, 0.5), np.full(30, 0.8)], axis=1)  # (P, 2): numerator, denominator
    iv = bootstrap_ci(x, ratio_stat, num_resamples=200)
    assert (
        iv.value == pytest.approx(0.625) and iv.lo == pytest.approx(0.625) and iv.hi == pytest.approx(0.625)
    )


def test_paired_bootstrap_detects_shift_not_null():
    rng = np.random.default_rng(1)
    difficulty = rng.normal(0, 1, size=200)  # large per-problem spread that pairing cancels
    a = difficulty + rng.normal(0, 0.1, size=200)
    shifted = paired_bootstrap(a, difficulty + 0.1 + rng.normal(0, 0.1, size=200), seed=0)
    assert shifted.excludes_zero and shifted.p_value < 0.01
    assert shifted.lo < 0.1 < shifted.hi and shifted.diff == pytest.approx(0.1, abs=0.04)
    rejections = 0
    for rep in range(40):
        b = difficulty + rng.normal(0, 0.1, size=200)
        res = paired_bootstrap(a, b, num_resamples=500, seed=rep)
        rejections += res.excludes_zero
    assert rejections <= 6  # nominal 5% of 40 = 2
    assert paired_bootstrap(a, a).p_value == 1.0

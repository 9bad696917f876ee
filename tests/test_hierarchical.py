"""Two-level (seed, problem) bootstrap against brute-force simulation of known effects."""

from __future__ import annotations

import numpy as np
import pytest

from trlvr.eval.hierarchical import paired_seed_bootstrap, seed_bootstrap_ci
from trlvr.eval.stats import bootstrap_ci


def simulate(rng, S, P, mu, tau, sd_problem=0.2, sd_noise=0.2, problem_effects=None):
    """Per-seed per-problem values y[s, p] = mu + d[p] + b[s] + e[s, p] (problems shared by seeds)."""
    d = rng.normal(0, sd_problem, P) if problem_effects is None else problem_effects
    b = rng.normal(0, tau, S)
    return [[mu + d + b[s] + rng.normal(0, sd_noise, P)] for s in range(S)], d


@pytest.mark.parametrize("S", [5, 8])
def test_seed_ci_covers_the_true_mean(S):
    rng = np.random.default_rng(0)
    reps, hits = 200, 0
    for r in range(reps):
        per_seed, _ = simulate(rng, S, 60, mu=0.5, tau=0.1)
        iv = seed_bootstrap_ci(per_seed, num_resamples=800, seed=r)
        hits += iv.lo <= 0.5 <= iv.hi
    assert 0.90 <= hits / reps <= 0.99


def test_paired_seed_difference_covers_a_known_between_seed_effect():
    """Tandem - grpo = 0.1 on average, with seed-level noise in both arms and shared problem difficulty."""
    rng = np.random.default_rng(1)
    reps, hits, S, P = 200, 0, 6, 50
    for r in range(reps):
        a, d = simulate(rng, S, P, mu=0.4, tau=0.08)
        b, _ = simulate(rng, S, P, mu=0.5, tau=0.08, problem_effects=d)
        res = paired_seed_bootstrap(a, b, num_resamples=800, seed=r)
        hits += res.lo <= 0.1 <= res.hi
        assert res.diff == pytest.approx(res.b - res.a)
    assert 0.90 <= hits / reps <= 0.99


def test_problem_only_bootstrap_misses_seed_variance():
    """With large between-seed variance, pooling seeds and resampling problems only under-covers badly;
    the two-level interval does not. This is why seeds need their own level."""
    rng = np.random.default_rng(2)
    reps, pooled_hits, two_level_hits = 150, 0, 0
    for r in range(reps):
        per_seed, _ = simulate(rng, 5, 80, mu=0.5, tau=0.15, sd_problem=0.05, sd_noise=0.05)
        pooled = np.mean([s[0] for s in per_seed], axis=0)  # per-problem mean over seeds
        pooled_hits += (
            bootstrap_ci(pooled, num_resamples=400, seed=r).lo
            <= 0.5
            <= bootstrap_ci(pooled, num_resamples=400, seed=r).hi
        )
        iv = seed_bootstrap_ci(per_seed, num_resamples=400, seed=r)
        two_level_hits += iv.lo <= 0.5 <= iv.hi
    assert pooled_hits / reps < 0.5
    assert two_level_hits / reps >= 0.88


def test_macro_over_benchmarks_and_errors():
    per_seed = [
        [np.array([1.0, 0.0]), np.array([1.0, 1.0, 1.0, 1.0])],
        [np.array([0.0, 0.0]), np.array([1.0] * 4)],
    ]
    iv = seed_bootstrap_ci(per_seed)
    assert iv.value == pytest.approx(np.mean([(0.5 + 1) / 2, (0 + 1) / 2]))
    with pytest.raises(ValueError, match="at least 2 seeds"):
        seed_bootstrap_ci([[np.array([1.0])]])
    with pytest.raises(ValueError, match="same problems"):
        seed_bootstrap_ci([[np.array([1.0, 0.0])], [np.array([1.0])]])


def test_intervals_stay_inside_what_the_data_can_average_to():
    """Near a boundary the seed inflation used to give pass rates above 100% (seen: [97.5, 100.2])."""
    rng = np.random.default_rng(0)
    near_one = [[(rng.random(200) < q).astype(float)] for q in (0.98, 1.0, 0.999)]
    iv = seed_bootstrap_ci(near_one)
    assert 0.0 <= iv.lo <= iv.value <= iv.hi <= 1.0
    near_zero = [[(rng.random(200) < q).astype(float)] for q in (0.0, 0.02, 0.0)]
    d = paired_seed_bootstrap(near_one, near_zero)
    assert -1.0 <= d.lo <= d.diff <= d.hi <= 1.0 and d.hi < 0

"""Evaluation statistics: unbiased pass@k and bootstrap confidence intervals over problems.

Pure numpy, seeded. Nothing here knows about models, files or metric names.

Shapes: P = problems in one benchmark, C = per-problem columns a statistic needs (one for a
mean, two for a ratio of means), R = bootstrap resamples, G = benchmarks (groups).

Resampling unit: the *problem*. Samples of one problem are correlated, so per-problem values
(pass@k, mean CE, ...) are computed first and the bootstrap redraws problems with replacement,
independently inside each benchmark (stratified), which is what a macro average over benchmarks
of different sizes needs.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import NamedTuple

import numpy as np

# statistic(means) -> value, where means is (..., G, C): per-benchmark column means
Statistic = Callable[[np.ndarray], np.ndarray]


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k = 1 - C(n-c, k) / C(n, k) for one problem with n samples, c correct.

    Computed as 1 - prod_{i=n-c+1}^{n} (1 - k/i), which never forms large binomials
    (Chen et al. 2021, "Evaluating Large Language Models Trained on Code").

    >>> pass_at_k(4, 1, 2)   # 1 - C(3,2)/C(4,2) = 1 - 3/6
    0.5
    """
    if not 0 <= c <= n:
        raise ValueError(f"need 0 <= c <= n, got n={n}, c={c}")
    if not 1 <= k <= n:
        raise ValueError(f"pass@{k} needs 1 <= k <= n = {n} samples")
    if n - c < k:
        return 1.0
    return float(1.0 - np.prod(1.0 - k / np.arange(n - c + 1, n + 1)))


class Interval(NamedTuple):
    value: float  # the statistic on the observed data
    lo: float  # lower end of the (1 - alpha) percentile bootstrap interval
    hi: float  # upper end


class PairedResult(NamedTuple):
    a: float  # statistic on A
    b: float  # statistic on B
    diff: float  # b - a
    lo: float  # percentile CI of the difference
    hi: float
    p_value: float  # two-sided bootstrap p-value for "difference = 0"

    @property
    def excludes_zero(self) -> bool:
        return self.lo > 0 or self.hi < 0


def mean_stat(means: np.ndarray) -> np.ndarray:
    """Macro mean of column 0: (..., G, C) -> (...)."""
    return means[..., 0].mean(axis=-1)


def ratio_stat(means: np.ndarray) -> np.ndarray:
    """Macro mean of column 0 over macro mean of column 1 (e.g. handoff / solo): (..., G, C) -> (...)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return means[..., 0].mean(axis=-1) / means[..., 1].mean(axis=-1)


def _as_groups(groups: Sequence[np.ndarray] | np.ndarray) -> list[np.ndarray]:
    if isinstance(groups, np.ndarray):
        groups = [groups]
    out = []
    for g in groups:
        g = np.asarray(g, dtype=float)
        g = g[:, None] if g.ndim == 1 else g  # (P,) -> (P, 1)
        if g.ndim != 2 or g.shape[0] == 0:
            raise ValueError(f"each group must be a non-empty (P,) or (P, C) array, got shape {g.shape}")
        out.append(g)
    return out


def _resampled_means(groups: list[np.ndarray], num_resamples: int, rng: np.random.Generator):
    """Observed (G, C) column means and (R, G, C) bootstrap column means."""
    if (
        isinstance(num_resamples, bool)
        or not isinstance(num_resamples, int | np.integer)
        or num_resamples < 1
    ):
        raise ValueError(
            f"num_resamples must be an integer >= 1, got {num_resamples!r}"
        )  # 0: every CI is NaN
    observed = np.stack([g.mean(axis=0) for g in groups])
    boot = []
    for g in groups:
        idx = rng.integers(0, g.shape[0], size=(num_resamples, g.shape[0]))  # (R, P)
        boot.append(g[idx].mean(axis=1))  # (R, C)
    return observed, np.stack(boot, axis=1)


def _percentiles(x: np.ndarray, alpha: float) -> tuple[float, float]:
    x = x[np.isfinite(x)]
    if x.size == 0:
        return float("nan"), float("nan")
    lo, hi = np.quantile(x, [alpha / 2, 1 - alpha / 2])
    return float(lo), float(hi)


def bootstrap_ci(
    groups: Sequence[np.ndarray] | np.ndarray,
    statistic: Statistic = mean_stat,
    *,
    num_resamples: int = 2000,
    alpha: float = 0.05,
    seed: int = 0,
) -> Interval:
    """Percentile bootstrap CI of `statistic` over problems, resampled within each group.

    `groups`: one (P,) or (P, C) array per benchmark (one array = a single benchmark).

    >>> v = bootstrap_ci(np.array([0.0, 1.0, 1.0, 0.0]))
    >>> v.value, v.lo <= v.value <= v.hi
    (0.5, True)
    """
    rng = np.random.default_rng(seed)
    observed, boot = _resampled_means(_as_groups(groups), num_resamples, rng)
    lo, hi = _percentiles(statistic(boot), alpha)
    return Interval(float(statistic(observed)), lo, hi)


def paired_bootstrap(
    groups_a: Sequence[np.ndarray] | np.ndarray,
    groups_b: Sequence[np.ndarray] | np.ndarray,
    statistic: Statistic = mean_stat,
    *,
    num_resamples: int = 2000,
    alpha: float = 0.05,
    seed: int = 0,
) -> PairedResult:
    """Paired bootstrap of statistic(B) - statistic(A) over shared problems.

    Row i of group g must be the same problem in A and B; each resample draws the same problem
    indices for both, so per-problem difficulty cancels. The p-value is the two-sided share of
    the null-centred bootstrap differences at least as far from 0 as the observed one.
    """
    ga, gb = _as_groups(groups_a), _as_groups(groups_b)
    if [g.shape for g in ga] != [g.shape for g in gb]:
        raise ValueError(f"paired groups differ in shape: {[g.shape for g in ga]} vs {[g.shape for g in gb]}")
    # Stack A and B as extra columns so one index draw serves both.
    joined = [np.concatenate([a, b], axis=1) for a, b in zip(ga, gb, strict=True)]
    c = ga[0].shape[1]
    rng = np.random.default_rng(seed)
    observed, boot = _resampled_means(joined, num_resamples, rng)
    a_obs, b_obs = float(statistic(observed[..., :c])), float(statistic(observed[..., c:]))
    with np.errstate(invalid="ignore"):
        diffs = statistic(boot[..., c:]) - statistic(boot[..., :c])  # (R,)
    diff = b_obs - a_obs
    lo, hi = _percentiles(diffs, alpha)
    finite = diffs[np.isfinite(diffs)]
    if finite.size == 0 or not np.isfinite(diff):
        p = float("nan")
    else:
        extreme = np.abs(finite - diff) >= abs(diff) - 1e-12
        p = float((1 + extreme.sum()) / (1 + finite.size))
    return PairedResult(a_obs, b_obs, diff, lo, hi, min(p, 1.0))

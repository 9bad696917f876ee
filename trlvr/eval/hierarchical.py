"""Two-level bootstrap over training seeds and problems: CIs that include training variance.

Pure numpy, seeded. Nothing here knows about runs, files or metric names.

One run (seed) gives per-problem values (pass@1, CE, ...) on a fixed problem set, one (P_g,)
array per benchmark g. A result over S seeds is the mean over seeds of the per-seed macro
metric. Its uncertainty has two sources: which seeds were trained (between-seed variance) and
which problems were drawn (between-problem variance). Each bootstrap resample therefore
    1. draws S seeds with replacement, and
    2. draws problems with replacement inside each benchmark -- one draw shared by the chosen
       seeds, because every seed is scored on the same problems (problem difficulty is common
       to all seeds and must not average out over seeds).
Seed deviations are inflated by sqrt(S / (S - 1)) so the resampled between-seed variance is
unbiased (the plain bootstrap shrinks it by (S - 1) / S, a 33% loss at S = 3). The inflation can
carry a resampled mean past what the data can average to (a pass rate above 100%), so resampled
means are clipped to the range of the per-problem values: a proportion's interval stays in [0, 1].

With very few seeds any interval is rough: at S = 3 a percentile interval cannot reach the
t-quantile's width, so coverage is below nominal (measured in tests/test_hierarchical.py).

Shapes: S seeds, G benchmarks, P_g problems in benchmark g, R resamples.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from trlvr.eval.stats import Interval, PairedResult, Statistic, _percentiles, mean_stat

PerSeed = Sequence[Sequence[np.ndarray]]  # [seed][benchmark] -> (P_g,) or (P_g, C) per-problem values


def _check(per_seed: PerSeed) -> list[list[np.ndarray]]:
    seeds = [[np.asarray(g, dtype=float) for g in s] for s in per_seed]
    seeds = [[g[:, None] if g.ndim == 1 else g for g in s] for s in seeds]  # (P,) -> (P, 1)
    if len(seeds) < 2:
        raise ValueError(f"a seed bootstrap needs at least 2 seeds, got {len(seeds)}")
    shapes = [[g.shape for g in s] for s in seeds]
    if any(sh != shapes[0] for sh in shapes):
        raise ValueError(
            f"every seed must be scored on the same problems; benchmark sizes per seed: {shapes}"
        )
    if any(g.ndim != 2 or g.shape[0] == 0 for g in seeds[0]):
        raise ValueError("each benchmark must be a non-empty (P,) or (P, C) array")
    return seeds


def _boot_means(seeds: list[list[np.ndarray]], num_resamples: int, rng: np.random.Generator):
    """Observed (G, C) seed-averaged column means, and (R, G, C) resampled ones."""
    S = len(seeds)
    seed_idx = rng.integers(0, S, size=(num_resamples, S))  # (R, S)
    per_bench = []
    for g in range(len(seeds[0])):
        vals = np.stack([s[g] for s in seeds])  # (S, P, C)
        P = vals.shape[1]
        prob_idx = rng.integers(0, P, size=(num_resamples, P))  # (R, P), shared by the chosen seeds
        per_bench.append(vals[:, prob_idx].mean(axis=2).transpose(1, 0, 2))  # (S, R, P, C) -> (R, S, C)
    means = np.stack(per_bench, axis=2)  # (R, S, G, C): each seed's column means under resample r
    grand = means.mean(axis=1)  # (R, G, C)
    chosen = np.take_along_axis(means, seed_idx[:, :, None, None], axis=1)  # (R, S, G, C)
    boot = grand + np.sqrt(S / (S - 1)) * (chosen.mean(axis=1) - grand)  # (R, G, C)
    low = np.stack(
        [np.min([s[g].min(axis=0) for s in seeds], axis=0) for g in range(len(seeds[0]))]
    )  # (G, C)
    high = np.stack(
        [np.max([s[g].max(axis=0) for s in seeds], axis=0) for g in range(len(seeds[0]))]
    )  # (G, C)
    boot = np.clip(boot, low, high)  # the inflation must not leave the data's range
    observed = np.mean([np.stack([g.mean(axis=0) for g in s]) for s in seeds], axis=0)  # (G, C)
    return observed, boot


def seed_bootstrap_ci(
    per_seed: PerSeed,
    statistic: Statistic = mean_stat,
    *,
    num_resamples: int = 2000,
    alpha: float = 0.05,
    seed: int = 0,
) -> Interval:
    """CI of statistic(seed-averaged column means), resampling seeds, then problems.

    >>> iv = seed_bootstrap_ci([[np.array([1.0, 0.0, 1.0])], [np.array([1.0, 1.0, 1.0])]])
    >>> round(iv.value, 3), iv.lo <= iv.value <= iv.hi
    (0.833, True)
    """
    seeds = _check(per_seed)
    observed, boot = _boot_means(seeds, num_resamples, np.random.default_rng(seed))
    lo, hi = _percentiles(statistic(boot), alpha)
    return Interval(float(statistic(observed)), lo, hi)


def paired_seed_bootstrap(
    per_seed_a: PerSeed,
    per_seed_b: PerSeed,
    statistic: Statistic = mean_stat,
    *,
    num_resamples: int = 2000,
    alpha: float = 0.05,
    seed: int = 0,
) -> PairedResult:
    """statistic(B) - statistic(A) over seeds paired by position (seed s of A with seed s of B) and
    problems paired by row.

    Both arms get the same seed and problem draws in every resample, so what the paired seeds and
    problems share cancels. The p-value is the two-sided share of null-centred resampled
    differences at least as far from 0 as the observed one.
    """
    a, b = _check(per_seed_a), _check(per_seed_b)
    if len(a) != len(b) or [g.shape for g in a[0]] != [g.shape for g in b[0]]:
        raise ValueError("paired seed groups differ: need the same seeds and problems in A and B")
    c = a[0][0].shape[1]
    joined = [
        [np.concatenate([ga, gb], axis=1) for ga, gb in zip(sa, sb, strict=True)]
        for sa, sb in zip(a, b, strict=True)
    ]
    observed, boot = _boot_means(joined, num_resamples, np.random.default_rng(seed))
    a_obs, b_obs = float(statistic(observed[..., :c])), float(statistic(observed[..., c:]))
    with np.errstate(invalid="ignore"):
        diffs = statistic(boot[..., c:]) - statistic(boot[..., :c])  # (R,)
    d_obs = b_obs - a_obs
    lo, hi = _percentiles(diffs, alpha)
    finite = diffs[np.isfinite(diffs)]
    if finite.size == 0 or not np.isfinite(d_obs):
        p = float("nan")
    else:
        p = float((1 + (np.abs(finite - d_obs) >= abs(d_obs) - 1e-12).sum()) / (1 + finite.size))
    return PairedResult(a_obs, b_obs, d_obs, lo, hi, min(p, 1.0))

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
unbiased (the plain bootstrap shrinks it by (S - 1) / S, a 33% loss at S = 3).

With very few seeds any interval is rough: at S = 3 a percentile interval cannot reach the
t-quantile's width, so coverage is below nominal (measured in tests/test_hierarchical.py).

Shapes: S seeds, G benchmarks, P_g problems in benchmark g, R resamples.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from trlvr.eval.stats import Interval, PairedResult

PerSeed = Sequence[Sequence[np.ndarray]]  # [seed][benchmark] -> (P_g,) per-problem values


def _check(per_seed: PerSeed) -> list[list[np.ndarray]]:
    seeds = [[np.asarray(g, dtype=float) for g in s] for s in per_seed]
    if len(seeds) < 2:
        raise ValueError(f"a seed bootstrap needs at least 2 seeds, got {len(seeds)}")
    shapes = [[g.shape for g in s] for s in seeds]
    if any(sh != shapes[0] for sh in shapes):
        raise ValueError(f"every seed must be scored on the same problems; benchmark sizes per seed: {shapes}")
    if any(g.ndim != 1 or g.size == 0 for g in seeds[0]):
        raise ValueError("each benchmark must be a non-empty (P,) array")
    return seeds


def _boot_macro(seeds: list[list[np.ndarray]], num_resamples: int, rng: np.random.Generator):
    """Observed seed-mean macro metric, and (R,) resampled values."""
    S, G = len(seeds), len(seeds[0])
    seed_idx = rng.integers(0, S, size=(num_resamples, S))  # (R, S)
    per_bench = []
    for g in range(G):
        vals = np.stack([s[g] for s in seeds])  # (S, P)
        P = vals.shape[1]
        prob_idx = rng.integers(0, P, size=(num_resamples, P))  # (R, P), shared by the chosen seeds
        # mean over the drawn problems for every seed: (R, S)
        seed_means = vals[:, prob_idx].mean(axis=2).T  # vals[:, idx] -> (S, R, P) -> (S, R) -> (R, S)
        per_bench.append(seed_means)
    macro = np.mean(per_bench, axis=0)  # (R, S): per resample, each seed's macro metric
    grand = macro.mean(axis=1, keepdims=True)  # (R, 1)
    chosen = np.take_along_axis(macro, seed_idx, axis=1)  # (R, S)
    inflate = np.sqrt(S / (S - 1))
    boot = (grand[:, 0] + inflate * (chosen - grand).mean(axis=1))  # (R,)
    observed = float(np.mean([np.mean([g.mean() for g in s]) for s in seeds]))
    return observed, boot


def seed_bootstrap_ci(
    per_seed: PerSeed, *, num_resamples: int = 2000, alpha: float = 0.05, seed: int = 0
) -> Interval:
    """CI of the seed-mean macro metric, resampling seeds, then problems.

    >>> iv = seed_bootstrap_ci([[np.array([1.0, 0.0, 1.0])], [np.array([1.0, 1.0, 1.0])]])
    >>> round(iv.value, 3), iv.lo <= iv.value <= iv.hi
    (0.833, True)
    """
    seeds = _check(per_seed)
    observed, boot = _boot_macro(seeds, num_resamples, np.random.default_rng(seed))
    lo, hi = np.quantile(boot, [alpha / 2, 1 - alpha / 2])
    return Interval(observed, float(lo), float(hi))


def paired_seed_bootstrap(
    per_seed_a: PerSeed, per_seed_b: PerSeed, *, num_resamples: int = 2000, alpha: float = 0.05, seed: int = 0
) -> PairedResult:
    """B - A over seeds paired by index (seed s of A with seed s of B) and problems paired by row.

    Both arms get the same seed and problem draws in every resample, so what the paired seeds
    and problems share cancels. The p-value is the two-sided share of null-centred resampled
    differences at least as far from 0 as the observed one.
    """
    a, b = _check(per_seed_a), _check(per_seed_b)
    if len(a) != len(b) or [g.shape for g in a[0]] != [g.shape for g in b[0]]:
        raise ValueError("paired seed groups differ: need the same seeds and problems in A and B")
    diffs = [[gb - ga for ga, gb in zip(sa, sb, strict=True)] for sa, sb in zip(a, b, strict=True)]
    rng = np.random.default_rng(seed)
    d_obs, boot = _boot_macro(diffs, num_resamples, rng)
    a_obs = float(np.mean([np.mean([g.mean() for g in s]) for s in a]))
    b_obs = float(np.mean([np.mean([g.mean() for g in s]) for s in b]))
    lo, hi = np.quantile(boot, [alpha / 2, 1 - alpha / 2])
    extreme = np.abs(boot - d_obs) >= abs(d_obs) - 1e-12
    p = float((1 + extreme.sum()) / (1 + boot.size))
    return PairedResult(a_obs, b_obs, d_obs, float(lo), float(hi), min(p, 1.0))

"""Seed groups: one evaluation directory per training seed, summarised and compared across seeds.

A group directory holds `seed-<s>/` evaluation directories (each a normal `trlvr eval` output,
scored on the same problems) and `group.json`:
    {"seeds": [0, 1, 2], "senior": "runs/x/seed-{seed}@selected", "complete": true,
     "metrics": {name: {value, ci_low, ci_high, per_seed: {seed: value}, num_problems}}}
A group is exactly the seeds its group.json names: `trlvr eval --seeds` writes that list (complete:
false) before it evaluates the first seed, so a `seed-<s>/` folder left by an earlier evaluation
into the same directory is never averaged in, and a group whose evaluation did not finish is
refused, not read in part. A folder without group.json (a study's eval/<variant>/) is every
`seed-<s>/` folder it holds, or the seeds a caller asks for.
The CI is the two-level (seeds, then problems) bootstrap of `trlvr.eval.hierarchical`, so it
reflects training variance, not only the sampling of problems. Comparing two groups pairs runs by
seed and problems by id.

What this file does not know: models or generation. It reads per_problem.json files.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from trlvr.errors import UserError
from trlvr.eval.aggregate import Table, _matrix, _problem_ids, _statistic, check_shared_problems, metric_specs
from trlvr.eval.hierarchical import paired_seed_bootstrap, seed_bootstrap_ci
from trlvr.eval.store import check_finished, read_json, write_json
from trlvr.rundir import GROUP_FILE, PER_PROBLEM, SAMPLES


def read_group(group_dir: str | Path) -> dict | None:
    """group.json of a `trlvr eval --seeds` group, None when there is none."""
    path = Path(group_dir) / GROUP_FILE
    if not path.is_file():
        return None
    rec = read_json(path, "seed group file")
    seeds = rec.get("seeds")
    if not isinstance(seeds, list) or not all(isinstance(s, int) and not isinstance(s, bool) for s in seeds):
        raise UserError(f"{path}: 'seeds' must be a list of integers, got {seeds!r}")
    return rec


def start_group(group_dir: str | Path, seeds: list[int], senior: str) -> None:
    """Name the group's seeds before the first is evaluated (complete: false until `write_group_summary`)."""
    Path(group_dir).mkdir(parents=True, exist_ok=True)
    write_json(Path(group_dir) / GROUP_FILE, {"seeds": sorted(seeds), "senior": senior, "complete": False})


def seed_dirs(group_dir: str | Path, seeds: list[int] | None = None) -> dict[int, Path]:
    """{seed: path} of the group's seed evaluations: the `seeds` asked for, else those group.json names
    (each must be there, and the group's evaluation finished), else every `seed-<s>/` folder holding a
    per-problem table (empty if none). Asked-for seeds without a finished evaluation are left out."""
    group_dir = Path(group_dir)
    found = {}
    for d in group_dir.glob("seed-*"):
        m = re.fullmatch(r"seed-(\d+)", d.name)
        if m and (d / PER_PROBLEM).is_file():
            found[int(m.group(1))] = d
    if seeds is not None:
        return {s: found[s] for s in sorted(set(seeds)) if s in found}
    rec = read_group(group_dir)
    if rec is None:
        return dict(sorted(found.items()))
    named = sorted(rec["seeds"])
    if rec.get("complete") is False:
        raise UserError(
            f"{group_dir}: the evaluation of seeds {named} into this group did not finish "
            f"({GROUP_FILE}: complete false); rerun that `trlvr eval --seeds`"
        )
    missing = [s for s in named if s not in found]
    if missing:
        raise UserError(
            f"{group_dir}: {GROUP_FILE} names seeds {named}, but seed(s) {missing} have no "
            f"finished evaluation ({PER_PROBLEM}); rerun that `trlvr eval --seeds`"
        )
    return {s: found[s] for s in named}


def refuse_mixing(out: str | Path, group: bool) -> None:
    """One folder holds a seed group or one evaluation, never both: a single `trlvr eval` into a group's
    folder (or a group into a folder with an evaluation of its own) would hide one from every reader
    (`is_group`). Refused in one line naming what is there; --fresh sets it aside instead."""
    out = Path(out)
    if not out.is_dir():
        return
    if not group and (
        (out / GROUP_FILE).is_file() or any(re.fullmatch(r"seed-\d+", d.name) for d in out.glob("seed-*"))
    ):
        raise UserError(
            f"--out {out} holds a seed group ({GROUP_FILE} or seed-<s>/ folders): a single evaluation "
            "needs its own --out (or --fresh sets the group aside into replaced-<time>/)"
        )
    if group and ((out / SAMPLES).is_file() or (out / PER_PROBLEM).is_file()):
        raise UserError(
            f"--out {out} holds an evaluation of its own ({SAMPLES}): a seed group needs its own "
            "--out (or --fresh sets it aside into replaced-<time>/)"
        )


def is_group(path: str | Path) -> bool:
    """A seed group: a folder with group.json or seed-<s>/ evaluations, and no evaluation of its own."""
    path = Path(path)
    if (path / PER_PROBLEM).is_file():
        return False
    return (path / GROUP_FILE).is_file() or any(
        re.fullmatch(r"seed-(\d+)", d.name) and (d / PER_PROBLEM).is_file() for d in path.glob("seed-*")
    )


def load_tables(group_dir: str | Path, seeds: list[int] | None = None) -> dict[int, Table]:
    dirs = seed_dirs(group_dir, seeds)
    missing = sorted(set(seeds or []) - set(dirs))
    if missing:
        raise UserError(
            f"{group_dir}: seed(s) {missing} of {sorted(set(seeds))} have no finished evaluation "
            f"({PER_PROBLEM})"
        )
    if len(dirs) < 2:
        raise UserError(
            f"{group_dir}: a seed group needs at least 2 seed-<s>/ evaluation folders, found {len(dirs)}"
        )
    for d in dirs.values():
        check_finished(d)
    return {s: read_json(d / PER_PROBLEM, "per-problem table", checked=True) for s, d in dirs.items()}


def _per_seed_groups(tables: list[Table], cols: tuple[str, ...], benches: list[str]):
    """[seed][benchmark] -> (P, C) on the problems every table has, or None if a benchmark has none."""
    out = [[] for _ in tables]
    for bench in benches:
        ids = _problem_ids([t[bench] for t in tables], cols)
        if not ids:
            return None
        for i, t in enumerate(tables):
            out[i].append(_matrix(t[bench], cols, ids))
    return out


def summarize_group(tables: dict[int, Table], *, num_resamples: int = 2000, seed: int = 0) -> dict:
    """Across-seed macro metrics with two-level bootstrap CIs, plus each seed's own value."""
    seeds = sorted(tables)
    ts = [tables[s] for s in seeds]
    benches = sorted(set.intersection(*(set(t) for t in ts)))
    specs = metric_specs(ts[0])
    metrics = {}
    for name, cols in specs.items():
        groups = _per_seed_groups(ts, cols, benches)
        if groups is None:
            continue
        stat = _statistic(cols)
        iv = seed_bootstrap_ci(groups, stat, num_resamples=num_resamples, seed=seed)
        per_seed = {str(s): float(stat(_col_means(g))) for s, g in zip(seeds, groups, strict=True)}
        metrics[name] = {
            "value": iv.value,
            "ci_low": iv.lo,
            "ci_high": iv.hi,
            "per_seed": per_seed,
            "num_problems": sum(len(g) for g in groups[0]),
        }
    return {
        "seeds": seeds,
        "benchmarks": benches,
        "metrics": metrics,
        "ci": "two-level bootstrap: seeds, then problems (shared draw)",
    }


def _col_means(groups):
    return np.stack([g.mean(axis=0) for g in groups])  # (G, C)


def compare_groups(
    tables_a: dict[int, Table], tables_b: dict[int, Table], *, num_resamples: int = 2000, seed: int = 0
) -> dict:
    """Paired B - A per metric, pairing seed s of A with seed s of B and problems by id."""
    seeds = sorted(set(tables_a) & set(tables_b))
    if len(seeds) < 2:
        raise UserError(f"seed groups share {len(seeds)} seeds ({seeds}); pairing needs at least 2")
    ta, tb = [tables_a[s] for s in seeds], [tables_b[s] for s in seeds]
    check_shared_problems(ta, tb)
    benches = sorted(set.intersection(*(set(t) for t in ta + tb)))
    specs_a, specs_b = metric_specs(ta[0]), metric_specs(tb[0])
    out = {"seeds": seeds, "benchmarks": benches, "macro": {}, "skipped": sorted(set(specs_a) ^ set(specs_b))}
    for name, cols in specs_b.items():
        if name not in specs_a:
            continue
        groups = _per_seed_groups(ta + tb, cols, benches)
        if groups is None:
            continue
        n = len(seeds)
        res = paired_seed_bootstrap(
            groups[:n], groups[n:], _statistic(cols), num_resamples=num_resamples, seed=seed
        )
        out["macro"][name] = {
            "a": res.a,
            "b": res.b,
            "diff": res.diff,
            "ci_low": res.lo,
            "ci_high": res.hi,
            "p_value": res.p_value,
            "excludes_zero": bool(res.excludes_zero),
            "num_problems": sum(len(g) for g in groups[0]),
        }
    out["benchmarks"] = {}
    return out


def write_group_summary(group_dir: str | Path, seeds: list[int] | None = None, **kw) -> dict:
    """Summarise the group's seeds (`seeds`, else those group.json names, else every seed folder) into
    group.json, marked complete."""
    rec = read_group(group_dir) or {}
    seeds = seeds if seeds is not None else rec.get("seeds")
    summary = summarize_group(load_tables(group_dir, seeds), **kw)
    out = {**summary, "complete": True, **({"senior": rec["senior"]} if "senior" in rec else {})}
    write_json(Path(group_dir) / GROUP_FILE, out)
    return summary

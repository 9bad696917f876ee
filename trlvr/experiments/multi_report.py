"""One report for many runs: `trlvr report A B C --baseline A`.

Each argument is an evaluation directory (one `trlvr eval` output) or a seed group (the
`seed-<s>/` folders of `trlvr eval --seeds`). The page shows, in this order:
    1. the headline table: one row per run, the metrics a reader compares (solo, handoff,
       handoff/solo, legibility, drift, plus every registered per-sample metric the runs have,
       e.g. one a toy world registers), value [95% CI] (groups: the two-level seed-and-problem CI);
    2. the runs side by side in one set of plots (`trlvr.eval.report.compared_plots`: pass@k, dose,
       legibility, drift) and the training curves (reward, senior share, switches, lengths, step
       time, KL) of the runs that produced each senior, seed bands for groups;
    3. paired differences against the baseline (seed groups pair by seed and problem);
    4. a rollout viewer with the same problem across runs side by side.

The study report (`trlvr study report`, and so `trlvr demo`) is this page over a study's runs.
Registered per-sample metrics (`trlvr.eval.sample_metrics`) are part of each run's per-problem
tables (`Run.tables`), so they get CIs and paired differences like every other metric.
What this file does not know: how metrics are computed. It reads results, per-problem tables,
samples and trainer states, and renders templates/multi_report.html.j2 (autoescaped).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import trlvr.eval.regex_jargon  # noqa: F401  (registers the real-text jargon rate, a study's jargon_regex)
import trlvr.toy  # noqa: F401  (the toy world registers its per-sample metrics)
from trlvr.errors import UserError
from trlvr.eval import sample_metrics
from trlvr.eval.aggregate import compare_tables
from trlvr.eval.comparable import check_comparable
from trlvr.eval.format import entry_text, unit
from trlvr.eval.groups import compare_groups, is_group, load_tables, seed_dirs, summarize_group
from trlvr.eval.report import (
    JUNIOR_COLOUR,
    SENIOR_COLOUR,
    TEMPLATES,
    _png,
    _surprisal_bg,
    compared_plots,
    comparison_view,
    load_results,
    sample_view,
    selection_warning,
)
from trlvr.eval.store import SAMPLES, read_samples
from trlvr.experiments.curves import CURVES, SELECTION, load_curves, plot_curves
from trlvr.provenance import path_from_record
from trlvr.rundir import FINAL, check_report_path, checkpoint_step, report_lock, write_file

# the evaluation's own headline metrics; then every registered per-sample metric (`headline_metrics`)
HEADLINE = (
    "solo/pass@1",
    "handoff/pass@1",
    "handoff_ratio/pass@1",
    "legibility/junior_ce",
    "legibility/junior_bpb",
    "drift/kl",
)


class Run:
    """One column of the report: a single evaluation or a seed group."""

    def __init__(
        self,
        path: str | Path,
        label: str | None = None,
        seeds: list[int] | None = None,
        settings: dict | None = None,
    ):
        self.path = Path(path)
        self.settings = settings  # what registered metrics that take a setting read (e.g. jargon_regex)
        if not self.path.is_dir():
            raise UserError(f"report: {self.path} is not a directory")
        self.label = label or self.path.name
        self.group = is_group(self.path)
        self.seeds = seeds if self.group else None  # a group's seeds (default: its own, `seed_dirs`)
        self.eval_dirs = list(seed_dirs(self.path, self.seeds).values()) if self.group else [self.path]
        self.results = [load_results(d) for d in self.eval_dirs]
        self._tables = None
        self.metrics = (
            summarize_group(self.tables())["metrics"]
            if self.group
            else {**self.results[0]["macro"]["metrics"], **sample_metrics.summary(self.tables())}
        )

    def tables(self):
        """The per-problem table (a group: {seed: table}), registered per-sample metrics included."""
        if self._tables is None:
            if self.group:
                dirs = seed_dirs(self.path, self.seeds)
                self._tables = {
                    s: sample_metrics.with_sample_metrics(
                        t, read_samples(dirs[s] / SAMPLES, checked=True), self.settings
                    )
                    for s, t in load_tables(self.path, self.seeds).items()
                }
            else:
                self._tables = sample_metrics.load_table(self.path, self.settings)
        return self._tables

    def training_runs(self) -> list[Path | None]:
        """The training folder of each seed's senior (the parent of checkpoint-N/ or final/)."""
        out = []
        for res, res_dir in zip(self.results, self.eval_dirs, strict=True):
            senior = res["config"].get("models", {}).get("senior")
            p = Path(path_from_record(senior, res_dir)) if senior else None
            out.append(
                p.parent if p is not None and (p.name == FINAL or checkpoint_step(p) is not None) else None
            )
        return out

    def curves(self) -> list[dict]:
        out = []
        for run in self.training_runs():
            try:
                out.append(load_curves(run) if run is not None else {})
            except UserError:
                out.append({})
        return out


def headline_metrics() -> list[str]:
    """The headline's metrics: the evaluation's own, then every registered per-sample metric."""
    return [*HEADLINE, *(m.name for m in sample_metrics.registered())]


def headline(runs: list[Run]) -> dict:
    zero = sample_metrics.all_zero([r.metrics for r in runs])
    names = [n for n in headline_metrics() if n not in zero and any(n in r.metrics for r in runs)]
    rows = [
        {
            "label": r.label,
            "kind": f"{len(r.eval_dirs)} seeds" if r.group else "1 run",
            "cells": [entry_text(r.metrics.get(n), n) for n in names],
        }
        for r in runs
    ]
    return {"cols": [n + unit(n) for n in names], "rows": rows, "left_out": [n + unit(n) for n in zero]}


def training_plots(runs: list[Run]) -> list[str]:
    import matplotlib.pyplot as plt

    per_run = {r.label: r.curves() for r in runs}
    out = []
    for label in [*CURVES, SELECTION]:
        groups = {name: [c.get(label) for c in curves] for name, curves in per_run.items()}
        if not any(c is not None for cs in groups.values() for c in cs):
            continue
        fig, ax = plt.subplots(figsize=(4.6, 3.2))
        plot_curves(groups, label, ax, smooth=5 if label in ("reward", "step time (s)") else 1)
        ax.legend(fontsize=8)
        ax.grid(alpha=0.3)
        out.append(_png(fig))
    return out


def comparisons(runs: list[Run], baseline: Run, allow_mismatch: bool = False) -> list[dict]:
    """Each run against `baseline`, evaluated alike (`trlvr.eval.comparable`: refused, or with
    `allow_mismatch` paired with a warning naming the settings that differ)."""
    out = []
    for r in runs:
        if r is baseline:
            continue
        # the headline is macro; per-benchmark detail lives in each run's report
        cmp = {**paired(baseline, r, allow_mismatch), "benchmarks": {}}
        how = "paired by seed and problem, two-level bootstrap" if r.group else "paired by problem, bootstrap"
        out.append(comparison_view(cmp, baseline.label, r.label, f"{r.label} − {baseline.label} ({how})"))
    return out


def paired(baseline: Run, r: Run, allow_mismatch: bool = False) -> dict:
    """Paired r - baseline, every metric (registered per-sample ones included): by seed and problem for
    seed groups (two-level bootstrap), by problem for single runs; only runs evaluated alike
    (`trlvr.eval.comparable`; allowed: the settings that differ are in "mismatch")."""
    if r.group != baseline.group:
        raise UserError(
            f"report: {r.path} and the baseline {baseline.path} are not both seed groups (or both single "
            "runs)"
        )
    mismatch = check_comparable(
        baseline.path,
        r.path,
        allow_mismatch=allow_mismatch,
        names=(baseline.label, r.label),
        seeds=(baseline.seeds, r.seeds),
    )
    cmp = (
        compare_groups(baseline.tables(), r.tables())
        if r.group
        else compare_tables(baseline.tables(), r.tables())
    )
    return {**cmp, "mismatch": mismatch}


def side_by_side(runs: list[Run], max_problems: int = 8, protocols=("solo", "handoff")) -> list[dict]:
    """The same problems across runs (first seed of each group): one column per run, sample 0 per protocol."""
    rows = {r.label: read_samples(r.eval_dirs[0] / SAMPLES, checked=True) for r in runs}
    by_run = {
        label: {(str(x["problem_id"]), x["protocol"]): x for x in rs if x.get("sample_idx") == 0}
        for label, rs in rows.items()
    }
    shared = None
    for m in by_run.values():
        ids = {pid for pid, _ in m}
        shared = ids if shared is None else shared & ids
    first = [str(x["problem_id"]) for x in next(iter(rows.values()), []) if x.get("sample_idx") == 0]
    order = list(dict.fromkeys(p for p in first if p in (shared or set())))[:max_problems]
    out = []
    for pid in order:
        prompt = next(
            (
                str(x["prompt"])
                for rs in rows.values()
                for x in rs
                if str(x["problem_id"]) == pid and x.get("prompt")
            ),
            None,
        )
        cells = []
        for proto in protocols:
            cells.append(
                {
                    "protocol": proto,
                    "cols": [
                        {
                            "label": label,
                            "sample": sample_view(m[(pid, proto)]) if (pid, proto) in m else None,
                        }
                        for label, m in by_run.items()
                    ],
                }
            )
        out.append({"pid": pid, "prompt": prompt, "rows": cells})
    return out


def _pairs(runs: list[Run], base: Run, pairs, allow_mismatch: bool = False) -> list[dict]:
    """Comparison views: every run against `base`, or each (baseline path, run path) of `pairs`."""
    if pairs is None:
        return comparisons(runs, base, allow_mismatch)
    by_path = {r.path: r for r in runs}
    out = []
    for a, b in pairs:
        if Path(a) not in by_path or Path(b) not in by_path:
            raise UserError(f"report: pair ({a}, {b}) names a run that is not in the report")
        out += comparisons([by_path[Path(b)]], by_path[Path(a)], allow_mismatch)
    return out


@dataclass(frozen=True)
class Page:
    """What a multi-run page shows beside its runs: `title` (default: the run labels joined by "vs"),
    `settings`: (name, value) rows shown as a table; `extra_plots`: more PNG data URLs (e.g. a study's
    detector metrics), under `extra_title`."""

    title: str | None = None
    settings: tuple[tuple[str, str], ...] = ()
    extra_plots: tuple[str, ...] = ()
    extra_title: str = "More plots"


def build_multi_report(
    paths: list[str | Path],
    baseline: str | Path | None = None,
    max_problems: int = 8,
    *,
    labels: list[str] | None = None,
    pairs: list[tuple] | None = None,
    page: Page = Page(),
    allow_mismatch: bool = False,
    group_seeds: dict | None = None,
    metric_settings: dict | None = None,
) -> str:
    """The page. `labels`: one per path (default: folder names); `pairs`: (baseline, run) paths to compare
    (default: every run against `baseline`); `page`: title, settings table and extra plots (`Page`);
    `allow_mismatch`: pair runs evaluated under other settings, with a warning (else refused);
    `group_seeds`: {path: seeds} of seed groups read as those seeds only (default: each group's own);
    `metric_settings`: {path: settings} for registered metrics that take one (e.g. a study's jargon_regex)."""
    import jinja2
    import matplotlib

    matplotlib.use("Agg")
    if len(paths) < 2:
        raise UserError("report: a multi-run report needs at least two runs")
    if labels is not None and len(labels) != len(paths):
        raise UserError(f"report: {len(labels)} labels for {len(paths)} runs")
    seeds = {str(k): v for k, v in (group_seeds or {}).items()}
    given = {str(k): v for k, v in (metric_settings or {}).items()}
    runs = [
        Run(p, label=lab, seeds=seeds.get(str(p)), settings=given.get(str(p)))
        for p, lab in zip(paths, labels or [None] * len(paths), strict=True)
    ]
    names = [r.label for r in runs]
    if len(set(names)) != len(names):
        runs = [Run(p, label=str(p), seeds=seeds.get(str(p)), settings=given.get(str(p))) for p in paths]
    base = runs[0] if baseline is None else next((r for r in runs if r.path == Path(baseline)), None)
    if base is None:
        raise UserError(f"report: --baseline {baseline} is not one of the runs")
    plots = compared_plots([(r.label, r.metrics) for r in runs])
    warnings = [
        w
        for r in runs
        for res in r.results
        if (w := selection_warning(res["config"].get("models", {}).get("senior_selection")))
    ]
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(TEMPLATES)), autoescape=True, undefined=jinja2.StrictUndefined
    )
    return env.get_template("multi_report.html.j2").render(
        title=page.title or "trlvr: " + " vs ".join(r.label for r in runs),
        baseline=base.label,
        headline=headline(runs),
        settings=list(page.settings),
        extra_plots=list(page.extra_plots),
        extra_title=page.extra_title,
        plots=plots,
        training=training_plots(runs),
        comparisons=_pairs(runs, base, pairs, allow_mismatch),
        problems=side_by_side(runs, max_problems),
        labels=[r.label for r in runs],
        warnings=sorted(set(warnings)),
        senior_colour=SENIOR_COLOUR,
        junior_colour=JUNIOR_COLOUR,
        shade_high=_surprisal_bg(-8),
        shade_low=_surprisal_bg(-2),
    )


def write_multi_report(paths, out_path, baseline=None, max_problems: int = 8, **kw) -> Path:

    out_path = Path(out_path)
    real = check_report_path(
        out_path, "--out"
    )  # checked (where the write lands) before anything is read or written
    with report_lock(real):
        write_file(real, build_multi_report(paths, baseline, max_problems, **kw))
    return out_path

"""Per-sample metrics beyond the evaluation's own, registered by whoever defines one.

A `SampleMetric` turns one benchmark's sample rows (samples.jsonl) into a value per problem, and
says whether it is a rate (a share in [0, 1], printed in percent: `trlvr.eval.format` asks `is_rate`);
a world registers its own (the toy world's live in `trlvr.toy`). Reports read the registry: an evaluation's
per-problem table is its per_problem.json plus every registered metric computed from its samples
(`load_table`), so summaries, two-level seed CIs and paired comparisons treat a registered metric
exactly like solo/pass@1, with no code of their own for it.

    register(SampleMetric("refusal_rate", "refusal rate (%)", refusals_by_problem, rate=True))

A metric may need a setting of the evaluation it reads (`setting`: its name, e.g. a pattern a study file
gives): its `per_problem(rows, value)` is then called with the setting's value from the `settings` the
caller passes (a study's evaluation keys: trlvr.experiments.study_report), and it is left out where the
setting is not given.

What this file does not know: which metrics exist (they register themselves), HTML, plots.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from trlvr.eval.aggregate import Table, summarize
from trlvr.eval.store import PER_PROBLEM, SAMPLES, read_json, read_samples


@dataclass(frozen=True)
class SampleMetric:
    name: str  # its column in the per-problem table
    title: str  # its column title in report tables, e.g. "refusal rate (%)"
    per_problem: Callable[
        [list[dict]], dict[str, float]
    ]  # one benchmark's sample rows -> {problem id: value}
    rate: bool = False  # a share in [0, 1], printed in percent (`is_rate`); else printed as it is
    setting: str | None = None  # the evaluation setting per_problem takes as its second argument (None: none)

    def values(self, rows: list[dict], settings: dict | None = None) -> dict[str, float]:
        """{problem id: value} over one benchmark's rows; {} when it needs a setting `settings` lacks."""
        if self.setting is None:
            return self.per_problem(rows)
        value = (settings or {}).get(self.setting)
        return self.per_problem(rows, value) if value is not None else {}


_REGISTRY: dict[str, SampleMetric] = {}


def register(metric: SampleMetric) -> SampleMetric:
    """Add `metric` to the registry (idempotent for the same metric); returns it."""
    known = _REGISTRY.get(metric.name)
    if known is not None and known != metric:
        raise ValueError(f"a per-sample metric named {metric.name!r} is already registered: {known}")
    _REGISTRY[metric.name] = metric
    return metric


def registered() -> list[SampleMetric]:
    """Every registered metric, in registration order."""
    return list(_REGISTRY.values())


def all_zero(metrics: list[dict]) -> list[str]:
    """The registered metrics that are exactly 0, CI included, in every one of `metrics` ({name: {value,
    ci_low, ci_high}} per run) that has them, e.g. a toy world's own metric on real data. Reports leave
    their columns and panels out and say so; the evaluation's own metrics are always shown."""
    out = []
    for m in registered():
        entries = [ms[m.name] for ms in metrics if m.name in ms]
        if entries and all(e["value"] == e["ci_low"] == e["ci_high"] == 0 for e in entries):
            out.append(m.name)
    return out


def is_rate(name: str) -> bool:
    """Whether `name` (a metric, or the last "/" component of one) is a registered rate."""
    metric = _REGISTRY.get(name.rpartition("/")[2])
    return metric is not None and metric.rate


def sample_table(rows: list[dict], settings: dict | None = None) -> Table:
    """{benchmark: {metric: {problem id: value}}} of the registered metrics over `rows` (a metric with no
    value for a benchmark, e.g. no sample of the protocol it reads or no `settings` entry it needs, is
    left out there)."""
    by_bench: dict[str, list[dict]] = defaultdict(list)
    for r in rows:
        by_bench[str(r["benchmark"])].append(r)
    table: Table = {}
    for bench, rs in by_bench.items():
        cols = {m.name: values for m in registered() if (values := m.values(rs, settings))}
        if cols:
            table[bench] = cols
    return table


def with_sample_metrics(table: Table, rows: list[dict], settings: dict | None = None) -> Table:
    """`table` plus the registered metrics over `rows`; a column the table already has is kept as it is."""
    extra = sample_table(rows, settings)
    return {b: {**extra.get(b, {}), **cols} for b, cols in table.items()} | {
        b: cols for b, cols in extra.items() if b not in table
    }


def load_table(eval_dir: str | Path, settings: dict | None = None) -> Table:
    """An evaluation's per-problem table (per_problem.json) with the registered metrics of its samples."""
    eval_dir = Path(eval_dir)
    table = read_json(eval_dir / PER_PROBLEM, "per-problem table", checked=True)
    return with_sample_metrics(table, read_samples(eval_dir / SAMPLES, checked=True), settings)


def summary(table: Table) -> dict[str, dict]:
    """Macro entries ({value, ci_low, ci_high, num_problems}, bootstrap over problems) of the registered
    metrics in `table`: what results.json holds for the evaluation's own metrics."""
    names = {m.name for m in registered()}
    own = {b: {k: v for k, v in cols.items() if k in names} for b, cols in table.items()}
    own = {b: cols for b, cols in own.items() if cols}
    return summarize(own)["macro"]["metrics"] if own else {}

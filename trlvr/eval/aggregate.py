"""From sample rows to per-problem metrics, then to results with bootstrap CIs and paired comparisons.

Per-problem table: {benchmark: {metric: {problem_id: value}}}. Metric names:
    solo/pass@k, handoff/pass@k, junior/pass@k        unbiased pass@k (correct = reward > 0.5); also
    handoff-paper/pass@k                               (k <= its own n = 4)
    <protocol>/mean_tokens, <protocol>/truncated      completion length, share cut by the budget
    handoff/round_capped                               share ended by the round cap (a round = one
                                                       senior step + one junior step)
    <protocol>/unrepresentable                         share ended because a partner's tokenizer cannot
                                                       spell the text (text pairs; `trlvr.engine.text_pair`);
                                                       a protocol has it once any of its rows ended so
    dose-J/pass@1, dose-J/senior_share                 at junior share J
    prefix-K/pass@1                                    the junior continuing the first K% of the senior's
                                                       solo trace (`trlvr.eval.prefix`)
    prefix-K/answer_in_prefix                          share of those prefixes that already hold the gold
    prefix-K/pass@1|no-answer                          pass@1 over the rows whose prefix does not (a problem
                                                       all of whose prefixes hold it has no value)
    legibility/junior_ce                               junior's mean per-token CE (nats) on the text of
                                                       solo samples (final EOS left out unless include_eos);
                                                       text pairs: per token of the junior's own tokenization
    legibility/junior_bpb                              the same surprisal in bits per UTF-8 byte of the text:
                                                       comparable across tokenizers
    drift/kl                                           mean per-token KL(senior || junior), same tokens
    <metric> (grader G)                                each pass@ metric above under grader G, an evaluation's
                                                       grader after its first (`trlvr eval --grader a,G`;
                                                       results.json `by_grader`); `graded`
Derived (ratio of means, not per problem): handoff_ratio/pass@k = handoff/pass@k / solo/pass@k (under each
grader).

A benchmark's value is the mean over its problems (for CE and KL: mean over problems of the
per-problem mean of per-sample means, equal to the mean of per-sample means when every problem
has n samples); the macro value averages benchmarks.
"""

from __future__ import annotations

import re
from collections import defaultdict

import numpy as np

from trlvr.errors import UserError
from trlvr.eval.stats import bootstrap_ci, mean_stat, paired_bootstrap, pass_at_k, ratio_stat
from trlvr.eval.suite import protocol_of_metric

PASS_PROTOCOLS = ("solo", "handoff", "handoff-paper", "junior")
UNREPRESENTABLE = (
    "unrepresentable"  # the finish reason (trlvr.engine.output.FINISH_REASONS) counted per protocol
)
CORRECT_THRESHOLD = 0.5

Table = dict[str, dict[str, dict[str, float]]]


def problem_table(rows: list[dict], ks: list[int]) -> Table:
    groups: dict[tuple[str, str, str], list[dict]] = defaultdict(list)
    for r in rows:
        groups[(r["benchmark"], r["protocol"], str(r["problem_id"]))].append(r)
    table: Table = defaultdict(lambda: defaultdict(dict))
    unspelt = {r["protocol"] for r in rows if r["finish_reason"] == UNREPRESENTABLE}
    for (bench, proto, pid), rs in groups.items():
        t = table[bench]
        correct = [float(r["reward"]) > CORRECT_THRESHOLD for r in rs]
        m = len(rs)
        t[f"{proto}/mean_tokens"][pid] = float(np.mean([r["num_tokens"] for r in rs]))
        t[f"{proto}/truncated"][pid] = float(np.mean([r["finish_reason"] == "length" for r in rs]))
        if proto in unspelt:
            t[f"{proto}/{UNREPRESENTABLE}"][pid] = float(
                np.mean([r["finish_reason"] == UNREPRESENTABLE for r in rs])
            )
        if proto in PASS_PROTOCOLS:
            for k in ks:
                if k <= m:
                    t[f"{proto}/pass@{k}"][pid] = pass_at_k(m, sum(correct), k)
        if proto == "handoff":
            t["handoff/round_capped"][pid] = float(np.mean([r["finish_reason"] == "rounds" for r in rs]))
        if (p := protocol_of_metric(proto)) is not None and p.entry == "dose":
            t[f"{proto}/pass@1"][pid] = float(np.mean(correct))
            t[f"{proto}/senior_share"][pid] = float(np.mean([r["senior_share"] for r in rs]))
        if (p := protocol_of_metric(proto)) is not None and p.entry == "prefix":
            flagged = [bool(r["answer_in_prefix"]) for r in rs]
            t[f"{proto}/pass@1"][pid] = float(np.mean(correct))
            t[f"{proto}/answer_in_prefix"][pid] = float(np.mean(flagged))
            clean = [c for c, f in zip(correct, flagged, strict=True) if not f]
            if clean:
                t[f"{proto}/pass@1|no-answer"][pid] = float(np.mean(clean))
        if proto == "solo":
            ce = [r["legibility"] for r in rs if r.get("legibility") is not None]
            bpb = [r["legibility_bpb"] for r in rs if r.get("legibility_bpb") is not None]
            kl = [r["drift"] for r in rs if r.get("drift") is not None]
            if ce:
                t["legibility/junior_ce"][pid] = float(np.mean(ce))
            if bpb:
                t["legibility/junior_bpb"][pid] = float(np.mean(bpb))
            if kl:
                t["drift/kl"][pid] = float(np.mean(kl))
    return {b: {m: dict(v) for m, v in t.items()} for b, t in table.items()}


def graded(name: str, grader: str) -> str:
    """The per-problem table's name of metric `name` under `grader`, an evaluation's grader after its first.

    >>> graded("solo/pass@4", "authors"), ungraded("solo/pass@4 (grader authors)"), ungraded("solo/pass@4")
    ('solo/pass@4 (grader authors)', ('solo/pass@4', 'authors'), ('solo/pass@4', None))
    """
    return f"{name} (grader {grader})"


def ungraded(name: str) -> tuple[str, str | None]:
    """(metric, grader) of a per-problem table's metric name; grader None: the evaluation's first."""
    m = re.fullmatch(r"(.+) \(grader ([^()]+)\)", name)
    return (m.group(1), m.group(2)) if m else (name, None)


def with_graders(table: Table, others: dict[str, Table]) -> Table:
    """`table` (the first grader's) with each other grader's metrics beside it, named `graded` (additive: the
    first grader's names and values unchanged)."""
    out = {b: dict(t) for b, t in table.items()}
    for grader, theirs in others.items():
        for bench, t in theirs.items():
            out.setdefault(bench, {}).update({graded(m, grader): v for m, v in t.items()})
    return out


def metric_specs(table: Table) -> dict[str, tuple[str, ...]]:
    """metric name -> the per-problem columns it needs: (col,) for a mean, (num, den) for a ratio."""
    names = sorted({m for t in table.values() for m in t})
    specs: dict[str, tuple[str, ...]] = {m: (m,) for m in names}
    for m in names:
        if m.startswith("handoff/pass@") and "solo/" + m.split("/", 1)[1] in names:
            specs["handoff_ratio/" + m.split("/", 1)[1]] = (m, "solo/" + m.split("/", 1)[1])
    return dict(sorted(specs.items(), key=lambda kv: _metric_order(kv[0])))


def _metric_order(name: str):
    name, grader = ungraded(name)  # the first grader's metrics, then each other grader's in the same order
    head, _, tail = name.partition("/")
    order = ["solo", "handoff", "handoff_ratio", "handoff-paper", "junior", "legibility", "drift"]
    rank = order.index(head) if head in order else len(order)
    k = int(tail.split("@")[1]) if "@" in tail and tail.split("@")[1].isdigit() else 0
    return (grader is not None, grader or "", rank, head, tail.split("@")[0], k, tail)


def _statistic(cols: tuple[str, ...]):
    return mean_stat if len(cols) == 1 else ratio_stat


def problems_of(table: Table) -> set[tuple[str, str]]:
    """(benchmark, problem_id) of every problem a table has any value for."""
    return {(b, pid) for b, cols in table.items() for values in cols.values() for pid in values}


def check_shared_problems(
    tables_a: list[Table], tables_b: list[Table], names: tuple[str, str] = ("A", "B")
) -> None:
    """A paired comparison needs problems both sides have: UserError naming how many each has otherwise."""
    a = set().union(*(problems_of(t) for t in tables_a))
    b = set().union(*(problems_of(t) for t in tables_b))
    if not a & b:
        raise UserError(
            f"nothing to compare: {names[0]} ({len(a)} problems) and {names[1]} ({len(b)} problems) share no "
            "problem (benchmark name and problem content); evaluate both on the same data"
        )


def _problem_ids(tables: list[dict[str, dict[str, float]]], cols: tuple[str, ...]) -> list[str]:
    """Problems that have every column in every table, in a stable order."""
    ids = None
    for t in tables:
        for c in cols:
            have = set(t.get(c, {}))
            ids = have if ids is None else ids & have
    return sorted(ids or [])


def _matrix(t: dict[str, dict[str, float]], cols: tuple[str, ...], ids: list[str]) -> np.ndarray:
    return np.array([[t[c][i] for c in cols] for i in ids], dtype=float)  # (P, C)


def _entry(iv, num_problems) -> dict:
    return {"value": iv.value, "ci_low": iv.lo, "ci_high": iv.hi, "num_problems": num_problems}


def summarize(table: Table, *, num_resamples: int = 2000, seed: int = 0, alpha: float = 0.05) -> dict:
    """Per-benchmark and macro metrics with percentile bootstrap CIs over problems."""
    specs = metric_specs(table)
    out = {"benchmarks": {}, "macro": {"benchmarks": sorted(table), "metrics": {}}}
    for bench in sorted(table):
        t = table[bench]
        metrics = {}
        for name, cols in specs.items():
            ids = _problem_ids([t], cols)
            if not ids:
                continue
            iv = bootstrap_ci(
                _matrix(t, cols, ids), _statistic(cols), num_resamples=num_resamples, seed=seed, alpha=alpha
            )
            metrics[name] = _entry(iv, len(ids))
        num = len({pid for col in t.values() for pid in col})
        out["benchmarks"][bench] = {"num_problems": num, "metrics": metrics}
    for name, cols in specs.items():
        groups = []
        for bench in sorted(table):
            ids = _problem_ids([table[bench]], cols)
            if not ids:
                break  # macro only over metrics every benchmark has
            groups.append(_matrix(table[bench], cols, ids))
        else:
            iv = bootstrap_ci(groups, _statistic(cols), num_resamples=num_resamples, seed=seed, alpha=alpha)
            out["macro"]["metrics"][name] = _entry(iv, sum(len(g) for g in groups))
    return out


def compare_tables(
    table_a: Table, table_b: Table, *, num_resamples: int = 2000, seed: int = 0, alpha: float = 0.05
) -> dict:
    """Paired bootstrap B - A for every metric both tables have, over problems both have.

    Returns {"benchmarks": {bench: {metric: entry}}, "macro": {metric: entry}, "skipped": [...]}
    with entry = {a, b, diff, ci_low, ci_high, p_value, excludes_zero, num_problems}.
    """
    check_shared_problems([table_a], [table_b])
    specs_a, specs_b = metric_specs(table_a), metric_specs(table_b)
    shared_benches = sorted(set(table_a) & set(table_b))
    names = [m for m in specs_b if m in specs_a]
    skipped = sorted(set(specs_a) ^ set(specs_b))
    out = {"benchmarks": {b: {} for b in shared_benches}, "macro": {}, "skipped": skipped}

    def entry(res, num):
        return {
            "a": res.a,
            "b": res.b,
            "diff": res.diff,
            "ci_low": res.lo,
            "ci_high": res.hi,
            "p_value": res.p_value,
            "excludes_zero": bool(res.excludes_zero),
            "num_problems": num,
        }

    for name in names:
        cols = specs_b[name]
        ga, gb, complete = [], [], True
        for bench in shared_benches:
            ids = _problem_ids([table_a[bench], table_b[bench]], cols)
            if not ids:
                complete = False
                continue
            a, b = _matrix(table_a[bench], cols, ids), _matrix(table_b[bench], cols, ids)
            res = paired_bootstrap(
                a, b, _statistic(cols), num_resamples=num_resamples, seed=seed, alpha=alpha
            )
            out["benchmarks"][bench][name] = entry(res, len(ids))
            ga.append(a)
            gb.append(b)
        if complete and ga:
            res = paired_bootstrap(
                ga, gb, _statistic(cols), num_resamples=num_resamples, seed=seed, alpha=alpha
            )
            out["macro"][name] = entry(res, sum(len(g) for g in ga))
    return out

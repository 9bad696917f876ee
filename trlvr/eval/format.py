"""One way to print a metric entry, shared by the HTML report, the CLI tables and the markdown summary.

An entry is results.json's {"value", "ci_low", "ci_high", ...} (or compare's {"a", "b", "diff",
"ci_low", "ci_high", ...}). Rates in [0, 1] print as percent; everything else (nats, token counts,
ratios such as handoff_ratio/pass@k) prints as is. The rule lives in `is_percent` and nowhere else:
the evaluation's own rates are named here, a registered per-sample metric says itself whether it is
a rate (`trlvr.eval.sample_metrics.SampleMetric.rate`).

What this file does not know: files, HTML, where the entries came from.
"""

from __future__ import annotations

from trlvr.eval.sample_metrics import is_rate

# An evaluation metric is a rate (printed x100) when its last component is one of these, or starts with
# "pass@", or it is a registered per-sample rate; ratios of rates ("handoff_ratio/...") are not rates.
RATE_SUFFIXES = ("senior_share", "truncated", "round_capped", "unrepresentable", "answer_in_prefix")
RATIO_HEADS = ("handoff_ratio",)


def is_percent(name: str) -> bool:
    """True when the metric `name` is a rate printed in percent.

    >>> is_percent("solo/pass@4"), is_percent("handoff_ratio/pass@1"), is_percent("drift/kl")
    (True, False, False)
    """
    head, _, tail = name.rpartition("/")
    if head.split("/")[0] in RATIO_HEADS:
        return False
    return tail.startswith("pass@") or tail in RATE_SUFFIXES or is_rate(tail)


def scale(name: str) -> float:
    return 100.0 if is_percent(name) else 1.0


def unit(name: str) -> str:
    """ " (%)" for a percent metric, " (bits/byte)" for a per-byte one (`*_bpb`), else "".

    >>> unit("solo/pass@1"), unit("legibility/junior_bpb"), unit("drift/kl")
    (' (%)', ' (bits/byte)', '')
    """
    if is_percent(name):
        return " (%)"
    return " (bits/byte)" if name.endswith("_bpb") else ""


def number(x: float | None, name: str, digits: int = 2, signed: bool = False) -> str:
    """One value of metric `name`, scaled; "–" for a missing value."""
    if x is None:
        return "–"
    return f"{x * scale(name):{'+' if signed else ''}.{digits}f}"


def entry_text(entry: dict | None, name: str, digits: int = 2) -> str:
    """ "value [lo, hi]" of a results.json entry.

    >>> entry_text({"value": 0.5, "ci_low": 0.25, "ci_high": 0.75}, "solo/pass@1")
    '50.00 [25.00, 75.00]'
    """
    if entry is None:
        return "–"
    v, lo, hi = (number(entry[k], name, digits) for k in ("value", "ci_low", "ci_high"))
    return f"{v} [{lo}, {hi}]"


def diff_text(entry: dict, name: str, digits: int = 2) -> str:
    """ "+diff [+lo, +hi]" of a paired comparison entry (B - A).

    >>> diff_text({"diff": 0.1, "ci_low": -0.05, "ci_high": 0.2}, "solo/pass@1")
    '+10.00 [-5.00, +20.00]'
    """
    d, lo, hi = (number(entry[k], name, digits, signed=True) for k in ("diff", "ci_low", "ci_high"))
    return f"{d} [{lo}, {hi}]"


def format_summary(res: dict) -> str:
    """Macro metrics as an aligned terminal table (graded by the first grader, named when there are several),
    then each other grader's (results.json `by_grader`)."""
    graders = (res.get("config") or {}).get("graders") or []
    named = f" (grader {graders[0]})" if len(graders) > 1 else ""
    lines = [f"{'metric':36s} macro [95% CI]{named}"]
    for name, e in res["macro"]["metrics"].items():
        lines.append(f"{name + unit(name):36s} {entry_text(e, name, digits=3)}")
    for grader, other in (res.get("by_grader") or {}).items():
        lines.append(f"{'metric':36s} macro [95% CI] (grader {grader})")
        for name, e in other["macro"]["metrics"].items():
            lines.append(f"{name + unit(name):36s} {entry_text(e, name, digits=3)}")
    return "\n".join(lines)


def format_group(summary: dict) -> str:
    """Across-seed macro metrics: value [two-level CI] and each seed's value."""
    lines = [f"{'metric':36s} seeds {summary['seeds']}: mean [95% CI over seeds and problems]   per seed"]
    for name, e in summary["metrics"].items():
        per = " ".join(number(v, name, 3) for v in e["per_seed"].values())
        lines.append(f"{name + unit(name):36s} {entry_text(e, name, digits=3):34s} {per}")
    return "\n".join(lines)

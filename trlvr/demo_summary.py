"""The demo's summary: one table and one picture over the evaluated seniors, plus the HTML report.

Reads DIR/eval/<name>/{results.json,samples.jsonl,per_problem.json}; writes DIR/summary.md,
DIR/summary.json, DIR/summary.png and DIR/report.html (tandem's report with the paired
comparison against grpo). The jargon rate (toy world only) is computed here from the solo
samples, per problem, with the same bootstrap as every other metric.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import numpy as np

# (results.json metric, column title, scale) in table order
COLUMNS = [
    ("solo/pass@1", "solo acc", 100),
    ("handoff/pass@1", "handoff acc", 100),
    ("handoff_ratio/pass@1", "handoff / solo", 1),
    ("legibility/junior_ce", "legibility CE (nats)", 1),
    ("drift/kl", "drift KL (nats)", 1),
    ("jargon_rate", "jargon rate", 100),
]


def jargon_by_problem(samples_path: Path) -> dict[str, float]:
    """problem id -> share of the senior's solo samples written in jargon."""
    from trlvr.eval.runner import load_samples
    from trlvr.toy import is_jargon

    per = defaultdict(list)
    for row in load_samples(samples_path):
        if row["protocol"] == "solo":
            per[str(row["problem_id"])].append(is_jargon(row["text"]))
    return {pid: float(np.mean(v)) for pid, v in per.items()}


def _entry(values: np.ndarray) -> dict:
    from trlvr.eval.stats import bootstrap_ci

    iv = bootstrap_ci(values)
    return {"value": iv.value, "ci_low": iv.lo, "ci_high": iv.hi, "num_problems": int(values.size)}


def collect(out: Path, names: list[str]) -> dict[str, dict]:
    """name -> {metric: {value, ci_low, ci_high}} for the summary columns (macro over benchmarks)."""
    rows = {}
    for name in names:
        run = out / "eval" / name
        metrics = dict(json.loads((run / "results.json").read_text())["macro"]["metrics"])
        jargon = jargon_by_problem(run / "samples.jsonl")
        if jargon:
            metrics["jargon_rate"] = _entry(np.array(list(jargon.values())))
        rows[name] = metrics
        if name == "initial" and "junior/pass@1" in metrics:
            rows["junior (floor)"] = {"solo/pass@1": metrics["junior/pass@1"]}
    return rows


def _cell(m: dict | None, scale: float) -> str:
    if m is None:
        return "–"
    return f"{m['value'] * scale:.2f} [{m['ci_low'] * scale:.2f}, {m['ci_high'] * scale:.2f}]"


def paired_jargon(out: Path, a: str, b: str) -> dict:
    from trlvr.eval.stats import paired_bootstrap

    ja, jb = (
        jargon_by_problem(out / "eval" / a / "samples.jsonl"),
        jargon_by_problem(out / "eval" / b / "samples.jsonl"),
    )
    ids = sorted(set(ja) & set(jb))
    res = paired_bootstrap(np.array([ja[i] for i in ids]), np.array([jb[i] for i in ids]))
    return {"diff": res.diff, "ci_low": res.lo, "ci_high": res.hi, "p_value": res.p_value}


def markdown_table(rows: dict[str, dict]) -> str:
    head = "| senior | " + " | ".join(title for _, title, _ in COLUMNS) + " |"
    sep = "|---|" + "---|" * len(COLUMNS)
    lines = [head, sep]
    for name, metrics in rows.items():
        lines.append(f"| {name} | " + " | ".join(_cell(metrics.get(k), s) for k, _, s in COLUMNS) + " |")
    return "\n".join(lines)


def plot(rows: dict[str, dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [("solo/pass@1", "solo accuracy (%)", 100), ("handoff/pass@1", "step-handoff accuracy (%)", 100),
              ("jargon_rate", "senior jargon rate (%)", 100), ("legibility/junior_ce", "junior CE on senior CoT (nats)", 1)]  # fmt: skip
    names = list(rows)
    colors = {"initial": "#999999", "grpo": "#4c72b0", "tandem": "#dd8452", "junior (floor)": "#55a868"}
    fig, axes = plt.subplots(1, len(panels), figsize=(4 * len(panels), 3.4))
    for ax, (key, title, scale) in zip(axes, panels, strict=True):
        shown = [n for n in names if key in rows[n]]
        vals = [rows[n][key]["value"] * scale for n in shown]
        lo = [v - rows[n][key]["ci_low"] * scale for n, v in zip(shown, vals, strict=True)]
        hi = [rows[n][key]["ci_high"] * scale - v for n, v in zip(shown, vals, strict=True)]
        ax.bar(shown, vals, yerr=[lo, hi], capsize=4, color=[colors.get(n, "#8172b2") for n in shown])
        ax.set_title(title, fontsize=10)
        ax.tick_params(axis="x", labelsize=8, rotation=20)
    fig.suptitle("trlvr toy demo: 95% bootstrap CIs over test problems", fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_summary(out: Path, names: list[str]) -> Path:
    from trlvr.eval.report import write_report

    out = Path(out)
    rows = collect(out, names)
    lines = [
        "# trlvr demo summary",
        "",
        "Toy world, test split; decoding temperature 0.7, top_p 0.8, top_k 20. Each cell: value [95% bootstrap CI",
        "over problems]. Accuracies in %, handoff = senior and junior alternate one step each, senior first;",
        "legibility = the junior's mean per-token cross-entropy on the senior's solo chains of thought;",
        "drift = mean per-token KL(senior || junior) on the same; jargon rate = share of solo samples in jargon.",
        "",
        markdown_table(rows),
        "",
    ]
    summary = {"rows": rows}
    if "grpo" in names and "tandem" in names:
        pj = summary["paired_jargon_tandem_minus_grpo"] = paired_jargon(out, "grpo", "tandem")
        lines += [
            f"Paired tandem - grpo jargon rate: {pj['diff'] * 100:+.1f} points "
            f"[{pj['ci_low'] * 100:+.1f}, {pj['ci_high'] * 100:+.1f}], p = {pj['p_value']:.3f}. "
            "All paired differences: report.html.",
            "",
        ]
        write_report(out / "eval" / "tandem", out / "report.html", compare_dirs=[out / "eval" / "grpo"])
    (out / "summary.json").write_text(json.dumps(summary, indent=2))
    plot(rows, out / "summary.png")
    path = out / "summary.md"
    path.write_text("\n".join(lines))
    print("\n".join(lines))
    return path

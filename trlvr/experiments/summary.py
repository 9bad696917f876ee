"""The demo's summary: one table and one picture over the evaluated seniors, plus the HTML report.

Reads DIR/eval/<name>/{results.json,samples.jsonl}; writes DIR/summary.md, DIR/summary.json,
DIR/summary.png and DIR/report.html (tandem's report with the paired comparison against grpo).
The jargon rate (toy world, `trlvr.toy.jargon`) is bootstrapped over problems here, like every
other metric. This module sits above eval and toy because it needs both; neither knows the other.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from trlvr.eval.format import entry_text, number
from trlvr.eval.stats import bootstrap_ci, paired_bootstrap
from trlvr.eval.store import RESULTS, SAMPLES, read_json, read_samples
from trlvr.toy.jargon import jargon_by_problem

# (results.json metric, column title) in table order; scaling comes from trlvr.eval.format
COLUMNS = [
    ("solo/pass@1", "solo acc (%)"),
    ("handoff/pass@1", "handoff acc (%)"),
    ("handoff_ratio/pass@1", "handoff / solo"),
    ("legibility/junior_ce", "legibility CE (nats)"),
    ("drift/kl", "drift KL (nats)"),
    ("jargon_rate", "jargon rate (%)"),
]


def _jargon(run: Path) -> dict[str, float]:
    return jargon_by_problem(read_samples(run / SAMPLES))


def collect(out: Path, names: list[str]) -> dict[str, dict]:
    """name -> {metric: {value, ci_low, ci_high}} for the summary columns (macro over benchmarks)."""
    rows = {}
    for name in names:
        run = out / "eval" / name
        metrics = dict(read_json(run / RESULTS, "results file")["macro"]["metrics"])
        jargon = _jargon(run)
        if jargon:
            values = np.array(list(jargon.values()))
            iv = bootstrap_ci(values)
            metrics["jargon_rate"] = {
                "value": iv.value,
                "ci_low": iv.lo,
                "ci_high": iv.hi,
                "num_problems": int(values.size),
            }
        rows[name] = metrics
        if name == "initial" and "junior/pass@1" in metrics:
            rows["junior (floor)"] = {"solo/pass@1": metrics["junior/pass@1"]}
    return rows


def paired_jargon(out: Path, a: str, b: str) -> dict:
    """Paired bootstrap of the jargon rate, B - A, over the problems both runs have."""
    ja, jb = _jargon(out / "eval" / a), _jargon(out / "eval" / b)
    ids = sorted(set(ja) & set(jb))
    res = paired_bootstrap(np.array([ja[i] for i in ids]), np.array([jb[i] for i in ids]))
    return {"diff": res.diff, "ci_low": res.lo, "ci_high": res.hi, "p_value": res.p_value}


def markdown_table(rows: dict[str, dict]) -> str:
    head = "| senior | " + " | ".join(title for _, title in COLUMNS) + " |"
    lines = [head, "|---|" + "---|" * len(COLUMNS)]
    for name, metrics in rows.items():
        lines.append(f"| {name} | " + " | ".join(entry_text(metrics.get(k), k) for k, _ in COLUMNS) + " |")
    return "\n".join(lines)


def plot(rows: dict[str, dict], path: Path, title: str = "trlvr toy demo: 95% bootstrap CIs over test problems") -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from trlvr.eval.format import scale

    panels = [("solo/pass@1", "solo accuracy (%)"), ("handoff/pass@1", "step-handoff accuracy (%)"),
              ("jargon_rate", "senior jargon rate (%)"), ("legibility/junior_ce", "junior CE on senior CoT (nats)")]  # fmt: skip
    names = list(rows)
    colors = {"initial": "#999999", "grpo": "#4c72b0", "tandem": "#dd8452", "junior (floor)": "#55a868"}
    fig, axes = plt.subplots(1, len(panels), figsize=(4 * len(panels), 3.4))
    for ax, (key, panel_title) in zip(axes, panels, strict=True):
        s = scale(key)
        shown = [n for n in names if key in rows[n]]
        vals = [rows[n][key]["value"] * s for n in shown]
        lo = [v - rows[n][key]["ci_low"] * s for n, v in zip(shown, vals, strict=True)]
        hi = [rows[n][key]["ci_high"] * s - v for n, v in zip(shown, vals, strict=True)]
        ax.bar(shown, vals, yerr=[lo, hi], capsize=4, color=[colors.get(n, "#8172b2") for n in shown])
        ax.set_title(panel_title, fontsize=10)
        ax.tick_params(axis="x", labelsize=8, rotation=20)
    fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_summary(out: Path, names: list[str]) -> Path:
    """Write summary.md/.json/.png (and report.html when grpo and tandem were both evaluated)."""
    from trlvr.eval.report import write_report

    out = Path(out)
    rows = collect(out, names)
    lines = [
        "# trlvr demo summary",
        "",
        "Toy world, test split; decoding temperature 0.7, top_p 0.8, top_k 20. Each cell: value [95% bootstrap CI",
        "over problems]. Accuracies in %, handoff = senior and junior alternate one step each, senior first",
        "(a round = one senior step + one junior step); legibility = the junior's mean per-token cross-entropy",
        "on the text of the senior's solo chains of thought (final EOS excluded); drift = mean per-token",
        "KL(senior || junior) on the same; jargon rate = share of solo samples in jargon.",
        "",
        markdown_table(rows),
        "",
    ]
    summary = {"rows": rows}
    if "grpo" in names and "tandem" in names:
        pj = summary["paired_jargon_tandem_minus_grpo"] = paired_jargon(out, "grpo", "tandem")
        d, lo, hi = (number(pj[k], "jargon_rate", 1, signed=True) for k in ("diff", "ci_low", "ci_high"))
        lines += [
            f"Paired tandem - grpo jargon rate: {d} points [{lo}, {hi}], p = {pj['p_value']:.3f}. "
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


# ---- the seed study: eval/<arm>/seed-<s>/ groups ---------------------------------------------------

SEED_COLUMNS = [c for c in COLUMNS if c[0] != "jargon_rate"]


def _group_jargon(group: Path) -> dict[int, dict[str, float]]:
    from trlvr.eval.groups import seed_dirs

    return {s: _jargon(d) for s, d in seed_dirs(group).items()}


def _aligned(per_seed: dict[int, dict[str, float]], seeds: list[int], ids: list[str]) -> list[list[np.ndarray]]:
    return [[np.array([per_seed[s][i] for i in ids])] for s in seeds]


def write_seed_summary(out: Path, arms: tuple[str, ...] = ("grpo", "tandem")) -> Path:
    """summary.md/.json/.png and report.html of a seed study: each arm's across-seed metrics (two-level
    bootstrap over seeds and problems) and the paired tandem - grpo differences, jargon rate included."""
    from trlvr.eval.groups import compare_groups, load_tables, write_group_summary
    from trlvr.eval.hierarchical import paired_seed_bootstrap, seed_bootstrap_ci
    from trlvr.experiments.multi_report import write_multi_report

    out = Path(out)
    groups = {arm: out / "eval" / arm for arm in arms}
    rows, jargon = {}, {}
    for arm, g in groups.items():
        rows[arm] = dict(write_group_summary(g)["metrics"])
        jargon[arm] = _group_jargon(g)
    seeds = sorted(set.intersection(*(set(j) for j in jargon.values())))
    ids = sorted(set.intersection(*(set(j[s]) for j in jargon.values() for s in seeds)))
    for arm in arms:
        iv = seed_bootstrap_ci(_aligned(jargon[arm], seeds, ids))
        rows[arm]["jargon_rate"] = {"value": iv.value, "ci_low": iv.lo, "ci_high": iv.hi,
                                    "per_seed": {str(s): float(np.mean(list(jargon[arm][s].values()))) for s in seeds}}  # fmt: skip
    a, b = arms
    cmp = compare_groups(load_tables(groups[a]), load_tables(groups[b]))["macro"]
    pj = paired_seed_bootstrap(_aligned(jargon[a], seeds, ids), _aligned(jargon[b], seeds, ids))
    cmp["jargon_rate"] = {"a": pj.a, "b": pj.b, "diff": pj.diff, "ci_low": pj.lo, "ci_high": pj.hi,
                          "p_value": pj.p_value, "excludes_zero": bool(pj.excludes_zero)}  # fmt: skip
    lines = [
        f"# trlvr demo: seed study (seeds {seeds})",
        "",
        "Toy world, test split; checkpoints selected on 200 held-out training problems by handoff pass@1.",
        "Each cell: mean over seeds [95% CI, two-level bootstrap: seeds, then problems]. Definitions as in",
        "the one-seed summary.",
        "",
        markdown_table(rows),
        "",
        f"Paired {b} - {a} (by seed and problem, two-level bootstrap):",
        "",
        "| metric | difference [95% CI] | p | CI excludes 0 |",
        "|---|---|---|---|",
    ]
    from trlvr.eval.format import diff_text

    for name, _title in COLUMNS:
        if name in cmp:
            e = cmp[name]
            lines.append(f"| {name} | {diff_text(e, name)} | {e['p_value']:.3f} | {'yes' if e['excludes_zero'] else 'no'} |")
    per_seed = [f"| {arm} | " + " | ".join(
        ", ".join(number(v, k) for v in rows[arm][k].get("per_seed", {}).values()) for k, _ in COLUMNS if k in rows[arm])
        + " |" for arm in arms]  # fmt: skip
    lines += ["", "Per seed (seed order " + ", ".join(map(str, seeds)) + "):", "",
              "| arm | " + " | ".join(t for k, t in COLUMNS if k in rows[arms[0]]) + " |",
              "|---|" + "---|" * sum(k in rows[arms[0]] for k, _ in COLUMNS), *per_seed, ""]  # fmt: skip
    (out / "summary.json").write_text(json.dumps({"seeds": seeds, "rows": rows, "paired": cmp}, indent=2))
    plot(rows, out / "summary.png", f"trlvr toy demo, seeds {seeds}: mean over seeds, 95% CIs (two-level bootstrap: seeds, then test problems)")
    write_multi_report([groups[a], groups[b]], out / "report.html", baseline=groups[a])
    path = out / "summary.md"
    path.write_text("\n".join(lines))
    return path

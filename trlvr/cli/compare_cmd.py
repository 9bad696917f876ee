"""`trlvr compare DIR_A DIR_B`: paired bootstrap B - A over shared problems for every metric.

    trlvr compare runs/grpo/eval runs/tandem/eval --out runs/compare

Prints a table, writes OUT/compare.json and OUT/report.html (OUT defaults to DIR_B/compare).
"""

from __future__ import annotations

import argparse


def make_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser("compare", help="paired bootstrap comparison of two evaluation directories")
    p.add_argument("dir_a", help="baseline evaluation directory (A)")
    p.add_argument("dir_b", help="evaluation directory compared against A (B); differences are B - A")
    p.add_argument("--out", default=None, help="output directory (default: DIR_B/compare)")
    p.add_argument("--resamples", type=int, default=2000, help="bootstrap resamples")
    p.add_argument("--seed", type=int, default=0)
    return p


def format_table(cmp: dict) -> str:
    lines = [f"{'scope':12s} {'metric':30s} {'A':>9s} {'B':>9s} {'B-A':>9s} {'95% CI':>22s} {'p':>6s}  sig"]
    for scope, metrics in [("macro", cmp["macro"])] + list(cmp["benchmarks"].items()):
        for name, e in metrics.items():
            s = 100.0 if "pass@" in name or name.endswith("share") else 1.0
            lines.append(
                f"{scope[:12]:12s} {name[:30]:30s} {e['a'] * s:9.3f} {e['b'] * s:9.3f} {e['diff'] * s:+9.3f} "
                f"[{e['ci_low'] * s:+9.3f}, {e['ci_high'] * s:+9.3f}] {e['p_value']:6.3f}  "
                f"{'*' if e['excludes_zero'] else ''}"
            )
    if cmp.get("skipped"):
        lines.append(f"metrics in only one run (skipped): {', '.join(cmp['skipped'])}")
    return "\n".join(lines)


def main(args) -> int:
    import json
    from pathlib import Path

    from trlvr.eval.aggregate import compare_tables
    from trlvr.eval.report import comparison_table, load_results, load_table, page

    try:
        for d in (args.dir_a, args.dir_b):
            load_results(d)
        cmp = compare_tables(
            load_table(args.dir_a), load_table(args.dir_b), num_resamples=args.resamples, seed=args.seed
        )
    except (FileNotFoundError, ValueError) as e:
        print(f"trlvr compare: {e}")
        return 2
    out = Path(args.out) if args.out else Path(args.dir_b) / "compare"
    out.mkdir(parents=True, exist_ok=True)
    (out / "compare.json").write_text(json.dumps({"a": args.dir_a, "b": args.dir_b, **cmp}, indent=2))
    body = (
        f"<h1>Paired comparison</h1><p>B &minus; A over shared problems; 95% percentile bootstrap CI "
        f"({args.resamples} resamples); p = two-sided bootstrap p-value.</p>"
        + comparison_table(cmp, args.dir_a, args.dir_b)
    )
    (out / "report.html").write_text(page("trlvr comparison", body), encoding="utf-8")
    print(format_table(cmp))
    print(f"wrote {out}/report.html and {out}/compare.json")
    return 0

"""`trlvr compare DIR_A DIR_B`: paired bootstrap B - A over shared problems for every metric.

    trlvr compare runs/grpo/eval runs/tandem/eval --out runs/compare
    trlvr compare runs/eval-grpo runs/eval-tandem      # seed groups (OUT/seed-<s>/ from `trlvr eval --seeds`)

Two seed groups are paired by seed and problem, with the two-level (seeds, then problems) bootstrap.
Only evaluations made alike are paired: settings that change the numbers (token budget, decoding,
grading, n, seed, seeds, protocol settings, the junior; `trlvr.eval.comparable`) must agree, or
the comparison is refused naming each difference; `--allow-mismatch` pairs them anyway and prints
the differences as a warning with the table (and in compare.json and report.html).

Prints a table, writes OUT/compare.json and OUT/report.html (OUT defaults to DIR_B/compare).
"""

from __future__ import annotations

import argparse


def make_parser(subparsers) -> argparse.ArgumentParser:
    from trlvr.eval.defaults import MAX_RESAMPLES
    from trlvr.kinds import OUT_DIR, SEED, TEXT, count

    p = subparsers.add_parser("compare", help="paired bootstrap comparison of two evaluation directories")
    p.add_argument("dir_a", type=TEXT, help="baseline evaluation directory (A)")
    p.add_argument("dir_b", type=TEXT, help="evaluation directory compared against A (B); differences are B - A")
    p.add_argument("--out", type=OUT_DIR, default=None, help="output directory (default: DIR_B/compare)")
    p.add_argument("--resamples", type=count(MAX_RESAMPLES), default=2000, help="bootstrap resamples")
    p.add_argument("--seed", type=SEED, default=0)
    p.add_argument("--allow-mismatch", action="store_true",
                   help="pair evaluations whose settings differ, with a warning naming the differences")
    return p


def format_table(cmp: dict) -> str:
    from trlvr.eval.format import diff_text, number, unit

    lines = [f"{'scope':12s} {'metric':34s} {'A':>9s} {'B':>9s}  {'B-A [95% CI]':32s} {'p':>6s}  sig"]
    for scope, metrics in [("macro", cmp["macro"])] + list(cmp["benchmarks"].items()):
        for name, e in metrics.items():
            label = (name + unit(name))[:34]
            lines.append(
                f"{scope[:12]:12s} {label:34s} {number(e['a'], name, 3):>9s} {number(e['b'], name, 3):>9s}  "
                f"{diff_text(e, name, 3):32s} {e['p_value']:6.3f}  {'*' if e['excludes_zero'] else ''}"
            )
    if cmp.get("skipped"):
        lines.append(f"metrics in only one run (skipped): {', '.join(cmp['skipped'])}")
    if cmp.get("mismatch"):
        from trlvr.eval.comparable import warning_text

        lines.append("WARNING: " + warning_text(cmp["mismatch"]))
    return "\n".join(lines)


def main(args) -> int:
    from pathlib import Path

    from trlvr import rundir

    out = Path(args.out) if args.out else Path(args.dir_b) / "compare"
    rundir.prepare_output(out, rundir.COMPARISON, flag="--out")  # never into a run, an evaluation, a study
    rundir.check_unlocked(out, "trlvr compare", "--out")  # a second compare into --out: refused at once
    return _compare(args, out)


def _compare(args, out) -> int:
    import json

    from trlvr import rundir
    from trlvr.errors import UserError
    from trlvr.eval.aggregate import compare_tables
    from trlvr.eval.comparable import check_comparable
    from trlvr.eval.groups import compare_groups, is_group, load_tables
    from trlvr.eval.report import comparison_view, load_results, load_table, render

    groups = [is_group(d) for d in (args.dir_a, args.dir_b)]
    if any(groups) and not all(groups):
        raise UserError("compare: one directory is a seed group and the other a single evaluation; compare like with like")
    if not any(groups):
        for d in (args.dir_a, args.dir_b):
            load_results(d)
    mismatch = check_comparable(args.dir_a, args.dir_b, allow_mismatch=args.allow_mismatch)
    if all(groups):
        cmp = compare_groups(
            load_tables(args.dir_a), load_tables(args.dir_b), num_resamples=args.resamples, seed=args.seed
        )
    else:
        cmp = compare_tables(
            load_table(args.dir_a), load_table(args.dir_b), num_resamples=args.resamples, seed=args.seed
        )
    cmp = {**cmp, "mismatch": mismatch}
    intro = (
        f"B − A over shared problems; 95% percentile bootstrap CI ({args.resamples} resamples); "
        "p = two-sided bootstrap p-value."
    )
    view = comparison_view(cmp, args.dir_a, args.dir_b, f"B = {args.dir_b} vs A = {args.dir_a}")
    with rundir.lock(out, by="trlvr compare"):  # its two files written under the folder's lock
        rundir.write_file(out / rundir.COMPARE_FILE, json.dumps({"a": args.dir_a, "b": args.dir_b, **cmp}, indent=2))
        rundir.write_file(out / "report.html", render("Paired comparison", [], [view], intro=intro))
    print(format_table(cmp))
    print(f"wrote {out}/report.html and {out}/{rundir.COMPARE_FILE}")
    return 0

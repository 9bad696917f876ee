"""`trlvr compare DIR_A DIR_B`: paired bootstrap B - A over shared problems for every metric.

    trlvr compare runs/grpo/eval runs/tandem/eval --out runs/compare
    trlvr compare runs/eval-grpo runs/eval-tandem      # seed groups (OUT/seed-<s>/ from `trlvr eval --seeds`)
    trlvr compare A B --benchmarks amc23_25,aime24_26,minerva   # the macro over the paper era's three sets

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
    p.add_argument(
        "dir_b", type=TEXT, help="evaluation directory compared against A (B); differences are B - A"
    )
    p.add_argument("--out", type=OUT_DIR, default=None, help="output directory (default: DIR_B/compare)")
    p.add_argument("--resamples", type=count(MAX_RESAMPLES), default=2000, help="bootstrap resamples")
    p.add_argument("--seed", type=SEED, default=0)
    p.add_argument(
        "--benchmarks",
        type=TEXT,
        default=None,
        metavar="NAMES",
        help="compare only these benchmarks, comma-separated: the macro is their mean (e.g. the paper "
        "era's amc23_25,aime24_26,minerva; default: every benchmark both have)",
    )
    p.add_argument(
        "--allow-mismatch",
        action="store_true",
        help="pair evaluations whose settings differ, with a warning naming the differences",
    )
    return p


def format_table(cmp: dict) -> str:
    from trlvr.eval.format import diff_text, number, unit

    scopes = [("macro", cmp["macro"])] + list(cmp["benchmarks"].items())
    # a metric under another grader ("solo/pass@1 (grader authors)") is named whole, never cut
    width = max([34] + [len(name + unit(name)) for _, metrics in scopes for name in metrics])
    lines = [f"{'scope':12s} {'metric':{width}s} {'A':>9s} {'B':>9s}  {'B-A [95% CI]':32s} {'p':>6s}  sig"]
    for scope, metrics in scopes:
        for name, e in metrics.items():
            label = name + unit(name)
            lines.append(
                f"{scope[:12]:12s} {label:{width}s} {number(e['a'], name, 3):>9s} "
                f"{number(e['b'], name, 3):>9s}  {diff_text(e, name, 3):32s} {e['p_value']:6.3f}  "
                f"{'*' if e['excludes_zero'] else ''}"
            )
    if cmp.get("skipped"):
        lines.append(f"metrics in only one run (skipped): {', '.join(cmp['skipped'])}")
    if cmp.get("mismatch"):
        from trlvr.eval.comparable import warning_text

        lines.append("WARNING: " + warning_text(cmp["mismatch"]))
    return "\n".join(lines)


def only_benchmarks(tables: list[dict], spec: str | None) -> list[dict]:
    """Each per-problem table cut to the benchmarks `spec` names (None: unchanged); a name no table has, or
    an empty list, is one line naming --benchmarks."""
    from trlvr.errors import UserError

    if spec is None:
        return tables
    names = [n.strip() for n in spec.split(",") if n.strip()]
    if not names:
        raise UserError("--benchmarks is empty; expected comma-separated benchmark names")
    have = set.intersection(*(set(t) for t in tables))
    missing = [n for n in names if n not in have]
    if missing:
        raise UserError(
            f"--benchmarks: {missing[0]!r} is not a benchmark both evaluations have "
            f"(they share: {', '.join(sorted(have)) or 'none'})"
        )
    return [{n: t[n] for n in names} for t in tables]


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
        raise UserError(
            "compare: one directory is a seed group and the other a single evaluation; compare like with like"
        )
    if not any(groups):
        for d in (args.dir_a, args.dir_b):
            load_results(d)
    mismatch = check_comparable(args.dir_a, args.dir_b, allow_mismatch=args.allow_mismatch)
    if all(groups):
        ga, gb = load_tables(args.dir_a), load_tables(args.dir_b)
        cut = only_benchmarks([*ga.values(), *gb.values()], args.benchmarks)
        ga, gb = dict(zip(ga, cut[: len(ga)], strict=True)), dict(zip(gb, cut[len(ga) :], strict=True))
        cmp = compare_groups(ga, gb, num_resamples=args.resamples, seed=args.seed)
    else:
        ta, tb = only_benchmarks([load_table(args.dir_a), load_table(args.dir_b)], args.benchmarks)
        cmp = compare_tables(ta, tb, num_resamples=args.resamples, seed=args.seed)
    cmp = {**cmp, "mismatch": mismatch}
    intro = (
        f"B − A over shared problems; 95% percentile bootstrap CI ({args.resamples} resamples); "
        "p = two-sided bootstrap p-value."
    )
    view = comparison_view(cmp, args.dir_a, args.dir_b, f"B = {args.dir_b} vs A = {args.dir_a}")
    with rundir.lock(out, by="trlvr compare"):  # its two files written under the folder's lock
        rundir.write_file(
            out / rundir.COMPARE_FILE, json.dumps({"a": args.dir_a, "b": args.dir_b, **cmp}, indent=2)
        )
        rundir.write_file(out / "report.html", render("Paired comparison", [], [view], intro=intro))
    print(format_table(cmp))
    print(f"wrote {out}/report.html and {out}/{rundir.COMPARE_FILE}")
    return 0

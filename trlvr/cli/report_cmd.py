"""`trlvr report DIR [--compare OTHER ...]`: a self-contained HTML report of an evaluation directory.

    trlvr report runs/tandem/eval --compare runs/grpo/eval

Writes DIR/report.html (or --out): metrics with CIs, pass@k and dose curves, legibility and drift
bars, paired comparisons, and a rollout viewer. Opens offline. Reads the directory's files and
never changes them (a torn last line of samples.jsonl is skipped, not cut).
"""

from __future__ import annotations

import argparse


def make_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser("report", help="HTML report of an evaluation directory")
    p.add_argument("dir", help="evaluation directory (has results.json, per_problem.json, samples.jsonl)")
    p.add_argument(
        "--compare", nargs="*", default=[], help="other evaluation directories (A) to compare with"
    )
    p.add_argument("--out", default=None, help="output HTML path (default: DIR/report.html)")
    p.add_argument("--max-problems", type=int, default=12, help="problems shown in the rollout viewer")
    return p


def main(args) -> int:
    from trlvr.eval.report import write_report

    path = write_report(args.dir, args.out, args.compare, max_problems=args.max_problems)
    print(f"wrote {path}")
    return 0

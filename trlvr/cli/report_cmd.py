"""`trlvr report DIR [DIR ...] [--baseline DIR]`: a self-contained HTML report.

    trlvr report runs/tandem/eval --compare runs/grpo/eval          # one run, paired against another
    trlvr report runs/eval-grpo runs/eval-tandem runs/eval-kl --baseline runs/eval-grpo   # many runs

One directory: DIR/report.html (or --out) with metrics and CIs, pass@k and dose curves,
legibility and drift, paired comparisons (--compare) and a rollout viewer. Several directories
(evaluations or seed groups from `trlvr eval --seeds`; default file: report-<names>-<hash>.html next to
the first, a name of its own for each set, so the report of another pair never replaces it): the headline
table, overlaid plots and training curves, paired differences against --baseline (default: the first), and the
same problems side by side. Reads the directories and never changes them. Runs are paired only when
they were evaluated alike (`trlvr.eval.comparable`); `--allow-mismatch` pairs them with a warning.
"""

from __future__ import annotations

import argparse
from pathlib import Path


def make_parser(subparsers) -> argparse.ArgumentParser:
    from trlvr.kinds import NONNEG, OUT_FILE, TEXT

    p = subparsers.add_parser("report", help="HTML report of one or several evaluation directories")
    p.add_argument("dirs", nargs="+", type=TEXT, help="evaluation directories or seed groups")
    p.add_argument(
        "--compare",
        nargs="*",
        type=TEXT,
        default=[],
        help="(one run) other evaluation directories (A) to compare with",
    )
    p.add_argument(
        "--baseline", type=TEXT, default=None, help="(several runs) the run the others are compared with"
    )
    p.add_argument(
        "--out",
        type=OUT_FILE,
        default=None,
        help=(
            "output HTML (default: DIR/report.html; several: report-<names>-<hash>.html next to the first, "
            "its own name for each set of directories)"
        ),
    )
    p.add_argument("--max-problems", type=NONNEG, default=12, help="problems shown in the rollout viewer")
    p.add_argument(
        "--allow-mismatch",
        action="store_true",
        help="pair evaluations whose settings differ (budget, decoding, grading, n, seeds, ...) with a "
        "warning above the table; by default they are refused",
    )
    return p


def several_out(dirs) -> Path:
    """The default file of a report of several directories: next to the first, named for them all (their
    names and a hash of their real paths, in order), so a report of another set never replaces it."""
    import hashlib

    real = [Path(d).resolve() for d in dirs]
    digest = hashlib.sha256("\0".join(map(str, real)).encode()).hexdigest()[:8]
    names = "+".join(p.name for p in real)
    return real[0].parent / f"report-{names[:60]}-{digest}.html"


def main(args) -> int:
    from trlvr.errors import UserError
    from trlvr.eval.groups import is_group

    if len(args.dirs) == 1 and not is_group(args.dirs[0]):
        if args.baseline:
            raise UserError("report: --baseline needs several runs")
        from trlvr.eval.report import write_report

        path = write_report(
            args.dirs[0],
            args.out,
            args.compare,
            max_problems=args.max_problems,
            allow_mismatch=args.allow_mismatch,
        )
    else:
        if args.compare:
            raise UserError("report: with several runs use --baseline, not --compare")
        from trlvr.experiments.multi_report import write_multi_report

        if len(args.dirs) == 1:
            raise UserError("report: a seed group alone has no baseline; pass it with another run")
        out = args.out or several_out(args.dirs)
        path = write_multi_report(
            args.dirs, out, args.baseline, max_problems=args.max_problems, allow_mismatch=args.allow_mismatch
        )
    print(f"wrote {path}")
    return 0

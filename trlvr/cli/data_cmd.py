"""`trlvr data check SOURCE`: count usable rows of a dataset and show the first bad ones.

    trlvr data check /work/shared/data/gsm8k-test.jsonl
    trlvr data check problems.parquet --problem-field question --answer-field final

Exit code 0 when every row is usable, 1 when some are not, 2 when the source cannot be read.
"""

from __future__ import annotations

import argparse
import sys


def make_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser("data", help="inspect problem datasets")
    sub = p.add_subparsers(dest="data_command", required=True)
    c = sub.add_parser("check", help="count usable rows; list the first unusable ones (row, field, reason)")
    c.add_argument(
        "source", help="local .jsonl/.json/.parquet, hub dataset name, or reasoning-gym:TASK?size=N&seed=S"
    )
    c.add_argument("--split", default=None, help="split for hub datasets (default: the schema's)")
    c.add_argument("--schema", default=None, help="built-in schema name (default: detected)")
    c.add_argument("--problem-field", default=None, help="column holding the problem text")
    c.add_argument("--answer-field", default=None, help="column holding the gold answer")
    c.add_argument("--limit", type=int, default=None, help="check only the first N rows")
    c.add_argument("--show", type=int, default=10, help="offending rows to print")
    return p


def main(args: argparse.Namespace) -> int:
    from trlvr.data import DataError, check_source

    try:
        report = check_source(
            args.source,
            split=args.split,
            schema=args.schema,
            problem_field=args.problem_field,
            answer_field=args.answer_field,
            limit=args.limit,
            show=args.show,
        )
    except DataError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(report.format())
    return 1 if report.n_bad else 0

"""`trlvr data check SOURCE`: count usable rows of a dataset, show the first bad ones and duplicates.

    trlvr data check /work/shared/data/gsm8k-test.jsonl
    trlvr data check problems.parquet --problem-field question --answer-field final

Golds are parsed with math-verify here (the data package imports no grader; `--no-math-verify`
skips it). A gold whose reading changes once its Unicode forms are normalised (a thin space in
``1 234``, a fraction slash, a middle dot; see ``trlvr.rewards.mathtext``) gets one line naming the file,
row and field: it stays usable, graded by its normalised reading. Exit code 0 when every row is usable
and nothing is duplicated, 1 when some rows are
bad or duplicated, 2 when the source cannot be read at all (a UserError, printed by trlvr.cli.main).
"""

from __future__ import annotations

import argparse


def make_parser(subparsers) -> argparse.ArgumentParser:
    from trlvr.kinds import COUNT, NONNEG, TEXT

    p = subparsers.add_parser("data", help="inspect problem datasets")
    sub = p.add_subparsers(dest="data_command", required=True)
    c = sub.add_parser(
        "check", help="count usable rows; list the first unusable ones (row, field, reason) and duplicates"
    )
    c.add_argument(
        "source",
        type=TEXT,
        help="local .jsonl/.json/.parquet, hub dataset name, or reasoning-gym:TASK?size=N&seed=S",
    )
    c.add_argument("--split", type=TEXT, default=None, help="split for hub datasets (default: the schema's)")
    c.add_argument("--schema", type=TEXT, default=None, help="built-in schema name (default: detected)")
    c.add_argument("--problem-field", type=TEXT, default=None, help="column holding the problem text")
    c.add_argument("--answer-field", type=TEXT, default=None, help="column holding the gold answer")
    c.add_argument("--limit", type=COUNT, default=None, help="check only the first N rows")
    c.add_argument("--show", type=NONNEG, default=10, help="offending rows and duplicates to print")
    c.add_argument(
        "--no-math-verify",
        action="store_true",
        help="skip parsing golds with math-verify (structural checks only)",
    )
    b = sub.add_parser(
        "build-evals",
        help="build the paper's evaluation panels (AMC 2023-2025, AIME 2024-2026, Minerva, OlympiadBench) "
        "from "
        "their hub sources as the authors do; check each set's row count and gold checksum",
    )
    b.add_argument(
        "--out",
        type=TEXT,
        default=None,
        help="folder for NAME.jsonl (default: $TRLVR_PAPER_EVALS or ~/.cache/trlvr/paper-evals, where "
        "`paper:NAME` sources are read from)",
    )
    b.add_argument(
        "--sets",
        type=TEXT,
        default=None,
        help="comma-separated panels (default: amc23_25,aime24_26,minerva,olympiad)",
    )
    b.add_argument(
        "--olympiad-src",
        type=TEXT,
        default=None,
        help="the authors' data/eval/olympiad/test.parquet (their OlympiadBench source is private)",
    )
    return p


def build_evals(args: argparse.Namespace) -> int:
    from trlvr.data import evalsets as E

    names = tuple(s.strip() for s in args.sets.split(",") if s.strip()) if args.sets else E.PAPER_PANELS
    out = args.out or E.panels_dir()
    digests = E.build(out, names, olympiad_src=args.olympiad_src)
    for name, digest in digests.items():
        panel = E.PANELS[name]
        state = (
            "matches the recorded checksum" if panel.gold_sha256 else "no checksum recorded yet: compare it"
        )
        print(f"{name}: {panel.rows} rows ({panel.label}), gold sha256 {digest} ({state})")
    print(
        f"wrote {len(digests)} panel(s) to {out}; evaluate them as "
        + ",".join(f"{n}=paper:{n}" for n in digests)
    )
    return 0


def main(args: argparse.Namespace) -> int:
    if args.data_command == "build-evals":
        return build_evals(args)
    from trlvr.data import check_source
    from trlvr.rewards import check_golds, gold_reading_changes

    report = check_source(
        args.source,
        split=args.split,
        schema=args.schema,
        problem_field=args.problem_field,
        answer_field=args.answer_field,
        limit=args.limit,
        show=args.show,
        check_gold=None if args.no_math_verify else check_golds,
        note_gold=None if args.no_math_verify else gold_reading_changes,
    )
    print(report.format(show=args.show))
    return 0 if report.clean else 1

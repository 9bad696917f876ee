"""`trlvr` command line: dispatch only. Each command lives in its own module with
`make_parser(subparsers)` and `main(args) -> int`, imported lazily so `trlvr --help` is fast."""

from __future__ import annotations

import argparse
import importlib
import sys

# command name -> module under trlvr.cli
COMMANDS = {
    "train": "train_cmd",
    "eval": "eval_cmd",
    "compare": "compare_cmd",
    "report": "report_cmd",
    "demo": "demo_cmd",
    "toy": "toy_cmd",
    "data": "data_cmd",
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="trlvr", description="Tandem RLVR: train and evaluate tandem seniors.")
    sub = parser.add_subparsers(dest="command", required=True)
    for module in COMMANDS.values():
        importlib.import_module(f"trlvr.cli.{module}").make_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = build_parser()
    args = parser.parse_args(argv)
    return int(importlib.import_module(f"trlvr.cli.{COMMANDS[args.command]}").main(args) or 0)


if __name__ == "__main__":
    sys.exit(main())

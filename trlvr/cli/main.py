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
    "select": "select_cmd",
    "study": "study_cmd",
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="trlvr", description="Tandem RLVR: train and evaluate tandem seniors.")
    sub = parser.add_subparsers(dest="command", required=True)
    for module in COMMANDS.values():
        importlib.import_module(f"trlvr.cli.{module}").make_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run one command. A `UserError` (bad file, row, key, path, setting) is one line on stderr and
    exit code 2; `--debug` (anywhere on the command line) keeps the traceback."""
    from trlvr.errors import EXIT_BAD_INPUT, UserError

    argv = sys.argv[1:] if argv is None else list(argv)
    debug = "--debug" in argv
    argv = [a for a in argv if a != "--debug"]
    if argv[:1] == ["train"]:  # `train` hands its arguments to TRL's own parser (trlvr.config)
        args = argparse.Namespace(command="train", rest=argv[1:])
    else:
        args = build_parser().parse_args(argv)
    try:
        return int(importlib.import_module(f"trlvr.cli.{COMMANDS[args.command]}").main(args) or 0)
    except UserError as e:
        if debug:
            raise
        print(f"trlvr {args.command}: error: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT


if __name__ == "__main__":
    sys.exit(main())

"""`trlvr demo --out DIR [--fresh]`: the whole pipeline on the embedded toy world, on a CPU.

trlvr demo --out runs/demo             # re-running skips finished stages
trlvr demo --out runs/demo --fresh     # start over
"""

from __future__ import annotations

import argparse


def make_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "demo", help="toy world -> grpo and tandem seniors -> evaluation -> report (CPU, minutes)",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
    )  # fmt: skip
    p.add_argument("--out", default="runs/demo", help="output directory (default: runs/demo)")
    p.add_argument("--fresh", action="store_true", help="delete DIR first and start over")
    p.add_argument(
        "--steps", type=int, default=None, help="training steps per arm (default: the toy configs')"
    )
    p.add_argument("--limit", type=int, default=200, help="test problems to evaluate (default: 200)")
    p.add_argument("--n", type=int, default=4, help="samples per problem and protocol (default: 4)")
    return p


def main(args) -> int:
    from trlvr.demo import run_demo

    run_demo(args.out, fresh=args.fresh, steps=args.steps, limit=args.limit, n=args.n)
    return 0

"""`trlvr demo --out DIR [--fresh] [--seeds 0,1,2]`: the whole pipeline on the embedded toy world, on a CPU.

trlvr demo --out runs/demo                          # one seed; re-running skips finished stages
trlvr demo --out runs/demo-seeds --seeds 0,1,2      # the seed study, across-seed CIs
trlvr demo --out runs/demo --fresh                  # start over (the earlier demo: runs/demo/replaced-<time>/)
trlvr demo --out runs/demo-compact --jargon compact # spaceless GSM8K-like jargon (the world is retrained)
trlvr demo --out runs/demo-lora --lora              # LoRA seniors instead of full fine-tuning
"""

from __future__ import annotations

import argparse


def make_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "demo", help="toy world -> grpo and tandem seniors -> evaluation -> report (CPU, minutes)",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
    )  # fmt: skip
    p.add_argument("--out", default="runs/demo", help="output directory (default: runs/demo)")
    p.add_argument("--fresh", action="store_true", help="start over: move what DIR holds into DIR/replaced-<time>/ (nothing is deleted)")
    p.add_argument(
        "--steps", type=int, default=None, help="training steps per arm (default: 100, trlvr.demo.DEMO_STEPS)"
    )
    p.add_argument("--limit", type=int, default=200, help="test problems to evaluate (default: 200)")
    p.add_argument("--n", type=int, default=4, help="samples per problem and protocol (default: 4)")
    p.add_argument("--seeds", default=None, help="comma-separated training seeds (default: one run, seed 0)")
    p.add_argument("--jargon", choices=("spaced", "compact"), default="spaced",
                   help="the toy world's jargon: spaced <<7 +5 =12>> (shipped) or compact <<7+5=12>> (retrains the world)")
    p.add_argument("--lora", action="store_true", help="train LoRA adapters (rank 16) instead of all weights")
    return p


def main(args) -> int:
    from trlvr.demo import run_demo
    from trlvr.errors import UserError

    seeds = None
    if args.seeds:
        try:
            seeds = [int(x) for x in args.seeds.split(",") if x.strip()]
        except ValueError:
            raise UserError(f"--seeds: expected comma-separated integers, got {args.seeds!r}") from None
    run_demo(args.out, fresh=args.fresh, steps=args.steps, limit=args.limit, n=args.n, seeds=seeds,
             jargon=args.jargon, lora=args.lora)
    return 0

"""`trlvr toy prepare --out DIR [--seed 0] [--from-scratch]`: the toy arithmetic world.

Heavy imports (torch, transformers) happen inside `main`, so `trlvr --help` stays fast.
"""

from __future__ import annotations

import argparse
import json


def make_parser(subparsers) -> argparse.ArgumentParser:
    from trlvr.kinds import OUT_DIR, SEED

    p = subparsers.add_parser("toy", help="toy arithmetic world: a jargon-writing senior and a plain junior")
    sub = p.add_subparsers(dest="toy_command", required=True)
    prep = sub.add_parser(
        "prepare",
        help="write DIR/senior, DIR/junior, DIR/data/{train,test}.jsonl and DIR/card.json",
        description=(
            "Prepare the toy world. By default the shipped checkpoints (trlvr/toy/assets) are copied and "
            "only the data and the card are computed; --from-scratch retrains tokenizer and models "
            "(about 5 minutes on 2 idle CPU cores). An existing complete DIR is reused."
        ),
    )
    prep.add_argument("--out", required=True, type=OUT_DIR, help="output directory")
    prep.add_argument("--seed", type=SEED, default=0, help="data and training seed (default 0)")
    prep.add_argument(
        "--from-scratch", action="store_true", help="retrain instead of copying shipped checkpoints"
    )
    prep.add_argument(
        "--jargon",
        choices=["spaced", "compact"],
        default="spaced",
        help=(
            "the senior's jargon: spaced <<47 +18 =65>> (shipped) or compact <<47+18=65>> (GSM8K-like; "
            "needs --from-scratch)"
        ),
    )
    prep.add_argument("--no-progress", action="store_true", help="no progress bar")
    return p


def main(args) -> int:
    from trlvr.toy.world import is_complete, prepare_world

    if args.toy_command != "prepare":  # argparse already enforces the choice
        raise SystemExit(f"unknown toy command {args.toy_command!r}")
    from trlvr import rundir

    rundir.check_dir_path(args.out, "--out")
    rundir.check_unlocked(args.out, "trlvr toy prepare", "--out")  # a second prepare into it: refused at once
    rundir.prepare_output(args.out, rundir.TOY_WORLD, flag="--out")  # checked first (prepare_world does too)
    seed = args.seed
    from_scratch = args.from_scratch
    if seed != 0 and not from_scratch:
        print(f"seed {seed}: the shipped checkpoints are for seed 0, so training from scratch")
        from_scratch = True
    from trlvr.errors import UserError
    from trlvr.toy.world import WorldConfig

    if args.jargon != "spaced" and not from_scratch:
        raise UserError(
            "--jargon compact: no compact checkpoints are shipped; add --from-scratch (about 5 minutes)"
        )
    reused = is_complete(
        args.out
    )  # then prepare_world says so in one line; its card was printed when it was made
    with rundir.lock(args.out, by="trlvr toy prepare"):  # every check passed: held from the first write on
        card = prepare_world(
            args.out,
            seed=seed,
            from_scratch=from_scratch,
            progress=not args.no_progress,
            config=WorldConfig(jargon=args.jargon),
        )
    if not reused:
        shown = {k: v for k, v in card.items() if k not in ("config", "assets_train_card")}
        print(json.dumps(shown, indent=2))
    return 0

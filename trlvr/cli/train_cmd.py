"""`trlvr train --config FILE.yaml [--key value ...] [--resume]`: GRPO-train a tandem senior.

    trlvr train --config configs/toy-tandem.yaml
    trlvr train --config configs/toy-tandem.yaml --p 0.3 --grpo.max_steps 20 --output_dir runs/p03
    trlvr train --config configs/toy-tandem.yaml --resume          # continue from the last checkpoint
    torchrun --nproc_per_node 2 -m trlvr.cli.main train --config configs/toy-tandem.yaml
    accelerate launch --config_file recipes/accelerate-zero2-2gpu.yaml -m trlvr.cli.main train \\
        --config recipes/qwen3-4b-tandem-deepscaler.yaml

Overrides: `--key value` pairs after the options; keys plain (`p`) or dotted (`tandem.p`,
`grpo.beta`); values read as YAML scalars. Unknown keys are errors naming the key.
"""

from __future__ import annotations

import argparse


class _OverridesParser(argparse.ArgumentParser):
    """Keeps unknown `--key value` tokens as `args.overrides` instead of failing the whole command line
    (the dispatcher calls `parse_args`, and argparse's REMAINDER does not capture `--options`)."""

    def parse_known_args(self, args=None, namespace=None):
        namespace, extras = super().parse_known_args(args, namespace)
        namespace.overrides = list(getattr(namespace, "overrides", None) or []) + list(extras)
        return namespace, []


def make_parser(subparsers) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "train",
        allow_abbrev=False,
        help="GRPO-train a senior, tandem or solo (config YAML + overrides)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--config", required=True, help="run YAML with `tandem:` and `grpo:` sections")
    parser.add_argument("--resume", action="store_true", help="resume from the last checkpoint in output_dir")
    parser.__class__ = _OverridesParser
    parser.set_defaults(overrides=[])
    return parser


def parse_overrides(tokens: list[str]) -> dict:
    """["--p", "0.3", "--grpo.beta=0.01"] -> {"p": 0.3, "grpo.beta": 0.01}."""
    from trlvr.config import parse_scalar

    out, i = {}, 0
    tokens = [t for t in tokens if t != "--"]
    while i < len(tokens):
        tok = tokens[i]
        if not tok.startswith("--") or len(tok) <= 2:
            raise ValueError(f"expected --key value, got {tok!r}")
        key = tok[2:]
        if "=" in key:
            key, value = key.split("=", 1)
            i += 1
        else:
            if i + 1 >= len(tokens):
                raise ValueError(f"override --{key} has no value")
            value = tokens[i + 1]
            i += 2
        out[key.replace("-", "_")] = parse_scalar(value)
    return out


def main(args) -> int:
    import os

    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    from trlvr.config import load_run_config
    from trlvr.training import build_trainer

    overrides = parse_overrides(args.overrides or [])
    tandem, grpo = load_run_config(args.config, overrides)
    trainer = build_trainer(tandem, grpo)
    resume = args.resume
    if resume:
        from transformers.trainer_utils import get_last_checkpoint

        last = (
            get_last_checkpoint(trainer.args.output_dir) if os.path.isdir(trainer.args.output_dir) else None
        )
        if last is None:
            raise SystemExit(f"--resume: no checkpoint in {trainer.args.output_dir}")
        resume = last
        print(f"[trlvr] resuming from {last}")
    trainer.train(resume_from_checkpoint=resume or None)
    trainer.save_model(os.path.join(trainer.args.output_dir, "final"))
    return 0


if __name__ == "__main__":  # `python -m trlvr.cli.train_cmd train --config ...` (no dispatcher)
    import sys

    _parser = argparse.ArgumentParser(prog="trlvr")
    make_parser(_parser.add_subparsers(dest="command", required=True))
    sys.exit(main(_parser.parse_args(sys.argv[1:])))

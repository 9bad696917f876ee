"""`trlvr smoke --config FILE|NAME [--out DIR] [--steps N] [--problems N] [--set key=value ...]`: the first
command on a new machine (see `trlvr.experiments.smoke`).

    trlvr smoke --config recipes/qwen3-4b-lora-self-1gpu.yaml --out runs/smoke      # on the GPU it will train on
    trlvr smoke --config toy --set senior=runs/toy/senior --set junior=runs/toy/junior --set dataset=runs/toy/data/train.jsonl

Both arms train `--steps` optimizer steps on the config's own models, lengths and backend, then the
tandem run is selected and evaluated on `--problems` held-out problems. Every check is printed on
one screen and written to DIR/smoke.json; exit 0 when none failed, 1 when one did. An earlier smoke
in DIR is set aside into DIR/replaced-<time>/ (nothing is deleted).
"""

from __future__ import annotations

import argparse

import yaml

from trlvr.errors import UserError


def _key_value(text: str) -> tuple[str, object]:
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"expected key=value, got {text!r}")
    return key.strip(), yaml.safe_load(value) if value.strip() else value


def _positive(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {text!r}") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {text!r}")
    return n


def make_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser("smoke", help="a few steps of both arms + select + eval on the run's models: checks on one screen",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    p.add_argument("--config", required=True, help="a recipe or run config (or a shipped config name)")
    p.add_argument("--out", default="runs/smoke", help="the smoke directory (DIR/smoke.json)")
    p.add_argument("--steps", type=_positive, default=2, help="optimizer steps per arm")
    p.add_argument("--problems", type=_positive, default=8, help="training problems held out, selected and evaluated on")
    p.add_argument("--gpu-memory", default=None, help="plan for this GPU (e.g. 80GB, H200); default: this machine's")
    p.add_argument("--set", type=_key_value, action="append", default=[], metavar="KEY=VALUE",
                   help="a run-config key for both arms (repeatable), e.g. --set max_completion_length=256")
    return p


def main(args) -> int:
    from trlvr.cli.main import main as command
    from trlvr.config import resolve_config_path
    from trlvr.experiments.smoke import SmokeOptions, run_smoke
    from trlvr.memory import parse_size

    if args.gpu_memory is not None:
        parse_size(args.gpu_memory)
    overrides = dict(args.set)
    for key, value in overrides.items():
        if not isinstance(value, int | float | str | bool):
            raise UserError(f"--set {key}: only scalar values (put the rest in the config file)")
    opts = SmokeOptions(str(resolve_config_path(args.config)), args.out, args.steps, args.problems, args.gpu_memory,
                        overrides)  # fmt: skip
    return 0 if run_smoke(opts, command)["passed"] else 1

"""`trlvr smoke --config FILE|NAME [--out DIR] [--steps N] [--problems N] [--set key=value ...]`: the first
command on a new machine (see `trlvr.experiments.smoke`).

    trlvr smoke --config qwen3-4b-lora-self-1gpu --out runs/smoke   # on the GPU it will train on
    trlvr toy prepare --out runs/toy                                # first, for a CPU rehearsal: the toy pair
    trlvr smoke --config toy --out runs/smoke-toy                   # the toy config reads runs/toy (minutes)

Both arms train `--steps` optimizer steps on the config's own models, lengths and backend, then the
tandem run is selected and evaluated on `--problems` held-out problems. Every check is printed on
one screen and written to DIR/smoke.json; exit 0 when none failed, 1 when one did. What the stages
print themselves (the libraries' warnings, progress bars, select's and eval's tables) goes to DIR/smoke.log,
or to the screen with --verbose. An earlier smoke in DIR is set aside into DIR/replaced-<time>/ (nothing is
deleted).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import yaml

from trlvr.kinds import COUNT, OUT_DIR, TEXT, Kind
from trlvr.memory import GPU_MEMORY

SCALARS = int | float | str | bool


def _key_value(text: str) -> tuple[str, object]:
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise ValueError(text)
    try:
        return key.strip(), yaml.safe_load(value) if value.strip() else value
    except yaml.YAMLError:
        raise ValueError(text) from None


def _scalar(pair: tuple[str, object]) -> str | None:
    return None if isinstance(pair[1], SCALARS) else "only scalar values (put the rest in the config file)"


# a run-config key for both arms: `--set max_completion_length=256`
KEY_VALUE = Kind(
    "key=value", "text", "KEY=VALUE (a run-config key and a scalar value)", _key_value, check=_scalar
)


def make_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "smoke",
        help="a few steps of both arms + select + eval on the run's models: checks on one screen",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--config", required=True, type=TEXT, help="a recipe or run config (or a shipped config name)"
    )
    p.add_argument("--out", type=OUT_DIR, default="runs/smoke", help="the smoke directory (DIR/smoke.json)")
    p.add_argument("--steps", type=COUNT, default=2, help="optimizer steps per arm")
    p.add_argument(
        "--problems", type=COUNT, default=8, help="training problems held out, selected and evaluated on"
    )
    p.add_argument(
        "--gpu-memory",
        type=GPU_MEMORY,
        default=None,
        help="plan for this GPU (a size such as 80GB, or a name such as H200); default: the local machine's",
    )
    p.add_argument(
        "--set",
        type=KEY_VALUE,
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a run-config key for both arms (repeatable), e.g. --set max_completion_length=256",
    )
    p.add_argument(
        "--verbose",
        action="store_true",
        help="print the stages' own output (the libraries' warnings, progress bars; default: DIR/smoke.log) "
        "and keep tracebacks",
    )
    return p


def check_arms(config: str, out: str, steps: int, problems: int, overrides: dict) -> None:
    """Every check of both arms' runs that needs no GPU and no model (`trlvr.experiments.smoke.check_arms`:
    `trlvr train --dry-run`'s, capabilities and context lengths included, the bf16 guard, the disk), with the
    keys the smoke trains them with: before any engine, and before an earlier smoke in --out is set aside."""
    from trlvr.experiments.smoke import check_arms as check_both_arms

    check_both_arms(config, out, steps, problems, overrides)


def check_device(name: str, config: str, overrides: dict) -> None:
    """A GPU config (no `use_cpu: true`) on a machine without CUDA: one line naming what to run here instead,
    before transformers refuses its bf16 with its own wording."""
    import torch

    from trlvr.errors import UserError

    if torch.cuda.is_available():
        return
    try:
        raw = yaml.safe_load(Path(config).read_text())
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return  # not a readable config: check_arms says so in its one line
    if not isinstance(raw, dict):
        return
    if str(overrides.get("use_cpu", raw.get("use_cpu", False))).lower() in ("true", "1", "yes"):
        half = [
            k
            for k in ("bf16", "fp16")
            if str(overrides.get(k, raw.get(k, False))).lower() in ("true", "1", "yes")
        ]
        if half:  # a CPU rehearsal of a GPU recipe: said here, not in transformers' words about bf16/gpu
            raise UserError(
                f"smoke of {name} with use_cpu on a machine without CUDA: {half[0]} needs a GPU here; "
                f"add --set {half[0]}=false for the CPU rehearsal"
            )
        return
    raise UserError(
        f"smoke trains {name} on its GPU, and this machine has no CUDA device: here check the config "
        f"with `trlvr train --config {name} --dry-run`, or smoke the toy pair on the CPU with "
        "`trlvr smoke --config toy` (after `trlvr toy prepare --out runs/toy`)"
    )


def main(args) -> int:
    from trlvr import rundir
    from trlvr.cli.main import main as command
    from trlvr.config import resolve_config_path
    from trlvr.experiments.smoke import SmokeOptions, run_smoke

    rundir.check_dir_path(args.out, "--out")
    rundir.check_unlocked(args.out, "trlvr smoke", "--out")  # a second smoke into --out: refused at once
    config = str(resolve_config_path(args.config))
    overrides = dict(args.set)
    check_device(args.config, config, overrides)
    # --out holds no other command's work, and both arms' configs check, before anything is written or moved
    rundir.prepare_output(
        args.out,
        rundir.SMOKE,
        flag="--out",
        checks=[lambda: check_arms(config, args.out, args.steps, args.problems, overrides)],
    )
    opts = SmokeOptions(config, args.out, args.steps, args.problems, args.gpu_memory, overrides, args.verbose)
    with rundir.lock(args.out, by="trlvr smoke"):  # every check passed: held from the first write on
        return 0 if run_smoke(opts, command)["passed"] else 1

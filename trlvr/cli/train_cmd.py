"""`trlvr train --config FILE|NAME [--key value ...]`: GRPO-train a tandem senior (or its baseline).

    trlvr toy prepare --out runs/toy                      # first: the toy world that `--config toy` reads
    trlvr train --config toy --arm tandem                 # trlvr/configs/toy.yaml; 200 problems held out
    trlvr train --config toy --arm tandem --resume        # continue from the newest complete checkpoint
    trlvr train --config toy --arm grpo --max_steps 20 --output_dir runs/grpo20
    trlvr train --config toy --arm tandem --seeds 0,1,2   # runs/toy-tandem/seed-0, seed-1, seed-2
    trlvr train --config toy --arm grpo --holdout 0 --output_dir runs/grpo-all   # trains on every problem
    torchrun --nproc_per_node 2 -m trlvr.cli.main train --config toy --per_device_train_batch_size 64
    trlvr train --config starter --senior PATH --junior PATH --dataset FILE --dry-run   # your models, one GPU
    trlvr train --config qwen3-4b-deepscaler --dry-run    # its 2-GPU ZeRO-2 plan and disk use, on any machine
    accelerate launch --config_file "$(trlvr recipes --path accelerate-zero2-2gpu)" -m trlvr.cli.main train \\
        --config qwen3-4b-deepscaler --arm tandem          # shipped recipes: `trlvr recipes` lists them

`trlvr train --config NAME --help` lists every config field, grouped (trlvr's, TRL's, this command's
switches).

The config is one flat YAML of `trlvr.config.TandemConfig` and `trl.GRPOConfig` fields, read by
TRL's own parser (`trl.TrlParser`); any field is also a `--key value` override, and a wrong key
or type is one error line naming it. `{arm}` in output_dir becomes the arm. Switches: `--resume`,
`--force` (start over: the earlier run in output_dir is moved into output_dir/replaced-<time>/, so
nothing of it is resumed or selected later; nothing is deleted), `--verbose` (also: tracebacks), `--seeds`,
`--dry-run` (every config check that needs no model, then exit: `trlvr study plan` commands on a CPU;
it prints the engine's `memory plan` and the trainer's, refuses one that cannot start, and prints the disk
the run's checkpoints will use: `--gpu-memory 80GB` or `H200` plans for a GPU the local machine does not have;
`--processes N --zero-stage S`, or `--config_file FILE` (an `accelerate launch` config; by default the one
the recipe's Launch line names), plans the trainer for that launch).

A second `trlvr train` into a directory being trained into is refused (exit 2, naming the first's
pid). On SIGTERM or SIGUSR1 (a cluster pre-empting the job) the run finishes its step, saves a
checkpoint, prints one line with the command that resumes it and exits 143, within
`preempt_grace_s` (default 120 s).
"""

from __future__ import annotations

import argparse

from trlvr.engine.backends import backend


def make_parser(subparsers) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "train",
        help="GRPO-train a senior, tandem or solo (config YAML + --key value overrides)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        add_help=False,
    )
    parser.add_argument("rest", nargs=argparse.REMAINDER, help="--config FILE and --key value pairs")
    return parser


def _value(argv: list[str], flag: str) -> str | None:
    """The value after `flag` in argv (None when the flag or its value is missing)."""
    i = argv.index(flag) if flag in argv else len(argv)
    return argv[i + 1] if i + 1 < len(argv) else None


def _pop(argv: list[str], flag: str, missing: str) -> tuple[list[str], str | None]:
    """argv without `flag VALUE`, and VALUE (None without the flag); `missing`: the error when VALUE is."""
    from trlvr.errors import UserError

    if flag not in argv:
        return argv, None
    i = argv.index(flag)
    if i + 1 >= len(argv):
        raise UserError(missing)
    return argv[:i] + argv[i + 2 :], argv[i + 1]


def _pop_seeds(argv: list[str]) -> tuple[list[str], list[int] | None]:
    from trlvr.errors import UserError
    from trlvr.kinds import SEEDS

    argv, text = _pop(argv, "--seeds", "--seeds needs a comma-separated list, e.g. --seeds 0,1,2")
    if text is None:
        return argv, None
    try:  # the seeds kind every command uses (trlvr.kinds): distinct integers in the seed range
        return argv, SEEDS(text)
    except argparse.ArgumentTypeError as e:
        raise UserError(f"--seeds: {e}") from None


def check_seeds(seeds: list[int] | None, backend_name: str, environ=None) -> None:
    """Several seeds in one launch of several processes, on a backend that owns its engine, are refused in one
    line: each process keeps its engine until it exits (vLLM's shutdown would end the launch's process group),
    so the second seed would build a second engine beside the first and run out of memory."""
    import os

    from trlvr.errors import UserError

    env = os.environ if environ is None else environ
    processes = int(env.get("WORLD_SIZE") or 1)
    if seeds and len(seeds) > 1 and processes > 1 and backend(backend_name).own_engine:
        raise UserError(
            f"--seeds {','.join(map(str, seeds))} with {processes} processes and backend {backend_name}: "
            f"each process keeps its engine until it exits, so a second seed would not fit; launch one "
            f"run per seed (--seed N, or `trlvr study`, which does)"
        )


def dry_run(argv: list[str], *, folder: bool = True) -> str:
    """The run's own check list without loading a model (`trlvr.training.preflight.check_run_start`, what
    `trlvr train` calls before its first weight load: the output folder's kind and state, the run's
    identity, --resume, the config); without a GPU, bf16/fp16 are checked off (their device check runs at
    launch). A dataset or model folder not there yet (an earlier study stage makes it) is noted. folder
    False: the output folder's kind and state are left out (`check_run_start`)."""
    import torch

    from trlvr.config import parse_run_args
    from trlvr.training.learning import check_updates_land
    from trlvr.training.memory_plan import planned_sharding, render_plan
    from trlvr.training.preflight import check_run_start

    argv, layout = _pop_layout(argv)
    note = ""
    layout["sleep"] = _asks_sleep(argv)
    if not torch.cuda.is_available():
        argv = [*argv, "--use_cpu", "true", "--bf16", "false", "--fp16", "false"]
        note = " (no GPU here: checked with use_cpu on and bf16/fp16 off"
        if layout["sleep"]:  # vLLM's CPU build has no sleep mode; the plan still counts it
            argv += ["--vllm_enable_sleep_mode", "false"]
            note += ", sleep mode off"
        note += ")"
    tandem, grpo, options = parse_run_args(argv)
    note += check_run_start(
        tandem, grpo, resume=options.resume, force=options.force, planning=True, folder=folder
    ).note
    config = _value(argv, "--config")
    check_updates_land(tandem, grpo, planned_sharding(grpo, config, layout), where=f"senior {tandem.senior}")
    head = (
        f"config ok{note}: arm {tandem.arm}, schedule {tandem.schedule}, senior {tandem.senior}, "
        f"dataset {tandem.dataset}, max_steps {grpo.max_steps}, seed {grpo.seed}, "
        f"output_dir {grpo.output_dir}"
    )
    return f"{head}\n{render_plan(tandem, grpo, config, layout)}"


LAYOUT_FLAGS = ("--processes", "--zero-stage", "--config_file")


def _asked(argv: list[str], key: str, default=None):
    """A run setting as given, before the config is checked: the command line's `--key value`, else the
    config file's (`read_yaml`: a file it cannot read is the one line `parse_run_args` would give), else
    `default`."""
    from trlvr.config import read_yaml, resolve_config_path

    value = default
    if (config := _value(argv, "--config")) is not None:
        raw = read_yaml(resolve_config_path(config))  # not a mapping: parse_run_args says so
        value = raw.get(key, default) if isinstance(raw, dict) else default
    given = _value(argv, f"--{key}")
    return value if given is None else given


def _true(value) -> bool:
    return str(value).strip().lower() in ("true", "1", "yes")


def _asks_sleep(argv: list[str]) -> bool:
    """Whether the run asks for vLLM's sleep mode on a GPU: backend vllm, `vllm_enable_sleep_mode` on and
    `use_cpu` off (a run that asks for it on the CPU, or on backend hf, is refused by the config check)."""
    from trlvr.errors import UserError

    if not _true(_asked(argv, "vllm_enable_sleep_mode", False)) or _true(_asked(argv, "use_cpu", False)):
        return False
    try:  # sleep mode is a setting of a backend with engine options (the config check refuses it elsewhere)
        return backend(str(_asked(argv, "backend", "hf"))).engine_options
    except UserError:  # an unknown backend: the config check says so in one line
        return False


def _pop_layout(argv: list[str]) -> tuple[list[str], dict]:
    """--dry-run's launch switches, taken out of the run's own keys: --processes N, --zero-stage S, and
    --config_file FILE (an `accelerate launch` config, read for both)."""
    from trlvr.errors import UserError

    found = {}
    for flag in LAYOUT_FLAGS:
        argv, value = _pop(argv, flag, f"{flag} needs a value")
        if value is not None:
            found[flag] = value
    for flag, allowed in (("--processes", None), ("--zero-stage", (0, 1, 2, 3))):
        if flag in found:
            try:
                value = int(found[flag])
            except ValueError:
                value = None
            if value is None or value < 1 and flag == "--processes" or allowed and value not in allowed:
                raise UserError(
                    f"{flag} {found[flag]!r}: expected "
                    + ("a positive integer" if allowed is None else "0, 1, 2 or 3")
                )
            found[flag] = value
    return argv, found


def _check_toy_world(argv: list[str], tandem) -> None:
    """`--config toy` where its toy world is not: one line naming the command that makes it."""
    from pathlib import Path

    from trlvr.config import read_yaml, resolve_config_path, shipped_configs
    from trlvr.errors import UserError

    toy = shipped_configs()["toy"]
    if (config := _value(argv, "--config")) is None or resolve_config_path(config) != toy:
        return
    world = read_yaml(toy)  # its own paths; one given on the command line is checked as any other
    missing = [
        p
        for p in (tandem.senior, tandem.dataset)
        if p in (world["senior"], world["dataset"]) and not Path(p).exists()
    ]
    if missing:
        raise UserError(
            f"--config toy reads the toy world, and {', '.join(missing)} "
            f"{'is' if len(missing) == 1 else 'are'} not here: run `trlvr toy prepare --out runs/toy` first"
        )


def resume_command(argv: list[str]) -> str:
    """The `trlvr train` command line that continues a run started with `argv` (shell-quoted)."""
    import shlex

    kept = [a for a in argv if a not in ("--resume", "--force")]
    return shlex.join(["trlvr", "train", *kept, "--resume"])


def main(args) -> int:
    argv = [a for a in args.rest if a != "--"]
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__)
        return 0
    again = resume_command(argv)
    argv, seeds = _pop_seeds(argv)
    if "--dry-run" in argv:
        print(dry_run([a for a in argv if a != "--dry-run"]))
        return 0
    from trlvr.config import parse_run_args
    from trlvr.training.console import log, quiet_libraries

    tandem, grpo, options = parse_run_args(argv)
    check_seeds(seeds, tandem.backend)
    _check_toy_world(argv, tandem)
    from trlvr.training.preflight import check_start
    from trlvr.training.run import seed_flags, start_over, train_and_save

    check_start(grpo.output_dir, resume=options.resume, force=options.force)
    quiet_libraries(options.verbose)
    from trlvr.training.preempt import Preempted

    runs = [(tandem, grpo, None)]
    if seeds is not None:
        runs = [(*parse_run_args(argv + seed_flags(grpo, s))[:2], s) for s in seeds]
        if (
            options.force
        ):  # start over in OUTPUT_DIR as a whole (every seed's checks first): no seed-<s>/ stays
            start_over(grpo.output_dir, [(t, a) for t, a, _ in runs])
    for tandem, run_args, seed in runs:
        desc = f"train {tandem.arm}" + (f" seed {seed}" if seed is not None else "")
        try:
            train_and_save(
                tandem,
                run_args,
                resume=options.resume,
                force=options.force,
                desc=desc,
                verbose=options.verbose,
                resume_command=again,
            )  # says what it wrote, or why nothing
        except Preempted as e:
            log(str(e))
            return e.exit_code
    return 0


if __name__ == "__main__":  # `python -m trlvr.cli.train_cmd --config ...` (no dispatcher)
    import sys

    from trlvr.cli.main import main as dispatch

    sys.exit(dispatch(["train", *sys.argv[1:]]))

"""`trlvr train --config FILE|NAME [--key value ...]`: GRPO-train a tandem senior (or its baseline).

    trlvr toy prepare --out runs/toy                      # first: the toy world that `--config toy` reads
    trlvr train --config toy --arm tandem                 # `toy` = trlvr/configs/toy.yaml; 200 problems held out
    trlvr train --config toy --arm tandem --resume        # continue from the newest complete checkpoint
    trlvr train --config toy --arm grpo --max_steps 20 --output_dir runs/grpo20
    trlvr train --config toy --arm tandem --seeds 0,1,2   # runs/toy-tandem/seed-0, seed-1, seed-2
    trlvr train --config toy --arm grpo --holdout 0 --output_dir runs/grpo-all   # trains on every problem
    torchrun --nproc_per_node 2 -m trlvr.cli.main train --config toy --per_device_train_batch_size 64
    trlvr train --config starter --senior PATH --junior PATH --dataset FILE --dry-run   # your own models, one GPU
    trlvr train --config qwen3-4b-deepscaler --dry-run    # its 2-GPU ZeRO-2 plan and disk use, on any machine
    accelerate launch --config_file "$(trlvr recipes --path accelerate-zero2-2gpu)" -m trlvr.cli.main train \\
        --config qwen3-4b-deepscaler --arm tandem          # shipped recipes: `trlvr recipes` lists them

`trlvr train --config NAME --help` lists every config field, grouped (trlvr's, TRL's, this command's switches).

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


def _pop_seeds(argv: list[str]) -> tuple[list[str], list[int] | None]:
    from trlvr.errors import UserError

    if "--seeds" not in argv:
        return argv, None
    i = argv.index("--seeds")
    if i + 1 >= len(argv):
        raise UserError("--seeds needs a comma-separated list, e.g. --seeds 0,1,2")
    from trlvr.kinds import SEEDS

    try:  # the seeds kind every command uses (trlvr.kinds): distinct integers in the seed range
        seeds = SEEDS(argv[i + 1])
    except argparse.ArgumentTypeError as e:
        raise UserError(f"--seeds: {e}") from None
    return argv[:i] + argv[i + 2 :], seeds


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
    from trlvr.training.learning import check_updates_land
    from trlvr.training.preflight import check_run_start

    note += check_run_start(
        tandem, grpo, resume=options.resume, force=options.force, planning=True, folder=folder
    ).note
    check_updates_land(tandem, grpo, dry_run_sharding(grpo, argv, layout), where=f"senior {tandem.senior}")
    head = (
        f"config ok{note}: arm {tandem.arm}, schedule {tandem.schedule}, senior {tandem.senior}, "
        f"dataset {tandem.dataset}, max_steps {grpo.max_steps}, seed {grpo.seed}, output_dir {grpo.output_dir}"
    )
    return f"{head}\n{memory_plan(tandem, grpo, argv, layout)}"


def dry_run_sharding(grpo, argv: list[str], layout: dict) -> str | None:
    """The sharding the launch would give the run (`trlvr.training.learning.launch_sharding`'s answer): this
    launch's own environment or the run's `deepspeed` argument, else the ZeRO stage of the planned launch
    (`launch_of`: --zero-stage, --config_file, the recipe's Launch line), "zero<stage>" for stage 1 to 3."""
    from trlvr.training.learning import launch_sharding

    zero = launch_of(argv, layout)[0]
    return launch_sharding(grpo) or (f"zero{zero}" if zero >= 1 else None)


LAYOUT_FLAGS = ("--processes", "--zero-stage", "--config_file")


def _setting(argv: list[str], key: str, default=None):
    """A run setting as given: the command line's `--key value`, else its config file's (read before a machine
    without a GPU checks the config with its own overrides); `default` when neither sets it."""
    import yaml

    from trlvr.config import resolve_config_path

    value = default
    if "--config" in argv and argv.index("--config") + 1 < len(argv):
        try:
            value = (
                yaml.safe_load(resolve_config_path(argv[argv.index("--config") + 1]).read_text()) or {}
            ).get(key, default)
        except Exception:  # an unreadable config: parse_run_args says why, in one line
            value = default
    if f"--{key}" in argv and (i := argv.index(f"--{key}")) + 1 < len(argv):
        value = argv[i + 1]
    return value


def _true(value) -> bool:
    return str(value).strip().lower() in ("true", "1", "yes")


def _asks_sleep(argv: list[str]) -> bool:
    """Whether the run asks for vLLM's sleep mode on a GPU: backend vllm, `vllm_enable_sleep_mode` on and
    `use_cpu` off (a run that asks for it on the CPU, or on backend hf, is refused by the config check)."""
    from trlvr.errors import UserError

    if not _true(_setting(argv, "vllm_enable_sleep_mode", False)) or _true(_setting(argv, "use_cpu", False)):
        return False
    try:  # sleep mode is a setting of a backend with engine options (the config check refuses it elsewhere)
        return backend(str(_setting(argv, "backend", "hf"))).engine_options
    except UserError:  # an unknown backend: the config check says so in one line
        return False


def _pop_layout(argv: list[str]) -> tuple[list[str], dict]:
    """--dry-run's launch switches, taken out of the run's own keys: --processes N, --zero-stage S, and
    --config_file FILE (an `accelerate launch` config, read for both)."""
    from trlvr.errors import UserError

    argv, found = list(argv), {}
    for flag in LAYOUT_FLAGS:
        if flag not in argv:
            continue
        i = argv.index(flag)
        if i + 1 >= len(argv):
            raise UserError(f"{flag} needs a value")
        found[flag], argv = argv[i + 1], argv[:i] + argv[i + 2 :]
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


def launch_of(argv: list[str], layout: dict) -> tuple[int, int, str]:
    """(ZeRO stage, processes, where they came from) for the plan: this launch's own environment (under
    `accelerate launch`), else --zero-stage / --processes, else --config_file, else the accelerate config
    the recipe names on its Launch line, else one process without ZeRO."""
    import os

    from trlvr.training.memory_plan import accelerate_layout, launch_layout, recipe_launcher

    if int(os.environ.get("WORLD_SIZE") or 1) > 1:
        return (*launch_layout(), "this launch")
    zero, processes, source = 0, 1, "one process, no ZeRO"
    launcher = layout.get("--config_file")
    if (
        launcher is None
        and "--config" in argv
        and (named := recipe_launcher(argv[argv.index("--config") + 1]))
    ):
        launcher = named
    if launcher is not None:
        zero, processes = accelerate_layout(launcher)
        source = f"from {os.path.basename(str(launcher))}"
    if "--zero-stage" in layout or "--processes" in layout:
        zero, processes = layout.get("--zero-stage", zero), layout.get("--processes", processes)
        source = "from --zero-stage/--processes"
    return zero, processes, source


def memory_plan(tandem, grpo, argv: list[str], layout: dict | None = None) -> str:
    """The engine's memory plan (`trlvr.training.memory_plan`), refused in one line when it cannot start."""
    import dataclasses

    from trlvr.memory import parse_size
    from trlvr.team import is_self
    from trlvr.training.memory_plan import check_both, checkpoint_count, device_memory, run_plan, trainer_plan

    where = argv[argv.index("--config") + 1] if "--config" in argv else "command line"
    if not all(_has_config(p) for p in (tandem.senior, tandem.junior) if p and not is_self(p)):
        return "memory plan: not computed (a model folder is not there yet)"
    memory = parse_size(tandem.gpu_memory) if tandem.gpu_memory else device_memory()
    plan = run_plan(tandem, grpo, gpu_memory=memory)
    zero, processes, source = launch_of(argv, layout or {})
    trainer = trainer_plan(tandem, grpo, zero_stage=zero, processes=processes)
    sleep = bool((layout or {}).get("sleep")) or bool(grpo.vllm_enable_sleep_mode)
    check_both(dataclasses.replace(plan, gpu_memory=memory), trainer, where, tandem.backend, sleep=sleep)
    engine = backend(tandem.backend)
    text = plan.render(engine_share=engine.gpu_share) + "\n" + trainer.render()
    if memory is not None:
        share = plan.share if engine.gpu_share else None
        room = trainer.room(memory, share, sleep)
        text += (
            f"\n  fits: trainer ~{trainer.total_bytes / 2**30:.1f} of the {room / 2**30:.1f} GiB left to it"
        )
        if sleep and share:
            text += (
                f" (the engine asleep); while it generates: the trainer's static {_gib(trainer.static_bytes)} + "
                f"the engine's {_gib(int(share * memory))} of {_gib(memory)}"
            )
    text += f"\n  launch: {source}" + (
        " (--config_file FILE, or --processes N --zero-stage S, plans another)"
        if source != "this launch"
        else ""
    )
    from trlvr.training.checkpoints import KEEP_RESUME

    saved = checkpoint_count(grpo)
    every = trainer.saved_weight_bytes + trainer.resume_state_bytes
    text += (
        f"\ndisk: ~{_gib(trainer.disk_bytes(saved, KEEP_RESUME))} in {grpo.output_dir}: {saved} checkpoint(s) x "
        f"{_gib(trainer.saved_weight_bytes)} of weights, the resume state ({_gib(trainer.resume_state_bytes)}) "
        f"in the newest {KEEP_RESUME} only, final/ {_gib(trainer.saved_weight_bytes)}"
        + (
            f" (resume state in every checkpoint would be ~{_gib(saved * every + trainer.saved_weight_bytes)})"
            if saved > KEEP_RESUME
            else ""
        )
    )
    from trlvr.errors import UserError
    from trlvr.training.memory_plan import disk_problem

    # the output folder's free space: refused on a GPU machine (the run's own, as the run refuses at its start);
    # a plan made without a GPU (for another machine) says it and goes on
    if problem := disk_problem(grpo.output_dir, trainer.disk_bytes(saved, KEEP_RESUME)):
        if device_memory() is not None:
            raise UserError(problem)
        text += f"\n  {problem.split('; ')[0]} (planned for another machine: `trlvr train` refuses it at its start)"
    return text


def _gib(n: int) -> str:
    return f"{n / 2**40:.2f} TiB" if n >= 2**40 else f"{n / 2**30:.1f} GiB"


def _has_config(path: str) -> bool:
    """Whether a model's config can be read now (a folder, a cached hub model, a shipped config)."""
    from trlvr.errors import UserError
    from trlvr.memory import read_config
    from trlvr.models import model_folder

    try:
        read_config(model_folder(path))  # an adapter folder: its base's config
    except UserError:
        return False
    return True


def _check_toy_world(argv: list[str], tandem) -> None:
    """`--config toy` where its toy world is not: one line naming the command that makes it."""
    from trlvr.config import resolve_config_path, shipped_configs
    from trlvr.errors import UserError

    toy = shipped_configs()["toy"]
    if "--config" not in argv or resolve_config_path(argv[argv.index("--config") + 1]) != toy:
        return
    from pathlib import Path

    import yaml

    world = yaml.safe_load(
        toy.read_text()
    )  # its own paths; one given on the command line is checked as any other
    missing = [
        p
        for p in (tandem.senior, tandem.dataset)
        if p in (world["senior"], world["dataset"]) and not Path(p).exists()
    ]
    if missing:
        raise UserError(
            f"--config toy reads the toy world, and {', '.join(missing)} {'is' if len(missing) == 1 else 'are'} not here: run "
            "`trlvr toy prepare --out runs/toy` first"
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

"""A training run's rollout-engine memory plan (`trlvr.memory.MemoryPlan`) from its two configs.

    plan = run_plan(tandem, grpo, gpu_memory="H100")   # printed by `trlvr train --dry-run`
    plan.check("recipes/x.yaml")                        # and enforced before a vLLM engine starts

The engine holds the senior, and the junior when the arm's schedule lets it write (the grpo arm's
engine is the senior alone; `junior: self` is a second copy of the senior's base in the engine).
Its context is `vllm_max_model_length`, or the run's longest prompt plus `max_completion_length`
when that is unset (`engine_context`: never the model's own limit, 262,144 for Qwen3-4B-2507).
One generate call sends a process's whole generation batch (`per_device_train_batch_size x
steps_per_generation` sequences; with `vllm_tensor_parallel_size` t, its group's t batches, and each GPU
holds 1/t of the weights and of the KV). `render_plan` is the text `trlvr train --dry-run` prints: both
plans, the launch they assume (`launch_of`) and the disk the checkpoints take.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import re
import shutil
from pathlib import Path

import torch
import yaml

from trlvr import rundir
from trlvr.config import RECIPES_DIR, TandemConfig, resolve_config_path
from trlvr.engine.backends import backend
from trlvr.errors import UserError
from trlvr.memory import MemoryPlan, Stack, derived_max_model_len, parse_size, read_config
from trlvr.models import model_folder
from trlvr.team import Team
from trlvr.trainer_memory import TrainerPlan, lora_params


def run_dtype(grpo) -> str | None:
    init = dict(grpo.model_init_kwargs or {})
    dtype = init.get("dtype", init.get("torch_dtype"))
    return None if dtype in (None, "auto") else str(dtype).removeprefix("torch.")


def engine_context(tandem: TandemConfig, grpo, longest_prompt: int | None = None) -> int | None:
    """The engine's max_model_len: the run's own setting, else its prompt bound plus the completion budget."""
    if grpo.vllm_max_model_length:
        return int(grpo.vllm_max_model_length)
    return derived_max_model_len(tandem.max_prompt_length or longest_prompt, grpo.max_completion_length)


def device_memory() -> int | None:
    """The current CUDA device's total bytes, or None without one."""
    return (
        torch.cuda.get_device_properties(torch.cuda.current_device()).total_memory
        if torch.cuda.is_available()
        else None
    )


def run_plan(
    tandem: TandemConfig, grpo, *, gpu_memory: int | str | None = None, longest_prompt: int | None = None
) -> MemoryPlan:
    """The plan of the run's engine. gpu_memory: bytes or a size/name; default: the run's `gpu_memory`
    setting. backend hf: the shapes and lengths only (trlvr's engine sizes its sub-batches to the free
    memory at run time)."""
    dtype = run_dtype(grpo)
    senior_cfg = read_config(model_folder(tandem.senior))  # an adapter folder's shapes are its base's
    stacks = [Stack.from_config("senior", senior_cfg, dtype)]
    if tandem.arm == "tandem":
        junior_cfg = senior_cfg if Team.of(tandem).is_self else read_config(tandem.junior)
        stacks.append(Stack.from_config("junior", junior_cfg, dtype))
    memory = gpu_memory if gpu_memory is not None else tandem.gpu_memory
    if isinstance(memory, str):
        memory = parse_size(memory)
    rows = grpo.per_device_train_batch_size * grpo.steps_per_generation * grpo.vllm_tensor_parallel_size
    # max_num_seqs: the rows a generate call sends, TRL's own rule for its colocated engine
    return MemoryPlan(
        stacks=tuple(stacks),
        prompt_len=tandem.max_prompt_length or longest_prompt,
        completion_len=grpo.max_completion_length,
        max_num_seqs=rows,
        share=grpo.vllm_gpu_memory_utilization,
        gpu_memory=memory if backend(tandem.backend).gpu_share else None,
        max_model_len=grpo.vllm_max_model_length,
        rows=rows,
        tensor_parallel=grpo.vllm_tensor_parallel_size,
    )


def launch_layout(environ=None) -> tuple[int, int]:
    """(ZeRO stage, processes) of this launch, as `accelerate launch` tells its processes
    (ACCELERATE_USE_DEEPSPEED, ACCELERATE_DEEPSPEED_ZERO_STAGE, WORLD_SIZE); a plain `trlvr train`: (0, 1)."""
    env = os.environ if environ is None else environ
    deepspeed = env.get("ACCELERATE_USE_DEEPSPEED", "").lower() == "true"
    return (int(env.get("ACCELERATE_DEEPSPEED_ZERO_STAGE") or 0) if deepspeed else 0), int(
        env.get("WORLD_SIZE") or 1
    )


def accelerate_layout(path: str | Path) -> tuple[int, int]:
    """(ZeRO stage, processes) an `accelerate launch --config_file` YAML asks for: `num_processes` (x
    `num_machines`), and `deepspeed_config.zero_stage` (or `zero_optimization.stage` of the DeepSpeed JSON it
    names) when `distributed_type` is DEEPSPEED; a file that says neither clearly is one line naming it."""
    p = Path(path)
    try:
        cfg = yaml.safe_load(p.read_text())
    except (OSError, yaml.YAMLError) as e:
        raise UserError(
            f"--config_file {path}: not a readable accelerate config ({' '.join(str(e).split())})"
        ) from None
    if not isinstance(cfg, dict):
        raise UserError(f"--config_file {path}: not an accelerate config (a YAML mapping)")
    try:
        processes = int(cfg.get("num_processes") or 1)
    except (TypeError, ValueError):
        raise UserError(
            f"--config_file {path}: num_processes {cfg.get('num_processes')!r} is not a number"
        ) from None
    if str(cfg.get("distributed_type", "")).upper() != "DEEPSPEED":
        return 0, processes
    ds = cfg.get("deepspeed_config") or {}
    stage = ds.get("zero_stage")
    if stage is None and ds.get("deepspeed_config_file"):
        ds_file = (
            (p.parent / ds["deepspeed_config_file"])
            if not Path(ds["deepspeed_config_file"]).is_absolute()
            else (Path(ds["deepspeed_config_file"]))
        )
        try:
            stage = (json.loads(ds_file.read_text()).get("zero_optimization") or {}).get("stage")
        except (OSError, json.JSONDecodeError):
            stage = None
    if stage not in (0, 1, 2, 3):
        raise UserError(
            f"--config_file {path}: deepspeed_config.zero_stage {stage!r} is not 0, 1, 2 or 3; pass "
            f"--zero-stage to plan it"
        )
    return int(stage), processes


# `--config_file "$(trlvr recipes --path NAME)"` (works from any folder) or `--config_file FILE`
LAUNCH_CONFIG = re.compile(r"--config_file\s+(?:\"\$\(trlvr recipes --path (\S+?)\)\"|(\S+))")


def recipe_launcher(config: str | Path) -> Path | None:
    """The accelerate config a recipe names on its `# Launch: accelerate launch --config_file ...` line: a
    `"$(trlvr recipes --path NAME)"` or a FILE (a shipped recipe's `recipes/NAME.yaml` resolves to the
    package's copy); None when it names none."""
    try:
        text = resolve_config_path(str(config)).read_text()
    except (OSError, UserError):
        return None
    for line in text.splitlines():
        if (
            line.lstrip().startswith("#")
            and "accelerate launch" in line
            and (m := re.search(LAUNCH_CONFIG, line))
        ):
            if m.group(1):  # a shipped accelerate config by name
                path = RECIPES_DIR / f"{m.group(1)}.yaml"
                return path if path.is_file() else None
            name = m.group(2).strip("\"'")
            try:
                return resolve_config_path(name)
            except UserError:
                return None
    return None


def checkpoint_count(grpo) -> int:
    """How many checkpoints a run keeps on disk: one every `save_steps` optimizer steps (a fraction < 1: of
    max_steps) up to max_steps, at most `save_total_limit`; none with save_strategy "no"."""
    strategy = str(getattr(grpo.save_strategy, "value", grpo.save_strategy))
    if strategy == "no" or grpo.max_steps is None or grpo.max_steps <= 0:
        return 0
    every = grpo.save_steps if grpo.save_steps >= 1 else math.ceil(grpo.max_steps * grpo.save_steps)
    count = int(grpo.max_steps // max(int(every), 1)) if strategy == "steps" else 1
    return min(count, grpo.save_total_limit) if grpo.save_total_limit else count


def trainer_plan(
    tandem: TandemConfig, grpo, *, zero_stage: int = 0, processes: int = 1, longest_prompt: int | None = None
) -> TrainerPlan:
    """The training process's own GPU memory (`trlvr.trainer_memory`): the senior in the run's dtype, full
    or LoRA, under `zero_stage` over `processes`; frozen beside it: the junior on backend hf (the HF engine's)
    and TRL's KL reference when beta > 0 (the junior when kl_ref is junior; none for LoRA: the base, adapters
    off)."""
    dtype = run_dtype(grpo)
    cfg = read_config(model_folder(tandem.senior))  # an adapter folder's shapes are its base's
    stack = Stack.from_config("senior", cfg, dtype)
    team, frozen = Team.of(tandem, grpo.beta), 0
    # TRL's reference model: the junior (kl_ref junior) or the senior
    if grpo.beta > 0 and not tandem.use_peft:
        ref = team.kl_to_junior and team.junior_model or tandem.senior
        frozen += Stack.from_config("reference", read_config(model_folder(ref)), dtype).weight_bytes
    if team.loads_junior:  # beside the senior: not the reference, not held by the backend's engine
        frozen += Stack.from_config("junior", read_config(tandem.junior), dtype).weight_bytes
    sequence = engine_context(tandem, grpo, longest_prompt) or grpo.max_completion_length
    return TrainerPlan(
        stack=stack,
        batch=grpo.per_device_train_batch_size,
        sequence=sequence,
        zero_stage=zero_stage,
        processes=processes,
        trainable=lora_params(cfg, tandem.lora_r, tandem.lora_target_modules) if tandem.use_peft else None,
        checkpointing=bool(grpo.gradient_checkpointing),
        frozen_bytes=frozen,
    )


def check_both(
    plan: MemoryPlan, trainer: TrainerPlan, where: str, backend_name: str, sleep: bool = False
) -> None:
    """Refuse, in one line naming the setting, a run whose engine or trainer cannot fit on the stated GPU
    (sleep: the engine sleeps while the trainer works, `vllm_enable_sleep_mode`)."""
    # the engine holds its share: the plan applies, the trainer has the rest
    share = backend(backend_name).gpu_share
    found = (plan.problems(where) if share else []) + trainer.problems(
        where, plan.gpu_memory, plan.share if share else None, plan.share_setting, sleep=sleep
    )
    if found:
        raise UserError(found[0])


def engine_kv_tokens(llm) -> int | None:
    """vLLM's own KV report: the tokens its cache holds (blocks x block size), from the engine's config."""
    cache = getattr(getattr(getattr(llm, "llm_engine", None), "vllm_config", None), "cache_config", None)
    blocks, size = getattr(cache, "num_gpu_blocks", None), getattr(cache, "block_size", None)
    return int(blocks) * int(size) if blocks and size else None


def write_memory_record(
    output_dir, plan: MemoryPlan, kv_tokens: int | None, main_process: bool = True
) -> None:
    """output_dir/memory_plan.json: the plan beside what the engine reported (trlvr smoke reads it)."""
    if not main_process:
        return
    path = Path(output_dir) / rundir.MEMORY_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"plan": plan.as_dict(), "engine_kv_tokens": kv_tokens}, indent=1))
    tmp.replace(path)


# --- the disk the run's checkpoints need, against what is free where they go --------------------------------


def nearest_existing(path: str | Path) -> Path:
    """`path`, or its nearest parent that exists (an output folder not made yet is made under it)."""
    p = Path(path).expanduser().absolute()
    while not p.exists() and p != p.parent:
        p = p.parent
    return p


def _folder_bytes(folder: Path) -> int:
    """The bytes already under `folder` (a resumed run's own checkpoints count toward its need)."""
    if not folder.is_dir():
        return 0
    return sum(f.stat().st_size for f in folder.rglob("*") if f.is_file() and not f.is_symlink())


def disk_problem(folder: str | Path, need: int, disk_usage=None) -> str | None:
    """One line when the nearest existing folder of `folder` has less free space than `need` bytes, else None.
    disk_usage: `shutil.disk_usage` (a seam for tests)."""
    where = nearest_existing(folder)
    free = (disk_usage or shutil.disk_usage)(where).free
    if free >= need:
        return None
    return (
        f"disk: the run's checkpoints need ~{_gib(need)} in {folder} and {where} has {_gib(free)} free; free "
        f"space there, set output_dir to a larger disk, or lower save_total_limit / raise save_steps"
    )


def _gib(n: int) -> str:
    return f"{n / 2**30:.1f} GiB"


def run_disk_bytes(tandem: TandemConfig, grpo, zero_stage: int = 0, processes: int = 1) -> int | None:
    """The disk the run's output takes (`TrainerPlan.disk_bytes`: its checkpoints' weights, the resume state
    in the newest KEEP_RESUME, final/), or None when a model's config cannot be read here (a hub id not
    cached)."""
    from trlvr.training.checkpoints import KEEP_RESUME

    try:
        trainer = trainer_plan(tandem, grpo, zero_stage=zero_stage, processes=processes)
    except (UserError, OSError, ValueError):
        return None
    return trainer.disk_bytes(checkpoint_count(grpo), KEEP_RESUME)


def check_disk(
    tandem: TandemConfig,
    grpo,
    *,
    zero_stage: int = 0,
    processes: int = 1,
    resume: bool = False,
    disk_usage=None,
) -> None:
    """UserError (one line naming the folder and both figures) when the run's output folder's disk has less
    free space than the run will write (`run_disk_bytes`; with `resume`, less what its folder already
    holds)."""
    need = run_disk_bytes(tandem, grpo, zero_stage, processes)
    if need is None:
        return
    if resume:
        need = max(need - _folder_bytes(Path(grpo.output_dir)), 0)
    if problem := disk_problem(grpo.output_dir, need, disk_usage):
        raise UserError(problem)


# --- the plan as `trlvr train --dry-run` prints it ----------------------------------------------------------


def launch_of(config: str | None, layout: dict) -> tuple[int, int, str]:
    """(ZeRO stage, processes, where they came from) for the plan: this launch's own environment (under
    `accelerate launch`), else --zero-stage / --processes, else --config_file, else the accelerate config
    the recipe `config` names on its Launch line, else one process without ZeRO."""
    if int(os.environ.get("WORLD_SIZE") or 1) > 1:
        return (*launch_layout(), "this launch")
    zero, processes, source = 0, 1, "one process, no ZeRO"
    launcher = layout.get("--config_file")
    if launcher is None and config is not None:
        launcher = recipe_launcher(config)
    if launcher is not None:
        zero, processes = accelerate_layout(launcher)
        source = f"from {os.path.basename(str(launcher))}"
    if "--zero-stage" in layout or "--processes" in layout:
        zero, processes = layout.get("--zero-stage", zero), layout.get("--processes", processes)
        source = "from --zero-stage/--processes"
    return zero, processes, source


def planned_sharding(grpo, config: str | None, layout: dict) -> str | None:
    """The sharding the launch would give the run (`trlvr.training.learning.launch_sharding`'s answer): this
    launch's own environment or the run's `deepspeed` argument, else the planned launch's ZeRO stage
    (`launch_of`), "zero<stage>" for stage 1 to 3."""
    from trlvr.training.learning import launch_sharding

    zero = launch_of(config, layout)[0]
    return launch_sharding(grpo) or (f"zero{zero}" if zero >= 1 else None)


def render_plan(tandem: TandemConfig, grpo, config: str | None, layout: dict) -> str:
    """The engine's and the trainer's memory plans, the launch and the disk, as `--dry-run` prints them;
    refused in one line when the run cannot start. `config`: the --config as given; `layout`: the dry run's
    --processes, --zero-stage, --config_file, and whether the run sleeps its engine ("sleep")."""
    from trlvr.training.checkpoints import KEEP_RESUME

    if not all(_has_config(p) for p in Team.of(tandem).model_paths.values()):
        return "memory plan: not computed (a model folder is not there yet)"
    memory = parse_size(tandem.gpu_memory) if tandem.gpu_memory else device_memory()
    plan = run_plan(tandem, grpo, gpu_memory=memory)
    zero, processes, source = launch_of(config, layout)
    trainer = trainer_plan(tandem, grpo, zero_stage=zero, processes=processes)
    sleep = bool(layout.get("sleep")) or bool(grpo.vllm_enable_sleep_mode)
    where = config if config is not None else "command line"
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
                " (the engine asleep); while it generates: "
                f"the trainer's static {_size(trainer.static_bytes)} + "
                f"the engine's {_size(int(share * memory))} of {_size(memory)}"
            )
    text += f"\n  launch: {source}"
    if source != "this launch":
        text += " (--config_file FILE, or --processes N --zero-stage S, plans another)"
    saved = checkpoint_count(grpo)
    need = trainer.disk_bytes(saved, KEEP_RESUME)
    weights, state = trainer.saved_weight_bytes, trainer.resume_state_bytes
    text += (
        f"\ndisk: ~{_size(need)} in {grpo.output_dir}: {saved} checkpoint(s) x {_size(weights)} of weights, "
        f"the resume state ({_size(state)}) in the newest {KEEP_RESUME} only, final/ {_size(weights)}"
    )
    if saved > KEEP_RESUME:
        text += f" (resume state in every checkpoint would be ~{_size(saved * (weights + state) + weights)})"
    # the output folder's free space: refused on a GPU machine (the run's own, as the run refuses at its
    # start); a plan made without a GPU (for another machine) says it and goes on
    if problem := disk_problem(grpo.output_dir, need):
        if device_memory() is not None:
            raise UserError(problem)
        text += (
            f"\n  {problem.split('; ')[0]} (planned for another machine: "
            "`trlvr train` refuses it at its start)"
        )
    return text


def _size(n: int) -> str:
    return f"{n / 2**40:.2f} TiB" if n >= 2**40 else f"{n / 2**30:.1f} GiB"


def _has_config(path: str) -> bool:
    """Whether a model's config can be read now (a folder, a cached hub model, a shipped config)."""
    try:
        read_config(model_folder(path))  # an adapter folder: its base's config
    except UserError:
        return False
    return True

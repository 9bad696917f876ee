"""A training run's rollout-engine memory plan (`trlvr.memory.MemoryPlan`) from its two configs.

    plan = run_plan(tandem, grpo, gpu_memory="H100")   # printed by `trlvr train --dry-run`
    plan.check("recipes/x.yaml")                        # and enforced before a vLLM engine starts

The engine holds the senior, and the junior when the arm's schedule lets it write (the grpo arm's
engine is the senior alone; `junior: self` is a second copy of the senior's base in the engine).
Its context is `vllm_max_model_length`, or the run's longest prompt plus `max_completion_length`
when that is unset (`engine_context`: never the model's own limit, 262,144 for Qwen3-4B-2507).
One generate call sends a process's whole generation batch (`per_device_train_batch_size x
steps_per_generation` sequences; with `vllm_tensor_parallel_size` t, its group's t batches, and each GPU
holds 1/t of the weights and of the KV).
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from trlvr import rundir
from trlvr.config import TandemConfig
from trlvr.memory import MemoryPlan, Stack, derived_max_model_len, parse_size, read_config
from trlvr.models import model_folder

SELF = "self"


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
    return torch.cuda.get_device_properties(torch.cuda.current_device()).total_memory if torch.cuda.is_available() else None


def run_plan(tandem: TandemConfig, grpo, *, gpu_memory: int | str | None = None,
             longest_prompt: int | None = None) -> MemoryPlan:  # fmt: skip
    """The plan of the run's engine. gpu_memory: bytes or a size/name; default: the run's `gpu_memory`
    setting. backend hf: the shapes and lengths only (trlvr's engine sizes its sub-batches to the free
    memory at run time)."""
    dtype = run_dtype(grpo)
    senior_cfg = read_config(model_folder(tandem.senior))  # an adapter folder's shapes are its base's
    stacks = [Stack.from_config("senior", senior_cfg, dtype)]
    if tandem.arm == "tandem":
        junior_cfg = senior_cfg if tandem.junior == SELF else read_config(tandem.junior)
        stacks.append(Stack.from_config("junior", junior_cfg, dtype))
    memory = gpu_memory if gpu_memory is not None else tandem.gpu_memory
    if isinstance(memory, str):
        memory = parse_size(memory)
    rows = grpo.per_device_train_batch_size * grpo.steps_per_generation * grpo.vllm_tensor_parallel_size
    return MemoryPlan(
        stacks=tuple(stacks), prompt_len=tandem.max_prompt_length or longest_prompt,
        completion_len=grpo.max_completion_length, max_num_seqs=rows, share=grpo.vllm_gpu_memory_utilization,
        gpu_memory=memory if tandem.backend == "vllm" else None, max_model_len=grpo.vllm_max_model_length,
        rows=rows, tensor_parallel=grpo.vllm_tensor_parallel_size,
    )  # fmt: skip  (max_num_seqs: the rows a generate call sends, TRL's own rule for its colocated engine)


def engine_kv_tokens(llm) -> int | None:
    """vLLM's own KV report: the tokens its cache holds (blocks x block size), read from the engine's config."""
    cache = getattr(getattr(getattr(llm, "llm_engine", None), "vllm_config", None), "cache_config", None)
    blocks, size = getattr(cache, "num_gpu_blocks", None), getattr(cache, "block_size", None)
    return int(blocks) * int(size) if blocks and size else None


def write_memory_record(output_dir, plan: MemoryPlan, kv_tokens: int | None, main_process: bool = True) -> None:
    """output_dir/memory_plan.json: the plan and what the engine reported, side by side (trlvr smoke reads it)."""
    if not main_process:
        return
    path = Path(output_dir) / rundir.MEMORY_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"plan": plan.as_dict(), "engine_kv_tokens": kv_tokens}, indent=1))
    tmp.replace(path)

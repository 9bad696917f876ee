"""`TandemVLLMGeneration`: TRL's own `VLLMGeneration` around the tandem engine (`pair.VLLMPair`).

TRL 1.16 builds its colocated `vllm.LLM` in `VLLMGeneration._init_vllm` without `hf_overrides` or
`logits_processors`, so it cannot build the composite. This subclass builds the run's `VLLMPair`
there instead (the composite `TandemForCausalLM` with the author processor and the sampler's log-probs,
or the plain senior for the grpo arm) and hands TRL its `LLM`. Everything else is TRL's:
- `sync_weights` (run by `GRPOTrainer._generate` before each rollout whose step changed): FSDP /
  DeepSpeed ZeRO-3 gathering, PEFT adapters merged into the base weights (names stripped of PEFT's),
  one `model.load_weights([(name, tensor)])` per parameter on the engine's model (the composite routes
  them to its senior; the junior only ever loads from its own folder), `reset_prefix_cache`. The one
  addition: the sync is bracketed by `VLLMPair.begin_sync` / `end_sync` (vLLM's layerwise in-place
  reload), without which a CPU engine keeps computing with its repacked old linear weights.
- the importance-sampling correction, from the rollout's `logprobs` (the sampler's).
Rollouts still go through `VLLMPair.generate` (`trlvr.training.rollout.TandemRollout`), the one code
path of training and evaluation; TRL's own `generate` is never called.

Several training processes (torchrun / accelerate, N of them): TRL's colocate path, one composite
engine per process, built with `distributed_executor_backend="external_launcher"` (vLLM's UniProc
executor over the launcher's process group: the engine and its model stay in the trainer's process, so
the weight sync above runs as in one process, on every rank). `vllm_tensor_parallel_size` = t > 1:
TRL's TP groups of t consecutive ranks (t must divide N), both stacks sharded over each; every rank of
a group runs the group's prompts (gathered, with their row keys, as TRL's `generate` gathers them) and
keeps its own share (`generate_rows`). The engine's seed is TRL's per group (the run's seed + the
group's index); it draws nothing in a rollout: every request carries its own seed, a function of the
run's seed and the row's global key (`trlvr.vllm.core.engine_keys`), so each row's tokens and authors
are the ones a 1-process run draws for the same key (up to float summation order: TP all-reduces,
batch shapes).

Sleep mode (`vllm_enable_sleep_mode`, GPU only: vLLM's CPU worker has none): level 1, not TRL's
level 2. Level 2 discards every weight, and TRL re-pushes only the senior's, so the junior would
have to be reloaded from disk after each wake; level 1 keeps both models' weights in host memory and
puts them back on wake (costs host memory for both models and one copy each way per step).
`awake()` wakes what sleeps around a rollout and puts the engine back to sleep after it.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import replace

import torch.distributed as dist
from trl.generation.vllm_generation import VLLMGeneration
from trl.trainer.utils import ensure_master_addr_port

from trlvr.errors import UserError

SLEEP_LEVEL = 1  # keeps the junior's weights (see the module docstring)
# engines over a launcher's process group, kept until the process ends (`TandemVLLMGeneration.close`)
LAUNCHER_ENGINES: list = []


def engine_distribution(accelerator, tensor_parallel_size: int, seed: int) -> dict:
    """The `EngineOptions` fields of this process's engine. Several processes: TRL's colocate executor
    (external_launcher), its TP size, and TRL's seed per TP group (rank // TP) offset by the run's seed.
    One process: vLLM's own executor, the run's seed."""
    if accelerator.num_processes == 1:
        if tensor_parallel_size != 1:
            raise UserError(
                f"vllm_tensor_parallel_size {tensor_parallel_size} shards the engine over that many "
                "training processes (TRL's colocate TP); this run has one: launch it with torchrun/accelerate"
            )
        return {"seed": seed}
    return {
        "distributed_executor_backend": "external_launcher",
        "tensor_parallel_size": tensor_parallel_size,
        "seed": seed + accelerator.process_index // tensor_parallel_size,
    }


class TandemVLLMGeneration(VLLMGeneration):
    """`VLLMGeneration` (colocate mode) whose engine is `build_pair()`'s `LLM`; `.pair` is that `VLLMPair`.

    build_pair: builds the run's pair (called once, from `_init_vllm`). Every other keyword is
    `VLLMGeneration`'s (model, accelerator, processing_class, enable_sleep_mode, ...).
    """

    def __init__(self, build_pair: Callable, **kwargs):
        self._build_pair = build_pair
        self.pair = None
        self.tp_group = None
        self._kv_sleeping = False
        super().__init__(mode="colocate", **kwargs)

    def _init_vllm(self):
        # TRL's colocated engine runs in the trainer's process (its external_launcher executor turns vLLM's
        # engine process off); TRL's sync_weights reaches the model there (llm_engine.model_executor).
        os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
        acc, tp = self.accelerator, self.tensor_parallel_size
        if acc.num_processes % tp:  # TRL's own check, before any group is made
            raise UserError(
                f"vllm_tensor_parallel_size {tp} must divide the number of processes ({acc.num_processes})"
            )
        if acc.num_processes > 1:  # TRL 1.16's colocate set-up (VLLMGeneration._init_vllm), unchanged
            if tp > 1:  # groups of consecutive ranks: [0, 1], [2, 3], ...
                self.tp_group, _ = dist.new_subgroups_by_enumeration(
                    [list(range(i * tp, (i + 1) * tp)) for i in range(acc.num_processes // tp)]
                )
            os.environ["RANK"] = str(acc.process_index)
            os.environ["LOCAL_RANK"] = str(acc.local_process_index)
            os.environ["WORLD_SIZE"] = str(acc.num_processes)
            ensure_master_addr_port()
        self.pair = self._build_pair()
        self._build_pair = (
            None  # a closure over the trainer (a reference cycle): built once, not needed again
        )
        self.llm = self.pair.llm
        if self.enable_sleep_mode:
            self.llm.sleep(level=SLEEP_LEVEL)
        self._llm_weights_sleeping = self._kv_sleeping = self.enable_sleep_mode
        self.accelerator.wait_for_everyone()

    def close(self) -> None:
        """Shut the engine down and drop every reference this object holds to it (TRL's `llm`, the pair, and
        the builder, a closure over the trainer), so that the next stage's engine (smoke's second arm,
        selection, evaluation) finds its memory free. The generation is unusable afterwards.

        Several processes: the engine runs over the launcher's process group (external_launcher), and vLLM's
        shutdown destroys the default process group (vllm/distributed/parallel_state.py,
        `destroy_distributed_environment`), which the launcher's later collectives need; such an engine is
        kept (`LAUNCHER_ENGINES`) until the process ends."""
        pair, self.pair, self.llm, self._build_pair = self.pair, None, None, None
        if pair is None:
            return
        if self.accelerator.num_processes > 1:
            LAUNCHER_ENGINES.append(pair)
        else:
            pair.close()

    def sync_weights(self):
        self.pair.begin_sync()
        try:
            super().sync_weights()
        finally:
            self.pair.end_sync()

    def generate_rows(self, prompts: list[list[int]], schedule, sampling, row_keys: list[int]):
        """`pair.generate` for this process's rows; with TP, over its group's rows (prompts and row keys
        gathered in rank order, as TRL's `generate` gathers prompts), of which this rank keeps its own.
        Every rank of a group runs the same requests (external_launcher needs identical schedules)."""
        if self.tp_group is None:
            return self.pair.generate(prompts, schedule, sampling, row_keys)
        gathered = [None] * self.tensor_parallel_size
        dist.all_gather_object(gathered, (list(prompts), list(row_keys)), group=self.tp_group)
        all_prompts = [p for ps, _ in gathered for p in ps]
        all_keys = [k for _, ks in gathered for k in ks]
        out = self.pair.generate(all_prompts, schedule, sampling, all_keys)
        rank = dist.get_rank(group=self.tp_group)
        start = sum(len(ps) for ps, _ in gathered[:rank])
        mine = _rows_of(out, start, start + len(prompts))
        if rank and mine.plan is not None:  # the group's pre-emptions, counted once (by its first rank)
            mine.plan = {**mine.plan, "preemptions": 0}
        return mine

    @contextmanager
    def awake(self):
        """The engine's weights and KV cache in device memory for a rollout; asleep again afterwards
        (sleep mode), or nothing at all (no sleep mode)."""
        if not self.enable_sleep_mode:
            yield
            return
        tags = [
            t
            for t, asleep in (("weights", self._llm_weights_sleeping), ("kv_cache", self._kv_sleeping))
            if asleep
        ]
        if tags:
            self.llm.wake_up(tags=tags)
        self._llm_weights_sleeping = self._kv_sleeping = False
        try:
            yield
        finally:
            self.llm.sleep(level=SLEEP_LEVEL)
            self._llm_weights_sleeping = self._kv_sleeping = True


def _rows_of(out, start: int, stop: int):
    """Rows [start, stop) of a `TandemOutput`, cut to their own longest completion."""
    T = max(int(out.completion_mask[start:stop].sum(1).max()) if stop > start else 0, 1)

    def cut(t):
        return None if t is None else t[start:stop, :T].clone()

    return replace(
        out,
        tokens=cut(out.tokens),
        senior_authored=cut(out.senior_authored),
        completion_mask=cut(out.completion_mask),
        senior_logprob=cut(out.senior_logprob),
        junior_logprob=cut(out.junior_logprob),
        finish_codes=out.finish_codes[start:stop].clone(),
    )

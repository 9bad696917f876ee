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

from trl.generation.vllm_generation import VLLMGeneration

SLEEP_LEVEL = 1  # keeps the junior's weights (see the module docstring)


class TandemVLLMGeneration(VLLMGeneration):
    """`VLLMGeneration` (colocate mode) whose engine is `build_pair()`'s `LLM`; `.pair` is that `VLLMPair`.

    build_pair: builds the run's pair (called once, from `_init_vllm`). Every other keyword is
    `VLLMGeneration`'s (model, accelerator, processing_class, enable_sleep_mode, ...).
    """

    def __init__(self, build_pair: Callable, **kwargs):
        self._build_pair = build_pair
        self.pair = None
        self._kv_sleeping = False
        super().__init__(mode="colocate", **kwargs)

    def _init_vllm(self):
        # TRL's colocated engine runs in the trainer's process (its external_launcher executor turns vLLM's
        # engine process off); TRL's sync_weights reaches the model there (llm_engine.model_executor).
        os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
        self.pair = self._build_pair()
        self.llm = self.pair.llm
        if self.enable_sleep_mode:
            self.llm.sleep(level=SLEEP_LEVEL)
        self._llm_weights_sleeping = self._kv_sleeping = self.enable_sleep_mode
        self.accelerator.wait_for_everyone()

    def sync_weights(self):
        self.pair.begin_sync()
        try:
            super().sync_weights()
        finally:
            self.pair.end_sync()

    @contextmanager
    def awake(self):
        """The engine's weights and KV cache in device memory for a rollout; asleep again afterwards
        (sleep mode), or nothing at all (no sleep mode)."""
        if not self.enable_sleep_mode:
            yield
            return
        tags = [t for t, asleep in (("weights", self._llm_weights_sleeping), ("kv_cache", self._kv_sleeping)) if asleep]
        if tags:
            self.llm.wake_up(tags=tags)
        self._llm_weights_sleeping = self._kv_sleeping = False
        try:
            yield
        finally:
            self.llm.sleep(level=SLEEP_LEVEL)
            self._llm_weights_sleeping = self._kv_sleeping = True

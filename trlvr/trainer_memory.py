"""The trainer's side of a GPU, from the senior's config alone (no GPU, no weights): what `trlvr train
--dry-run` prints beside the rollout engine's plan (`trlvr.memory.MemoryPlan`), and the check that both fit.

    from trlvr.trainer_memory import TrainerPlan, lora_params
    t = TrainerPlan(stack=Stack.from_config("senior", cfg, "bfloat16"), batch=4, sequence=4024,
                    zero_stage=2, processes=2)
    t.total_bytes; print(t.render()); t.problems("recipes/x.yaml", gpu_memory=80 << 30, engine_share=0.3)

Accounting (per GPU; P the senior's parameters, T the trainable ones, N the processes):
- static, held all through: full fine-tuning with ZeRO (DeepSpeed, mixed precision: the ZeRO paper's
  2P + 2P + 12P): the model's weights (its dtype), gradients (the same dtype), and the optimizer's fp32
  master weights plus Adam's two moments (12 bytes a parameter). Stage 1 shards the optimizer over N,
  stage 2 the gradients too, stage 3 the weights too. Without ZeRO (one process or DDP): torch's AdamW on
  the model's own dtype: weights + gradients + two moments, each in the model's dtype. LoRA: the frozen
  base in the model's dtype; the adapters in fp32 (PEFT upcasts them) with their gradients and two fp32
  moments (16 bytes a trainable parameter). Frozen models beside the senior (a junior for the HF engine,
  TRL's KL reference): their weights.
- the backward peak: static + what the backward holds. With activation checkpointing every layer's
  input is kept (L x B x S x H) and one layer is recomputed and differentiated at a time (about twice
  its working set, B x S x (2 I + 4 H) each); without it every layer keeps its working set. TRL 1.16
  never makes the B x S x V logits: its fused LM head (`trl.trainer.utils.add_fused_lm_head`,
  `trl.kernels.chunked_logprob`) scores `HEAD_TOKENS` x `HEAD_VOCAB` tiles, and its backward holds an
  fp32 gradient of the head's weight (V x H, when the head trains) and of its input (B x S x H) beside
  one tile; the head's backward runs before any layer's, so the two transients are not summed.
- the optimizer-step peak (activations are freed by then): static + DeepSpeed's fp32 copy of the
  gradient partition (ZeRO-1/2, `stage_1_and_2.py`: 4P/N; up to 2P/N more for a flattened bf16 copy
  when the partition is not pre-flattened, printed beside, not counted); torch's AdamW without ZeRO: one
  temporary the size of the weights (its foreach maths).
- the peak: max(backward, step). B is per_device_train_batch_size, S the longest sequence.

Pure arithmetic: no torch. What this file does not know: which run (callers build the plan).
"""

from __future__ import annotations

from dataclasses import dataclass

from trlvr.memory import SAFETY, Stack

ADAM_FP32_BYTES = 12  # mixed-precision Adam under ZeRO: fp32 master weights + two fp32 moments
LORA_BYTES = 16  # an fp32 adapter parameter: weight, gradient, two moments
GRAD_FP32_BYTES = (
    4  # DeepSpeed upcasts the gradient partition to fp32 for the step; TRL's head grads are fp32
)
ASLEEP_BYTES = 1 << 30  # a sleeping vLLM engine's CUDA-graph pools, outside its sleep allocator (~0.5-1 GiB)
HEAD_TOKENS, HEAD_VOCAB = (
    4096,
    32768,
)  # TRL 1.16's fused LM head tile (TOKEN_CHUNK_SIZE x _CHUNKED_LOGPROB_CHUNK_SIZE)


def lora_params(cfg: dict, rank: int, targets: str = "all-linear") -> int:
    """Trainable parameters of LoRA rank `rank` on a decoder config: r x (in + out) per adapted linear layer.
    targets: "all-linear" (q, k, v, o, gate, up, down) or comma-separated module names (q_proj, ...).

    >>> lora_params({"hidden_size": 8, "intermediate_size": 16, "num_attention_heads": 2,
    ...              "num_hidden_layers": 1, "vocab_size": 10}, 1, "q_proj,down_proj")
    40
    """
    c = cfg.get("text_config", cfg) if "num_hidden_layers" not in cfg else cfg
    H, inter, L, hq = (
        c["hidden_size"],
        c["intermediate_size"],
        c["num_hidden_layers"],
        c["num_attention_heads"],
    )
    hkv = c.get("num_key_value_heads") or hq
    D = c.get("head_dim") or H // hq
    shapes = {
        "q_proj": (H, hq * D),
        "k_proj": (H, hkv * D),
        "v_proj": (H, hkv * D),
        "o_proj": (hq * D, H),
        "gate_proj": (H, inter),
        "up_proj": (H, inter),
        "down_proj": (inter, H),
    }
    names = (
        list(shapes)
        if targets.strip() == "all-linear"
        else [t.strip() for t in targets.split(",") if t.strip()]
    )
    return L * rank * sum(sum(shapes[n]) for n in names if n in shapes)


@dataclass(frozen=True)
class TrainerPlan:
    """One training process's GPU memory (module docstring). stack: the senior (`trlvr.memory.Stack`, its
    dtype the training dtype); batch: per_device_train_batch_size; sequence: prompt + completion tokens;
    trainable: None for full fine-tuning, else the LoRA parameters; frozen_bytes: other models' weights."""

    stack: Stack
    batch: int
    sequence: int
    zero_stage: int = 0
    processes: int = 1
    trainable: int | None = None
    checkpointing: bool = True
    frozen_bytes: int = 0

    @property
    def _shard(self) -> int:
        return max(self.processes, 1)

    @property
    def weight_bytes(self) -> int:
        w = self.stack.weight_bytes
        return w // self._shard if self.zero_stage >= 3 and self.trainable is None else w

    @property
    def gradient_bytes(self) -> int:
        if self.trainable is not None:
            return 0  # counted in the adapters' LORA_BYTES
        g = self.stack.weight_bytes
        return g // self._shard if self.zero_stage >= 2 else g

    @property
    def optimizer_bytes(self) -> int:
        if self.trainable is not None:
            return self.trainable * LORA_BYTES // (self._shard if self.zero_stage >= 1 else 1)
        if self.zero_stage == 0:  # torch AdamW on the model's dtype: two moments, no master copy
            return 2 * self.stack.weight_bytes
        return self.stack.params * ADAM_FP32_BYTES // self._shard

    @property
    def static_bytes(self) -> int:
        return self.weight_bytes + self.gradient_bytes + self.optimizer_bytes + self.frozen_bytes

    @property
    def _tokens(self) -> int:
        return self.batch * self.sequence

    @property
    def checkpoint_bytes(self) -> int:
        """Activation checkpointing: every layer's input, kept from the forward to its layer's backward."""
        s = self.stack
        return s.layers * self._tokens * s.hidden * s.bytes_per_value if self.checkpointing else 0

    @property
    def layer_bytes(self) -> int:
        """What the backward works on beside the kept inputs: one layer recomputed and differentiated (about
        twice its working set) with checkpointing; every layer's working set without it."""
        layer = self.stack.activation_bytes(self._tokens)  # one layer's working set (trlvr.memory.Stack)
        return 2 * layer if self.checkpointing else self.stack.layers * layer

    @property
    def head_bytes(self) -> int:
        """TRL's fused LM head in the backward: one tile, the fp32 gradient of its input and, when the head
        trains (full fine-tuning), of its weight. No B x S x V tensor."""
        s, tokens = self.stack, self._tokens
        tile = min(tokens, HEAD_TOKENS) * min(s.vocab, HEAD_VOCAB) * s.bytes_per_value
        weight_grad = s.vocab * s.hidden * GRAD_FP32_BYTES if self.trainable is None else 0
        return tile + tokens * s.hidden * GRAD_FP32_BYTES + weight_grad

    @property
    def activation_bytes(self) -> int:
        """The backward's own peak above static: the kept inputs plus the larger of the head's and a layer's
        transients (the head's backward is over before the first layer's starts)."""
        return self.checkpoint_bytes + max(self.layer_bytes, self.head_bytes)

    @property
    def backward_bytes(self) -> int:
        return self.static_bytes + self.activation_bytes

    @property
    def step_transient_bytes(self) -> int:
        """What the optimizer step adds to static: DeepSpeed's fp32 copy of this rank's gradient partition
        (ZeRO); torch AdamW's one weights-sized temporary (no ZeRO); the adapters' fp32 temporary (LoRA)."""
        if self.trainable is not None:
            return self.trainable * GRAD_FP32_BYTES
        if self.zero_stage == 0:
            return self.stack.weight_bytes
        return self.stack.params * GRAD_FP32_BYTES // self._shard

    @property
    def step_extra_bytes(self) -> int:
        """Up to this much more at a ZeRO-1/2 step whose gradient partition is not pre-flattened (a flattened
        copy in the model's dtype); printed, not counted in the peak."""
        if self.trainable is not None or self.zero_stage not in (1, 2):
            return 0
        return self.stack.weight_bytes // self._shard

    @property
    def step_bytes(self) -> int:
        return self.static_bytes + self.step_transient_bytes

    @property
    def total_bytes(self) -> int:
        """The peak: max(backward, optimizer step)."""
        return max(self.backward_bytes, self.step_bytes)

    @property
    def saved_weight_bytes(self) -> int:
        """One checkpoint's weights on disk: the senior in its dtype, or the fp32 adapters (LoRA)."""
        return self.stack.weight_bytes if self.trainable is None else self.trainable * GRAD_FP32_BYTES

    @property
    def resume_state_bytes(self) -> int:
        """One checkpoint's resume state on disk, all processes together: DeepSpeed's module states (the
        weights again) and its optimizer partitions (fp32 master + two moments); torch AdamW's two moments
        in the weights' dtype (no ZeRO); the adapters' two fp32 moments (LoRA)."""
        if self.trainable is not None:
            return 2 * self.trainable * GRAD_FP32_BYTES
        if self.zero_stage == 0:
            return 2 * self.stack.weight_bytes
        return self.stack.weight_bytes + self.stack.params * ADAM_FP32_BYTES

    def disk_bytes(self, checkpoints: int, keep_resume: int = 2) -> int:
        """A run's output on disk: `checkpoints` checkpoints' weights, the resume state in the `keep_resume`
        newest only (`trlvr.training.checkpoints.prune_resume_state`), and final/'s weights."""
        return (checkpoints + 1) * self.saved_weight_bytes + min(
            checkpoints, keep_resume
        ) * self.resume_state_bytes

    def room(self, gpu_memory: int, engine_share: float | None, sleep: bool = False) -> int:
        """What the trainer may use of a GPU of `gpu_memory` bytes beside an engine that takes `engine_share`
        of it (vLLM reserves its share whole); None: no engine on this GPU beside it (backend hf). sleep: the
        engine sleeps while the trainer works (vLLM's sleep mode, level 1: weights to the host, KV dropped),
        leaving only its CUDA-graph pools (`ASLEEP_BYTES`)."""
        if sleep and engine_share:
            return gpu_memory - ASLEEP_BYTES
        return int(gpu_memory * (1 - (engine_share or 0.0)))

    def problems(
        self,
        where: str,
        gpu_memory: int | None,
        engine_share: float | None,
        share_setting: str = "vllm_gpu_memory_utilization",
        sleep: bool = False,
    ) -> list[str]:
        """One line naming the setting to change when the trainer cannot fit beside the engine; [] when it
        can. With sleep mode both phases count: generating (the trainer's static state beside the engine's
        whole share) and training (the trainer's peak beside the sleeping engine)."""
        if gpu_memory is None:
            return []
        if sleep and engine_share and self.static_bytes + engine_share * gpu_memory > SAFETY * gpu_memory:
            return [
                f"{where}: while the engine generates, the trainer's static {_gib(self.static_bytes)} "
                f"(weights, gradients, optimizer) and the engine's {share_setting} {engine_share:g} x "
                f"{_gib(gpu_memory)} need more than {SAFETY:.0%} of {_gib(gpu_memory)} (the estimate's "
                f"margin): lower {share_setting}"
            ]
        room = self.room(gpu_memory, engine_share, sleep)
        if self.total_bytes <= SAFETY * room:
            return []
        beside = (
            f" beside the {'sleeping ' if sleep else ''}engine's {share_setting} {engine_share:g}"
            if engine_share
            else ""
        )
        if self.backward_bytes > self.step_bytes:
            fix = "lower per_device_train_batch_size (or max_completion_length)"
        elif self.trainable is None and (self.zero_stage < 2 or self._shard == 1):
            fix = "shard it (DeepSpeed ZeRO-2/3 over more processes) or train LoRA (use_peft)"
        else:
            fix = "train on more GPUs or with LoRA (use_peft)"
        if engine_share and not sleep:
            fix += f", or lower {share_setting} (or turn on vllm_enable_sleep_mode)"
        return [
            f"{where}: the trainer needs ~{_gib(self.total_bytes)} per GPU ({self.summary()}), more than "
            f"{SAFETY:.0%} of the {_gib(room)} left of {_gib(gpu_memory)}{beside} (the estimate's margin): "
            f"{fix}"
        ]

    def summary(self) -> str:
        extra = f" (up to +{_gib(self.step_extra_bytes)} unflattened)" if self.step_extra_bytes else ""
        transient = (
            "fp32 gradient partition" if self.zero_stage and self.trainable is None else "step temporaries"
        )
        return (
            f"static {_gib(self.static_bytes)}: weights {_gib(self.weight_bytes + self.frozen_bytes)}, "
            f"gradients {_gib(self.gradient_bytes)}, optimizer {_gib(self.optimizer_bytes)}; backward peak "
            f"{_gib(self.backward_bytes)} (+ checkpoints {_gib(self.checkpoint_bytes)}, + max(layer "
            f"{_gib(self.layer_bytes)}, LM head {_gib(self.head_bytes)})); step peak {_gib(self.step_bytes)} "
            f"(+ {transient} {_gib(self.step_transient_bytes)}{extra})"
        )

    def render(self) -> str:
        how = "LoRA" if self.trainable is not None else "full fine-tuning"
        zero = (
            f"ZeRO-{self.zero_stage} over {self.processes} processes"
            if self.zero_stage
            else (f"{self.processes} process(es), no ZeRO")
        )
        return "\n".join(
            [
                f"trainer (per GPU; {how}, {zero}, {self.stack.bytes_per_value}-byte weights, batch "
                f"{self.batch} x {self.sequence} "
                f"tokens{', activation checkpointing' if self.checkpointing else ''})",
                f"  {self.summary()}",
                (
                    f"  peak ~{_gib(self.total_bytes)} = max(backward, step) (activations and transients: "
                    "estimates)"
                ),
            ]
        )

    def as_dict(self) -> dict:
        return {
            "weight_bytes": self.weight_bytes,
            "frozen_bytes": self.frozen_bytes,
            "gradient_bytes": self.gradient_bytes,
            "optimizer_bytes": self.optimizer_bytes,
            "static_bytes": self.static_bytes,
            "activation_bytes_estimate": self.activation_bytes,
            "backward_bytes": self.backward_bytes,
            "step_bytes": self.step_bytes,
            "step_extra_bytes": self.step_extra_bytes,
            "total_bytes": self.total_bytes,
            "zero_stage": self.zero_stage,
            "processes": self.processes,
            "trainable": self.trainable,
            "batch": self.batch,
            "sequence": self.sequence,
        }


def _gib(n: int) -> str:
    return f"{n / 2**30:.1f} GiB"

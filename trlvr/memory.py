"""The memory plan of a run's rollout engine, computed from model configs alone (no GPU, no weights).

    from trlvr.memory import MemoryPlan, Stack, gpu_bytes
    plan = MemoryPlan(stacks=(Stack.from_config("senior", cfg_s), Stack.from_config("junior", cfg_j)),
                      prompt_len=1024, completion_len=3000, max_num_seqs=256, share=0.3,
                      gpu_memory=gpu_bytes("H100"), rows=64)
    print(plan.render()); plan.check("recipes/x.yaml")   # one line naming the setting to change

What vLLM does with a composite engine (both models' attention layers in one KV spec, one block
table, so every token holds both stacks' K and V): it may use `share x total` bytes of the GPU;
from that it subtracts the weights of both stacks, the peak of a profiling forward (activations,
logits and the sampler) and memory outside torch (CUDA context, CUDA graphs), and sizes the KV
cache with what is left. It refuses to start when one sequence of `max_model_len` tokens does not
fit. This module counts the same terms. The weights are exact (counted from the config's shapes,
or read from the checkpoint's index); the profiling peak and the outside-torch memory are
estimates (`ACTIVATION_*`, `OUTSIDE_TORCH_BYTES`), printed as such: `trlvr smoke` puts vLLM's own
KV report beside this plan on a GPU.

Pure arithmetic over dicts: no torch, no vLLM. What this file does not know: which models a run
uses (the callers read the configs), how a GPU is found (callers pass its size).
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from pathlib import Path

from trlvr import kinds as K
from trlvr.errors import UserError

KNOWN_CONFIGS = Path(__file__).resolve().parent / "configs" / "models"
DTYPE_BYTES = {
    "float32": 4,
    "float": 4,
    "fp32": 4,
    "bfloat16": 2,
    "bf16": 2,
    "float16": 2,
    "fp16": 2,
    "half": 2,
    "fp8": 1,
    "float8": 1,
}
# GPU memory as the devices report it (nvidia-smi's MiB), by name; `--gpu-memory` also takes a size
GPUS_MIB = {
    "H200": 143771,
    "H100": 81559,
    "H100-80GB": 81559,
    "A100": 81920,
    "A100-80GB": 81920,
    "A100-40GB": 40960,
    "L40S": 46068,
    "A10G": 23028,
    "RTX4090": 24564,
    "A6000": 49140,
}
OUTSIDE_TORCH_BYTES = 2 << 30  # estimate: CUDA context, NCCL, CUDA graphs' pools (vLLM reports its own)
# vLLM's max_num_batched_tokens: every trlvr engine is built with it (`trlvr.vllm.pair.EngineOptions`), so the
# plan's profiling forward (that many tokens) is the engine's (vLLM's own default is 16384 on an H100/H200)
BATCHED_TOKENS = 8192
SAFETY = 0.95  # a plan that needs more than this share of what it can have is refused as too tight


def parse_size(text: str) -> int:
    """Bytes of '80GB' (10^9), '80GiB' (2^30), '81559MiB', '1.5TB', or a GPU name ('H200', 'A100-40GB')."""
    t = str(text).strip()
    key = t.upper().replace(" ", "").replace("NVIDIA", "").lstrip("-")
    if key in GPUS_MIB:
        return GPUS_MIB[key] << 20
    m = re.fullmatch(r"(\d+(?:\.\d+)?)\s*([KMGT]i?B?)", t, flags=re.IGNORECASE)
    if not m:
        raise UserError(
            f"--gpu-memory {text!r}: expected a size such as 80GB or 141GiB, or a GPU name "
            f"({', '.join(sorted(GPUS_MIB))})"
        )
    value, unit = float(m.group(1)), m.group(2).upper().rstrip("B")
    power = "KMGT".index(unit[0]) + 1
    size = value * (1024**power if unit.endswith("I") else 1000**power)
    if not size > 0 or not math.isfinite(size):
        raise UserError(f"--gpu-memory {text!r}: must be a positive size")
    return int(size)


def gpu_bytes(text: str | None) -> int | None:
    return None if text is None else parse_size(text)


def read_config(path: str) -> dict:
    """A model's config.json: from a folder, from the HF cache, or shipped (`trlvr/configs/models/`:
    the published configs of the models the recipes name, so a plan runs with no network)."""
    folder = Path(path)
    if (folder / "config.json").is_file():
        return json.loads((folder / "config.json").read_text())
    shipped = KNOWN_CONFIGS / f"{str(path).replace('/', '--')}.json"
    if shipped.is_file():
        return json.loads(shipped.read_text())
    try:
        from huggingface_hub import try_to_load_from_cache

        cached = try_to_load_from_cache(str(path), "config.json")
    except Exception:  # not a hub id, or no hub library: no cached config
        cached = None
    if isinstance(cached, str):
        return json.loads(Path(cached).read_text())
    raise UserError(
        f"{path}: no config.json to plan memory with (a model folder, a cached hub model, or one of "
        f"{', '.join(p.stem.replace('--', '/') for p in sorted(KNOWN_CONFIGS.glob('*.json')))})"
    )


def _text_config(cfg: dict) -> dict:
    return cfg.get("text_config", cfg) if "num_hidden_layers" not in cfg else cfg


def param_count(cfg: dict) -> int:
    """Parameters of a decoder-only config (Llama / Qwen / Mistral shapes), counted from its shapes:
    attention q, k, v, o (+ Qwen3's q/k norms), gated MLP, two norms per layer, embeddings (the LM head
    once more unless tied), the final norm. Biases are not counted (Qwen2's qkv biases: < 0.1%)."""
    c = _text_config(cfg)
    H, inter, V, L = c["hidden_size"], c["intermediate_size"], c["vocab_size"], c["num_hidden_layers"]
    hq = c["num_attention_heads"]
    hkv = c.get("num_key_value_heads") or hq
    D = c.get("head_dim") or H // hq
    qk_norm = 2 * D if c.get("model_type") in ("qwen3", "qwen3_moe") else 0
    layer = H * hq * D + 2 * H * hkv * D + hq * D * H + 3 * H * inter + 2 * H + qk_norm
    embed = V * H * (1 if c.get("tie_word_embeddings", False) else 2)
    return L * layer + embed + H


def dtype_bytes(name: str | None, cfg: dict) -> int:
    n = name if name not in (None, "auto") else cfg.get("torch_dtype") or cfg.get("dtype") or "float32"
    n = str(n).removeprefix("torch.")
    if n not in DTYPE_BYTES:
        raise UserError(f"dtype {n!r}: expected one of {', '.join(DTYPE_BYTES)}")
    return DTYPE_BYTES[n]


@dataclass(frozen=True)
class Stack:
    """One model's share of the engine: its weights and the K and V it keeps per token."""

    name: str
    params: int
    layers: int
    kv_heads: int
    head_dim: int
    hidden: int
    intermediate: int
    vocab: int
    bytes_per_value: int
    max_positions: int | None = None

    @classmethod
    def from_config(cls, name: str, cfg: dict, dtype: str | None = None) -> Stack:
        c = _text_config(cfg)
        hq = c["num_attention_heads"]
        return cls(
            name=name,
            params=param_count(c),
            layers=c["num_hidden_layers"],
            kv_heads=c.get("num_key_value_heads") or hq,
            head_dim=c.get("head_dim") or c["hidden_size"] // hq,
            hidden=c["hidden_size"],
            intermediate=c["intermediate_size"],
            vocab=c["vocab_size"],
            bytes_per_value=dtype_bytes(dtype, c),
            max_positions=c.get("max_position_embeddings"),
        )

    @property
    def weight_bytes(self) -> int:
        return self.params * self.bytes_per_value

    @property
    def kv_bytes_per_token(self) -> int:
        return 2 * self.layers * self.kv_heads * self.head_dim * self.bytes_per_value

    def activation_bytes(self, tokens: int) -> int:
        """Estimate of one forward's peak over `tokens` tokens: the MLP's gate and up projections and
        a few hidden-sized buffers per token."""
        return tokens * (2 * self.intermediate + 4 * self.hidden) * self.bytes_per_value


def derived_max_model_len(prompt_len: int | None, completion_len: int) -> int | None:
    """The context an engine needs for a run: its longest prompt plus its completion budget."""
    return None if prompt_len is None else int(prompt_len) + int(completion_len)


@dataclass(frozen=True)
class MemoryPlan:
    """A rollout engine's memory (module docstring). stacks: the engine's models (one for solo, two for a
    tandem composite); prompt_len / completion_len: the run's lengths; max_model_len: the engine's
    context (None: derived from the lengths); rows: sequences one generate call sends (the batch);
    share: vLLM's gpu_memory_utilization; gpu_memory: the device's bytes (None: not checked)."""

    stacks: tuple[Stack, ...]
    prompt_len: int | None
    completion_len: int
    max_num_seqs: int = 256
    share: float = 0.9
    gpu_memory: int | None = None
    max_model_len: int | None = None
    rows: int | None = None
    tensor_parallel: int = 1  # the engine's stacks sharded over this many GPUs: the plan is one GPU's share
    share_setting: str = "vllm_gpu_memory_utilization"
    length_setting: str = "vllm_max_model_length"
    lengths_hint: str = "max_prompt_length or max_completion_length"

    @property
    def context(self) -> int | None:
        return self.max_model_len or derived_max_model_len(self.prompt_len, self.completion_len)

    @property
    def weight_bytes(self) -> int:
        """One GPU's share of the weights (tensor parallelism shards every linear layer)."""
        return sum(s.weight_bytes for s in self.stacks) // self.tensor_parallel

    @property
    def kv_bytes_per_token(self) -> int:
        """One GPU's share of a token's K and V (tensor parallelism shards the KV heads)."""
        return sum(s.kv_bytes_per_token for s in self.stacks) // self.tensor_parallel

    @property
    def processor_bytes(self) -> int:
        """The tandem processor's own buffers: per slot, a few int64 state fields; per step the junior's
        logits (B x V, the model's dtype) stashed for the author swap. Nothing scales with the context."""
        if len(self.stacks) < 2:
            return 0
        junior = self.stacks[1]
        return self.max_num_seqs * (16 * 8) + self.max_num_seqs * junior.vocab * junior.bytes_per_value

    @property
    def activation_bytes(self) -> int:
        """Estimate of vLLM's profiling peak: one forward of BATCHED_TOKENS tokens through the largest
        stack, plus fp32 logits and sampler buffers for max_num_seqs rows of every stack's head."""
        forward = max(s.activation_bytes(BATCHED_TOKENS) for s in self.stacks)
        logits = sum(self.max_num_seqs * s.vocab * 4 * 2 for s in self.stacks)
        return forward + logits

    @property
    def budget_bytes(self) -> int | None:
        return None if self.gpu_memory is None else int(self.share * self.gpu_memory)

    @property
    def kv_budget_bytes(self) -> int | None:
        if self.budget_bytes is None:
            return None
        used = self.weight_bytes + self.activation_bytes + self.processor_bytes + OUTSIDE_TORCH_BYTES
        return self.budget_bytes - used

    @property
    def kv_tokens(self) -> int | None:
        kv = self.kv_budget_bytes
        return None if kv is None else max(kv, 0) // self.kv_bytes_per_token

    @property
    def concurrency(self) -> int | None:
        """Full-length sequences the KV cache holds at once (min with max_num_seqs)."""
        if self.kv_tokens is None or not self.context:
            return None
        return min(self.kv_tokens // self.context, self.max_num_seqs)

    def problems(self, where: str) -> list[str]:
        """Each reason this engine cannot start, one line each, naming the setting to change."""
        out = []
        limit = min((s.max_positions for s in self.stacks if s.max_positions), default=None)
        ctx = self.context
        if ctx is None:
            out.append(
                f"{where}: the prompt length is unknown: set max_prompt_length or {self.length_setting}"
            )
            return out
        if limit is not None and ctx > limit:
            out.append(
                f"{where}: a context of {ctx} tokens (prompt + completion) is beyond the models' {limit} "
                f"positions: lower {self.lengths_hint}"
            )
        kv = self.kv_budget_bytes
        if kv is None:
            return out
        if kv <= 0:
            out.append(
                f"{where}: {self.share_setting} {self.share:g} of {_gb(self.gpu_memory)} is "
                f"{_gb(self.budget_bytes)}, less than the weights ({_gb(self.weight_bytes)}) and the "
                "engine's own memory "
                f"({_gb(self.activation_bytes + self.processor_bytes + OUTSIDE_TORCH_BYTES)}): raise "
                f"{self.share_setting}"
            )
        elif ctx * self.kv_bytes_per_token > SAFETY * kv:
            need = ctx * self.kv_bytes_per_token
            out.append(
                f"{where}: one sequence of {ctx} tokens needs {_gb(need)} of KV for {len(self.stacks)} "
                f"stack(s), more than the {_gb(kv)} left in {self.share_setting} {self.share:g} of "
                f"{_gb(self.gpu_memory)}: lower {self.length_setting} (or the run's lengths) or raise "
                f"{self.share_setting}"
            )
        return out

    def check(self, where: str) -> None:
        found = self.problems(where)
        if found:
            raise UserError(found[0])

    def as_dict(self) -> dict:
        return {
            "stacks": {
                s.name: {
                    "params": s.params,
                    "weight_bytes": s.weight_bytes,
                    "kv_bytes_per_token": s.kv_bytes_per_token,
                }
                for s in self.stacks
            },
            "context": self.context,
            "max_num_seqs": self.max_num_seqs,
            "share": self.share,
            "gpu_memory": self.gpu_memory,
            "budget_bytes": self.budget_bytes,
            "weight_bytes": self.weight_bytes,
            "activation_bytes_estimate": self.activation_bytes,
            "outside_torch_bytes_estimate": OUTSIDE_TORCH_BYTES,
            "processor_bytes": self.processor_bytes,
            "kv_budget_bytes": self.kv_budget_bytes,
            "kv_bytes_per_token": self.kv_bytes_per_token,
            "kv_tokens": self.kv_tokens,
            "concurrency": self.concurrency,
            "rows": self.rows,
            "tensor_parallel": self.tensor_parallel,
        }

    def render(self, engine_share: bool = True) -> str:
        """The plan under the heading `memory plan`, a few lines. engine_share False: the backend's engine
        takes no share of the GPU (backend hf), so there is no budget to plan."""
        lines = ["memory plan"]
        for s in self.stacks:
            size = f"{s.params / 1e9:.2f}B" if s.params >= 1e8 else f"{s.params / 1e6:.2f}M"
            lines.append(
                f"  {s.name}: {size} params, weights {_gb(s.weight_bytes)}, "
                f"KV {s.kv_bytes_per_token:,} B/token ({s.layers} layers x {s.kv_heads} KV heads x "
                f"{s.head_dim})"
            )
        ctx = self.context
        how = "" if self.max_model_len else " (derived: longest prompt + completion budget)"
        tp = f" per GPU (tensor parallel {self.tensor_parallel})" if self.tensor_parallel > 1 else ""
        lines.append(
            f"  longest sequence: {ctx if ctx else 'unknown'} tokens{how}; KV per token "
            f"{self.kv_bytes_per_token:,} B{tp} (every stack keeps every token)"
        )
        if not engine_share:
            lines.append(
                "  no engine share (backend hf: trlvr's engine sizes its decode sub-batches to the memory "
                "free at run time)"
            )
            return "\n".join(lines)
        if self.budget_bytes is None:
            lines.append(
                "  GPU memory: not given (--gpu-memory 80GB or a name such as H200 checks that it fits)"
            )
            return "\n".join(lines)
        lines.append(
            f"  engine budget: {self.share:g} x {_gb(self.gpu_memory)} = {_gb(self.budget_bytes)}; weights "
            f"{_gb(self.weight_bytes)}, profiling peak ~{_gb(self.activation_bytes)} (estimate), outside "
            f"torch ~{_gb(OUTSIDE_TORCH_BYTES)} (estimate), processor {_gb(self.processor_bytes)}"
        )
        kv = self.kv_budget_bytes
        lines.append(
            f"  KV cache: {_gb(max(kv, 0))} = {self.kv_tokens:,} tokens"
            + (f" = {self.kv_tokens / ctx:.1f} full-length sequences at once" if ctx else "")
        )
        if self.concurrency is not None and self.rows and self.concurrency < self.rows:
            lines.append(
                f"  note: a generate call sends {self.rows} rows and {self.concurrency} fit at full length: "
                f"vLLM queues or pre-empts the rest (raise {self.share_setting} to run them together)"
            )
        return "\n".join(lines)


def _gb(n: int | None) -> str:
    return "?" if n is None else f"{n / 2**30:.1f} GiB"


def _size_problem(text: str) -> str | None:
    try:
        parse_size(text)
    except UserError as e:  # "--gpu-memory 'x': expected a size ..." -> the rule alone
        return str(e).split(": ", 1)[-1]
    return None


# A GPU's memory, as `--gpu-memory` and `gpu_memory:` take it (trlvr.memory.parse_size): a size such as 80GB
# or 141GiB, or a GPU name such as H200. GPU_MEMORY keeps the text; GPU_BYTES hands on the bytes.
_SIZE = "a size such as 80GB or 141GiB, or a GPU name such as H200"
GPU_MEMORY = K.text_kind("memory size", _SIZE, _size_problem)
GPU_BYTES = K.text_kind("memory size", _SIZE, _size_problem, finish=parse_size)

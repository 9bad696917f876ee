"""Small Qwen3 models for the toy world and a plain-PyTorch SFT loop (bf16 autocast on CPU).

The loss covers completion tokens only (the chain of thought and its EOS), never the prompt.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
from transformers import Qwen3Config, Qwen3ForCausalLM


@dataclass(frozen=True)
class ModelSize:
    hidden: int
    layers: int
    heads: int = 4
    intermediate_mult: int = 3


SENIOR_SIZE = ModelSize(hidden=128, layers=4)
JUNIOR_SIZE = ModelSize(hidden=64, layers=2)


def build_model(tokenizer, size: ModelSize, seed: int = 0, max_positions: int = 256) -> Qwen3ForCausalLM:
    """A randomly initialised Qwen3ForCausalLM with tied embeddings, sized for `tokenizer`."""
    torch.manual_seed(seed)
    cfg = Qwen3Config(
        vocab_size=len(tokenizer),
        hidden_size=size.hidden,
        intermediate_size=size.intermediate_mult * size.hidden,
        num_hidden_layers=size.layers,
        num_attention_heads=size.heads,
        num_key_value_heads=size.heads,
        head_dim=size.hidden // size.heads,
        max_position_embeddings=max_positions,
        tie_word_embeddings=True,
        bos_token_id=tokenizer.eos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        rope_theta=10000.0,
    )
    model = Qwen3ForCausalLM(cfg).float()
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model


def n_params(model) -> int:
    """Distinct parameters (tied embeddings counted once)."""
    return sum(p.numel() for p in model.parameters())


def encode_pairs(tokenizer, pairs: list[tuple[str, str]]) -> list[tuple[list[int], list[int]]]:
    """(prompt, completion) texts -> (prompt ids, completion ids + EOS)."""
    prompts = tokenizer([p for p, _ in pairs], add_special_tokens=False)["input_ids"]
    comps = tokenizer([c for _, c in pairs], add_special_tokens=False)["input_ids"]
    eos = tokenizer.eos_token_id
    return [(p, c + [eos]) for p, c in zip(prompts, comps, strict=True)]


def _collate(batch: list[tuple[list[int], list[int]]], pad_id: int):
    T = max(len(p) + len(c) for p, c in batch)
    ids = torch.full((len(batch), T), pad_id, dtype=torch.long)
    labels = torch.full((len(batch), T), -100, dtype=torch.long)
    mask = torch.zeros((len(batch), T), dtype=torch.long)
    for i, (p, c) in enumerate(batch):  # right padding
        seq = p + c
        ids[i, : len(seq)] = torch.tensor(seq)
        mask[i, : len(seq)] = 1
        labels[i, len(p) : len(seq)] = torch.tensor(c)
    return ids, mask, labels


@dataclass(frozen=True)
class SFTSettings:
    """How `sft` trains: up to `steps` AdamW steps of `batch_size` rows, peak `lr` after a linear
    `warmup`, then cosine decay to 10% of it; `pad_id` pads the batches; `seed` fixes the batches and
    the initial draws. bf16: autocast to bfloat16; None = only where the CPU computes bf16 natively
    (`native_bf16`): on an AVX2-only CPU, bf16 autocast is emulated and measured 6.3x slower than
    fp32 (2.23 vs 0.36 s per junior step, batch 64, 2 threads), which made a from-scratch world
    take over an hour."""

    steps: int
    batch_size: int = 64
    lr: float = 3e-3
    warmup: int = 30
    weight_decay: float = 0.01
    pad_id: int = 1
    seed: int = 0
    bf16: bool | None = None

    def lr_at(self, step: int) -> float:
        """The learning rate of step `step` (0-based): linear warmup, then cosine decay to 10%.

        >>> s = SFTSettings(steps=100, lr=1.0, warmup=10)
        >>> s.lr_at(0), s.lr_at(9), round(s.lr_at(99), 3)
        (0.1, 1.0, 0.1)
        """
        if step < self.warmup:
            return self.lr * (step + 1) / self.warmup
        frac = (step - self.warmup) / max(1, self.steps - self.warmup)
        return self.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * frac)))


def sft(
    model,
    sample_batch: Callable[[random.Random, int], list[tuple[list[int], list[int]]]],
    settings: SFTSettings,
    progress: Callable[[int, float], None] | None = None,
    should_stop: Callable[[int], bool] | None = None,
) -> dict:
    """Train `model` as `settings` say on batches from `sample_batch(rng, settings.batch_size)`.

    `should_stop(steps_done)` is asked after every step and ends training early when it returns
    True (e.g. a validation target is met). The bf16 choice is returned, so a world's card records it.
    Returns {"loss": last mean loss, "seconds", "steps": steps taken, "bf16": the choice}.
    """
    steps, pad_id = settings.steps, settings.pad_id
    bf16 = native_bf16() if settings.bf16 is None else settings.bf16
    rng = random.Random(settings.seed)
    torch.manual_seed(settings.seed)
    opt = torch.optim.AdamW(
        model.parameters(), lr=settings.lr, weight_decay=settings.weight_decay, betas=(0.9, 0.98)
    )

    model.train()
    t0, ema = time.perf_counter(), None
    for step in range(steps):
        for g in opt.param_groups:
            g["lr"] = settings.lr_at(step)
        ids, mask, labels = _collate(sample_batch(rng, settings.batch_size), pad_id)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            logits = model(input_ids=ids, attention_mask=mask).logits
        loss = torch.nn.functional.cross_entropy(
            logits[:, :-1].float().reshape(-1, logits.shape[-1]), labels[:, 1:].reshape(-1), ignore_index=-100
        )
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        ema = loss.item() if ema is None else 0.95 * ema + 0.05 * loss.item()
        if progress is not None:
            progress(step, ema)
        if should_stop is not None and should_stop(step + 1):
            break
    model.eval()
    return {
        "loss": float(ema if ema is not None else float("nan")),
        "seconds": time.perf_counter() - t0,
        "steps": step + 1 if steps else 0,
        "bf16": bool(bf16),
    }


def native_bf16() -> bool:
    """Whether this CPU computes bfloat16 natively (oneDNN's check: AVX512-BF16 or AMX)."""
    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):
        return False

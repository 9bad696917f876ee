"""A Mixture-of-Experts model loaded with `output_router_logits=True` (as TRL's MoE recipes load one, for its
load-balancing loss in training) generates through the tandem engine: no router loss in generation, the setting
back as it was afterwards."""

from __future__ import annotations

import pytest
import torch
from helpers import PROMPTS, encode
from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM

from trlvr.engine import Sampling, TandemGenerator, WordSchedule
from trlvr.engine.options import DecodeOptions


def _moe(vocab_size: int, seed: int) -> Qwen3MoeForCausalLM:
    torch.manual_seed(seed)
    config = Qwen3MoeConfig(
        vocab_size=vocab_size,
        hidden_size=16,
        intermediate_size=32,
        moe_intermediate_size=16,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=8,
        num_experts=4,
        num_experts_per_tok=2,
        output_router_logits=True,
    )
    return Qwen3MoeForCausalLM(config).eval()


@pytest.mark.parametrize("decode", ["eager", "static"])
def test_moe_with_router_logits_generates(tokenizer, decode):
    senior, junior = _moe(len(tokenizer), 0), _moe(len(tokenizer), 1)
    gen = TandemGenerator(senior, junior, tokenizer, options=DecodeOptions(decode=decode, compile=False))
    out = gen.generate(encode(tokenizer, PROMPTS), WordSchedule(), Sampling(12, seed=0))
    assert out.completion_mask.sum() > 0
    assert senior.config.output_router_logits and junior.config.output_router_logits  # restored

"""Shared fixtures: a tokenizer trained here and tiny random Qwen3 / Llama models.

Nothing is downloaded: models are built from configs, the tokenizer from a short corpus.
"""

from __future__ import annotations

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM, Qwen3Config, Qwen3ForCausalLM

from trlvr.toy.tokenizer import train_bpe_tokenizer

# One thread: tiny models gain nothing from more, and parallel test jobs would oversubscribe 2 cores.
torch.set_num_threads(1)

CORPUS = [
    "The cat sat on the mat.\n\nThen the dog ran to the park.\n\n",
    "Let's think step by step. 12 plus 30 is 42.\n\nSo the answer is \\boxed{42}.",
    "A train leaves at 3 pm and travels 60 miles per hour for 2 hours.\n\n",
    "<<47+18=65>> <<65*2=130>>\n\n\\boxed{130}",
] * 20


@pytest.fixture(scope="session")
def tokenizer():
    return train_bpe_tokenizer(CORPUS, vocab_size=320)


def tiny_model(arch: str, vocab_size: int, seed: int, hidden: int = 64, layers: int = 2):
    torch.manual_seed(seed)
    common = dict(
        vocab_size=vocab_size,
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        tie_word_embeddings=True,
    )
    if arch == "qwen3":
        cfg = Qwen3Config(head_dim=hidden // 4, **common)
        model = Qwen3ForCausalLM(cfg)
    elif arch == "llama":
        model = LlamaForCausalLM(LlamaConfig(**common))
    else:
        raise ValueError(arch)
    return model.float().eval()


@pytest.fixture(scope="session", params=["qwen3", "llama"])
def arch(request):
    return request.param


@pytest.fixture(scope="session")
def models(tokenizer, arch):
    """(senior, junior): same architecture and vocabulary, different random weights and sizes."""
    senior = tiny_model(arch, len(tokenizer), seed=0, hidden=64, layers=2)
    junior = tiny_model(arch, len(tokenizer), seed=1, hidden=32, layers=1)
    return senior, junior

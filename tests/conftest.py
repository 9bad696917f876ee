"""Shared fixtures: a tokenizer trained here and tiny random Qwen3 / Llama models (see helpers.py).

Nothing is downloaded: models are built from configs, the tokenizer from a short corpus.
"""

from __future__ import annotations

import pytest
import torch
from helpers import tiny_model, tiny_tokenizer

# One thread: tiny models gain nothing from more, and parallel test jobs would oversubscribe 2 cores.
torch.set_num_threads(1)


@pytest.fixture(scope="session")
def tokenizer():
    return tiny_tokenizer()


@pytest.fixture(scope="session", params=["qwen3", "llama"])
def arch(request):
    return request.param


@pytest.fixture(scope="session")
def models(tokenizer, arch):
    """(senior, junior): same architecture and vocabulary, different random weights and sizes."""
    senior = tiny_model(arch, len(tokenizer), seed=0, hidden=64, layers=2)
    junior = tiny_model(arch, len(tokenizer), seed=1, hidden=32, layers=1)
    return senior, junior

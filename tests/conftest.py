"""Shared fixtures: a tokenizer trained here and tiny random Qwen3 / Llama models (see helpers.py).

Nothing is downloaded: models are built from configs, the tokenizer from a short corpus.
"""

from __future__ import annotations

import pytest
import torch
from helpers import TOY_RUN_PROBLEMS, copy_toy_pair, copy_toy_run, tiny_model, tiny_tokenizer, toy_run_argv

# One thread: tiny models gain nothing from more, and parallel test jobs would oversubscribe 2 cores.
torch.set_num_threads(1)


@pytest.fixture(scope="session")
def tokenizer():
    return tiny_tokenizer()


# Both architectures where their KV-cache layouts matter (the engine: tests/test_engine*.py); elsewhere qwen3 alone.
# A test's own `@pytest.mark.parametrize("arch", ..., indirect=True)` chooses for itself.
BOTH_ARCHS = ("test_engine",)


def pytest_generate_tests(metafunc):
    if "arch" not in metafunc.fixturenames:
        return
    for mark in metafunc.definition.iter_markers("parametrize"):
        names = mark.args[0].split(",") if isinstance(mark.args[0], str) else mark.args[0]
        if "arch" in [n.strip() for n in names]:
            return
    both = metafunc.module.__name__.startswith(BOTH_ARCHS)
    metafunc.parametrize("arch", ["qwen3", "llama"] if both else ["qwen3"], indirect=True, scope="session")


@pytest.fixture(scope="session")
def arch(request):
    return request.param


@pytest.fixture(scope="session")
def models(tokenizer, arch):
    """(senior, junior): same architecture and vocabulary, different random weights and sizes."""
    senior = tiny_model(arch, len(tokenizer), seed=0, hidden=64, layers=2)
    junior = tiny_model(arch, len(tokenizer), seed=1, hidden=32, layers=1)
    return senior, junior


@pytest.fixture(scope="session")
def trained_toy(tmp_path_factory):
    """The shipped toy pair trained once per session, 2 steps, a checkpoint each (`helpers.toy_run_argv`): the
    folder holding senior/, junior/, train.jsonl and run/. Read-only to tests: take `toy_run` (a copy)."""
    from trlvr.cli.main import main

    root = copy_toy_pair(tmp_path_factory.mktemp("toy-run"), TOY_RUN_PROBLEMS)
    assert main(toy_run_argv(root, "--max_steps", "2")) == 0
    return root


@pytest.fixture
def toy_run(trained_toy, tmp_path):
    """A finished 2-step toy run of one's own (tmp_path/run: checkpoint-1, checkpoint-2, final/; beside it the
    senior/, junior/ and train.jsonl it was trained on): resume, force, tear or select it with
    `helpers.toy_run_argv(tmp_path, ...)` instead of training one from scratch."""
    return copy_toy_run(trained_toy, tmp_path)

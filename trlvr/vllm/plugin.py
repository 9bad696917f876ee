"""vLLM's `vllm.general_plugins` entry point (pyproject.toml): every vLLM process, spawned engine
workers included, calls `register` before it builds a model, so `TandemForCausalLM` is known there."""

from __future__ import annotations

ARCHITECTURE = "TandemForCausalLM"


def register() -> None:
    from vllm import ModelRegistry

    if ARCHITECTURE not in ModelRegistry.get_supported_archs():
        # the lazy "module:Class" form: nothing is imported (no CUDA initialised) until a model is built
        ModelRegistry.register_model(ARCHITECTURE, "trlvr.vllm.model:TandemForCausalLM")

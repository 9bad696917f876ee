"""Prompt sharing and memory planning: the engine's batch-level savings must not change what it generates."""

from __future__ import annotations

import pytest
import torch
from helpers import PROMPTS, SCHEDULES, encode, frequent_eos

from trlvr.engine import DecodeOptions, Sampling, TandemGenerator, WordSchedule
from trlvr.engine.generator import kv_cache_bytes, plan_per_device, plan_sub_batches


@pytest.mark.parametrize("schedule", SCHEDULES, ids=lambda s: repr(s))
def test_shared_prefill_generates_what_the_unshared_one_does(models, tokenizer, schedule):
    senior, junior = models
    gen = TandemGenerator(senior, junior, tokenizer, eos_token_ids=frequent_eos(tokenizer))
    prompts = [
        p for p in encode(tokenizer, PROMPTS) for _ in range(4)
    ]  # each prompt 4 times, as TRL hands them
    sampling = Sampling(24, temperature=1.0, seed=11)
    shared = gen.generate(
        prompts, schedule, sampling, score_both=True, options=DecodeOptions(share_prompts=True)
    )
    plain = gen.generate(
        prompts, schedule, sampling, score_both=True, options=DecodeOptions(share_prompts=False)
    )
    assert shared.completion_ids == plain.completion_ids
    assert shared.authors == plain.authors and shared.finish_reasons == plain.finish_reasons
    assert len(set(map(len, shared.completion_ids))) > 1  # rows ended at different times
    for a, b in (
        (shared.senior_logprob, plain.senior_logprob),
        (shared.junior_logprob, plain.junior_logprob),
    ):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=0)


def test_kv_bytes_match_a_real_cache(models, tokenizer):
    senior, _ = models
    ids = torch.tensor([encode(tokenizer, ["The cat sat on the mat."])[0]] * 3)
    with torch.no_grad():
        cache = senior(input_ids=ids, use_cache=True).past_key_values
    real = sum(t.numel() * t.element_size() for layer in cache.layers for t in (layer.keys, layer.values))
    assert kv_cache_bytes(senior, batch=3, tokens=ids.shape[1]) == real


def test_memory_budget_splits_into_sub_batches(models, tokenizer):
    senior, junior = models
    gen = TandemGenerator(senior, junior, tokenizer)
    prompts = encode(tokenizer, PROMPTS) * 2  # 8 rows
    tokens = max(map(len, prompts)) + 16
    per_row = kv_cache_bytes(senior, 1, tokens) + kv_cache_bytes(junior, 1, tokens)
    assert plan_sub_batches([senior, junior], 8, tokens, None) == 1
    assert plan_sub_batches([senior, junior], 8, tokens, int(2.5 * per_row)) == 4
    # junior on its own device: each cache against its own device's budget, the worse device decides
    s_row, j_row = kv_cache_bytes(senior, 1, tokens), kv_cache_bytes(junior, 1, tokens)
    split = {"cuda:0": [senior], "cuda:1": [junior]}
    assert plan_per_device(split, 8, tokens, {"cuda:0": 8 * s_row, "cuda:1": 8 * j_row}) == 1
    assert plan_per_device(split, 8, tokens, {"cuda:0": 8 * s_row, "cuda:1": 2 * j_row}) == 4
    assert plan_per_device({"cpu": [senior, junior]}, 8, tokens, {"cpu": None}) == 1
    sampling, tight = Sampling(16, seed=5), DecodeOptions(memory_budget_bytes=int(2.5 * per_row))
    out = gen.generate(prompts, WordSchedule(), sampling, options=tight)
    assert out.num_sub_batches == 4 and len(out) == 8
    again = gen.generate(prompts, WordSchedule(), sampling, options=tight)
    assert out.completion_ids == again.completion_ids  # deterministic
    whole = gen.generate(prompts, WordSchedule(), sampling, options=DecodeOptions(memory_budget_bytes=None))
    assert whole.num_sub_batches == 1
    # batch-invariant sampling: the sub-batches give exactly the rows of one batch
    assert out.completion_ids == whole.completion_ids and out.authors == whole.authors


def test_a_row_that_cannot_fit_is_a_clear_error(models, tokenizer):
    senior, junior = models
    gen = TandemGenerator(senior, junior, tokenizer)
    with pytest.raises(
        ValueError, match=r"one row of \d+ tokens needs [\d,]+ bytes of KV cache .* \(batch 4\)"
    ):
        gen.generate(
            encode(tokenizer, PROMPTS),
            WordSchedule(),
            Sampling(16),
            options=DecodeOptions(memory_budget_bytes=100),
        )

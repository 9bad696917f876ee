"""Batch-invariant sampling: a row's completion is a function of (seed, row key, prompt), not of its batch.

Every uniform the engine draws (tokens, schedule redraws) is a counter-based hash of (seed, row key,
position, stream), so a row generated alone, inside a batch of 64, or in sub-batches gives the same
tokens and authors, for every schedule, on the one-device, split-device, shared and static paths.
"""

from __future__ import annotations

import pytest
import torch
from helpers import PROMPTS, SCHEDULES, assert_same_outputs, encode, frequent_eos

from trlvr.engine import DecodeOptions, Sampling, TandemGenerator
from trlvr.engine.generator import kv_cache_bytes
from trlvr.engine.sampling import RowStreams, hash_uniform, mix32, row_key


def _rows(out, idx):
    return [out.completion_ids[i] for i in idx], [out.authors[i] for i in idx]


@pytest.mark.parametrize("schedule", SCHEDULES, ids=lambda s: repr(s))
def test_a_row_alone_in_a_batch_of_64_and_in_sub_batches_is_the_same(models, tokenizer, schedule):
    senior, junior = models
    gen = TandemGenerator(senior, junior, tokenizer, eos_token_ids=frequent_eos(tokenizer))
    base = encode(tokenizer, PROMPTS)
    prompts = [base[i % 4] for i in range(64)]  # 16 repeats of each prompt, as TRL hands them
    keys = [row_key(7, i // 4, i % 4) for i in range(64)]
    sampling = Sampling(16, seed=3)
    batch = gen.generate(prompts, schedule, sampling, keys)
    assert len({tuple(c) for c in batch.completion_ids}) > 8  # the keys do give different samples
    picked = [0, 5, 33, 63]
    for i in picked:  # alone
        alone = gen.generate([prompts[i]], schedule, sampling, [keys[i]])
        assert alone.completion_ids[0] == batch.completion_ids[i] and alone.authors[0] == batch.authors[i]
    # three sub-batches (the memory plan splits 64 rows into 3 parts of 22, 22, 20)
    running = [m for name, m in (("senior", senior), ("junior", junior)) if name in schedule.writers]
    per_row = sum(kv_cache_bytes(m, 1, max(map(len, prompts)) + 16) for m in running)
    parts = gen.generate(
        prompts, schedule, sampling, keys, options=DecodeOptions(memory_budget_bytes=22 * per_row)
    )
    assert parts.num_sub_batches == 3
    assert parts.completion_ids == batch.completion_ids and parts.authors == batch.authors
    # unshared prompts, the split sampler and the static path: the same rows again
    unshared = gen.generate(prompts, schedule, sampling, keys, options=DecodeOptions(share_prompts=False))
    assert_same_outputs(batch, unshared, atol=1e-5)
    split = TandemGenerator(
        senior, junior, tokenizer, eos_token_ids=frequent_eos(tokenizer), junior_device="cpu"
    )
    assert_same_outputs(batch, split.generate(prompts, schedule, sampling, keys))
    static = gen.generate(
        [prompts[i] for i in picked],
        schedule,
        sampling,
        [keys[i] for i in picked],
        options=DecodeOptions(decode="static"),
    )
    assert _rows(static, range(4)) == _rows(batch, picked)


def test_default_row_keys_are_row_indices_and_seed_changes_everything(models, tokenizer):
    senior, junior = models
    gen = TandemGenerator(senior, junior, tokenizer)
    prompts = encode(tokenizer, PROMPTS) * 2
    a = gen.generate(prompts, SCHEDULES[0], Sampling(12, seed=1))
    b = gen.generate(prompts, SCHEDULES[0], Sampling(12, seed=1), torch.arange(8))
    c = gen.generate(prompts, SCHEDULES[0], Sampling(12, seed=2))
    assert a.completion_ids == b.completion_ids and a.authors == b.authors
    assert a.completion_ids != c.completion_ids
    assert a.completion_ids[:4] != a.completion_ids[4:]  # same prompts, other row keys: other samples
    with pytest.raises(ValueError, match="row_keys has 3 keys for 8 prompts"):
        gen.generate(prompts, SCHEDULES[0], Sampling(4), [1, 2, 3])


def test_counter_hash_is_exact_integer_arithmetic():
    # mix32 is a bijection on 32-bit words and matches a plain-Python reference bit for bit
    def ref(x):
        x ^= x >> 16
        x = (x * 0x7FEB352D) & 0xFFFFFFFF
        x ^= x >> 15
        x = (x * 0x846CA68B) & 0xFFFFFFFF
        return x ^ (x >> 16)

    xs = [0, 1, 2**31, 2**32 - 1, 123456789, 0xDEADBEEF]
    assert mix32(torch.tensor(xs)).tolist() == [ref(x) for x in xs]
    assert len(set(mix32(torch.arange(1 << 16)).tolist())) == 1 << 16
    keys = torch.tensor([row_key(0, i) for i in range(4096)])
    s = RowStreams(keys)
    u = torch.stack([s.uniform(t) for t in range(8)])  # (8, 4096)
    assert 0 <= u.min() and u.max() < 1 and abs(u.mean() - 0.5) < 0.01
    assert torch.corrcoef(u).fill_diagonal_(0).abs().max() < 0.06  # positions are not correlated
    assert not torch.equal(s.uniform(3, 0), s.uniform(3, 1))  # streams differ
    assert torch.equal(s.select(torch.tensor([7, 2])).uniform(5), s.uniform(5)[[7, 2]])
    assert torch.equal(hash_uniform(s.lo, s.hi, torch.full((4096,), 5), 0), s.uniform(5))
    assert row_key(1, "gsm8k", "p3", 0, "solo") != row_key(1, "gsm8k", "p3", 1, "solo")
    with pytest.raises(TypeError, match="ints or strings"):
        row_key(1.5)

"""Junior on its own device: the split sampling path must give what the one-device path gives.

No second device here: `junior_device="cpu"` takes the split branch on the same CPU (each model samples
its own candidate from the shared per-row uniform; only (B,) tensors cross), so the equality below
is exact: same tokens, authors, finish reasons and log-probs.
"""

from __future__ import annotations

import pytest
import torch
from helpers import PROMPTS, SCHEDULES, assert_same_outputs, encode, frequent_eos

from trlvr.engine import DecodeOptions, Sampling, SoloSchedule, TandemGenerator, WordSchedule
from trlvr.engine.sampling import draw_uniforms, sample_tokens, sample_with_uniforms


# one architecture: placement is the engine's, not the KV layout's (both layouts: tests/test_engine.py)
@pytest.mark.parametrize("arch", ["qwen3"], indirect=True)
@pytest.mark.parametrize("share", [True, False], ids=["shared", "unshared"])
@pytest.mark.parametrize("schedule", SCHEDULES, ids=lambda s: repr(s))
def test_split_devices_path_equals_one_device_path(models, tokenizer, schedule, share):
    senior, junior = models
    eos = frequent_eos(tokenizer)  # rows end at different times: finished-row compaction runs
    one = TandemGenerator(senior, junior, tokenizer, eos_token_ids=eos)
    split = TandemGenerator(senior, junior, tokenizer, eos_token_ids=eos, junior_device="cpu")
    assert split.split_devices and not one.split_devices
    prompts = [p for p in encode(tokenizer, PROMPTS) for _ in range(4)]
    options = DecodeOptions(share_prompts=share)
    for sampling, score_both in (
        (Sampling(24, seed=5), True),
        (Sampling(24, seed=5), False),
        (Sampling(24, temperature=0.0, seed=5), False),
        (Sampling(24, top_p=0.9, top_k=20, seed=5), False),
    ):
        a = one.generate(prompts, schedule, sampling, score_both=score_both, options=options)
        b = split.generate(prompts, schedule, sampling, score_both=score_both, options=options)
        assert_same_outputs(a, b)
    assert len(set(map(len, a.completion_ids))) > 1  # rows ended at different times


def test_split_path_with_static_decode(models, tokenizer):
    senior, junior = models
    eos = frequent_eos(tokenizer)
    one = TandemGenerator(senior, junior, tokenizer, eos_token_ids=eos)
    split = TandemGenerator(senior, junior, tokenizer, eos_token_ids=eos, junior_device="cpu")
    prompts = encode(tokenizer, PROMPTS) * 3
    kw = dict(score_both=True, options=DecodeOptions(decode="static"))
    assert_same_outputs(
        one.generate(prompts, WordSchedule(p=0.5, max_gap=4), Sampling(24, seed=2), **kw),
        split.generate(prompts, WordSchedule(p=0.5, max_gap=4), Sampling(24, seed=2), **kw),
    )


def test_sampling_with_shared_uniforms_is_row_wise():
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(6, 50, generator=g)
    u = draw_uniforms(6, torch.Generator().manual_seed(1))
    whole = sample_with_uniforms(logits, u, 0.8, top_k=10, top_p=0.9)
    rows = torch.cat([sample_with_uniforms(logits[i : i + 1], u[i : i + 1], 0.8, 10, 0.9) for i in range(6)])
    assert torch.equal(whole, rows)
    assert torch.equal(sample_tokens(logits, 0.8, 10, 0.9, torch.Generator().manual_seed(1)), whole)


def test_junior_device_is_validated(models, tokenizer):
    senior, junior = models
    with pytest.raises(ValueError, match="junior_device is meta but the junior's parameters are on cpu"):
        TandemGenerator(senior, junior, tokenizer, junior_device="meta")
    with pytest.raises(ValueError, match="junior_device was given but there is no junior"):
        TandemGenerator(senior, None, tokenizer, junior_device="cpu")
    gen = TandemGenerator(senior, junior, tokenizer, junior_device=torch.device("cpu"))
    assert len(gen.generate(encode(tokenizer, PROMPTS), SoloSchedule("junior"), Sampling(3))) == len(PROMPTS)


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two CUDA devices")
def test_two_gpus(tokenizer):
    from helpers import tiny_model

    senior = tiny_model("qwen3", len(tokenizer), seed=0).to("cuda:0")
    junior = tiny_model("qwen3", len(tokenizer), seed=1, hidden=32, layers=1)
    one = TandemGenerator(senior, junior.to("cuda:0"), tokenizer)
    a = one.generate(
        encode(tokenizer, PROMPTS),
        WordSchedule(),
        Sampling(16, seed=1),
        options=DecodeOptions(decode="eager"),
    )
    two = TandemGenerator(senior, junior.to("cuda:1"), tokenizer)
    b = two.generate(
        encode(tokenizer, PROMPTS),
        WordSchedule(),
        Sampling(16, seed=1),
        options=DecodeOptions(decode="eager"),
    )
    assert a.completion_ids == b.completion_ids and a.authors == b.authors
    torch.testing.assert_close(a.senior_logprob, b.senior_logprob, atol=1e-5, rtol=0)

"""decode="static": preallocated KV caches, row buckets and length blocks must not change what is generated."""

from __future__ import annotations

import pytest
import torch
from helpers import PROMPTS, SCHEDULES, assert_same_outputs, encode, frequent_eos, teacher_forced_logprobs

from trlvr.engine import DecodeOptions, Sampling, TandemGenerator, TokenSchedule, WordSchedule
from trlvr.engine.generator import resolve_decode
from trlvr.engine.kv import attended_length, batch_bucket
from trlvr.engine.runners import StaticRunner, static_block_for


def static_gen(senior, junior, tokenizer, block=8, **kw):
    gen = TandemGenerator(senior, junior, tokenizer, **kw)
    gen.static_block = block  # small blocks: the attended length grows several times within a test
    return gen


@pytest.mark.parametrize("schedule", SCHEDULES, ids=lambda s: repr(s))
def test_static_equals_eager_with_compaction_and_sharing(models, tokenizer, schedule):
    senior, junior = models
    gen = static_gen(senior, junior, tokenizer, eos_token_ids=frequent_eos(tokenizer))
    prompts = [p for p in encode(tokenizer, PROMPTS) for _ in range(4)]  # 16 rows, each prompt 4 times
    sampling = Sampling(30, seed=11)
    for score_both, share in ((True, True), (False, False)):
        eager = gen.generate(
            prompts,
            schedule,
            sampling,
            score_both=score_both,
            options=DecodeOptions(decode="eager", share_prompts=share),
        )
        static = gen.generate(
            prompts,
            schedule,
            sampling,
            score_both=score_both,
            options=DecodeOptions(decode="static", share_prompts=share),
        )
        assert_same_outputs(eager, static, atol=1e-5)
    assert len(set(map(len, eager.completion_ids))) > 2  # compaction ran, into smaller buckets


@pytest.mark.parametrize("schedule", SCHEDULES[:2], ids=lambda s: repr(s))
def test_static_logprobs_equal_teacher_forced_forward(models, tokenizer, schedule):
    senior, junior = models
    gen = static_gen(senior, junior, tokenizer, block=4)
    prompts = encode(tokenizer, PROMPTS)
    out = gen.generate(
        prompts, schedule, Sampling(24, seed=3), score_both=True, options=DecodeOptions(decode="static")
    )
    for i, prompt in enumerate(prompts):
        for model, got in ((senior, out.senior_logprobs[i]), (junior, out.junior_logprobs[i])):
            ref = teacher_forced_logprobs(model, prompt, out.completion_ids[i])
            assert torch.allclose(torch.tensor(got), ref, atol=1e-4), (
                i,
                (torch.tensor(got) - ref).abs().max(),
            )


def test_static_with_eager_attention_and_a_block_past_the_budget(tokenizer):
    from helpers import tiny_model

    senior = tiny_model("qwen3", len(tokenizer), seed=0)
    junior = tiny_model("llama", len(tokenizer), seed=1, hidden=32, layers=1)
    senior.set_attn_implementation("eager")
    gen = static_gen(senior, junior, tokenizer, block=256, eos_token_ids=frequent_eos(tokenizer))
    prompts = encode(tokenizer, PROMPTS) * 2
    sampling = Sampling(20, seed=4)
    assert_same_outputs(
        gen.generate(
            prompts, TokenSchedule(), sampling, score_both=True, options=DecodeOptions(decode="eager")
        ),
        gen.generate(
            prompts, TokenSchedule(), sampling, score_both=True, options=DecodeOptions(decode="static")
        ),
        atol=1e-5,
    )


def test_static_sub_batches(models, tokenizer):
    senior, junior = models
    gen = static_gen(senior, junior, tokenizer)
    prompts = encode(tokenizer, PROMPTS) * 2
    from trlvr.engine.generator import kv_cache_bytes

    budget = int(2.5 * sum(kv_cache_bytes(m, 1, max(map(len, prompts)) + 16) for m in (senior, junior)))
    sampling = Sampling(16, seed=5)
    eager = gen.generate(
        prompts, WordSchedule(), sampling, options=DecodeOptions("eager", memory_budget_bytes=budget)
    )
    static = gen.generate(
        prompts, WordSchedule(), sampling, options=DecodeOptions("static", memory_budget_bytes=budget)
    )
    assert static.num_sub_batches == 4
    assert_same_outputs(eager, static, atol=1e-5)


def test_decode_and_compile_arguments_are_validated(models, tokenizer):
    senior, junior = models
    gen = TandemGenerator(senior, junior, tokenizer)
    prompts = encode(tokenizer, PROMPTS)
    with pytest.raises(ValueError, match="decode must be one of"):
        gen.generate(prompts, WordSchedule(), Sampling(4), options=DecodeOptions(decode="fast"))
    with pytest.raises(ValueError, match="compile must be True, False or 'auto'"):
        gen.generate(prompts, WordSchedule(), Sampling(4), options=DecodeOptions(compile="yes"))
    with pytest.raises(ValueError, match="compile=True needs decode='static'"):
        gen.generate(
            prompts, WordSchedule(), Sampling(4), options=DecodeOptions(decode="eager", compile=True)
        )
    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    assert resolve_decode("auto", "auto", cpu) == ("eager", False)
    assert resolve_decode("auto", "auto", cuda) == (
        "static",
        False,
    )  # compile: opt-in until measured on a GPU
    assert resolve_decode("auto", True, cpu) == ("static", True)  # compiling implies the static path
    assert resolve_decode("static", True, cuda) == ("static", True)
    with pytest.raises(ValueError, match="decode must be one of"):
        DecodeOptions(decode="fast")  # checked when made, before any generator or call sees them
    assert resolve_decode("static", "auto", cpu) == ("static", False)
    assert resolve_decode("eager", "auto", cuda) == ("eager", False)
    assert resolve_decode("static", True, cpu) == ("static", True)


def test_buckets_and_blocks():
    assert [batch_bucket(n, 128) for n in (1, 2, 3, 64, 65, 128)] == [1, 2, 4, 64, 128, 128]
    assert batch_bucket(96, 96) == 96 and batch_bucket(40, 96) == 64
    with pytest.raises(ValueError):
        batch_bucket(0, 8)
    assert [attended_length(s, 128, 600) for s in (0, 127, 128, 599)] == [128, 128, 256, 600]


def test_the_default_length_block_depends_on_the_device(models, tokenizer):
    """CUDA keeps 256-position blocks (one recorded graph per block); elsewhere the static path
    attends the length rounded up to 16 (measured faster on CPU); an explicit block wins."""
    senior, _ = models
    assert StaticRunner(senior, torch.device("cpu"), 8, 40).block == 16
    assert StaticRunner(senior, torch.device("cpu"), 8, 40, block=64).block == 64
    assert static_block_for("cuda") == 256 and static_block_for("cuda:1") == 256
    gen = TandemGenerator(senior, None, tokenizer)
    seen = []
    hook = senior.model.layers[0].self_attn.register_forward_hook(
        lambda m, args, kwargs, out: seen.append(kwargs["attention_mask"].shape[-1]), with_kwargs=True
    )
    try:
        gen.generate(
            encode(tokenizer, PROMPTS[:2]),
            TokenSchedule(1.0),
            Sampling(40, seed=0),
            options=DecodeOptions(decode="static"),
        )
    finally:
        hook.remove()
    L = max(map(len, encode(tokenizer, PROMPTS[:2])))
    decode_lengths = seen[1:]  # the first call is the prefill
    assert decode_lengths == [min(-(-(L + t + 1) // 16) * 16, L + 40) for t in range(len(decode_lengths))]


@pytest.mark.slow
def test_compiled_static_step_equals_eager(tokenizer):
    """torch.compile of the per-token forward on CPU (default mode): same tokens, authors, log-probs."""
    from helpers import tiny_model
    from torch._dynamo.utils import counters

    senior = tiny_model("qwen3", len(tokenizer), seed=0)
    junior = tiny_model("qwen3", len(tokenizer), seed=1, hidden=32, layers=1)
    graphs = counters["stats"]["unique_graphs"]
    gen = static_gen(senior, junior, tokenizer, block=16, eos_token_ids=frequent_eos(tokenizer))
    prompts = encode(tokenizer, PROMPTS) * 2
    sampling = Sampling(20, seed=6)
    eager = gen.generate(
        prompts,
        WordSchedule(p=0.5, max_gap=4),
        sampling,
        score_both=True,
        options=DecodeOptions(decode="eager"),
    )
    compiled = gen.generate(
        prompts,
        WordSchedule(p=0.5, max_gap=4),
        sampling,
        score_both=True,
        options=DecodeOptions(decode="static", compile=True),
    )
    assert_same_outputs(eager, compiled, atol=1e-5)
    assert counters["stats"]["unique_graphs"] > graphs  # the step really ran compiled


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_auto_decode_equals_eager(tokenizer):
    """On CUDA, decode="auto" is static with the step compiled and captured as CUDA graphs (fp32 tiny models)."""
    from helpers import tiny_model

    senior = tiny_model("qwen3", len(tokenizer), seed=0).cuda()
    junior = tiny_model("qwen3", len(tokenizer), seed=1, hidden=32, layers=1).cuda()
    gen = static_gen(senior, junior, tokenizer, block=16, eos_token_ids=frequent_eos(tokenizer))
    prompts = encode(tokenizer, PROMPTS) * 4
    sampling = Sampling(40, seed=6)
    eager = gen.generate(
        prompts,
        WordSchedule(p=0.5, max_gap=4),
        sampling,
        score_both=True,
        options=DecodeOptions(decode="eager"),
    )
    for _ in range(2):  # the second call reuses the compiled step with new buffers (CUDA graphs re-recorded)
        auto = gen.generate(prompts, WordSchedule(p=0.5, max_gap=4), sampling, score_both=True)
        assert_same_outputs(eager, auto, atol=1e-5)


def test_the_eval_flag_offers_the_engines_decode_modes():
    from trlvr.cli.main import build_parser
    from trlvr.engine import DECODE_MODES

    sub = next(a for a in build_parser()._actions if a.dest == "command").choices["eval"]
    assert tuple(next(a for a in sub._actions if a.dest == "decode").choices) == DECODE_MODES

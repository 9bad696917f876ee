"""The static decode path's GPU invariants, checked on CPU by watching the ops it dispatches.

- attention reads K/V at the KV head count: no (R, query heads, K, D) tensor in a decode step;
- no host sync per token: at most one data-dependent op (item, nonzero, bool masks, ...) per
  `sync_every` = 8 generated tokens;
- static equals eager on a GQA model (query heads 4x KV heads) for every schedule, with
  compaction, prompt sharing and the split-device path.
"""

from __future__ import annotations

import pytest
import torch
from helpers import PROMPTS, SCHEDULES, assert_same_outputs, encode, frequent_eos
from torch.utils._python_dispatch import TorchDispatchMode
from transformers import Qwen3Config, Qwen3ForCausalLM
from transformers.integrations import sdpa_attention

from trlvr.engine import DecodeOptions, Sampling, TandemGenerator, WordSchedule
from trlvr.engine.runners import StaticRunner

HQ, HKV, D = 8, 2, 8  # query heads 4x KV heads, like Qwen3-4B (32 / 8)


def gqa_model(vocab: int, seed: int, layers: int = 2):
    torch.manual_seed(seed)
    cfg = Qwen3Config(
        vocab_size=vocab,
        hidden_size=HQ * D,
        intermediate_size=128,
        num_hidden_layers=layers,
        num_attention_heads=HQ,
        num_key_value_heads=HKV,
        head_dim=D,
        max_position_embeddings=512,
        tie_word_embeddings=True,
    )
    return Qwen3ForCausalLM(cfg).float().eval()


@pytest.fixture(scope="module")
def gqa_pair(tokenizer):
    return gqa_model(len(tokenizer), 0), gqa_model(len(tokenizer), 1, layers=1)


class Shapes(TorchDispatchMode):
    """Records the shape of every tensor an op returns."""

    def __init__(self):
        super().__init__()
        self.shapes = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in out if isinstance(out, tuple | list) else (out,):
            if isinstance(t, torch.Tensor):
                self.shapes.append(tuple(t.shape))
        return out


def expanded_kv(shapes) -> list:
    """K/V-sized tensors at the query head count: (R, Hq, K > 1, D)."""
    return [s for s in shapes if len(s) == 4 and s[1] == HQ and s[2] > 1 and s[3] == D]


_SYNC_OPS = (
    "_local_scalar_dense",
    "nonzero",
    "is_nonzero",
    "equal",
    "masked_select",
    "unique",
    "_unique2",
    "bincount",
    "repeat_interleave",
    "allclose",
    "_assert_async",
)


class HostSyncs(TorchDispatchMode):
    """Counts data-dependent ops: what makes the host wait for a GPU (item, nonzero, bool indexing, ...)."""

    def __init__(self):
        super().__init__()
        self.ops = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func._schema.name.split("::")[-1]
        flat = [*args, *(kwargs or {}).values()]
        indices = [i for a in flat if isinstance(a, list | tuple) for i in a if isinstance(i, torch.Tensor)]
        if name in _SYNC_OPS or (name.startswith("index") and any(i.dtype == torch.bool for i in indices)):
            self.ops.append(name)
        return func(*args, **(kwargs or {}))


def static_gen(senior, junior, tokenizer, block=8, **kw):
    gen = TandemGenerator(senior, junior, tokenizer, **kw)
    gen.static_block = block
    return gen


def test_static_decode_never_expands_kv_to_query_heads(gqa_pair, tokenizer, monkeypatch):
    senior, junior = gqa_pair
    seen = Shapes()
    step = StaticRunner.step

    def watched(self, tok, t):
        with seen:
            return step(self, tok, t)

    monkeypatch.setattr(StaticRunner, "step", watched)
    # as under torch.compile, where transformers' SDPA path repeats K/V to the query heads (its
    # no-copy decode is skipped while compiling)
    monkeypatch.setattr(sdpa_attention, "is_torchdynamo_compiling", lambda: True)
    gen = static_gen(senior, junior, tokenizer, eos_token_ids=frequent_eos(tokenizer))
    gen.generate(
        encode(tokenizer, PROMPTS) * 2,
        WordSchedule(),
        Sampling(20),
        score_both=True,
        options=DecodeOptions(decode="static"),
    )
    assert len(seen.shapes) > 100 and expanded_kv(seen.shapes) == []
    # the detector does see transformers' own (compiled-path) decode with a mask: K/V repeated to the query heads
    ids = torch.tensor([encode(tokenizer, PROMPTS)[0]])
    with torch.no_grad():
        cache = senior(input_ids=ids, use_cache=True).past_key_values
        plain = Shapes()
        with plain:
            senior(
                input_ids=ids[:, -1:],
                past_key_values=cache,
                attention_mask=torch.ones(1, 1, 1, ids.shape[1] + 1, dtype=torch.bool),
                use_cache=True,
            )
    assert expanded_kv(plain.shapes)


def test_static_loop_syncs_the_host_once_per_8_tokens(gqa_pair, tokenizer, monkeypatch):
    senior, junior = gqa_pair
    counts = {}
    decode = TandemGenerator._decode_n_tokens

    def counted(self, run, schedule, sampling):
        with HostSyncs() as mode:
            decode(self, run, schedule, sampling)
        counts["ops"], counts["rows"] = mode.ops, run.rows.numel()

    monkeypatch.setattr(TandemGenerator, "_decode_n_tokens", counted)
    gen = static_gen(senior, junior, tokenizer, eos_token_ids=frequent_eos(tokenizer)[::3])
    prompts = [p for p in encode(tokenizer, PROMPTS) for _ in range(4)]
    for schedule in SCHEDULES:
        out = gen.generate(prompts, schedule, Sampling(64, seed=1), options=DecodeOptions(decode="static"))
        tokens = int(out.lengths.max())
        assert len(counts["ops"]) <= -(-tokens // 8), (repr(schedule), tokens, counts["ops"])
    assert counts["rows"] < len(prompts)  # compaction ran (on the device, without a sync)
    # the eager path, by contrast, reads the host every token: the counter does count syncs
    gen.generate(prompts, WordSchedule(), Sampling(16, seed=1), options=DecodeOptions(decode="eager"))
    assert len(counts["ops"]) >= 16


@pytest.mark.parametrize("schedule", SCHEDULES, ids=lambda s: repr(s))
def test_static_equals_eager_on_a_gqa_model(gqa_pair, tokenizer, schedule):
    senior, junior = gqa_pair
    eos = frequent_eos(tokenizer)
    gen = static_gen(senior, junior, tokenizer, eos_token_ids=eos)
    split = static_gen(senior, junior, tokenizer, eos_token_ids=eos, junior_device="cpu")
    prompts = [p for p in encode(tokenizer, PROMPTS) for _ in range(4)]
    sampling, static = Sampling(30, seed=11), DecodeOptions(decode="static")
    eager = gen.generate(
        prompts,
        schedule,
        sampling,
        score_both=True,
        options=DecodeOptions(decode="eager", share_prompts=False),
    )
    assert len(set(map(len, eager.completion_ids))) > 2  # rows end at different times: compaction runs
    assert_same_outputs(
        eager, gen.generate(prompts, schedule, sampling, score_both=True, options=static), atol=1e-5
    )
    assert_same_outputs(
        eager, split.generate(prompts, schedule, sampling, score_both=True, options=static), atol=1e-5
    )


def test_run_config_compile_field_is_one_clear_line():
    from trlvr.config import TandemConfig
    from trlvr.errors import UserError

    assert [
        TandemConfig(senior="s", junior="j", compile=v).compile for v in ("auto", "true", True, "no")
    ] == ["auto", True, True, False]
    with pytest.raises(UserError, match=r"^compile: must be true, false or auto \(got 'maybe'\)$"):
        TandemConfig(senior="s", junior="j", compile="maybe")
    with pytest.raises(UserError, match="^compile: true needs decode: static or auto"):
        TandemConfig(senior="s", junior="j", compile=True, decode="eager")


@pytest.mark.slow
def test_compiled_static_step_compiles_once_across_batch_sizes_and_prompt_lengths(tokenizer):
    """The KV buffers are the generator's (kept across calls) and R, K are dynamic sizes: the second and
    third calls, with other batch sizes and prompt lengths, compile nothing (dynamo's own counters;
    backend "eager" so that the test counts dynamo's graphs without waiting for inductor on a CPU)."""
    from helpers import tiny_model
    from torch._dynamo.utils import counters

    senior = tiny_model("qwen3", len(tokenizer), seed=0)
    junior = tiny_model("qwen3", len(tokenizer), seed=1, hidden=32, layers=1)
    gen = static_gen(senior, junior, tokenizer, block=16, eos_token_ids=frequent_eos(tokenizer))
    gen.compile_backend = "eager"
    P = encode(tokenizer, PROMPTS)
    calls = [(P * 4, 40), (P[1:] * 3, 30), ([p[:3] for p in P] * 2 + P, 36)]  # 16, 9, 12 rows
    graphs = []
    for i, (prompts, n) in enumerate(calls):
        before = counters["stats"]["unique_graphs"]
        out = gen.generate(
            prompts,
            WordSchedule(),
            Sampling(n, seed=i),
            options=DecodeOptions("static", True),
            score_both=True,
        )
        eager = gen.generate(
            prompts, WordSchedule(), Sampling(n, seed=i), options=DecodeOptions("eager"), score_both=True
        )
        assert_same_outputs(eager, out, atol=1e-5)
        graphs.append(counters["stats"]["unique_graphs"] - before)
    assert graphs[0] > 0 and graphs[1:] == [0, 0], graphs
    assert "recompiles" not in counters or sum(counters["recompiles"].values()) == 0


@pytest.mark.slow
def test_inductor_step_survives_the_last_block_and_the_full_batch(tokenizer):
    """With inductor (the backend a GPU user gets), the attended length K reaches the buffers' capacity
    (the final block, or a whole call shorter than one block) and the row bucket R equals the full
    batch: the dynamic-K, dynamic-R graph must hold there too. Before the KV buffers kept a spare
    position, inductor specialised K to the capacity and dynamo raised ConstraintViolationError."""
    from helpers import tiny_model
    from torch._dynamo.utils import counters

    senior = tiny_model("qwen3", len(tokenizer), seed=0)
    junior = tiny_model("qwen3", len(tokenizer), seed=1, hidden=32, layers=1)
    gen = static_gen(senior, junior, tokenizer, block=256)  # L + N < one block: K = capacity from step 0
    P = encode(tokenizer, PROMPTS)
    # the first call is the largest (the buffers are sized for it and never regrown), the second has
    # fewer rows and positions
    for i, (prompts, n) in enumerate([(P * 2, 20), (P, 12)]):
        before = counters["stats"]["unique_graphs"]
        out = gen.generate(
            prompts,
            WordSchedule(),
            Sampling(n, seed=i),
            options=DecodeOptions("static", True),
            score_both=True,
        )
        eager = gen.generate(
            prompts, WordSchedule(), Sampling(n, seed=i), options=DecodeOptions("eager"), score_both=True
        )
        assert_same_outputs(eager, out, atol=1e-4)
        if i:
            assert counters["stats"]["unique_graphs"] == before  # the second call compiles nothing


def test_memory_plan_counts_cached_free_blocks_and_transients(models, tokenizer):
    from trlvr.engine.generator import (
        device_budget,
        kv_cache_bytes,
        plan_sub_batches,
        transient_bytes_per_row,
    )

    senior, junior = models
    # PyTorch's reserved-but-unallocated blocks are free to this call; a negative gap counts as none
    assert device_budget(free=1000, reserved=500, allocated=200, fraction=1.0) == 1300
    assert device_budget(free=1000, reserved=100, allocated=200, fraction=0.5) == 500
    eager, static = (transient_bytes_per_row(senior, 40, s) for s in (False, True))
    assert static - eager == kv_cache_bytes(senior, 1, 40)  # the prefill cache beside the static buffers
    assert (
        eager >= 6 * 4 * senior.get_output_embeddings().weight.shape[0]
    )  # fp32 logits and the sampler's copies
    per_row = kv_cache_bytes(senior, 1, 60) + kv_cache_bytes(junior, 1, 60)
    assert plan_sub_batches([senior, junior], 8, 60, 4 * per_row) == 2
    assert plan_sub_batches([senior, junior], 8, 60, 4 * per_row, extra_per_row=per_row) == 4  # 2 rows fit
    out = TandemGenerator(senior, junior, tokenizer).generate(
        encode(tokenizer, PROMPTS), WordSchedule(), Sampling(4)
    )
    assert out.plan == {
        "decode": "eager",
        "compile": False,
        "sub_batches": 1,
        "memory": None,
    }  # CPU: no limit


def test_logprobs_come_from_fp32_logits_of_a_bf16_model(tokenizer):
    """During generation a bf16 model's output layer returns fp32 logits computed from its bf16 input
    (no bf16 rounding before log-softmax and sampling); outside generation the model is untouched."""
    from trlvr.engine.runners import fp32_logits

    senior = gqa_model(len(tokenizer), 0).to(torch.bfloat16)
    ids = torch.tensor(encode(tokenizer, PROMPTS)[:1])
    w = senior.get_output_embeddings().weight
    with torch.no_grad():
        hidden = senior.model(input_ids=ids).last_hidden_state
        plain = senior(input_ids=ids).logits
        with fp32_logits([senior]):
            inside = senior(input_ids=ids).logits
    exact = hidden.float() @ w.float().t()
    assert plain.dtype == torch.bfloat16 and inside.dtype == torch.float32
    torch.testing.assert_close(inside, exact, atol=1e-5, rtol=0)
    assert (plain.float() - exact).abs().max() > 1e-4  # bf16 rounding, which generation no longer sees
    gen = TandemGenerator(senior, None, tokenizer, eos_token_ids=[len(tokenizer) + 1])
    out = gen.generate(ids.tolist(), SCHEDULES[4], Sampling(6, seed=0))
    assert out.senior_logprob.dtype == torch.float32
    with torch.no_grad():
        assert senior(input_ids=ids).logits.dtype == torch.bfloat16  # the hook is inert after generate

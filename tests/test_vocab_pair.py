"""Compatibility from configs and tokenizers, before weights load (issue 44, mechanism 5).

Tandem needs one tokenizer, not one embedding size: Qwen2.5-0.5B/1.5B/3B have 151,936 embedding rows and
Qwen2.5-7B 152,064 for one 151,665-token tokenizer. Here tiny pairs built the same way (one tokenizer,
two paddings) decode in lockstep, a padded row is never sampled even when its logit is made huge, and a
pair that cannot share a tokenizer is refused in one line before any weights load.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from helpers import CORPUS, PROMPTS, tiny_model, tiny_tokenizer

from trlvr.config import TandemConfig
from trlvr.engine import SoloSchedule, TokenSchedule, WordSchedule, make_pair
from trlvr.engine.options import Sampling
from trlvr.errors import UserError
from trlvr.toy.tokenizer import train_bpe_tokenizer
from trlvr.training.build import check_pairing, load_models

HUGE = 1e4


def padded(model, n_ids: int):
    """``model`` with the logits of every row past ``n_ids`` (its padding) made huge."""

    def hook(module, inputs, output):
        out = output.clone()
        out[..., n_ids:] = HUGE
        return out

    model.get_output_embeddings().register_forward_hook(hook)
    return model


def unpadded(model, arch: str, n_ids: int, seed: int, **kw):
    """The same weights with only the first ``n_ids`` embedding rows (what the padded model means)."""
    small = tiny_model(arch, n_ids, seed, **kw)
    state = {
        k: (v[:n_ids] if v.shape[:1] == (model.config.vocab_size,) else v)
        for k, v in model.state_dict().items()
    }
    small.load_state_dict(state)
    return small


@pytest.mark.parametrize("arch", ["qwen3", "llama"])
def test_qwen_like_pair_decodes_in_lockstep_and_never_samples_a_padded_row(arch):
    """One tokenizer, two paddings (like Qwen2.5-0.5B's and 7B's): the pair decodes (it was refused after
    both loaded), no token id reaches the tokenizer's size though every padded row's logit is 1e4, and
    the tokens, authors and log-probs are those of the same weights without their padding rows."""
    tok = tiny_tokenizer()
    n = len(tok)
    senior = padded(tiny_model(arch, n + 16, 0), n)
    junior = padded(tiny_model(arch, n + 48, 1, hidden=32, layers=1), n)
    prompts = [tok.encode(p) for p in PROMPTS[:4]]
    for schedule in (WordSchedule(0.5), TokenSchedule(0.5), SoloSchedule("junior")):
        sampling = Sampling(12, temperature=1.0, seed=3)
        out = make_pair(senior, junior, tok).generate(prompts, schedule, sampling)
        ids = out.tokens[out.completion_mask]
        assert ids.numel() > 0 and int(ids.max()) < n
        ref = make_pair(unpadded(senior, arch, n, 0), unpadded(junior, arch, n, 1, hidden=32, layers=1), tok)
        want = ref.generate(prompts, schedule, sampling)
        assert torch.equal(out.tokens, want.tokens) and torch.equal(out.senior_authored, want.senior_authored)
        torch.testing.assert_close(out.senior_logprob, want.senior_logprob)
        torch.testing.assert_close(out.junior_logprob, want.junior_logprob)


def test_a_padded_model_alone_never_samples_a_padded_row():
    tok = tiny_tokenizer()
    senior = padded(tiny_model("qwen3", len(tok) + 40, 0), len(tok))
    out = make_pair(senior, None, tok).generate(
        [tok.encode(p) for p in PROMPTS[:3]], SoloSchedule("senior"), Sampling(10, seed=1)
    )
    assert int(out.tokens[out.completion_mask].max()) < len(tok)


def test_text_pair_never_samples_a_padded_row():
    """Text pairing: each model samples only ids its own tokenizer has."""
    ts, tj = tiny_tokenizer(), train_bpe_tokenizer(CORPUS, vocab_size=290, split_digits=True)
    senior = padded(tiny_model("qwen3", len(ts) + 24, 0), len(ts))
    junior = padded(tiny_model("llama", len(tj) + 64, 1), len(tj))
    pair = make_pair(senior, junior, ts, junior_tokenizer=tj)
    out = pair.generate([ts.encode(p) for p in PROMPTS[:3]], WordSchedule(0.5), Sampling(16, seed=2))
    assert int(out.tokens[out.completion_mask].max()) < len(ts)
    assert (
        out.senior_authored[out.completion_mask].any() and (~out.senior_authored[out.completion_mask]).any()
    )
    last = pair.last  # the TextPairOutput: each model's own ids and which of them it sampled
    junior_sampled = [
        i
        for ids, a in zip(last.junior_ids, last.junior_authored, strict=True)
        for i, own in zip(ids, a, strict=True)
        if own
    ]
    assert junior_sampled and max(junior_sampled) < len(tj)
    assert max(i for ids in last.senior_ids for i in ids) < len(ts)


# ---- before any weights load -----------------------------------------------------------------------


def _save(root, name, tok, rows, seed=0):
    tiny_model("qwen3", rows, seed, hidden=16, layers=1).save_pretrained(root / name)
    tok.save_pretrained(root / name)
    return str(root / name)


@pytest.fixture
def no_weights(monkeypatch):
    """Fail the test if any model's weights are loaded."""
    from transformers import AutoModelForCausalLM

    calls = []

    def refuse(*a, **k):
        calls.append(a)
        raise AssertionError(f"weights loaded: {a}")

    monkeypatch.setattr(AutoModelForCausalLM, "from_pretrained", refuse)
    return calls


def _config(senior, junior, **kw):
    return TandemConfig(senior=senior, junior=junior, dataset="x.jsonl", **kw)


def test_a_qwen_like_pair_is_accepted_from_configs_and_tokenizers(tmp_path, no_weights):
    tok = tiny_tokenizer()
    cfg = _config(_save(tmp_path, "small", tok, len(tok) + 16), _save(tmp_path, "big", tok, len(tok) + 48, 1))
    assert check_pairing(cfg) == "lockstep" and no_weights == []


def test_pairs_that_cannot_share_a_tokenizer_are_refused_in_one_line_before_weights_load(
    tmp_path, no_weights
):
    tok, other = tiny_tokenizer(), train_bpe_tokenizer(CORPUS, vocab_size=290, split_digits=True)
    senior = _save(tmp_path, "senior", tok, len(tok) + 16)
    args = SimpleNamespace(model_init_kwargs=None, beta=0.0, max_completion_length=16)
    # different tokenizers, lockstep asked for
    with pytest.raises(UserError) as e:
        load_models(_config(senior, _save(tmp_path, "other", other, len(other), 1), pairing="lockstep"), args)
    assert "tokenizers differ" in str(e.value) and "\n" not in str(e.value)
    # one tokenizer, but a model with fewer embedding rows than it has tokens
    short = _save(tmp_path, "short", tok, len(tok) - 5, 1)
    with pytest.raises(UserError) as e:
        load_models(_config(senior, short), args)
    assert str(e.value) == (
        f"junior {short}: {len(tok) - 5} embedding rows for a {len(tok)}-token tokenizer; each "
        "model of a pair needs a row for every token of the shared tokenizer"
    )
    assert no_weights == []


def test_eval_checks_the_pair_from_configs_before_weights_load(tmp_path, no_weights):
    """`trlvr eval`'s check (`check_eval`, run before any model loads) accepts a Qwen-like pair and refuses
    a model with fewer rows than the shared tokenizer in one line naming its flag."""
    from trlvr.data import Problem
    from trlvr.eval.api import ModelSpec, check_eval
    from trlvr.eval.spec import EvalSpec

    tok = tiny_tokenizer()
    small, big = _save(tmp_path, "small", tok, len(tok) + 16), _save(tmp_path, "big", tok, len(tok) + 48, 1)
    short = _save(tmp_path, "short", tok, len(tok) - 1, 2)
    bench = {"b": [Problem("b:1", "What is 1+1?", "2", "b.jsonl")]}
    spec = EvalSpec()
    assert spec.needs_junior
    check_eval(ModelSpec(senior=small, junior=big), bench, spec)
    with pytest.raises(UserError) as e:
        check_eval(ModelSpec(senior=small, junior=short), bench, spec)
    assert str(e.value).startswith(
        f"--junior {short}: {len(tok) - 1} embedding rows for a {len(tok)}-token tokenizer"
    )
    assert no_weights == []


@pytest.mark.parametrize("arch", ["qwen3", "llama"])
def test_teacher_forced_scores_of_a_qwen_like_pair_are_those_without_padding(arch):
    """Evaluation's legibility/drift scores (`score_completions`): for one tokenizer with two paddings,
    the log-probs and KL are those of the same weights without the padding rows (before: the KL of a
    336-wide and a 368-wide logit row raised), even with the padded rows' logits huge."""
    from trlvr.eval.scoring import score_completions

    tok = tiny_tokenizer()
    n = len(tok)
    senior = padded(tiny_model(arch, n + 16, 0), n)
    junior = padded(tiny_model(arch, n + 48, 1, hidden=32, layers=1), n)
    prompts = [tok.encode(p) for p in PROMPTS[:3]]
    completions = [tok.encode(" 12 and 5"), tok.encode(" so x"), tok.encode(" 7")]
    got = score_completions(senior, junior, prompts, completions, n_ids=n)
    want = score_completions(
        unpadded(senior, arch, n, 0), unpadded(junior, arch, n, 1, hidden=32, layers=1), prompts, completions
    )
    for g, w in zip(got, want, strict=True):
        for name in ("junior_logprobs", "senior_logprobs", "kl"):
            assert getattr(g, name) == pytest.approx(getattr(w, name), abs=1e-5), name

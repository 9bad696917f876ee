"""Engine invariants on tiny random Qwen3 and Llama models (see conftest.py)."""

from __future__ import annotations

import pytest
import torch
from helpers import PROMPTS, SCHEDULES, encode, teacher_forced_logprobs

from trlvr.engine import (
    Sampling,
    SoloSchedule,
    StepSchedule,
    TandemGenerator,
    TokenSchedule,
    WordSchedule,
)
from trlvr.engine.sampling import filter_logits, sample_tokens
from trlvr.engine.schedules import VocabTables, _initial


@pytest.mark.parametrize("schedule", SCHEDULES, ids=lambda s: repr(s))
def test_logprobs_equal_teacher_forced_forward(models, tokenizer, schedule):
    senior, junior = models
    gen = TandemGenerator(senior, junior, tokenizer)
    prompts = encode(tokenizer, PROMPTS)  # different lengths: exercises left padding
    out = gen.generate(prompts, schedule, Sampling(24, temperature=1.0, seed=3), score_both=True)
    for i, prompt in enumerate(prompts):
        completion = out.completion_ids[i]
        assert len(out.authors[i]) == len(completion) == len(out.senior_logprobs[i])
        for model, got in ((senior, out.senior_logprobs[i]), (junior, out.junior_logprobs[i])):
            ref = teacher_forced_logprobs(model, prompt, completion)
            assert torch.allclose(torch.tensor(got), ref, atol=1e-4), (
                i,
                (torch.tensor(got) - ref).abs().max(),
            )


def test_solo_runs_only_the_author(models, tokenizer):
    senior, junior = models
    gen = TandemGenerator(senior, junior, tokenizer)
    out = gen.generate(encode(tokenizer, PROMPTS), SoloSchedule("senior"), Sampling(8))
    assert out.junior_logprobs is None and out.senior_logprobs is not None
    assert all(a == 1 for row in out.authors for a in row)
    out = gen.generate(encode(tokenizer, PROMPTS), SoloSchedule("junior"), Sampling(8))
    assert out.senior_logprobs is None
    assert all(a == 0 for row in out.authors for a in row)


def test_prompt_result_does_not_depend_on_batch_mates(models, tokenizer):
    senior, junior = models
    gen = TandemGenerator(senior, junior, tokenizer)
    prompts = encode(tokenizer, PROMPTS)
    together = gen.generate(prompts, SoloSchedule("senior"), Sampling(16, temperature=0))
    for i, p in enumerate(prompts):
        alone = gen.generate([p], SoloSchedule("senior"), Sampling(16, temperature=0))
        assert alone.completion_ids[0] == together.completion_ids[i]
        assert torch.allclose(
            torch.tensor(alone.senior_logprobs[0]), torch.tensor(together.senior_logprobs[i]), atol=1e-4
        )


def test_same_seed_same_output_and_temperature_zero_is_deterministic(models, tokenizer):
    senior, junior = models
    gen = TandemGenerator(senior, junior, tokenizer)
    prompts = encode(tokenizer, PROMPTS)
    a = gen.generate(prompts, WordSchedule(), Sampling(20, seed=7))
    b = gen.generate(prompts, WordSchedule(), Sampling(20, seed=7))
    c = gen.generate(prompts, WordSchedule(), Sampling(20, seed=8))
    assert a.completion_ids == b.completion_ids and a.authors == b.authors
    assert a.completion_ids != c.completion_ids
    g1 = gen.generate(prompts, WordSchedule(), Sampling(20, temperature=0, seed=1))
    g2 = gen.generate(prompts, WordSchedule(), Sampling(20, temperature=0, seed=1))
    assert g1.completion_ids == g2.completion_ids


def test_max_new_tokens_holds(models, tokenizer):
    senior, junior = models
    gen = TandemGenerator(senior, junior, tokenizer, eos_token_ids=[10_000 % len(tokenizer)])
    out = gen.generate(encode(tokenizer, PROMPTS), WordSchedule(), Sampling(5))
    assert all(len(c) <= 5 for c in out.completion_ids)
    assert all(
        r == "length" for r, c in zip(out.finish_reasons, out.completion_ids, strict=True) if len(c) == 5
    )


def test_embedding_rows_short_of_the_tokenizer_raise_naming_both_sizes(tokenizer):
    """A model needs a row per token of the shared tokenizer; rows past it are padding (issue 44: one
    tokenizer with two paddings, like Qwen2.5-0.5B's 151,936 and 7B's 152,064 rows, is a valid pair and
    decodes over the tokenizer's ids: tests/test_vocab_pair.py)."""
    from helpers import tiny_model

    senior = tiny_model("qwen3", len(tokenizer), seed=0)
    padded = tiny_model("qwen3", len(tokenizer) + 7, seed=1)
    assert TandemGenerator(senior, padded, tokenizer).n_ids == len(tokenizer)
    short = tiny_model("qwen3", len(tokenizer) - 3, seed=1)
    with pytest.raises(
        ValueError,
        match=rf"tokenizer has {len(tokenizer)} tokens but the models' vocabulary has {len(tokenizer) - 3}",
    ):
        TandemGenerator(senior, short, tokenizer)
    small = tiny_model("llama", len(tokenizer) - 20, seed=0)
    with pytest.raises(ValueError, match=rf"tokenizer has {len(tokenizer)}"):
        TandemGenerator(small, None, tokenizer)


def test_tandem_schedule_without_junior_raises(models, tokenizer):
    senior, _ = models
    gen = TandemGenerator(senior, None, tokenizer)
    with pytest.raises(ValueError, match="needs a junior"):
        gen.generate(encode(tokenizer, PROMPTS), WordSchedule(), Sampling(4))
    assert len(gen.generate(encode(tokenizer, PROMPTS), SoloSchedule(), Sampling(4))) == len(PROMPTS)


def test_eos_from_either_author_ends_the_sequence(models, tokenizer):
    senior, junior = models
    eos = list(range(2, len(tokenizer), 9))  # ~11% of ids end a sequence: both authors hit EOS often
    gen = TandemGenerator(senior, junior, tokenizer, eos_token_ids=eos)
    prompts = encode(tokenizer, PROMPTS) * 32
    out = gen.generate(prompts, TokenSchedule(p=0.5), Sampling(64, seed=0))
    eos_set, enders = set(eos), set()
    for ids, authors, reason in zip(out.completion_ids, out.authors, out.finish_reasons, strict=True):
        assert not eos_set & set(ids[:-1]), "a token after EOS was kept"
        if reason == "eos":
            assert ids[-1] in eos_set
            enders.add(authors[-1])
    assert enders == {0, 1}, "both the senior and the junior should have ended some sequences"
    # Finished rows are dropped from the batch and the KV caches mid-generation: the survivors'
    # log-probs must still match a teacher-forced pass.
    longest = sorted(range(len(prompts)), key=lambda i: -len(out.completion_ids[i]))[:6]
    for i in longest:
        ref = teacher_forced_logprobs(senior, prompts[i], out.completion_ids[i])
        assert torch.allclose(torch.tensor(out.senior_logprobs[i]), ref, atol=1e-4)
        ref = teacher_forced_logprobs(junior, prompts[i], out.completion_ids[i])
        assert torch.allclose(torch.tensor(out.junior_logprobs[i]), ref, atol=1e-4)


def redraw_points(tokens: list[int], word_start: set[int], max_gap: int) -> set[int]:
    """Reference: indices t whose author may differ from t-1 under WordSchedule."""
    points, since = set(), 0
    for t, tok in enumerate(tokens[:-1]):
        since += 1
        if tok in word_start or since >= max_gap:
            points.add(t + 1)
            since = 0
    return points


def test_word_schedule_statistics(models, tokenizer):
    senior, junior = models
    gen = TandemGenerator(senior, junior, tokenizer, eos_token_ids=[len(tokenizer) + 99])  # never stops
    # Make word starts common so many redraws happen within a short completion.
    tables = gen.tables._replace(word_start=torch.arange(len(tokenizer)) % 4 == 0)
    gen.tables = tables
    word_start = set(torch.nonzero(tables.word_start).squeeze(1).tolist())
    prompts = encode(tokenizer, PROMPTS) * 128  # 512 sequences
    out = gen.generate(prompts, WordSchedule(p=0.5, max_gap=6), Sampling(40, seed=0))
    share = out.senior_share.mean().item()
    assert 0.45 <= share <= 0.55, share
    first = torch.tensor([a[0] for a in out.authors], dtype=torch.float).mean().item()
    assert 0.43 <= first <= 0.57, first
    assert out.switches.float().mean() > 3
    for ids, authors in zip(out.completion_ids, out.authors, strict=True):
        allowed = redraw_points(ids, word_start, max_gap=6)
        changes = {t for t in range(1, len(ids)) if authors[t] != authors[t - 1]}
        assert changes <= allowed


@pytest.mark.parametrize("p,author", [(1.0, 1), (0.0, 0)])
def test_word_schedule_extremes_reduce_to_solo(models, tokenizer, p, author):
    senior, junior = models
    gen = TandemGenerator(senior, junior, tokenizer)
    prompts = encode(tokenizer, PROMPTS)
    out = gen.generate(prompts, WordSchedule(p=p), Sampling(16, seed=2))
    assert all(a == author for row in out.authors for a in row)
    solo = gen.generate(prompts, SoloSchedule("senior" if author else "junior"), Sampling(16, seed=2))
    assert out.completion_ids == solo.completion_ids  # same token stream: the author draw uses its own RNG


def test_step_schedule_alternates_at_step_ends_senior_first(models, tokenizer):
    senior, junior = models
    step_ids = list(range(3, len(tokenizer), 7))  # frequent artificial step ends
    gen = TandemGenerator(
        senior, junior, tokenizer, step_end_ids=step_ids, eos_token_ids=[len(tokenizer) + 1]
    )
    # max_rounds=2: a round is a senior step plus a junior step, so the cap is 4 steps
    out = gen.generate(encode(tokenizer, PROMPTS) * 8, StepSchedule(max_rounds=2), Sampling(80, seed=0))
    step_set = set(step_ids)
    for ids, authors, reason in zip(out.completion_ids, out.authors, out.finish_reasons, strict=True):
        assert authors[0] == 1
        ends = [t for t, tok in enumerate(ids) if tok in step_set]
        for t in range(1, len(ids)):
            assert (authors[t] != authors[t - 1]) == (t - 1 in ends)
        assert len(ends) <= 4
        if reason == "rounds":
            assert len(ends) == 4 and ends[-1] == len(ids) - 1
    assert "rounds" in out.finish_reasons


def test_step_end_split_across_two_newline_tokens():
    # ids: 0 = "a", 1 = "x\n", 2 = "\n", 3 = "\n\n"
    tables = VocabTables(
        word_start=torch.tensor([False] * 4),
        step_end=torch.tensor([False, False, False, True]),
        ends_newline=torch.tensor([False, True, True, True]),
        only_newlines=torch.tensor([False, False, True, True]),
    )
    sched = StepSchedule(max_rounds=10)
    state = _initial(torch.tensor([True]))
    authors = []
    for tok in [0, 1, 2, 2, 0, 3, 0]:  # "x\n" + "\n" ends a step; the next lone "\n" does not
        state = sched.advance(state, torch.tensor([tok]), tables, None)
        authors.append(bool(state.author))
    assert authors == [True, True, False, False, False, True, True]


def test_top_k_top_p_filters():
    logits = torch.tensor([[0.0, 1.0, 2.0, 3.0]])
    kept = torch.isfinite(filter_logits(logits, 1.0, top_k=2))
    assert kept.tolist() == [[False, False, True, True]]
    probs = torch.softmax(logits, -1)  # [0.032, 0.087, 0.237, 0.644]
    kept = torch.isfinite(filter_logits(logits, 1.0, top_p=0.7))
    assert kept.tolist() == [[False, False, True, True]]  # 0.644 < 0.7, so the second token is kept
    kept = torch.isfinite(filter_logits(logits, 1.0, top_p=0.5))
    assert kept.tolist() == [[False, False, False, True]]
    assert probs[0, 3] > 0.5
    g = torch.Generator().manual_seed(0)
    draws = sample_tokens(logits.expand(2000, 4), 1.0, top_k=2, generator=g)
    assert set(draws.tolist()) == {2, 3}
    frac3 = (draws == 3).float().mean().item()
    assert abs(frac3 - 1 / (1 + torch.e**-1)) < 0.04  # softmax over the two kept logits


def test_sampler_matches_softmax_and_never_draws_excluded_tokens():
    g = torch.Generator().manual_seed(0)
    logits = torch.tensor([[0.0, 1.0, 2.0, 3.0, float("-inf")]]).expand(40_000, 5)
    freq = torch.bincount(sample_tokens(logits, 1.0, generator=g), minlength=5) / 40_000
    expected = torch.softmax(logits[0], -1)
    assert freq[4] == 0
    assert torch.allclose(freq, expected, atol=0.01), (freq, expected)
    # temperature 2 flattens the distribution by exactly logits / 2
    freq = torch.bincount(sample_tokens(logits, 2.0, generator=g), minlength=5) / 40_000
    assert torch.allclose(freq, torch.softmax(logits[0] / 2, -1), atol=0.01)

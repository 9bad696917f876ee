"""Legibility and drift: the batched, chunked scorer equals a per-position reference loop."""

from __future__ import annotations

import pytest
import torch

from trlvr.eval.metrics import token_cross_entropy, token_kl
from trlvr.eval.scoring import score_completions

PROMPTS = ["The cat sat on the mat.", "Let's think step by step."]
COMPLETIONS = [" 12 plus 30 is 42.\n\nSo", " The dog ran to the park.\n\n\\boxed{130}"]


def reference(senior, junior, prompt: list[int], completion: list[int]):
    """Per completion token: one full forward of each model on the prefix, last-position logits."""
    ce, kl = [], []
    for t in range(len(completion)):
        prefix = torch.tensor([prompt + completion[:t]])
        with torch.no_grad():
            ls = senior(input_ids=prefix).logits[0, -1].double()
            lj = junior(input_ids=prefix).logits[0, -1].double()
        ps, lps, lpj = ls.softmax(-1), ls.log_softmax(-1), lj.log_softmax(-1)
        ce.append(-lpj[completion[t]].item())
        kl.append(float((ps * (lps - lpj)).sum()))  # float64, straight from the definition
    return ce, kl


def test_scores_equal_reference_loop(models, tokenizer):
    senior, junior = models
    prompts = [tokenizer.encode(p) for p in PROMPTS]
    completions = [tokenizer.encode(c) for c in COMPLETIONS]
    # batch_size 2 pads the shorter sequence; chunk_tokens 5 splits the LM-head pass.
    got = score_completions(
        senior, junior, prompts, completions, pad_token_id=1, batch_size=2, chunk_tokens=5
    )
    for p, c, sc in zip(prompts, completions, got, strict=True):
        ce, kl = reference(senior, junior, p, c)
        assert [-x for x in sc.junior_logprobs] == pytest.approx(ce, abs=1e-4)
        assert sc.kl == pytest.approx(kl, abs=1e-4)
        assert sc.junior_ce == pytest.approx(sum(ce) / len(ce), abs=1e-4)
        assert sc.mean_kl == pytest.approx(sum(kl) / len(kl), abs=1e-4)


def test_kl_of_a_model_with_itself_is_zero(models, tokenizer):
    senior, _ = models
    sc = score_completions(
        senior, senior, [tokenizer.encode("A train")], [tokenizer.encode(" leaves at 3 pm")]
    )[0]
    assert max(sc.kl) < 1e-5
    assert sc.junior_logprobs == pytest.approx(sc.senior_logprobs, abs=1e-5)


def test_metric_functions_by_hand():
    # Two-token vocabulary. p = (0.5, 0.5), q = (0.8, 0.2): KL = 0.5 ln(0.5/0.8) + 0.5 ln(0.5/0.2).
    lp = torch.log(torch.tensor([[0.5, 0.5]]))
    lq = torch.log(torch.tensor([[0.8, 0.2]]))
    expect = 0.5 * torch.log(torch.tensor(0.5 / 0.8)) + 0.5 * torch.log(torch.tensor(2.5))
    assert token_kl(lp, lq).item() == pytest.approx(expect.item(), abs=1e-6)
    assert token_cross_entropy(lq, torch.tensor([1])).item() == pytest.approx(
        -torch.log(torch.tensor(0.2)).item()
    )

"""Issue 29, rule 3 (check what is impossible, not what is unlikely): tandem training at p = 0.99."""

from __future__ import annotations

from helpers import tiny_model
from test_training import make_trainer

from trlvr.config import TandemConfig


def test_tandem_training_at_p_099_survives_an_all_senior_batch(tmp_path, tokenizer):
    """At p = 0.99 a step whose rollouts hold no junior token is simply likely; it used to end the run with
    "the author mask is wrong". Here (seeded) steps are all senior, and training finishes."""
    senior = tiny_model("qwen3", len(tokenizer), seed=0)
    junior = tiny_model("qwen3", len(tokenizer), seed=1, hidden=32, layers=1)
    tandem = TandemConfig(senior="senior", junior="junior", p=0.99, schedule="word", max_gap=32)
    trainer = make_trainer(
        tmp_path, tokenizer, senior, junior, tandem=tandem, max_steps=3, max_completion_length=4
    )
    trainer.train()
    junior_len = [
        h["tandem/junior_tokens/mean"] for h in trainer.state.log_history if "tandem/junior_tokens/mean" in h
    ]
    assert trainer.state.global_step == 3 and len(junior_len) == 3
    assert min(junior_len) == 0.0  # the case itself: a step without a junior token went through

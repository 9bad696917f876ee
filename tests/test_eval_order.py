"""Evaluation with an engine that holds no HF models (backend vllm): every batch is generated first, the
engine is closed, and only then do the HF scorers load (so a GPU never holds both); the scores equal the
ones an HF pair attaches while it generates."""

from __future__ import annotations

import json

import pytest
from helpers import last_word, parity_reward, toy_problems

from trlvr.engine import make_pair
from trlvr.eval.prepare import prompt_ids_for
from trlvr.eval.runner import Partners, evaluate
from trlvr.eval.spec import EvalSpec


class EngineOnly:
    """An HF pair seen as backend vllm's is: it generates, holds no scoring models, and can be closed."""

    def __init__(self, inner, events):
        self.inner, self.events = inner, events
        self.senior = self.junior = None
        self.closed = False

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def generate(self, *a, **kw):
        assert not self.closed, "generated after close"
        self.events.append("generate")
        return self.inner.generate(*a, **kw)

    def close(self):
        self.closed = True
        self.events.append("closed")


@pytest.mark.parametrize("arch", ["qwen3"], indirect=True)
def test_scoring_loads_after_the_engine_is_closed_and_scores_are_the_same(models, tokenizer, tmp_path):
    senior, junior = models
    spec = EvalSpec(
        suite=["solo", "handoff", "legibility", "drift"],
        n=2,
        ks=[1],
        seed=3,
        max_new_tokens=8,
        batch_size=4,
        num_resamples=50,
    )
    benches = {"a": toy_problems(3, "a")}
    ids = {"senior": {"weights": "s"}, "junior": {"weights": "j"}}
    kw = dict(score_fn=parity_reward, extract_fn=last_word, progress=False)
    inline = Partners(tokenizer, lambda junior_prompts=None: make_pair(senior, junior, tokenizer), True, ids)
    evaluate(inline, benches, spec, tmp_path / "inline", **kw)
    events, lengths, engines = [], [], []

    def build(junior_prompts=None, max_model_len=None, stacks=None):
        lengths.append(max_model_len)
        engines.append(stacks)
        events.append(f"build {'+'.join(stacks)}")
        return EngineOnly(make_pair(senior, junior, tokenizer), events)

    def scorers():
        events.append("scorers")
        return senior, junior

    later = Partners(tokenizer, build, True, ids, backend="vllm", scorers=scorers)
    evaluate(later, benches, spec, tmp_path / "later", **kw)
    last_close = len(events) - 1 - events[::-1].index("closed")
    assert last_close < events.index("scorers") and events.count("scorers") == 1
    assert "generate" not in events[last_close:]
    # one engine per set of models: the tandem protocols' composite, then the senior alone for solo
    assert engines == [("senior", "junior"), ("senior",)]
    assert events.index("closed") < events.index("build senior")  # the composite goes before the next engine
    assert len(set(lengths)) == 1
    assert lengths[0] == max(len(prompt_ids_for(p, tokenizer)) for p in benches["a"]) + 8  # prompt + budget
    rows = {
        (r["protocol"], r["problem_id"], r["sample_idx"]): r
        for r in map(json.loads, (tmp_path / "later" / "samples.jsonl").read_text().splitlines())
    }
    for r in map(json.loads, (tmp_path / "inline" / "samples.jsonl").read_text().splitlines()):
        other = rows[(r["protocol"], r["problem_id"], r["sample_idx"])]
        assert other["token_ids"] == r["token_ids"]
        for key in ("legibility", "drift"):
            assert (other.get(key) is None) == (r.get(key) is None)
            if r.get(key) is not None:
                assert other[key] == pytest.approx(r[key], abs=1e-5)
    assert sum("legibility" in r for r in rows.values()) == 3 * 2  # every solo row was scored

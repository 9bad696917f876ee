"""Evaluation protocols and `evaluate` end to end on tiny models with a trivial reward."""

from __future__ import annotations

import json

import pytest
from helpers import evaluate_models, last_word, parity_reward, toy_problems

from trlvr.engine import LockstepPair, StepSchedule, WordSchedule
from trlvr.eval.protocols import batch_seed, protocols_for, run_protocol, schedule_for
from trlvr.eval.store import read_samples as load_samples


def test_protocol_schedules():
    assert protocols_for(["solo", "handoff", "dose", "legibility", "drift", "junior"]) == [
        "solo",
        "handoff",
        "dose-0.25",
        "dose-0.5",
        "dose-0.75",
        "junior",
    ]
    assert protocols_for(["drift"]) == ["solo"]
    assert schedule_for("handoff") == StepSchedule(first_author="senior", max_rounds=150)
    assert schedule_for("dose-0.25") == WordSchedule(p=0.75)
    with pytest.raises(ValueError, match="unknown suite"):
        protocols_for(["bogus"])
    assert batch_seed(0, "a", "solo", 1) == batch_seed(0, "a", "solo", 1) != batch_seed(0, "a", "solo", 2)


def test_handoff_alternates_at_step_ends_with_shared_budget_and_round_cap(models, tokenizer):
    senior, junior = models
    # Random tiny models rarely write "\n\n": declare a third of the vocabulary step ends.
    step_ids = list(range(2, len(tokenizer), 3))
    pair = LockstepPair(senior, junior, tokenizer, step_end_ids=step_ids)
    prompts = [tokenizer.encode(p.prompt) for p in toy_problems(6)]
    decoding = {"temperature": 1.0, "top_p": 1.0, "top_k": 0}
    for max_rounds, budget in ((2, 40), (150, 12)):
        out = run_protocol(
            pair,
            "handoff",
            prompts,
            max_new_tokens=budget,
            decoding=decoding,
            seed=5,
            handoff_max_rounds=max_rounds,
        )
        for ids, authors, reason in zip(out.completion_ids, out.authors, out.finish_reasons, strict=True):
            assert len(ids) <= budget  # one budget for the whole team
            assert authors[0] == 1  # senior first
            ends = [pair.tables.step_end[t].item() for t in ids]
            for t in range(len(ids) - 1):  # the author flips exactly after a step end
                assert (authors[t + 1] != authors[t]) == ends[t], (t, ids, authors)
            assert sum(ends) <= 2 * max_rounds  # a round = one senior step + one junior step
            if reason == "rounds":
                assert sum(ends) == 2 * max_rounds and ends[-1]
        if max_rounds == 2:
            assert "rounds" in out.finish_reasons
            assert any(0 in a for a in out.authors)


SUITE = ["solo", "handoff", "dose", "legibility", "drift", "junior"]


def run_eval(models, tokenizer, out_dir, **kw):
    senior, junior = models
    benches = {"alpha": toy_problems(3, "a"), "beta": toy_problems(2, "b")}
    args = dict(
        suite=SUITE,
        n=4,
        ks=[1, 2, 4],
        seed=3,
        max_new_tokens=10,
        batch_size=5,
        progress=False,
        score_fn=parity_reward,
        extract_fn=last_word,
        num_resamples=200,
    )
    args.update(kw)
    return evaluate_models(senior, junior, tokenizer, benches, out_dir, **args)


@pytest.mark.parametrize("arch", ["qwen3"], indirect=True)
def test_evaluate_end_to_end_and_resume(models, tokenizer, tmp_path):
    res = run_eval(models, tokenizer, tmp_path / "run")
    run = tmp_path / "run"
    for name in ("results.json", "samples.jsonl", "per_problem.json", "config.json"):
        assert (run / name).exists(), name
    assert json.loads((run / "results.json").read_text()) == res
    cfg = res["config"]
    assert cfg["decoding"] == {"temperature": 0.7, "top_p": 0.8, "top_k": 20}
    assert cfg["n"] == 4 and cfg["ks"] == [1, 2, 4] and cfg["seed"] == 3
    expected = [
        "solo/pass@1",
        "solo/pass@4",
        "handoff/pass@2",
        "handoff_ratio/pass@1",
        "junior/pass@4",
        "dose-0.25/pass@1",
        "dose-0.75/senior_share",
        "legibility/junior_ce",
        "drift/kl",
    ]
    for bench in ("alpha", "beta"):
        metrics = res["benchmarks"][bench]["metrics"]
        for m in expected:
            e = metrics[m]
            assert e["ci_low"] <= e["value"] + 1e-9 and e["value"] <= e["ci_high"] + 1e-9, (m, e)
        assert metrics["solo/pass@1"]["num_problems"] == (3 if bench == "alpha" else 2)
    macro = res["macro"]["metrics"]
    for m in expected:
        assert m in macro
    a, b = res["benchmarks"]["alpha"]["metrics"], res["benchmarks"]["beta"]["metrics"]
    assert macro["drift/kl"]["value"] == pytest.approx((a["drift/kl"]["value"] + b["drift/kl"]["value"]) / 2)
    assert macro["legibility/junior_ce"]["value"] > 0

    rows = load_samples(run / "samples.jsonl")
    assert (
        len(rows) == 2 * (3 + 2) * 4 + 4 * (3 + 2) * 4
    )  # solo/junior/handoff... 6 protocols x 5 problems x 4
    keys = {(r["benchmark"], r["protocol"], r["problem_id"], r["sample_idx"]) for r in rows}
    assert len(keys) == len(rows)
    for r in rows:
        assert len(r["token_ids"]) == len(r["authors"]) == r["num_tokens"] <= 10
        assert r["reward"] == parity_reward([r["text"]], [r["answer"]])[0]
        assert r["parsed_answer"] == last_word(r["text"])
        if r["protocol"] == "solo":
            assert set(r["authors"]) == {"1"} and len(r["junior_logprobs"]) == r["num_tokens"]
            m = r["num_tokens"] - (r["finish_reason"] == "eos")  # the final EOS is not text
            if m:
                assert r["legibility"] == pytest.approx(-sum(r["junior_logprobs"][:m]) / m, abs=1e-2)
            assert r["drift"] >= 0
        if r["protocol"] == "junior":
            assert set(r["authors"]) == {"0"}
        if r["protocol"] == "handoff":
            assert r["authors"][0] == "1"

    # Resume: drop rows from the middle and the end of the file (and tear the last line).
    lines = (run / "samples.jsonl").read_text().splitlines(keepends=True)
    kept = lines[:7] + lines[12:40] + [lines[40][: len(lines[40]) // 2]]
    (run / "samples.jsonl").write_text("".join(kept))
    res2 = run_eval(models, tokenizer, run)
    # the same results; only the record of the machine that wrote them may differ (e.g. a new commit)
    assert {**res2, "config": {**res2["config"], "machine": None}} == {
        **res,
        "config": {**res["config"], "machine": None},
    }
    assert set(res2["config"]["machine"]) >= {"versions", "torch_threads", "device", "dtype"}
    rows2 = load_samples(run / "samples.jsonl")
    by_key = {(r["benchmark"], r["protocol"], r["problem_id"], r["sample_idx"]): r for r in rows}
    assert len(rows2) == len(rows)
    for r in rows2:
        old = by_key[(r["benchmark"], r["protocol"], r["problem_id"], r["sample_idx"])]
        assert r["token_ids"] == old["token_ids"] and r["authors"] == old["authors"]

    # Changing a generation setting on resume is refused, naming the field.
    with pytest.raises(ValueError, match="max_new_tokens"):
        run_eval(models, tokenizer, run, max_new_tokens=11)


@pytest.mark.parametrize("arch", ["llama"], indirect=True)
def test_evaluate_adds_scores_to_earlier_solo_rows(models, tokenizer, tmp_path):
    res = run_eval(models, tokenizer, tmp_path, suite=["solo"], n=2, ks=[1, 2])
    assert "drift/kl" not in res["macro"]["metrics"]
    res = run_eval(models, tokenizer, tmp_path, suite=["solo", "drift"], n=2, ks=[1, 2])
    assert "drift/kl" in res["macro"]["metrics"] and "legibility/junior_ce" in res["macro"]["metrics"]


def test_handoff_paper_runs_its_own_n_and_decoding_and_records_them(models, tokenizer, tmp_path):
    """handoff-paper beside solo: 4 samples per problem at T 0.6 / top_p 0.95 whatever the run's n and decoding;
    pass@k up to its n; config.json records its settings."""
    res = run_eval(models, tokenizer, tmp_path / "run", suite=["solo", "handoff-paper"], n=8, ks=[1, 4, 8])
    rows = load_samples(tmp_path / "run" / "samples.jsonl")
    per = {p: sum(r["protocol"] == p for r in rows) for p in ("solo", "handoff-paper")}
    assert per == {"solo": 5 * 8, "handoff-paper": 5 * 4}
    metrics = res["macro"]["metrics"]
    assert {"handoff-paper/pass@1", "handoff-paper/pass@4", "solo/pass@8"} <= set(metrics)
    assert "handoff-paper/pass@8" not in metrics and "handoff/round_capped" not in metrics
    assert res["config"]["handoff_paper"] == {
        "decoding": {"temperature": 0.6, "top_p": 0.95, "top_k": 0},
        "n": 4,
        "max_rounds": None,
    }
    assert all(r["finish_reason"] != "rounds" for r in rows)


@pytest.mark.parametrize("arch", ["qwen3"], indirect=True)
def test_the_prompt_template_reaches_the_evaluated_prompts(models, tokenizer, tmp_path):
    """prompt_template authors: every problem without its own prompt is asked with the authors' instruction."""
    from trlvr.data import Problem
    from trlvr.data.prompts import AUTHORS_INSTRUCTION

    senior, junior = models
    benches = {"plain": [Problem(f"q{i}", f"What is {i} plus {i}?", str(2 * i), "t") for i in range(2)]}
    common = dict(
        suite=["solo"],
        n=1,
        ks=[1],
        max_new_tokens=4,
        progress=False,
        score_fn=parity_reward,
        extract_fn=last_word,
        num_resamples=20,
    )
    evaluate_models(senior, junior, tokenizer, benches, tmp_path / "a", prompt_template="authors", **common)
    evaluate_models(senior, junior, tokenizer, benches, tmp_path / "t", **common)
    theirs, ours = (load_samples(tmp_path / d / "samples.jsonl") for d in ("a", "t"))
    assert [r["prompt"] for r in theirs] == [f"What is {i} plus {i}?" + AUTHORS_INSTRUCTION for i in range(2)]
    assert all("Let's think step by step" in r["prompt"] for r in ours)
    assert json.loads((tmp_path / "a" / "config.json").read_text())["prompt_template"] == "authors"

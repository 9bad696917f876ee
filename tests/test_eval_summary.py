"""The demo summary (trlvr.experiments.summary) over evaluation directories, and the toy jargon metric."""

from __future__ import annotations

import json

import pytest
from helpers import evaluate_models, last_word, parity_reward, tiny_model, toy_problems

from trlvr.eval.store import read_samples
from trlvr.experiments.summary import write_summary
from trlvr.toy.jargon import jargon_by_problem


def test_jargon_rate_per_problem():
    rows = [
        {"protocol": "solo", "problem_id": "a", "text": "<<2+3=5>> so \\boxed{5}"},
        {"protocol": "solo", "problem_id": "a", "text": "2 plus 3 is 5"},
        {"protocol": "solo", "problem_id": "b", "text": "<<1+1=2>>"},
        {"protocol": "handoff", "problem_id": "b", "text": "plain"},
    ]
    assert jargon_by_problem(rows) == {"a": 0.5, "b": 1.0}


def test_summary_table_plot_and_report(tokenizer, tmp_path):
    junior = tiny_model("qwen3", len(tokenizer), seed=1, hidden=32, layers=1)
    for name, seed in (("grpo", 0), ("tandem", 2)):
        senior = tiny_model("qwen3", len(tokenizer), seed=seed)
        evaluate_models(
            senior, junior, tokenizer, {"toy": toy_problems(4)}, tmp_path / "eval" / name, suite=["solo", "handoff"],
            n=2, ks=[1, 2], max_new_tokens=8, batch_size=8, progress=False, score_fn=parity_reward,
            extract_fn=last_word, num_resamples=100,
        )  # fmt: skip
    # Put jargon into one grpo sample so the paired difference is not trivially zero.
    path = tmp_path / "eval" / "grpo" / "samples.jsonl"
    rows = read_samples(path)
    rows[0]["text"] = "<<1+1=2>>"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    md = write_summary(tmp_path, ["grpo", "tandem"]).read_text()
    summary = json.loads((tmp_path / "summary.json").read_text())
    j = summary["rows"]["grpo"]["jargon_rate"]
    assert j["value"] == pytest.approx(0.5 / 4) and j["num_problems"] == 4
    assert f"{j['value'] * 100:.2f} [" in md  # the shared formatter: jargon in percent
    assert summary["paired_jargon_tandem_minus_grpo"]["diff"] == pytest.approx(-0.5 / 4)
    assert (tmp_path / "summary.png").stat().st_size > 1000 and (tmp_path / "report.html").exists()

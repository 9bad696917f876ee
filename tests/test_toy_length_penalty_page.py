"""docs/results/toy-length-penalty.md reports the pre-registered toy length-penalty study from the committed
outputs in bench/results/toy-length-penalty: its tables are `bench/toy_length_penalty.py`'s rendering of
the committed summary.json, its status says partial exactly when a trained arm has fewer seeds than the
study file registers, the study file it cites registers what the page says, and the page's length fact
(jargon is not shorter than plain in the toy world) is recomputed from the shipped tokenizer."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import yaml
from helpers import load_script

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "results" / "toy-length-penalty.md"
RESULTS = ROOT / "bench" / "results" / "toy-length-penalty"
STUDY = ROOT / "studies" / "toy-length-penalty.yaml"


def _bench():
    return load_script(ROOT / "bench" / "toy_length_penalty.py", "toy_length_penalty")


def test_the_tables_are_the_committed_summary():
    summary = json.loads((RESULTS / "summary.json").read_text())
    assert _bench().table(summary) in PAGE.read_text()


def test_status_is_partial_exactly_when_seeds_are_missing():
    summary = json.loads((RESULTS / "summary.json").read_text())
    registered = yaml.safe_load(STUDY.read_text())["seeds"]
    done = min(len(summary["rows"][v]["seeds"]) for v in ("grpo-kimi", "tandem-kimi"))
    status = next(line for line in PAGE.read_text().splitlines() if line.startswith("| Status"))
    assert ("partial" in status) == (done < len(registered)), status
    assert f"{done} of {len(registered)} seeds" in status


def test_the_study_file_registers_what_the_page_says():
    study = yaml.safe_load(STUDY.read_text())
    v = study["variants"]
    assert v["grpo-kimi"]["length_penalty"] == v["tandem-kimi"]["length_penalty"] == "kimi"
    assert v["grpo-kimi"]["length_penalty_weight"] == v["tandem-kimi"]["length_penalty_weight"] == 1.0
    assert (v["tandem-kimi"]["schedule"], v["tandem-kimi"]["p"], v["tandem-kimi"]["max_gap"]) == (
        "word",
        0.5,
        32,
    )
    assert (
        study["train"]["max_steps"] == 100
        and study["evaluation"]["n"] == 2
        and study["evaluation"]["limit"] == 200
    )


def test_jargon_is_not_shorter_in_the_toy_world():
    from transformers import AutoTokenizer

    from trlvr.toy.dialects import render_solution
    from trlvr.toy.task import generate_problems

    tok = AutoTokenizer.from_pretrained(ROOT / "trlvr" / "toy" / "assets" / "senior")
    problems = generate_problems(500, "test", 0)
    n = {d: [len(tok(render_solution(p, d))["input_ids"]) for p in problems] for d in ("plain", "jargon")}
    diff = [j - p for j, p in zip(n["jargon"], n["plain"], strict=True)]
    page = PAGE.read_text()
    assert (
        f"{statistics.mean(n['plain']):.2f} tokens and a jargon one {statistics.mean(n['jargon']):.2f}"
        in page
    )
    assert f"mean {statistics.mean(diff):.2f}, range {min(diff)} to +{max(diff)}" in page

"""The README's headline and docs/results/toy-seeds.md report the three-seed toy study from its committed outputs
(bench/results/toy-seeds): the tables are the study report's rendering of the committed summary.json, the page's
answer quotes the paired row it holds, and the study file it ran registers what the page says."""

from __future__ import annotations

import json
import re
from pathlib import Path

import yaml
from helpers import load_script

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results" / "toy-seeds"
PAGE = ROOT / "docs" / "results" / "toy-seeds.md"


def _tool():
    return load_script(ROOT / "tools" / "seeds_table.py", "seeds_table")


def test_the_tables_are_the_committed_outputs_in_both_places():
    tool = _tool()
    want = tool.rows(tool.table())
    assert want.count("\n") >= 8 and "| tandem | grpo | 3 |" in want
    for place in tool.PLACES:
        (block,) = tool.blocks(place)
        assert tool.rows(block) == want, place


def test_the_page_answers_with_the_paired_row_it_holds():
    summary = json.loads((RESULTS / "summary.json").read_text())
    pair = summary["paired"]["tandem"]
    assert pair["baseline"] == "grpo" and sorted(pair["seeds"]) == [0, 1, 2]
    answer = next(line for line in PAGE.read_text().splitlines() if line.startswith("| Answer"))
    rows = _tool().rows(_tool().blocks(PAGE)[0])
    paired = next(line for line in rows.splitlines() if line.startswith("| tandem | grpo |"))
    handoff, solo = (c.strip() for c in paired.strip("|").split("|")[3:5])
    assert (
        handoff.startswith("+62.8 [+56.6, +68.3]") and "62.8 points" in answer and "[+56.6, +68.3]" in answer
    )
    assert solo == "-1.1 [-3.5, +0.9]" and "-1.1 points [-3.5, +0.9]" in answer  # no *: its CI includes 0
    assert "**current**" in next(
        line for line in PAGE.read_text().splitlines() if line.startswith("| Status")
    )


def test_the_study_it_ran_registers_what_the_page_says():
    study = yaml.safe_load((RESULTS / "study.yaml").read_text())
    assert (
        study["seeds"] == [0, 1, 2]
        and study["train"]["max_steps"] == 150
        and study["train"]["holdout"] == 200
    )
    assert study["evaluation"]["limit"] == 200 and study["evaluation"]["n"] == 4
    tandem = study["variants"]["tandem"]
    assert (tandem["schedule"], tandem["p"], tandem["max_gap"]) == ("word", 0.5, 32)
    assert not re.search(r"/(work|tmp|home)/", (RESULTS / "study.yaml").read_text())  # no local path

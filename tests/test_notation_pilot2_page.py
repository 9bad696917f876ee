"""docs/results/real-notation-2.md reports the second notation pilot from the committed outputs in
bench/results/notation-pilot-2: its table's rows are decision.md's, its paired plain-minus-variant CIs are
`paired_bootstrap` on the committed per_problem.json, and its decision is the pre-registered rule's."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from trlvr.eval.stats import paired_bootstrap

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "results" / "real-notation-2.md"
PILOT = ROOT / "bench" / "results" / "notation-pilot-2"
VARIANTS = ("spaced-50", "spaced-65", "spaced-50-short", "spaced-65-short")


def _page_rows() -> dict[str, list[str]]:
    results = PAGE.read_text().split("## Results", 1)[1]
    rows = {}
    for line in results.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("| ") and cells[0].split(" (")[0] in ("plain", *VARIANTS):
            rows[cells[0].split(" (")[0]] = cells
    return rows


def _paired(variant: str, metric: str) -> tuple[float, float, float]:
    per = {
        r: json.loads((PILOT / "eval" / r / "per_problem.json").read_text())["heldout"][metric]
        for r in ("plain", variant)
    }
    keys = sorted(per["plain"])
    assert sorted(per[variant]) == keys
    a, b = (np.array([[per[r][k]] for k in keys]) for r in (variant, "plain"))
    res = paired_bootstrap(a, b, num_resamples=10_000, seed=0)  # plain - variant
    return 100 * res.diff, 100 * res.lo, 100 * res.hi


def _numbers(cell: str) -> list[float]:
    return [float(x.replace("−", "-")) for x in re.findall(r"[−+-]?\d+\.\d", cell)]


@pytest.mark.parametrize("variant", VARIANTS)
def test_the_paired_cis_are_the_committed_per_problem_files(variant):
    row = _page_rows()[variant]
    for cell, metric in ((row[4], "solo/pass@1"), (row[5], "dose-0.5/pass@1")):
        assert _numbers(cell) == pytest.approx(_paired(variant, metric), abs=0.051), (variant, metric, cell)


def test_the_rows_are_decision_md_and_the_decision_is_the_rules():
    decision = json.loads((PILOT / "decision.json").read_text())
    rule, table = decision["rule"], decision["table"]
    rows = _page_rows()
    assert set(rows) == {"plain", *VARIANTS} == set(table)
    plain = table["plain"]
    qualifying = []
    for name, cells in rows.items():
        got = table[name]
        for cell, metric in ((cells[1], "solo/pass@1"), (cells[2], "dose-0.5/pass@1")):
            assert _numbers(cell)[0] == pytest.approx(got[metric]["value"], abs=0.05), (name, metric)
        if name == "plain":
            continue
        jargon = _numbers(cells[3])[0]
        gap = plain["dose-0.5/pass@1"]["value"] - got["dose-0.5/pass@1"]["value"]
        solo_loss = plain["solo/pass@1"]["value"] - got["solo/pass@1"]["value"]
        fails = [
            why
            for why, bad in (
                ("gap", gap < rule["min_gap"]),
                ("jargon", not rule["jargon"][0] <= jargon <= rule["jargon"][1]),
                ("solo", solo_loss > rule["solo_within"]),
            )
            if bad
        ]
        assert cells[6] == ", ".join(fails), name
        qualifying += [] if fails else [name]
    assert not qualifying
    assert "**Decision, by the rule: none qualifies" in PAGE.read_text()

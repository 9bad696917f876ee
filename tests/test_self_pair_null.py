"""The self-pair null check: a model paired with itself scores alike solo, in handoff and as the junior.

With one model on both sides every token is drawn from the same distribution whoever writes it, so the three
protocols differ by sampling noise only (their row keys differ: `trlvr.eval.protocols.eval_row_key`). A protocol
that scores an identical pair differently (a schedule that cuts or shifts the text, a budget or stop rule applied
to one protocol, a prompt built otherwise) shows here as a paired difference beyond its interval.
"""

from __future__ import annotations

import math
from collections import defaultdict

import pytest

from trlvr.cli.main import main as cli
from trlvr.data import read_jsonl
from trlvr.toy.task import make_splits
from trlvr.toy.world import ASSETS_DIR, _rows, _write_jsonl

Z = 3.29  # a two-sided 99.9% normal interval: two comparisons, one fixed seed, no flaky failure by design


def paired(rows: list[dict], a: str, b: str) -> tuple[float, float, int]:
    """(mean, SE, problems) of the per-problem pass@1 difference b - a over the problems both have."""
    by = defaultdict(list)
    for r in rows:
        by[(r["protocol"], r["problem_id"])].append(float(r["reward"]) > 0.5)
    ids = sorted({p for (proto, p) in by if proto == a} & {p for (proto, p) in by if proto == b})
    d = [sum(by[(b, i)]) / len(by[(b, i)]) - sum(by[(a, i)]) / len(by[(a, i)]) for i in ids]
    mean = sum(d) / len(d)
    var = sum((x - mean) ** 2 for x in d) / (len(d) - 1)
    return mean, math.sqrt(var / len(d)), len(d)


@pytest.mark.slow
@pytest.mark.parametrize("model", ["junior"])  # the toy senior is right ~99% of the time: no room to differ
def test_an_identical_pair_scores_alike_solo_in_handoff_and_as_the_junior(tmp_path, model):
    data = tmp_path / "test.jsonl"
    _write_jsonl(data, _rows(make_splits(10, 200, seed=0)[1]))
    path = str(ASSETS_DIR / model)
    assert (
        cli(
            [
                "eval",
                "--senior",
                path,
                "--junior",
                path,
                "--data",
                f"toy={data}",
                "--suite",
                "solo,handoff,junior",
                "--n",
                "8",
                "--k",
                "1",
                "--max-new-tokens",
                "48",
                "--no-progress",
                "--dtype",
                "float32",
                "--out",
                str(tmp_path / "eval"),
            ]
        )
        == 0
    )
    rows = read_jsonl(tmp_path / "eval" / "samples.jsonl")
    solo = [float(r["reward"]) > 0.5 for r in rows if r["protocol"] == "solo"]
    rate = sum(solo) / len(solo)
    assert 0.05 < rate < 0.95, rate  # the check means something only where answers are sometimes right
    for other in ("handoff", "junior"):
        mean, se, n = paired(rows, "solo", other)
        assert n == 200 and se > 0
        assert abs(mean) <= Z * se, f"{other} - solo pass@1 = {mean:+.4f} (SE {se:.4f}) on an identical pair"
        assert abs(mean) < 0.05  # and small in absolute terms: 1,600 samples a protocol

"""The acceptance run: the whole demo (the shipped study trlvr/studies/demo.yaml: toy world, grpo and tandem
side by side, selection, evaluation, report), ~10 min on 2 cores.

Bars from the training issue: tandem removes the jargon (<= 0.10) while grpo keeps it (>= 0.40);
tandem's step-handoff accuracy beats grpo's by >= 10 points (paired CI above 0) with solo accuracy
within 5 points; a tandem step costs <= 1.8x a grpo step.
"""

from __future__ import annotations

import json
import statistics

import pytest

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    from trlvr.cli.main import main as cli

    out = tmp_path_factory.mktemp("demo")
    assert cli(["demo", "--out", str(out)]) == 0
    return out


def summary(out) -> dict:
    return json.loads((out / "report" / "summary.json").read_text())


def metric(out, name, key):
    return summary(out)["rows"][name]["metrics"][key]["value"]


def test_published_files(demo):
    for name in ("summary.md", "summary.png", "report.html"):
        assert (demo / name).stat().st_size > 1000, name
    assert "| junior (floor) |" in (demo / "summary.md").read_text()


def test_jargon(demo):
    assert metric(demo, "tandem", "jargon_rate") <= 0.10
    assert metric(demo, "grpo", "jargon_rate") >= 0.40


def test_handoff_and_solo(demo):
    assert metric(demo, "tandem", "handoff/pass@1") - metric(demo, "grpo", "handoff/pass@1") >= 0.10
    assert abs(metric(demo, "tandem", "solo/pass@1") - metric(demo, "grpo", "solo/pass@1")) <= 0.05
    paired = summary(demo)["paired"]["tandem"]["metrics"]
    assert paired["handoff/pass@1"]["ci_low"] > 0 and "solo/pass@1" in paired


def test_step_time_ratio(demo):
    def median_step(arm):
        run = demo / "train" / arm / "seed-0"
        last = max(run.glob("checkpoint-*"), key=lambda p: int(p.name.split("-")[1]))
        state = json.loads((last / "trainer_state.json").read_text())
        return statistics.median(h["timing/step_s"] for h in state["log_history"][1:] if "timing/step_s" in h)

    assert median_step("tandem") <= 1.8 * median_step("grpo")


def test_checkpoints_were_selected_on_held_out_training_problems(demo):
    for arm in ("grpo", "tandem"):
        sel = json.loads((demo / "train" / arm / "seed-0" / "selected.json").read_text())
        assert (
            sel["metric"] == "handoff/pass@1"
            and sel["val"]["name"] == "holdout200"
            and sel["val"]["size"] == 200
        )
        res = json.loads((demo / "eval" / arm / "seed-0" / "results.json").read_text())
        note = res["config"]["models"]["senior_selection"]
        assert note["step"] == sel["step"] and not any(note["val_overlap"].values())  # no test problem in val

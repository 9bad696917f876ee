"""The acceptance run: the whole demo (toy world, 100 steps per arm, evaluation), ~8 min on 2 cores.

Bars from the training issue: tandem removes the jargon (<= 0.10) while grpo keeps it (>= 0.40);
tandem's step-handoff accuracy beats grpo's by >= 10 points with solo accuracy within 5 points;
a tandem step costs <= 1.8x a grpo step.
"""

from __future__ import annotations

import json
import statistics

import pytest

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    from trlvr.demo import run_demo

    out = tmp_path_factory.mktemp("demo")
    run_demo(out)
    return out


def metric(out, name, key):
    return json.loads((out / "summary.json").read_text())["rows"][name][key]["value"]


def test_jargon(demo):
    assert metric(demo, "tandem", "jargon_rate") <= 0.10
    assert metric(demo, "grpo", "jargon_rate") >= 0.40


def test_handoff_and_solo(demo):
    assert metric(demo, "tandem", "handoff/pass@1") - metric(demo, "grpo", "handoff/pass@1") >= 0.10
    assert abs(metric(demo, "tandem", "solo/pass@1") - metric(demo, "grpo", "solo/pass@1")) <= 0.05


def test_step_time_ratio(demo):
    def median_step(arm):
        state = json.loads((demo / f"train-{arm}" / "checkpoint-150" / "trainer_state.json").read_text())
        return statistics.median(h["timing/step_s"] for h in state["log_history"][1:] if "timing/step_s" in h)

    assert median_step("tandem") <= 1.8 * median_step("grpo")


def test_checkpoints_were_selected_on_held_out_training_problems(demo):
    for arm in ("grpo", "tandem"):
        sel = json.loads((demo / f"train-{arm}" / "selected.json").read_text())
        assert sel["metric"] == "handoff/pass@1" and sel["val"]["name"] == "holdout200" and sel["val"]["size"] == 200
        res = json.loads((demo / "eval" / arm / "results.json").read_text())
        note = res["config"]["models"]["senior_selection"]
        assert note["step"] == sel["step"] and not any(note["val_overlap"].values())  # no test problem in val

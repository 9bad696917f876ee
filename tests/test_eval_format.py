"""One formatter for an entry: the percent rule, the "value [lo, hi]" text, and who uses it."""

from __future__ import annotations

from helpers import parity_reward

from trlvr.cli.compare_cmd import format_table
from trlvr.eval.format import diff_text, entry_text, format_summary, is_percent
from trlvr.eval.grading import grading_name


def test_one_percent_rule():
    rates = [
        "solo/pass@1",
        "junior/pass@8",
        "dose-0.5/senior_share",
        "handoff/truncated",
        "handoff/round_capped",
        "jargon_rate",
        "dose-0.25/pass@1",
    ]
    plain = ["handoff_ratio/pass@1", "legibility/junior_ce", "drift/kl", "solo/mean_tokens"]
    assert all(is_percent(n) for n in rates) and not any(is_percent(n) for n in plain)


def test_entry_and_diff_text():
    e = {"value": 0.125, "ci_low": 0.0625, "ci_high": 0.25}
    assert entry_text(e, "solo/pass@1") == "12.50 [6.25, 25.00]"
    assert entry_text(e, "handoff_ratio/pass@1") == "0.12 [0.06, 0.25]"
    assert entry_text(None, "drift/kl") == "–"
    assert (
        diff_text({"diff": -0.01, "ci_low": -0.02, "ci_high": 0.005}, "drift/kl", 3)
        == "-0.010 [-0.020, +0.005]"
    )


def test_cli_tables_use_the_same_rule():
    e = {"value": 0.5, "ci_low": 0.25, "ci_high": 0.75}
    text = format_summary({"macro": {"metrics": {"solo/pass@1": e, "handoff_ratio/pass@1": e}}})
    assert "solo/pass@1 (%)" in text and "50.000 [25.000, 75.000]" in text and "0.500 [0.250, 0.750]" in text
    c = {
        "a": 0.5,
        "b": 0.75,
        "diff": 0.25,
        "ci_low": 0.1,
        "ci_high": 0.4,
        "p_value": 0.01,
        "excludes_zero": True,
        "num_problems": 9,
    }
    table = format_table({"macro": {"solo/pass@1": c, "handoff_ratio/pass@1": c}, "benchmarks": {}})
    assert "+25.000 [+10.000, +40.000]" in table and "+0.250 [+0.100, +0.400]" in table


def test_grading_mode_is_named():
    from trlvr.rewards import MathReward

    assert grading_name(None) == "boxed"
    assert grading_name(MathReward(require_box=False)) == "boxed_or_tail"
    assert grading_name(parity_reward) == "custom:parity_reward"

"""One set of plots for one run or many, and per-sample metrics that say themselves whether they are rates."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from trlvr.eval import format as fmt
from trlvr.eval import sample_metrics
from trlvr.eval.report import (
    BARS,
    bars_plot,
    benchmark_bars,
    build_report,
    compared_plots,
    dose_plot,
    pass_at_k_plot,
)


def _entry(value: float) -> dict:
    return {"value": value, "ci_low": value - 0.05, "ci_high": value + 0.05, "num_problems": 3}


METRICS = {
    "solo/pass@1": _entry(0.6),
    "solo/pass@2": _entry(0.7),
    "handoff/pass@1": _entry(0.3),
    "handoff/pass@2": _entry(0.4),
    "dose-0.25/pass@1": _entry(0.5),
    "dose-0.5/pass@1": _entry(0.4),
    "junior/pass@1": _entry(0.2),
    "legibility/junior_ce": _entry(2.5),
    "drift/kl": _entry(1.2),
}


def _eval_dir(d: Path, benchmarks: tuple[str, ...] = ("toy",)) -> Path:
    d.mkdir(parents=True)
    res = {
        "config": {"models": {}, "n": 2},
        "macro": {"metrics": METRICS},
        "benchmarks": {b: {"metrics": METRICS} for b in benchmarks},
    }
    (d / "results.json").write_text(json.dumps(res))  # no samples.jsonl: no rollouts to show
    return d


@pytest.mark.parametrize("benchmarks, images", [(("toy",), 4), (("a", "b"), 6)])
def test_a_single_run_report_embeds_the_shared_plots_of_a_list_of_one(tmp_path, benchmarks, images):
    """pass@k, dose, legibility and drift (plus pass@k per benchmark when there are several), each the
    shared function's drawing of the run as a list of one."""
    html = build_report(_eval_dir(tmp_path / "run", benchmarks))
    assert html.count("<img ") == images
    one = [("", METRICS)]
    res = json.loads((tmp_path / "run" / "results.json").read_text())
    for png in (
        pass_at_k_plot(one, "macro pass@k"),
        dose_plot(one),
        *(bars_plot(benchmark_bars(res), *bar, colour="#64748b") for bar in BARS),
    ):
        assert png is not None and png in html


def test_plots_of_runs_without_their_metrics_are_left_out():
    assert pass_at_k_plot([("a", {"drift/kl": _entry(1.0)})], "t") is None
    assert dose_plot([("a", {"solo/pass@1": _entry(0.5)})]) is None  # no dose point
    assert bars_plot([("a", METRICS)], "legibility/missing", "y", "t") is None
    assert compared_plots([("a", {}), ("b", {})]) == []


def test_benchmark_bars_add_macro_only_beside_several_benchmarks():
    one = {"benchmarks": {"toy": {"metrics": METRICS}}, "macro": {"metrics": METRICS}}
    two = {
        "benchmarks": {"a": {"metrics": METRICS}, "b": {"metrics": METRICS}},
        "macro": {"metrics": METRICS},
    }
    assert [n for n, _ in benchmark_bars(one)] == ["toy"]
    assert [n for n, _ in benchmark_bars(two)] == ["a", "b", "macro"]


def test_a_registered_rate_formats_in_percent_and_an_unregistered_metric_does_not(monkeypatch):
    monkeypatch.setattr(sample_metrics, "_REGISTRY", {})
    entry = {"value": 0.25, "ci_low": 0.125, "ci_high": 0.5}
    sample_metrics.register(
        sample_metrics.SampleMetric("widget_rate", "widget rate (%)", lambda rows: {}, rate=True)
    )
    sample_metrics.register(sample_metrics.SampleMetric("widget_count", "widgets", lambda rows: {}))
    assert fmt.is_percent("widget_rate") and fmt.unit("widget_rate") == " (%)"
    assert fmt.entry_text(entry, "widget_rate") == "25.00 [12.50, 50.00]"
    for name in ("widget_count", "gadget_rate"):  # registered as not a rate; not registered at all
        assert not fmt.is_percent(name) and fmt.unit(name) == ""
        assert fmt.entry_text(entry, name) == "0.25 [0.12, 0.50]"
    assert fmt.is_percent(
        "solo/widget_rate"
    )  # the last component names the metric, as for the eval's own rates


def test_the_toy_jargon_rate_is_a_registered_rate_and_no_format_rule_names_it():
    import inspect

    import trlvr.toy  # noqa: F401  (registers the toy world's metrics)

    assert fmt.is_percent("jargon_rate")
    assert "jargon" not in inspect.getsource(fmt) and "jargon" not in inspect.getsource(sample_metrics)

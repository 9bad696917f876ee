"""Seed groups: across-seed summaries, paired group comparison, `trlvr eval --seeds` end to end."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from trlvr.cli.main import main as cli
from trlvr.eval.groups import compare_groups, is_group, load_tables, summarize_group
from trlvr.toy.task import make_splits
from trlvr.toy.world import ASSETS_DIR, _rows, _write_jsonl


def fake_group(root, seed_means, n_problems=40, rng=None):
    """A group folder whose seed s has solo/pass@1 ~ Bernoulli(seed_means[s]) on shared problem ids."""
    rng = rng or np.random.default_rng(0)
    for s, mu in enumerate(seed_means):
        d = root / f"seed-{s}"
        d.mkdir(parents=True)
        vals = {f"p{i}": float(rng.random() < mu) for i in range(n_problems)}
        (d / "per_problem.json").write_text(
            json.dumps({"toy": {"solo/pass@1": vals, "handoff/pass@1": vals}})
        )
    return root


def test_group_summary_reports_each_seed_and_a_ci_around_the_mean(tmp_path):
    g = fake_group(tmp_path / "g", [0.2, 0.5, 0.8], n_problems=200)
    assert is_group(g) and not is_group(g / "seed-0")
    summary = summarize_group(load_tables(g), num_resamples=500)
    e = summary["metrics"]["solo/pass@1"]
    per = list(e["per_seed"].values())
    assert e["value"] == pytest.approx(np.mean(per))
    assert e["ci_low"] < e["value"] < e["ci_high"]
    # The spread between seeds (0.2 .. 0.8) must widen the CI far beyond problem sampling alone (~±0.04).
    assert e["ci_high"] - e["ci_low"] > 0.3
    assert summary["metrics"]["handoff_ratio/pass@1"]["value"] == pytest.approx(1.0)


def test_group_comparison_pairs_by_seed_and_detects_a_shift(tmp_path):
    a = fake_group(tmp_path / "a", [0.2, 0.3, 0.25], n_problems=150, rng=np.random.default_rng(1))
    b = fake_group(tmp_path / "b", [0.7, 0.8, 0.75], n_problems=150, rng=np.random.default_rng(2))
    cmp = compare_groups(load_tables(a), load_tables(b), num_resamples=500)
    e = cmp["macro"]["solo/pass@1"]
    assert e["diff"] == pytest.approx(e["b"] - e["a"]) and e["excludes_zero"] and e["ci_low"] > 0.3
    assert cli(["compare", str(a), str(b), "--out", str(tmp_path / "cmp"), "--resamples", "300"]) == 0
    assert json.loads((tmp_path / "cmp" / "compare.json").read_text())["seeds"] == [0, 1, 2]


def test_compare_refuses_group_against_single(tmp_path, capsys):
    a = fake_group(tmp_path / "a", [0.2, 0.3])
    assert cli(["compare", str(a), str(a / "seed-0"), "--out", str(tmp_path / "x")]) == 2
    assert "compare like with like" in capsys.readouterr().err


def test_eval_seeds_end_to_end(tmp_path, capsys):
    for s in (0, 1):
        shutil.copytree(ASSETS_DIR / "senior", tmp_path / f"run/seed-{s}/final")
    _write_jsonl(tmp_path / "test.jsonl", _rows(make_splits(50, 8, seed=0)[1]))
    argv = [
        "eval",
        "--senior",
        str(tmp_path / "run/seed-{seed}/final"),
        "--junior",
        str(ASSETS_DIR / "junior"),
        "--data",
        f"toy={tmp_path / 'test.jsonl'}",
        "--limit",
        "6",
        "--n",
        "2",
        "--k",
        "1",
        "--suite",
        "solo",
        "--max-new-tokens",
        "64",
        "--seeds",
        "0,1",
        "--out",
        str(tmp_path / "ev"),
        "--no-progress",
    ]
    assert cli(argv) == 0
    group = json.loads((tmp_path / "ev" / "group.json").read_text())
    assert group["seeds"] == [0, 1] and set(group["metrics"]["solo/pass@1"]["per_seed"]) == {"0", "1"}
    assert (tmp_path / "ev" / "seed-1" / "results.json").is_file()
    argv[argv.index("--seeds") + 1] = "0"
    assert cli(argv) == 2
    assert "at least 2 distinct seeds" in capsys.readouterr().err


def test_multi_run_report_headline_comparison_and_side_by_side(tmp_path):
    """Two single evaluations and one report: headline rows, a paired table, the same problem side by side."""
    import re

    _write_jsonl(tmp_path / "test.jsonl", _rows(make_splits(50, 8, seed=0)[1]))
    for name, model in (("weak", "junior"), ("strong", "senior")):
        argv = [
            "eval",
            "--senior",
            str(ASSETS_DIR / model),
            "--junior",
            str(ASSETS_DIR / "junior"),
            "--data",
            f"toy={tmp_path / 'test.jsonl'}",
            "--limit",
            "6",
            "--n",
            "2",
            "--k",
            "1,2",
            "--suite",
            "solo,handoff",
            "--max-new-tokens",
            "64",
            "--out",
            str(tmp_path / name),
            "--no-progress",
        ]
        assert cli(argv) == 0
    out = tmp_path / "multi.html"
    assert cli(["report", str(tmp_path / "weak"), str(tmp_path / "strong"), "--out", str(out)]) == 0
    html = out.read_text()
    headline = html[html.index("id='headline'") : html.index("</table>", html.index("id='headline'"))]
    assert headline.count("<tr>") == 3 and "weak" in headline and "strong" in headline
    assert "strong − weak (paired by problem, bootstrap)" in html
    assert len(re.findall(r"<table class='side'>", html)) == 6  # every shared problem, both protocols inside
    assert "<script>alert" not in html


@pytest.mark.slow
@pytest.mark.skipif(
    not __import__("pathlib").Path("/usr/bin/chromium").exists(), reason="needs Debian's chromium"
)
def test_multi_run_report_renders_in_headless_chromium(tmp_path):
    """The multi-run page with seed groups: its script runs, no console errors, a screenshot is taken."""
    import subprocess

    _write_jsonl(tmp_path / "test.jsonl", _rows(make_splits(50, 8, seed=0)[1]))
    for arm, model in (("weak", "junior"), ("strong", "senior")):
        for s in (0, 1):
            shutil.copytree(ASSETS_DIR / model, tmp_path / f"{arm}/seed-{s}/final")
        argv = [
            "eval",
            "--senior",
            str(tmp_path / f"{arm}/seed-{{seed}}/final"),
            "--junior",
            str(ASSETS_DIR / "junior"),
            "--data",
            f"toy={tmp_path / 'test.jsonl'}",
            "--limit",
            "6",
            "--n",
            "2",
            "--k",
            "1,2",
            "--seeds",
            "0,1",
            "--suite",
            "solo,handoff,dose",
            "--max-new-tokens",
            "64",
            "--out",
            str(tmp_path / f"ev-{arm}"),
            "--no-progress",
        ]
        assert cli(argv) == 0
    html = tmp_path / "multi.html"
    assert cli(["report", str(tmp_path / "ev-weak"), str(tmp_path / "ev-strong"), "--out", str(html)]) == 0
    assert "paired by seed and problem, two-level bootstrap" in html.read_text()
    flags = [
        "/usr/bin/chromium",
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--no-first-run",
        "--disable-background-networking",
        "--enable-logging=stderr",
        "--v=0",
    ]
    shot = tmp_path / "multi.png"
    run = subprocess.run(
        flags
        + [
            f"--user-data-dir={tmp_path / 'u1'}",
            f"--screenshot={shot}",
            "--window-size=1200,2400",
            html.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert shot.exists() and shot.stat().st_size > 10_000, run.stderr[-2000:]
    assert "CONSOLE" not in run.stderr
    dom = subprocess.run(
        flags + [f"--user-data-dir={tmp_path / 'u2'}", "--dump-dom", html.as_uri()],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert 'data-ready="1"' in dom.stdout and 'id="headline"' in dom.stdout
    shutil.copy(shot, "/tmp/trlvr-multi-report.png")

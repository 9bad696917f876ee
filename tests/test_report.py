"""compare and report: paired tables, HTML escaping, error messages, and a headless-browser check."""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
from pathlib import Path

import pytest
from helpers import evaluate_models, last_word, parity_reward, tiny_model, toy_problems

from trlvr import artifacts
from trlvr.cli import eval_cmd
from trlvr.cli.main import main
from trlvr.errors import UserError
from trlvr.eval.report import build_report, load_results

CHROMIUM = "/usr/bin/chromium"


def cli(argv: list[str]) -> int:
    """Our commands through the real dispatcher (a UserError is one line on stderr and exit code 2)."""
    return main(argv)


@pytest.fixture(scope="module")
def runs(tokenizer, tmp_path_factory):
    """Two evaluation directories: A and B differ only in the senior's weights."""
    root = tmp_path_factory.mktemp("runs")
    junior = tiny_model("qwen3", len(tokenizer), seed=1, hidden=32, layers=1)
    benches = {"alpha": toy_problems(4, "a"), "beta": toy_problems(3, "b")}
    for name, seed in (("A", 0), ("B", 2)):
        senior = tiny_model("qwen3", len(tokenizer), seed=seed)
        evaluate_models(
            senior,
            junior,
            tokenizer,
            benches,
            root / name,
            n=4,
            ks=[1, 2, 4],
            max_new_tokens=24,
            batch_size=8,
            progress=False,
            score_fn=parity_reward,
            extract_fn=last_word,
            num_resamples=200,
        )
    # Untrusted model text: a completion that tries to inject markup.
    path = root / "B" / "samples.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    rows[0]["text"] = "<script>alert('x')</script>" + rows[0]["text"]
    rows[0]["piece_lens"] = None
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    artifacts.write_manifest(root / "B")  # as if the model wrote it: the evaluation is whole, not torn
    return root / "A", root / "B"


def test_compare_cli_writes_paired_table(runs, tmp_path, capsys):
    a, b = runs
    assert cli(["compare", str(a), str(b), "--out", str(tmp_path / "cmp"), "--resamples", "300"]) == 0
    out = capsys.readouterr().out
    assert "macro" in out and "solo/pass@1" in out and "drift/kl" in out
    cmp = json.loads((tmp_path / "cmp" / "compare.json").read_text())
    e = cmp["macro"]["drift/kl"]
    assert e["diff"] == pytest.approx(e["b"] - e["a"]) and e["ci_low"] <= e["diff"] <= e["ci_high"]
    assert 0 < e["p_value"] <= 1 and e["num_problems"] == 7
    assert (tmp_path / "cmp" / "report.html").read_text().count("<tr>") > 10
    # A run compared with itself: every difference is exactly 0.
    assert cli(["compare", str(a), str(a), "--out", str(tmp_path / "self")]) == 0
    same = json.loads((tmp_path / "self" / "compare.json").read_text())
    assert all(e["diff"] == 0 and not e["excludes_zero"] for e in same["macro"].values())


def test_compare_benchmarks_takes_the_macro_over_the_named_ones(runs, tmp_path, capsys):
    """--benchmarks: the paper era's three-set macro beside the four-panel one: the macro of one benchmark is it."""
    a, b = runs
    assert cli(["compare", str(a), str(b), "--out", str(tmp_path / "all"), "--resamples", "50"]) == 0
    assert (
        cli(
            [
                "compare",
                str(a),
                str(b),
                "--out",
                str(tmp_path / "one"),
                "--resamples",
                "50",
                "--benchmarks",
                "beta",
            ]
        )
        == 0
    )
    capsys.readouterr()
    full, one = (json.loads((tmp_path / d / "compare.json").read_text()) for d in ("all", "one"))
    assert set(one["benchmarks"]) == {"beta"} and one["macro"]["solo/pass@1"]["num_problems"] == 3
    assert one["macro"]["solo/pass@1"]["diff"] == pytest.approx(
        full["benchmarks"]["beta"]["solo/pass@1"]["diff"]
    )
    assert cli(["compare", str(a), str(b), "--out", str(tmp_path / "x"), "--benchmarks", "alpha,gamma"]) == 2
    err = capsys.readouterr().err.strip()
    assert (
        len(err.splitlines()) == 1 and "--benchmarks: 'gamma' is not a benchmark both evaluations have" in err
    )
    assert "(they share: alpha, beta)" in err


def test_report_escapes_text_and_has_all_sections(runs, tmp_path):
    a, b = runs
    assert cli(["report", str(b), "--compare", str(a), "--out", str(tmp_path / "r.html")]) == 0
    page = (tmp_path / "r.html").read_text()
    assert "<script>alert" not in page and "&lt;script&gt;alert" in page
    assert "id='viewer'" in page and "class='j'" in page and "class='s'" in page
    assert page.count("data:image/png;base64,") >= 4  # pass@k, dose, legibility, drift
    assert "Comparison" in page and "http://" not in page and "https://" not in page


def test_bad_inputs_name_the_file_or_field(runs, tmp_path, capsys):
    assert cli(["report", str(tmp_path / "nope")]) == 2
    assert "nope" in capsys.readouterr().err
    bad = tmp_path / "bad"
    shutil.copytree(runs[0], bad)
    res = json.loads((bad / "results.json").read_text())
    del res["benchmarks"]["alpha"]["metrics"]["solo/pass@1"]["ci_low"]
    (bad / "results.json").write_text(json.dumps(res))
    with pytest.raises(
        UserError, match=r"bad is not a finished evaluation \(results.json is cut short or changed"
    ):
        load_results(bad)  # changed since the evaluation wrote it (its manifest): refused before it is read
    artifacts.write_manifest(bad)  # as if written so: its fields are checked
    with pytest.raises(
        UserError, match=r"results.json: metric 'solo/pass@1' of benchmark 'alpha' lacks field 'ci_low'"
    ):
        load_results(bad)
    (bad / "results.json").write_text("{not json")
    assert cli(["compare", str(bad), str(runs[1])]) == 2
    assert "results.json" in capsys.readouterr().err
    (bad / "results.json").unlink()
    with pytest.raises(UserError, match="results.json"):
        build_report(bad)


@pytest.mark.slow
@pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="needs Debian's chromium")
def test_report_opens_in_headless_chromium(runs, tmp_path):
    a, b = runs
    html_path = tmp_path / "report.html"
    assert cli(["report", str(b), "--compare", str(a), "--out", str(html_path)]) == 0
    flags = [
        CHROMIUM,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        "--enable-logging=stderr",
        "--v=0",
    ]
    shot = tmp_path / "report.png"
    run = subprocess.run(
        flags
        + [
            f"--user-data-dir={tmp_path / 'ud1'}",
            f"--screenshot={shot}",
            "--window-size=1200,2400",
            html_path.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert shot.exists() and shot.stat().st_size > 10_000, run.stderr[-2000:]
    assert "CONSOLE" not in run.stderr, [line for line in run.stderr.splitlines() if "CONSOLE" in line]
    dom = subprocess.run(
        flags + [f"--user-data-dir={tmp_path / 'ud2'}", "--dump-dom", html_path.as_uri()],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert 'data-ready="1"' in dom.stdout  # the page's script ran to the end
    assert 'id="viewer"' in dom.stdout and '<details class="problem" open' in dom.stdout
    assert "CONSOLE" not in dom.stderr
    keep = Path("/tmp/trlvr-report-screenshot.png")
    shutil.copy(shot, keep)


def test_eval_cli_parses_defaults_and_sources():
    parser = argparse.ArgumentParser()
    eval_cmd.make_parser(parser.add_subparsers())
    args = parser.parse_args(["eval", "--senior", "s", "--junior", "j", "--data", "x", "--out", "o"])
    assert (args.temperature, args.top_p, args.top_k, args.max_new_tokens) == (0.7, 0.8, 20, 3000)
    assert args.k == [1, 2, 4, 8] and args.n == 8 and args.handoff_max_rounds == 150
    assert eval_cmd.parse_sources("aime=data/aime.jsonl,amc") == {"aime": "data/aime.jsonl", "amc": "amc"}
    with pytest.raises(UserError, match="twice"):
        eval_cmd.parse_sources("a,a")

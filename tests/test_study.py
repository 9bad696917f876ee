"""`trlvr study`: strict study files, plan = the commands run executes, skip / resume, report on synthetic runs."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import numpy as np
import pytest
from helpers import fake_eval_outputs, fake_select_output, fake_train_output

from trlvr.cli.main import main as cli
from trlvr.errors import UserError
from trlvr.experiments import study as S
from trlvr.experiments.study_spec import load_study

ROOT = Path(__file__).resolve().parents[1]
STUDIES = ROOT / "studies"

TINY = """
name: tiny
base: toy
worlds: {spaced: {jargon: spaced}, compact: {jargon: compact}}
train: {max_steps: 4, save_steps: 2, holdout: 20}
seeds: [0, 1]
selection: {val: "split:20", metric: handoff/pass@1, n: 2}
evaluation: {data: test, suite: [solo, handoff], n: 2, k: [1, 2], limit: 30}
variants:
  grpo-spaced: {arm: grpo, world: spaced}
  word-spaced: {arm: tandem, world: spaced, schedule: word, max_gap: 32, baseline: grpo-spaced}
  grpo-compact: {arm: grpo, world: compact}
  word-compact: {arm: tandem, world: compact, schedule: word, max_gap: 32, baseline: grpo-compact}
"""


def write(tmp_path: Path, text: str, name: str = "study.yaml") -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


# ---- the study file --------------------------------------------------------------------------------


def test_tiny_study_loads_with_per_dialect_baselines(tmp_path):
    st = load_study(write(tmp_path, TINY))
    assert list(st.variants) == ["grpo-spaced", "word-spaced", "grpo-compact", "word-compact"]
    assert st.variants["word-compact"].baseline == "grpo-compact"
    assert st.variants["grpo-compact"].baseline is None
    assert st.baselines() == ["grpo-spaced", "grpo-compact"]
    assert st.variants["word-spaced"].overrides == {
        "max_steps": 4,
        "save_steps": 2,
        "holdout": 20,
        "arm": "tandem",
        "schedule": "word",
        "max_gap": 32,
    }


@pytest.mark.parametrize(
    "edit, error",
    [
        (("seeds: [0, 1]", "seeds: [0, 1]\nsteps: 3"), "study {p}: steps: unknown key"),
        (
            ("max_gap: 32, baseline: grpo-spaced", "max_gapp: 32, baseline: grpo-spaced"),
            "study {p}: variants.word-spaced.max_gapp: unknown key: not a study key, TandemConfig or trl.GRPOConfig field",
        ),
        (
            ("metric: handoff/pass@1, n: 2", "metric: handoff/pass@1, samples: 2"),
            "study {p}: selection.samples: unknown key (expected one of ",
        ),
        (("limit: 30}", "limit: 30, top: 3}"), "study {p}: evaluation.top: unknown key (expected one of "),
        (
            ("baseline: grpo-compact", "baseline: grpo-dense"),
            "study {p}: variants.word-compact.baseline: 'grpo-dense' is not a variant",
        ),
        (
            ("{arm: grpo, world: compact}", "{arm: grpo, world: dense}"),
            "study {p}: variants.grpo-compact.world: 'dense' is not one of worlds",
        ),
        (("seeds: [0, 1]", "seeds: [0, 0]"), "study {p}: seeds: expected a list of distinct integers"),
        (
            ("compact: {jargon: compact}", "compact: {jargon: tiny}"),
            "study {p}: worlds.compact.jargon: expected spaced or compact",
        ),
        (
            ("suite: [solo, handoff]", "suite: [solo, vibes]"),
            "study {p}: evaluation.suite: unknown entries ['vibes']",
        ),
        (
            ("n: 2, k: [1, 2]", "n: 2, k: [1, 4]"),
            "study {p}: evaluation.k: every k must be an integer in [1, n = 2]",
        ),
        (
            ("{arm: grpo, world: spaced}", "{arm: grpo, world: spaced, output_dir: x}"),
            "study {p}: variants.grpo-spaced.output_dir: set by the study runner",
        ),
        (
            ("base: toy", "base: no-such.yaml"),
            "study {p}: base/config: 'no-such.yaml' is neither a shipped config nor a file",
        ),
    ],
)
def test_bad_study_files_are_one_line_naming_file_and_key(tmp_path, capsys, edit, error):
    old, new = edit
    assert old in TINY
    p = write(tmp_path, TINY.replace(old, new, 1))
    assert cli(["study", "plan", str(p)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert err.startswith(f"trlvr study: error: {error.format(p=p)}"), err


def test_shipped_studies_load():
    for path in sorted(STUDIES.glob("*.yaml")):
        st = load_study(path)
        assert st.seeds and st.variants, path
        for v in st.variants.values():
            assert v.baseline is None or v.baseline in st.variants


# ---- plan = what run executes ---------------------------------------------------------------------


def test_plan_prints_world_then_train_select_eval_per_variant_and_seed(tmp_path, capsys):
    p = write(tmp_path, TINY)
    out = tmp_path / "out"
    assert cli(["study", "plan", str(p), "--out", str(out)]) == 0
    lines = [ln for ln in capsys.readouterr().out.splitlines() if not ln.startswith("#")]
    assert lines[0] == f"trlvr toy prepare --out {out}/worlds/spaced --jargon spaced --seed 0 --no-progress"
    assert lines[1].endswith("--jargon compact --seed 0 --no-progress --from-scratch")
    body = lines[2:-1]
    assert len(body) == 4 * 2 * 3 and lines[-1] == f"trlvr study report {out}"
    assert [ln.split()[1] for ln in body[:3]] == ["train", "select", "eval"]
    train = shlex.split(body[3 * 3])  # seed-major: the 4th unit is word-compact seed 0
    assert train[train.index("--output_dir") + 1] == f"{out}/train/word-compact/seed-0"
    assert train[train.index("--senior") + 1] == f"{out}/worlds/compact/senior"
    assert train[train.index("--seed") + 1] == "0" and train[train.index("--max_gap") + 1] == "32"
    ev = shlex.split(body[3 * 3 + 2])
    assert ev[ev.index("--data") + 1] == f"toy={out}/worlds/compact/data/test.jsonl"
    assert ev[ev.index("--senior") + 1] == f"{out}/train/word-compact/seed-0@selected"
    assert (
        shlex.split(body[-3])[shlex.split(body[-3]).index("--output_dir") + 1]
        == f"{out}/train/word-compact/seed-1"
    )


def test_paper_table2_plan_every_train_command_passes_the_config_checks(capsys):
    """The GPU study's commands are checked on a CPU without loading Qwen3-4B (`trlvr train --dry-run`)."""
    from trlvr.cli.train_cmd import dry_run

    assert cli(["study", "plan", str(STUDIES / "paper-table2.yaml"), "--out", "runs/paper-table2"]) == 0
    lines = [ln for ln in capsys.readouterr().out.splitlines() if not ln.startswith("#")]
    trains = [shlex.split(ln) for ln in lines if " train --config " in ln]
    assert len(trains) == 4 * 3
    assert all(t[:2] == ["accelerate", "launch"] for t in trains)
    seen = set()
    for t in trains:
        argv = t[t.index("train") + 1 :]
        summary = dry_run(argv)
        assert summary.startswith("config ok"), summary
        seen.add(summary.split("arm ")[1].split(",")[0])
    assert seen == {"tandem", "grpo"}
    g16 = next(t for t in trains if "grpo-g16" in " ".join(t))
    from trlvr.config import parse_run_args

    _, args, _ = parse_run_args([*g16[g16.index("train") + 1 :], "--use_cpu", "true", "--bf16", "false"])
    assert args.num_generations == 16 and args.output_dir == "runs/paper-table2/train/grpo-g16/seed-0"
    assert cli(["train", *g16[g16.index("train") + 1 :], "--dry-run"]) == 0


def test_dry_run_still_refuses_a_bad_key(capsys):
    assert cli(["train", "--config", "toy", "--holdout", "0", "--max_gapp", "3", "--dry-run"]) == 2
    assert "max_gapp" in capsys.readouterr().err


# ---- run: skip finished stages, resume interrupted ones, refuse another study --------------------------


class FakeStages:
    """An executor that records each command and writes what the real stage would leave behind."""

    def __init__(self, fail_on: str | None = None):
        self.calls: list[list[str]] = []
        self.fail_on = fail_on

    def __call__(self, argv, log):
        self.calls.append(list(argv))
        if self.fail_on and self.fail_on in " ".join(argv):
            raise UserError("boom")
        kind = argv[0]
        if kind == "toy":
            out = Path(argv[argv.index("--out") + 1])
            (out / "data").mkdir(parents=True, exist_ok=True)
        elif kind == "train":
            fake_train_output(Path(argv[argv.index("--output_dir") + 1]))
        elif kind == "select":
            fake_select_output(Path(argv[1]))
        elif kind == "eval":
            fake_eval_outputs(Path(argv[argv.index("--out") + 1]))


@pytest.fixture
def no_worlds(monkeypatch):
    from trlvr.toy import world

    monkeypatch.setattr(world, "is_complete", lambda d: (Path(d) / "data").is_dir())


def _run_all(st, out, execute):
    for w in S.world_stages(st, out):
        S.run_stage(out, w, execute)
    for unit in S.units(st, out):
        S.run_unit(out, unit, execute)


def test_run_skips_finished_stages_and_resumes_an_interrupted_train(tmp_path, no_worlds):
    st = load_study(write(tmp_path, TINY))
    out = tmp_path / "out"
    S.claim_dir(st, out, code={"commit": "abc", "dirty": False})
    # word-spaced seed 1 was killed mid-training: a checkpoint and no final/
    (S.train_dir(out, "word-spaced", 1) / "checkpoint-2").mkdir(parents=True)
    fake = FakeStages()
    _run_all(st, out, fake)
    assert len(fake.calls) == 2 + 4 * 2 * 3
    trains = [c for c in fake.calls if c[0] == "train"]
    resumed = [c for c in trains if "--resume" in c]
    assert len(resumed) == 1 and resumed[0][resumed[0].index("--output_dir") + 1].endswith(
        "word-spaced/seed-1"
    )
    assert all((S.eval_dir(out, v, s) / S.DONE).is_file() for v in st.variants for s in st.seeds)
    rows = [json.loads(x) for x in (out / S.TIMINGS_FILE).read_text().splitlines()]
    assert len(rows) == len(fake.calls) and sum(r["resumed"] for r in rows) == 1
    again = FakeStages()
    _run_all(st, out, again)
    assert again.calls == []  # everything finished: nothing runs twice


def test_run_with_a_relative_out_gives_every_stage_absolute_paths(tmp_path, no_worlds, monkeypatch):
    """Stages fingerprint the paths they are given: a study resumed from another directory must not
    look like another evaluation, so `run` resolves --out first."""
    from trlvr.cli import study_cmd

    p = write(tmp_path, TINY)
    fake = FakeStages()
    monkeypatch.setattr(study_cmd, "execute", fake)
    monkeypatch.chdir(tmp_path)
    assert cli(["study", "run", str(p), "--out", "out", "--only", "grpo-spaced:0", "--no-report"]) == 0
    select = next(c for c in fake.calls if c[0] == "select")
    train = next(c for c in fake.calls if c[0] == "train")
    assert select[1] == str(tmp_path / "out" / "train" / "grpo-spaced" / "seed-0")
    assert Path(train[train.index("--output_dir") + 1]).is_absolute()


def test_an_eval_without_the_done_marker_runs_again(tmp_path, no_worlds):
    st = load_study(write(tmp_path, TINY))
    out = tmp_path / "out"
    _run_all(st, out, FakeStages())
    (S.eval_dir(out, "word-compact", 0) / S.DONE).unlink()  # killed after results.json, before the marker
    fake = FakeStages()
    _run_all(st, out, fake)
    assert [c[0] for c in fake.calls] == ["eval"]


def test_a_failed_stage_stops_its_unit_and_the_next_run_retries_it(tmp_path, no_worlds):
    st = load_study(write(tmp_path, TINY))
    out = tmp_path / "out"
    for w in S.world_stages(st, out):
        S.run_stage(out, w, FakeStages())
    unit = S.units(st, out, [("word-spaced", 0)])[0]
    with pytest.raises(UserError, match="boom"):
        S.run_unit(out, unit, FakeStages(fail_on="select"))
    fake = FakeStages()
    S.run_unit(out, unit, fake)
    assert [c[0] for c in fake.calls] == ["select", "eval"]


def test_study_dir_refuses_another_study_file_and_records_each_code_commit(tmp_path):
    p = write(tmp_path, TINY)
    out = tmp_path / "out"
    S.claim_dir(load_study(p), out, code={"commit": "abc", "dirty": False})
    S.claim_dir(load_study(p), out, code={"commit": "abc", "dirty": False})
    S.claim_dir(load_study(p), out, code={"commit": "def", "dirty": True})
    rec = json.loads((out / S.STUDY_FILE).read_text())
    assert [r["commit"] for r in rec["runs"]] == ["abc", "def"]
    # (issue 29: a study is its parsed content) a comment and key order change nothing; an edit of the same
    # study is taken (each stage then checks its own settings: tests/test_trust_rules_study.py); another study is refused
    same = write(
        tmp_path,
        "# a comment\n" + TINY.replace("name: tiny\nbase: toy", "base: toy\nname: tiny"),
        "same.yaml",
    )
    assert load_study(same).sha256 == load_study(p).sha256
    edited = write(tmp_path, TINY.replace("seeds: [0, 1]", "seeds: [0, 1, 2]"), "edited.yaml")
    S.claim_dir(load_study(edited), out, code={"commit": "def", "dirty": True})
    rec = json.loads((out / S.STUDY_FILE).read_text())
    assert rec["sha256"] == load_study(edited).sha256 and len(rec["versions"]) == 1
    other = write(tmp_path, TINY.replace("name: tiny", "name: other"), "other.yaml")
    with pytest.raises(UserError, match=r"made for another study .*use another --out"):
        S.claim_dir(load_study(other), out)


def test_report_reads_the_study_copy_after_the_original_file_is_gone(tmp_path, capsys):
    (tmp_path / "snapshot").mkdir()
    p = write(tmp_path / "snapshot", TINY)
    out = tmp_path / "out"
    S.claim_dir(load_study(p), out, code={"commit": "abc", "dirty": False})
    assert (out / S.STUDY_COPY).read_text() == TINY
    fake_eval(S.eval_dir(out, "grpo-spaced", 0), 0.9, 0.2, 0.9, np.random.default_rng(0))
    p.unlink()  # e.g. the worktree the study ran from was removed
    assert S.study_file(out) == out / S.STUDY_COPY
    assert cli(["study", "report", str(out)]) == 0
    assert (out / "report" / "table.md").is_file()
    (out / S.STUDY_COPY).unlink()
    with pytest.raises(
        UserError, match=r"recorded in study.json .* is gone .* pass the study YAML with --study"
    ):
        S.study_file(out)
    other = write(tmp_path, TINY.replace("seeds: [0, 1]", "seeds: [0, 1, 2]"), "other.yaml")
    assert cli(["study", "report", str(out), "--study", str(other)]) != 0
    assert "made from another study file" in capsys.readouterr().err


def test_only_filters_and_checks_variant_and_seed(tmp_path):
    st = load_study(write(tmp_path, TINY))
    assert [(u[0].variant, u[0].seed) for u in S.units(st, tmp_path, S.parse_only(st, ["word-compact"]))] == [
        ("word-compact", 0),
        ("word-compact", 1),
    ]
    with pytest.raises(UserError, match="--only word-compact:7: seed '7' is not one of the study's seeds"):
        S.parse_only(st, ["word-compact:7"])
    with pytest.raises(UserError, match="--only nope: 'nope' is not a variant"):
        S.parse_only(st, ["nope"])


# ---- report on synthetic evaluations -----------------------------------------------------------------


def fake_eval(d: Path, solo: float, handoff: float, jargon: float, rng, n_problems: int = 60, n: int = 2):
    """An evaluation folder as `trlvr eval` writes it: samples, per-problem table, results."""
    from trlvr.eval.aggregate import problem_table, summarize

    rows = []
    for i in range(n_problems):
        for proto, acc in (("solo", solo), ("handoff", handoff)):
            for k in range(n):
                text = (
                    "<<7 +5 =12>> so \\boxed{12}"
                    if proto == "solo" and rng.random() < jargon
                    else "7 plus 5 is 12 \\boxed{12}"
                )
                rows.append(
                    {
                        "benchmark": "toy",
                        "protocol": proto,
                        "problem_id": f"p{i}",
                        "sample_idx": k,
                        "reward": float(rng.random() < acc),
                        "finish_reason": "stop",
                        "num_tokens": 10,
                        "text": text,
                        "prompt": f"problem {i}",
                        "senior_share": 1.0,
                    }
                )
    d.mkdir(parents=True)
    (d / "samples.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    table = problem_table(rows, [1, 2])
    (d / "per_problem.json").write_text(json.dumps(table))
    res = summarize(table, num_resamples=200)
    (d / "results.json").write_text(json.dumps({**res, "config": {"models": {}, "n": n}}))


def test_report_pairs_each_variant_with_its_own_baseline(tmp_path):
    from trlvr.experiments.study_report import write_study_report

    st = load_study(write(tmp_path, TINY))
    out = tmp_path / "out"
    S.claim_dir(st, out, code={"commit": "abc1234567", "dirty": False})
    rng = np.random.default_rng(0)
    truth = {
        "grpo-spaced": (0.95, 0.15, 0.95),
        "word-spaced": (0.95, 0.80, 0.05),
        "grpo-compact": (0.95, 0.12, 0.95),
        "word-compact": (0.95, 0.12, 0.95),
    }
    for v, (solo, handoff, jargon) in truth.items():
        for s in st.seeds:
            fake_eval(S.eval_dir(out, v, s), solo, handoff, jargon, rng)
        (S.train_dir(out, v, 0)).mkdir(parents=True)
        (S.train_dir(out, v, 0) / "selected.json").write_text(json.dumps({"step": 4}))
    (S.train_dir(out, "word-compact", 0) / "metrics.jsonl").write_text(
        "".join(
            json.dumps({"step": i, "tandem/loophole/backstop_share": 0.1 * i}) + "\n" for i in range(1, 5)
        )
    )
    paths = write_study_report(st, out)
    data = json.loads((out / "report" / "summary.json").read_text())
    spaced, compact = data["paired"]["word-spaced"], data["paired"]["word-compact"]
    assert spaced["baseline"] == "grpo-spaced" and compact["baseline"] == "grpo-compact"
    assert spaced["seeds"] == [0, 1]
    h = spaced["metrics"]["handoff/pass@1"]
    assert h["excludes_zero"] and h["ci_low"] > 0.4  # the spaced effect (+65 points) is found
    assert not compact["metrics"]["handoff/pass@1"]["excludes_zero"]  # no effect where there is none
    assert (
        spaced["metrics"]["jargon_rate"]["diff"] < -0.8 and spaced["metrics"]["jargon_rate"]["excludes_zero"]
    )
    assert data["selected_steps"]["grpo-spaced"] == {"0": 4}
    table = (out / "report" / "table.md").read_text()
    assert "| word-spaced | grpo-spaced | 2 |" in table and "| grpo-compact | 2 |" in table
    html = (out / "report" / "report.html").read_text()
    assert "<table id='settings'>" in html and "abc1234567"[:10] in html and "{'" not in html
    detector = html.split("<h2>Loophole detector (training, per step)</h2>")[1]
    assert detector.split("</div>")[0].count("<img") == 1  # the one detector key logged, over steps
    assert html.count("<img") == 2  # + one pass@k plot (solo solid, handoff dashed), every variant on it
    headline = html.split("<table id='headline'>")[1].split("</table>")[0]
    assert "<th>jargon_rate (%)</th>" in headline  # the registered per-sample metric, in the page as well
    for label in truth:
        assert f"<th>{label}</th>" in html
    assert {p.name for p in paths} == {"table.md", "summary.json", "figure.png", "report.html"}


def tiny_report(tmp_path: Path, evals: dict[str, tuple], rng) -> tuple[Path, str]:
    """The TINY study's report over faked seed-0 evaluations {variant: (solo, handoff, jargon)}: (DIR, table.md)."""
    from trlvr.experiments.study_report import write_study_report

    st = load_study(write(tmp_path, TINY))
    out = tmp_path / "out"
    S.claim_dir(st, out, code={"commit": "abc", "dirty": False})
    for variant, rates in evals.items():
        fake_eval(S.eval_dir(out, variant, 0), *rates, rng)
    write_study_report(st, out)
    return out, (out / "report" / "table.md").read_text()


def test_report_with_one_finished_seed_and_a_missing_variant(tmp_path):
    rng = np.random.default_rng(1)
    out, table = tiny_report(tmp_path, {"grpo-spaced": (0.9, 0.1, 0.9), "word-spaced": (0.9, 0.8, 0.0)}, rng)
    assert "| grpo-compact | none | – |" in table
    data = json.loads((out / "report" / "summary.json").read_text())
    assert data["paired"]["word-spaced"]["seeds"] == [0]
    assert data["paired"]["word-spaced"]["metrics"]["handoff/pass@1"]["excludes_zero"]


# ---- the one-run report (`trlvr report A --compare B`, the demo's report.html) --------------------------


def _captured_figures(monkeypatch):
    from trlvr.eval import report

    figs = []
    monkeypatch.setattr(report, "_png", lambda fig: figs.append(fig) or f"fig{len(figs)}")
    return figs


def test_run_report_plots_the_compared_runs_side_by_side_and_settings_as_a_table(tmp_path, monkeypatch):
    from trlvr.eval.report import build_report

    rng = np.random.default_rng(2)
    fake_eval(tmp_path / "grpo", 0.9, 0.1, 0.9, rng)
    fake_eval(tmp_path / "tandem", 0.9, 0.8, 0.0, rng)
    for name in ("grpo", "tandem"):
        res = json.loads((tmp_path / name / "results.json").read_text())
        res["config"] = {
            "models": {
                "senior": f"runs/{name}/checkpoint-50",
                "junior": "runs/toy/junior",
                "data": {"toy": "runs/toy/data/test.jsonl"},
            },
            "n": 2,
            "ks": [1, 2],
            "decoding": {"temperature": 0.7, "top_p": 0.8, "top_k": 20},
            "seed": 0,
        }
        (tmp_path / name / "results.json").write_text(json.dumps(res))
    figs = _captured_figures(monkeypatch)
    html = build_report(tmp_path / "tandem", [tmp_path / "grpo"])
    legends = [
        [t.get_text() for t in f.axes[0].get_legend().get_texts()] for f in figs if f.axes[0].get_legend()
    ]
    both = {f"{tmp_path / 'tandem'} solo", f"{tmp_path / 'grpo'} solo", f"{tmp_path / 'grpo'} handoff"}
    assert any(both <= set(lab) for lab in legends), legends  # pass@k: both runs on one axis
    assert "<table class='settings'>" in html and "<th>decoding</th>" in html
    assert "temperature 0.7, top_p 0.8, top_k 20" in html and "{&#39;" not in html and "{'" not in html


def test_one_benchmark_is_not_drawn_twice_as_itself_and_macro(monkeypatch):
    from trlvr.eval.report import bars_plot, benchmark_bars

    e = {"value": 1.0, "ci_low": 0.5, "ci_high": 1.5}
    figs = _captured_figures(monkeypatch)
    one = {
        "benchmarks": {"toy": {"metrics": {"legibility/junior_ce": e}}},
        "macro": {"metrics": {"legibility/junior_ce": e}},
    }
    bars_plot(benchmark_bars(one), "legibility/junior_ce", "CE", "legibility")
    two = {
        "benchmarks": {
            "a": {"metrics": {"legibility/junior_ce": e}},
            "b": {"metrics": {"legibility/junior_ce": e}},
        },
        "macro": {"metrics": {"legibility/junior_ce": e}},
    }
    bars_plot(benchmark_bars(two), "legibility/junior_ce", "CE", "legibility")
    ticks = [[t.get_text() for t in f.axes[0].get_xticklabels()] for f in figs]
    assert ticks == [["toy"], ["a", "b", "macro"]]


def test_the_kept_study_copy_finds_its_config_files_from_any_directory(tmp_path, monkeypatch):
    """A study naming its base config by a path relative to itself (studies/real-smollm2.yaml does):
    `report` reads OUT/study.yaml, so the config must be kept beside it at the same relative path."""
    home = tmp_path / "studies"
    (home / "configs").mkdir(parents=True)
    (home / "configs" / "base.yaml").write_text("arm: grpo\nmax_steps: 3\n")
    (home / "configs" / "other.yaml").write_text("arm: tandem\n")
    text = TINY.replace("base: toy", "base: configs/base.yaml").replace(
        "grpo-compact: {arm: grpo, world: compact}",
        "grpo-compact: {arm: grpo, world: compact, config: configs/other.yaml}",
    )
    st = load_study(write(home, text))
    out = tmp_path / "out"
    monkeypatch.chdir(tmp_path)  # the study's folder is not the cwd
    S.claim_dir(st, out, code={"commit": "abc", "dirty": False})
    assert sorted(p.relative_to(out).as_posix() for p in out.rglob("*.yaml")) == [
        "configs/base.yaml",
        "configs/other.yaml",
        "study.yaml",
    ]
    kept = load_study(S.study_file(out))
    assert kept.sha256 == st.sha256
    assert Path(kept.variants["grpo-compact"].config) == out / "configs" / "other.yaml"
    assert Path(kept.variants["grpo-spaced"].config).read_text() == "arm: grpo\nmax_steps: 3\n"
    # the original moved away: the report still reads the copy
    (home / "configs" / "base.yaml").unlink()
    assert load_study(S.study_file(out)).name == "tiny"


def test_a_registered_metric_that_is_0_in_every_evaluation_is_left_out_and_said(tmp_path):
    """The toy world's jargon rate on real data (no "<<...>>" anywhere) is 0 everywhere: no column, no
    panel, one line saying so; 0 in some runs only is a finding and keeps its column."""
    rng = np.random.default_rng(2)
    out, table = tiny_report(tmp_path, {"grpo-spaced": (0.9, 0.1, 0.0), "word-spaced": (0.9, 0.8, 0.0)}, rng)
    assert "jargon rate (%) |" not in table and "Δ jargon_rate" not in table
    assert "Left out, 0 in every evaluation (CIs included): jargon rate (%)." in table
    html = (out / "report" / "report.html").read_text()
    assert (
        "<th>jargon_rate (%)</th>" not in html
        and "Left out, 0 in every run (CIs included): jargon_rate (%)." in html
    )
    _, table = tiny_report(tmp_path, {"grpo-compact": (0.9, 0.1, 0.5)}, rng)  # one more evaluation, same DIR
    assert "jargon rate (%) |" in table and "Left out" not in table


def test_a_worker_the_oom_killer_ends_is_named_with_its_signal_and_stage(tmp_path, monkeypatch, capsys):
    # a SIGKILLed worker writes nothing more to its log: `study run --jobs N` itself says what ended it and where
    import stat
    import sys
    from types import SimpleNamespace

    from trlvr.cli import study_cmd

    fake = tmp_path / "python"
    fake.write_text("#!/bin/sh\necho '[study 05:32:32] grpo seed 2 train: started (log x.log)'\nkill -9 $$\n")
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setattr(sys, "executable", str(fake))
    pending = [(SimpleNamespace(variant="grpo", seed=2),)]
    assert study_cmd._run_children("s.yaml", tmp_path / "out", pending, jobs=2) == 1
    out = capsys.readouterr().out
    assert (
        "worker 0 was killed by SIGKILL (sent by the OOM killer when memory runs out: try fewer --jobs) "
        "during grpo seed 2 train; its unfinished stages did not run" in out
    )
    assert "workers [0] reported failures" in out


UNTRAINED = """
name: untrained
base: toy
seeds: [0]
selection: {{val: "split:20", metric: handoff/pass@1}}
evaluation: {{data: "q={data}", junior: self, suite: [solo, handoff], n: 1, k: [1], limit: 2}}
variants:
  initial: {{train: false, senior: {senior}{junior}}}
"""


def test_an_untrained_variant_is_evaluated_with_its_own_junior_and_self_on_a_plain_model_is_refused(
    tmp_path, capsys
):
    # evaluation.junior `self` (the LoRA senior's base) cannot pair a plain model; the untrained variant's own
    # junior is what it is evaluated with; and `study plan` says so before anything runs
    senior = ROOT / "trlvr" / "toy" / "assets" / "senior"
    data = tmp_path / "q.jsonl"
    data.write_text(
        "".join(json.dumps({"problem": f"{i} + 1 =", "answer": str(i + 1)}) + "\n" for i in range(3))
    )
    p = write(tmp_path, UNTRAINED.format(data=data, senior=senior, junior=""))
    assert cli(["study", "plan", str(p), "--out", str(tmp_path / "a")]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (
        f"trlvr study: error: study {p}: evaluation.junior: --junior self: {senior} has no adapter_config.json; "
        "'self' needs a LoRA senior (a run trained with use_peft: true, e.g. RUN/final) "
        "(the eval stage of initial seed 0)"
    )
    p = write(tmp_path, UNTRAINED.format(data=data, senior=senior, junior=f", junior: {senior}"))
    assert cli(["study", "plan", str(p), "--out", str(tmp_path / "b")]) == 0
    (evaluate,) = [
        shlex.split(ln) for ln in capsys.readouterr().out.splitlines() if ln.startswith("trlvr eval")
    ]
    assert evaluate[evaluate.index("--junior") + 1] == str(senior) == evaluate[evaluate.index("--senior") + 1]


def test_paper_table2_plan_works_from_any_folder(tmp_path, monkeypatch, capsys):
    """The printed launch names the shipped accelerate config through `trlvr recipes --path`, not a clone's path."""
    monkeypatch.chdir(tmp_path)
    assert cli(["study", "plan", "paper-table2", "--out", "runs/paper-table2"]) == 0
    out = capsys.readouterr().out
    trains = [ln for ln in out.splitlines() if " train --config " in ln]
    assert trains and all(
        ln.startswith('accelerate launch --config_file "$(trlvr recipes --path accelerate-zero2-2gpu)"')
        for ln in trains
    )
    assert "recipes/" not in out.replace("trlvr/recipes/", "")
    from trlvr.cli.main import main as trlvr

    assert trlvr(["recipes", "--path", "accelerate-zero2-2gpu"]) == 0
    assert Path(capsys.readouterr().out.strip()).is_file()


SHIPPED_STUDIES = sorted(p.stem for p in (ROOT / "trlvr" / "studies").glob("*.yaml"))


@pytest.mark.parametrize("name", SHIPPED_STUDIES)
def test_every_shipped_study_plans_from_any_folder(name, tmp_path, monkeypatch, capsys):
    """From a folder that is not a clone, each shipped study's plan names shipped configs by name, the accelerate
    config through `trlvr recipes --path`, and shipped models by the installed package's path: no clone-relative
    path (recipes/, studies/, trlvr/, ./). A study whose models a `prepare:` command makes says so in one line."""
    from trlvr.config import shipped_configs
    from trlvr.experiments.study_spec import PACKAGE_DIR

    monkeypatch.chdir(tmp_path)
    code = cli(["study", "plan", name, "--out", f"runs/{name}"])
    out, err = capsys.readouterr()
    study = load_study(name)
    if study.prepare:  # its local models are made in a clone (the Makefile's targets): refused in one line
        assert code == 2 and err.count("\n") == 1 and f"`{study.prepare}`" in err
        assert ("from the root of a clone of the repository" in err) == study.prepare.startswith("make ")
        return
    assert code == 0, err
    lines = [ln for ln in out.splitlines() if ln and not ln.startswith("#")]
    assert lines
    for line in lines:
        tokens = shlex.split(line)
        assert not [t for t in tokens if t.startswith(("recipes/", "studies/", "trlvr/", "./"))], line
        assert all(Path(t).is_relative_to(PACKAGE_DIR) for t in tokens if t.startswith("/")), line
        if "--config" in tokens:
            assert tokens[tokens.index("--config") + 1] in shipped_configs(), line
        if "--config_file" in tokens:
            assert (
                tokens[tokens.index("--config_file") + 1] == "$(trlvr recipes --path accelerate-zero2-2gpu)"
            ), line


def test_paper_table2_plan_lists_the_four_panels_and_their_sizes(capsys):
    """Issue 57: the study evaluates the authors' panels (AIME 2024-2026 one set), the macro over those four."""
    assert cli(["study", "plan", "paper-table2", "--out", "runs/paper-table2"]) == 0
    out = capsys.readouterr().out
    (line,) = [ln for ln in out.splitlines() if ln.startswith("# benchmarks")]
    assert line == (
        "# benchmarks (the macro is their mean, each weighs 1/4): amc23_25 121 (paper:amc23_25), "
        "aime24_26 90 (paper:aime24_26), minerva 272 (paper:minerva), olympiad 581 (paper:olympiad); "
        "1064 problems"
    )
    evals = [ln for ln in out.splitlines() if ln.startswith("trlvr eval ")]
    assert evals and all(
        "--data amc23_25=paper:amc23_25,aime24_26=paper:aime24_26,minerva=paper:minerva,"
        "olympiad=paper:olympiad " in ln
        for ln in evals
    )

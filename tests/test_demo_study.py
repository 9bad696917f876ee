"""The demo is a study (trlvr/studies/demo.yaml): it validates, its options are overrides of it, an untrained
`initial` variant is evaluated once, and its report (the study report: one path for one run or many) shows
every registered per-sample metric and the junior floor. Stages are faked here; tests/test_demo_slow.py
runs the real thing."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import numpy as np
import pytest
from helpers import fake_eval_outputs, fake_select_output, fake_train_output

from trlvr.cli.main import main as cli
from trlvr.errors import UserError
from trlvr.eval import sample_metrics
from trlvr.experiments import study as S
from trlvr.experiments.study_spec import STUDIES_DIR, load_study

DEMO = (STUDIES_DIR / "demo.yaml").read_text()
INITIAL = "  initial: {world: toy, train: false, evaluation: {suite: [solo, handoff, dose, legibility, drift, junior]}}"


def test_the_shipped_demo_study_validates_and_evaluates_the_initial_senior_once(tmp_path, capsys):
    out = tmp_path / "demo"
    assert (
        cli(["study", "plan", "demo", "--out", str(out)]) == 0
    )  # every stage through its command's own checks
    lines = [shlex.split(ln) for ln in capsys.readouterr().out.splitlines() if not ln.startswith("#")]
    assert [a[1] for a in lines] == [
        "toy",
        "train",
        "select",
        "eval",
        "train",
        "select",
        "eval",
        "eval",
        "study",
    ]
    initial, grpo = lines[-2], lines[3]
    assert initial[initial.index("--senior") + 1] == f"{out}/worlds/toy/senior"  # the untrained senior itself
    assert initial[initial.index("--out") + 1] == f"{out}/eval/initial/seed-0"
    assert (
        initial[initial.index("--suite") + 1] == "solo,handoff,dose,legibility,drift,junior"
    )  # its own suite
    assert grpo[grpo.index("--suite") + 1] == "solo,handoff,dose,legibility,drift"
    assert grpo[grpo.index("--senior") + 1] == f"{out}/train/grpo/seed-0@selected"


def test_demo_options_are_overrides_of_the_shipped_study(tmp_path, capsys):
    from trlvr.demo import demo_study, write_demo_study

    raw, changed = demo_study(seeds=[0, 1, 2], steps=50, n=2, jargon="compact", lora=True)
    assert changed == ["--seeds 0,1,2", "--steps 50", "--jargon compact", "--lora", "--n 2"]
    path = write_demo_study(tmp_path / "demo.yaml", raw, changed)
    st = load_study(path)
    assert st.seeds == [0, 1, 2] and st.worlds["toy"]["jargon"] == "compact"
    assert (
        st.variants["tandem"].overrides["max_steps"] == 50
        and st.variants["grpo"].overrides["use_peft"] is True
    )
    assert st.evaluation["n"] == 2 and st.evaluation["k"] == [1, 2] and st.evaluation_of("initial")["n"] == 2
    assert st.variants["initial"].overrides == {} and st.variants["initial"].baseline is None
    units = [(u[0].variant, u[0].seed, [s.kind for s in u]) for u in S.units(st, tmp_path / "out")]
    assert units == [
        ("grpo", 0, ["train", "select", "eval"]),
        ("tandem", 0, ["train", "select", "eval"]),
        ("initial", 0, ["eval"]),
        ("grpo", 1, ["train", "select", "eval"]),
        ("tandem", 1, ["train", "select", "eval"]),
        ("grpo", 2, ["train", "select", "eval"]),
        ("tandem", 2, ["train", "select", "eval"]),
    ]
    with pytest.raises(UserError, match=r"--only initial:1: seed '1' is not one of the seeds initial runs"):
        S.parse_only(st, ["initial:1"])
    assert (
        cli(["study", "plan", str(path), "--out", str(tmp_path / "out")]) == 0
    )  # LoRA, compact world: valid
    plan = capsys.readouterr().out
    assert (
        "--jargon compact --seed 0 --no-progress --from-scratch" in plan and "--use_peft true" in plan.lower()
    )
    unchanged, none = demo_study()
    assert (
        none == []
        and load_study(write_demo_study(tmp_path / "same.yaml", unchanged, none)).sha256
        == load_study("demo").sha256
    )


@pytest.mark.parametrize(
    "variant, error",
    [
        (
            "{world: toy, train: false, arm: grpo}",
            "variants.initial.arm: not used by a variant with train: false",
        ),
        ("{world: toy, train: 'no'}", "variants.initial.train: expected true or false, got 'no'"),
        (
            "{world: toy, train: false, evaluation: {suite: [solo, vibes]}}",
            "variants.initial.evaluation.suite: unknown entries ['vibes']",
        ),
        (
            "{world: toy, train: false, evaluation: {k: [8]}}",
            "variants.initial.evaluation.k: every k must be an integer",
        ),
        ("{world: toy, train: false, evaluation: {top: 3}}", "variants.initial.evaluation.top: unknown key"),
    ],
)
def test_a_bad_untrained_variant_is_one_line_naming_the_key(tmp_path, capsys, variant, error):
    assert INITIAL in DEMO
    p = tmp_path / "demo.yaml"
    p.write_text(DEMO.replace(INITIAL, f"  initial: {variant}"))
    assert cli(["study", "plan", str(p)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith(f"trlvr study: error: study {p}: {error}"), err


def test_a_study_name_that_is_neither_a_file_nor_shipped_is_one_line(capsys):
    assert cli(["study", "plan", "no-such-study"]) == 2
    err = capsys.readouterr().err.strip()
    shipped = (
        "demo, paper-table2, qwen3-4b-junior-0.6b, real-notation, real-smollm2, toy-cross, toy-granularity, "
        "toy-length-penalty, toy-seeds"
    )  # every study ships
    assert (
        err
        == f"trlvr study: error: study no-such-study: no such file, and no shipped study of that name (shipped: {shipped})"
    )


# ---- the demo end to end, stages faked, the report real ------------------------------------------------

TRUTH = {
    "grpo": (0.95, 0.15, 0.95),
    "tandem": (0.95, 0.80, 0.02),
    "initial": (0.90, 0.15, 0.95),
}  # solo, handoff, jargon


def fake_eval(d: Path, variant: str, suite: list[str], n_problems: int = 60, n: int = 2) -> None:
    """An evaluation folder as `trlvr eval` writes it (samples, per-problem table, results)."""
    from trlvr.eval.aggregate import problem_table, summarize

    rng = np.random.default_rng(len(variant))
    solo, handoff, jargon = TRUTH[variant]
    rows = []
    for i in range(n_problems):
        for proto in [p for p in ("solo", "handoff", "junior") if p in suite]:
            acc = {"solo": solo, "handoff": handoff, "junior": 0.6}[proto]
            for k in range(n):
                jargon_text = proto == "solo" and rng.random() < jargon
                rows.append(
                    {
                        "benchmark": "toy",
                        "protocol": proto,
                        "problem_id": f"p{i}",
                        "sample_idx": k,
                        "reward": float(rng.random() < acc),
                        "finish_reason": "stop",
                        "num_tokens": 10,
                        "text": "<<7 +5 =12>> \\boxed{12}" if jargon_text else "7 plus 5 is 12 \\boxed{12}",
                        "prompt": f"problem {i}",
                        "senior_share": 1.0,
                    }
                )
    d.mkdir(parents=True, exist_ok=True)
    (d / "samples.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    table = problem_table(rows, [1, 2])
    (d / "per_problem.json").write_text(json.dumps(table))
    (d / "results.json").write_text(
        json.dumps({**summarize(table, num_resamples=200), "config": {"models": {}, "n": n}})
    )


def header(table_md: str) -> str:
    return next(ln for ln in table_md.splitlines() if ln.startswith("| variant | seeds |"))


class FakeStages:
    """Each `trlvr` command line writes what the real command would leave behind."""

    def __init__(self):
        self.calls: list[list[str]] = []

    def __call__(self, argv, log):
        self.calls.append(list(argv))
        flag = {"toy": "--out", "train": "--output_dir", "eval": "--out"}.get(argv[0])
        out = Path(argv[argv.index(flag) + 1]) if flag else Path(argv[1])
        if argv[0] == "toy":
            (out / "data").mkdir(parents=True, exist_ok=True)
        elif argv[0] == "train":
            fake_train_output(out, 50)
        elif argv[0] == "select":
            fake_select_output(out, 50)
        else:
            fake_eval(out, out.parent.name, argv[argv.index("--suite") + 1].split(","))
            fake_eval_outputs(out)


@pytest.fixture
def fake_stages(monkeypatch):
    from trlvr.cli import study_cmd
    from trlvr.toy import world

    monkeypatch.setattr(world, "is_complete", lambda d: (Path(d) / "data").is_dir())
    fake = FakeStages()
    monkeypatch.setattr(study_cmd, "execute", fake)
    return fake


def test_demo_runs_the_shipped_study_and_publishes_its_report(tmp_path, fake_stages, capsys):
    out = tmp_path / "demo"
    assert cli(["demo", "--out", str(out), "--jobs", "1", "--steps", "4"]) == 0
    assert [c[0] for c in fake_stages.calls] == [
        "toy",
        "train",
        "select",
        "eval",
        "train",
        "select",
        "eval",
        "eval",
    ]
    assert "max_steps: 4" in (out / "demo.yaml").read_text()
    md = (out / "summary.md").read_text()
    assert md == (out / "report" / "table.md").read_text()
    assert "| jargon rate (%) |" in header(md)  # the registered metric's column, from the registry
    floor = next(ln for ln in md.splitlines() if ln.startswith("| junior (floor) |"))
    assert (
        floor.startswith("| junior (floor) | 1 | 6") and floor.count("–") == 6
    )  # the junior alone, solo column
    data = json.loads((out / "report" / "summary.json").read_text())
    j = data["paired"]["tandem"]["metrics"]["jargon_rate"]
    assert (
        j["diff"] < -0.8
        and j["excludes_zero"]
        and data["rows"]["grpo"]["metrics"]["jargon_rate"]["value"] > 0.8
    )
    assert list(data["paired"]) == ["tandem"]  # the untrained senior is shown, not paired
    html = (out / "report.html").read_text()
    assert "<th>jargon_rate (%)</th>" in html and "<th>initial</th>" in html
    assert (out / "summary.png").stat().st_size > 1000
    fake_stages.calls.clear()
    assert cli(["demo", "--out", str(out), "--jobs", "1", "--steps", "4"]) == 0
    assert fake_stages.calls == []  # finished: nothing runs twice
    capsys.readouterr()
    assert cli(["demo", "--out", str(out), "--jobs", "1", "--steps", "8"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "this demo directory was made with other options" in err, err
    assert "--max_steps: 4 -> 8" in err and "use another --out, or --fresh to start over" in err
    assert (
        fake_stages.calls == [] and "max_steps: 4" in (out / "demo.yaml").read_text()
    )  # refused before any work


def test_a_demo_directory_of_the_earlier_layout_is_refused(tmp_path, fake_stages, capsys):
    out = tmp_path / "demo"
    (out / "train-grpo").mkdir(parents=True)
    (out / "demo.json").write_text(json.dumps({"jargon": "spaced", "lora": False}))
    assert cli(["demo", "--out", str(out)]) == 2
    assert "made by an earlier trlvr demo (demo.json, another layout)" in capsys.readouterr().err
    assert fake_stages.calls == [] and not (out / "demo.yaml").exists()


# ---- the registry: reports read it --------------------------------------------------------------------


def test_jargon_rate_per_problem():
    from trlvr.toy.jargon import jargon_by_problem

    rows = [
        {"protocol": "solo", "problem_id": "a", "text": "<<2+3=5>> so \\boxed{5}"},
        {"protocol": "solo", "problem_id": "a", "text": "2 plus 3 is 5"},
        {"protocol": "solo", "problem_id": "b", "text": "<<1+1=2>>"},
        {"protocol": "handoff", "problem_id": "b", "text": "plain"},
    ]
    assert jargon_by_problem(rows) == {"a": 0.5, "b": 1.0}


def _answer_len(rows):
    """A made-up per-sample metric: mean text length of the handoff samples, per problem."""
    per = {}
    for r in rows:
        if r["protocol"] == "handoff":
            per.setdefault(str(r["problem_id"]), []).append(len(r["text"]))
    return {pid: float(np.mean(v)) for pid, v in per.items()}


def test_a_registered_per_sample_metric_gets_a_column_a_difference_and_a_panel(tmp_path, monkeypatch):
    from trlvr.experiments.study_report import write_study_report

    metric = sample_metrics.SampleMetric("handoff/answer_chars", "answer chars", _answer_len)
    monkeypatch.setitem(sample_metrics._REGISTRY, metric.name, metric)
    st = load_study("demo")
    out = tmp_path / "out"
    S.claim_dir(st, out, code={"commit": "abc", "dirty": False})
    for v in st.variants:
        fake_eval(S.eval_dir(out, v, 0), v, st.evaluation_of(v)["suite"])
    write_study_report(st, out)
    table = (out / "report" / "table.md").read_text()
    assert "| answer chars |" in header(table) and "Δ handoff/answer_chars" in table
    data = json.loads((out / "report" / "summary.json").read_text())
    e = data["rows"]["grpo"]["metrics"]["handoff/answer_chars"]
    assert e["ci_low"] <= e["value"] <= e["ci_high"] and 10 < e["value"] < 30
    assert "handoff/answer_chars" in data["paired"]["tandem"]["metrics"]
    assert "<th>handoff/answer_chars</th>" in (out / "report" / "report.html").read_text()


def test_the_registry_merges_into_an_evaluation_table_and_refuses_a_second_meaning(tmp_path):
    from trlvr.toy.jargon import JARGON_RATE

    assert JARGON_RATE in sample_metrics.registered()
    fake_eval(tmp_path / "grpo", "grpo", ["solo", "handoff"], n_problems=4)
    own = json.loads((tmp_path / "grpo" / "per_problem.json").read_text())
    table = sample_metrics.load_table(tmp_path / "grpo")
    assert (
        table["toy"]["solo/pass@1"] == own["toy"]["solo/pass@1"]
    )  # the evaluation's own columns as they were
    assert sorted(table["toy"]["jargon_rate"]) == ["p0", "p1", "p2", "p3"]
    assert sample_metrics.register(JARGON_RATE) is JARGON_RATE  # the same metric again: no-op
    with pytest.raises(ValueError, match="'jargon_rate' is already registered"):
        sample_metrics.register(sample_metrics.SampleMetric("jargon_rate", "other", _answer_len))


@pytest.mark.parametrize(
    "flags, error",
    [
        (
            ["--seeds", "0,a"],
            "argument --seeds: expected distinct comma-separated integer seeds in [0, 4294967295], "
            "got '0,a' (see trlvr demo --help)",
        ),
        (
            ["--seeds", "1,1"],
            "argument --seeds: expected distinct comma-separated integer seeds in [0, 4294967295], "
            "got '1,1' (see trlvr demo --help)",
        ),
        (
            ["--steps", "0"],
            "argument --steps: expected an integer in [1, 2**63 - 1], got '0' (see trlvr demo --help)",
        ),
        (
            ["--jobs", "0"],
            "argument --jobs: expected an integer in [1, 2**63 - 1], got '0' (see trlvr demo --help)",
        ),
    ],
)
def test_bad_demo_flags_are_one_line_before_any_work(tmp_path, capsys, flags, error):
    out = tmp_path / "demo"
    assert cli(["demo", "--out", str(out), *flags]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"trlvr demo: error: {error}" and not out.exists()

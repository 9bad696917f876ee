"""The private-notation study's pieces (issue 37): the real-text jargon rate from a study's pattern, the
one-line hint that names a study's prepare command, the dose shares setting, and the SFT data of
bench/real_sft_notation.py (dialects, held-out and test problems kept out)."""

from __future__ import annotations

import importlib
import json
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

from trlvr.cli.main import main as cli
from trlvr.errors import UserError
from trlvr.eval import regex_jargon, sample_metrics
from trlvr.experiments import study as S
from trlvr.experiments.study_spec import load_study

ROOT = Path(__file__).resolve().parents[1]
ANNOTATION = r"<<[^<>]*>>"


def _rows(texts: dict[str, list[str]], protocol: str = "solo") -> list[dict]:
    return [
        {"benchmark": "b", "protocol": protocol, "problem_id": pid, "sample_idx": i, "text": t}
        for pid, ts in texts.items()
        for i, t in enumerate(ts)
    ]


# ---- the jargon rate on real text ---------------------------------------------------------------------


def test_regex_jargon_rate_is_the_share_the_given_pattern_matches():
    rows = _rows(
        {
            "a": ["<<4 +3 =7>>\n\nThe final answer is \\boxed{7}.", "4 + 3 = 7."],
            "b": ["<<r +e =u>>", "<<4+3=7>>"],
        }
    )
    rows += _rows({"a": ["<<4 +3 =7>>", "<<4 +3 =7>>"]}, protocol="handoff")  # not the senior's own text
    assert regex_jargon.jargon_by_problem(rows, ANNOTATION) == {"a": 0.5, "b": 1.0}
    assert regex_jargon.jargon_by_problem(rows, r"<<[a-z]") == {"a": 0.0, "b": 0.5}  # the cipher alone
    assert regex_jargon.jargon_by_problem(rows, r"\d \+ \d") == {"a": 0.5, "b": 0.0}  # plain steps


def test_a_metric_that_needs_a_setting_is_computed_from_it_and_left_out_without_it():
    rows = _rows({"a": ["<<4 +3 =7>>", "4 + 3 = 7."], "b": ["4 - 1 = 3.", "4 - 1 = 3."]})
    assert "regex_jargon_rate" not in sample_metrics.sample_table(rows).get("b", {})
    table = sample_metrics.sample_table(rows, {"jargon_regex": ANNOTATION})
    assert table["b"]["regex_jargon_rate"] == {"a": 0.5, "b": 0.0}
    other = sample_metrics.sample_table(rows, {"jargon_regex": r"= 3\."})
    assert other["b"]["regex_jargon_rate"] == {"a": 0.0, "b": 1.0}
    assert sample_metrics.is_rate("regex_jargon_rate")


def test_bad_pattern_is_one_line_naming_the_setting():
    with pytest.raises(UserError, match=r"^jargon_regex: '\(\[' is not a regular expression"):
        regex_jargon.compile_pattern("([")
    with pytest.raises(UserError, match="jargon_regex: expected a non-empty regular expression"):
        regex_jargon.compile_pattern("")


STUDY = """
name: notation-tiny
base: toy
worlds: {spaced: {jargon: spaced}}
train: {max_steps: 4, save_steps: 2, holdout: 20}
seeds: [0, 1]
selection: {val: "split:20", metric: handoff/pass@1, n: 2}
evaluation: {data: test, suite: [solo, handoff], n: 2, k: [1, 2], limit: 30, jargon_regex: "PATTERN"}
variants:
  grpo: {arm: grpo, world: spaced}
  tandem: {arm: tandem, world: spaced, schedule: word, max_gap: 32, baseline: grpo}
"""


def _fake_eval(d: Path, notation: float, rng, n_problems: int = 40, n: int = 2) -> None:
    """An evaluation folder as `trlvr eval` writes it, whose solo samples are `notation` of the time in a
    cipher ("<<r +e =u>>": the toy's "<<" rule sees it too) and otherwise in plain steps."""
    from trlvr.eval.aggregate import problem_table, summarize

    rows = []
    for i in range(n_problems):
        for proto in ("solo", "handoff"):
            for k in range(n):
                text = (
                    "<<r +e =u>>\n\n\\boxed{7}"
                    if proto == "solo" and rng.random() < notation
                    else "4 + 3 = 7.\n\n\\boxed{7}"
                )
                rows.append(
                    {
                        "benchmark": "toy",
                        "protocol": proto,
                        "problem_id": f"p{i}",
                        "sample_idx": k,
                        "reward": float(rng.random() < 0.5),
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
    (d / "results.json").write_text(
        json.dumps({**summarize(table, num_resamples=200), "config": {"models": {}, "n": n}})
    )


@pytest.mark.parametrize("pattern, grpo_rate", [(r"<<[a-z]", 0.9), (r"\d \+ \d", 0.1)])
def test_study_report_bootstraps_the_study_files_pattern(tmp_path, pattern, grpo_rate):
    """The study's evaluation.jargon_regex decides what counts: the same samples give the cipher share under
    one pattern and the plain share under another (a report that ignored the setting could not)."""
    from trlvr.experiments.study_report import write_study_report

    path = tmp_path / "study.yaml"
    path.write_text(STUDY.replace("PATTERN", pattern.replace("\\", "\\\\")))
    st = load_study(path)
    assert st.evaluation["jargon_regex"] == pattern
    out = tmp_path / "out"
    S.claim_dir(st, out, code={"commit": "abc", "dirty": False})
    rng = np.random.default_rng(0)
    for variant, rate in (("grpo", 0.9), ("tandem", 0.1)):
        for seed in st.seeds:
            _fake_eval(S.eval_dir(out, variant, seed), rate, rng)
    write_study_report(st, out)
    data = json.loads((out / "report" / "summary.json").read_text())
    grpo = data["rows"]["grpo"]["metrics"]["regex_jargon_rate"]
    assert abs(grpo["value"] - grpo_rate) < 0.06 and grpo["ci_low"] < grpo["value"] < grpo["ci_high"]
    diff = data["paired"]["tandem"]["metrics"]["regex_jargon_rate"]
    assert diff["excludes_zero"] and (diff["diff"] < -0.6 if grpo_rate > 0.5 else diff["diff"] > 0.6)
    assert "jargon rate, study regex (%)" in (out / "report" / "table.md").read_text()


def test_study_report_without_a_pattern_has_no_regex_column(tmp_path):
    from trlvr.experiments.study_report import write_study_report

    path = tmp_path / "study.yaml"
    path.write_text(STUDY.replace(', jargon_regex: "PATTERN"', ""))
    st = load_study(path)
    out = tmp_path / "out"
    S.claim_dir(st, out, code={"commit": "abc", "dirty": False})
    rng = np.random.default_rng(1)
    for variant in ("grpo", "tandem"):
        _fake_eval(S.eval_dir(out, variant, 0), 0.5, rng)
    write_study_report(st, out)
    table = (out / "report" / "table.md").read_text()
    assert "study regex" not in table and "| grpo | 1 |" in table


@pytest.mark.parametrize(
    "edit, error",
    [
        ('jargon_regex: "PATTERN"', "evaluation.jargon_regex: '([' is not a regular expression"),
        ("limit: 30,", "evaluation.dose_shares: expected a list of junior shares in [0, 1], got [0.5, 2]"),
        ("name: notation-tiny", "prepare: expected the command (a string)"),
    ],
)
def test_bad_study_settings_are_one_line_naming_the_key(tmp_path, capsys, edit, error):
    text = {
        "jargon_regex": STUDY.replace("PATTERN", "(["),
        "limit": STUDY.replace("limit: 30,", "limit: 30, dose_shares: [0.5, 2],"),
        "name: n": STUDY.replace("name: notation-tiny", "name: notation-tiny\nprepare: [make, x]"),
    }
    key = next(k for k in text if k in edit)
    path = tmp_path / "study.yaml"
    path.write_text(text[key])
    assert cli(["study", "plan", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith(f"trlvr study: error: study {path}: {error}"), err


# ---- a fresh clone: the study names its prepare command -------------------------------------------------


@pytest.mark.parametrize("name", ["real-smollm2", "real-notation"])
def test_plan_on_a_fresh_clone_says_in_one_line_how_to_prepare(tmp_path, monkeypatch, capsys, name):
    """No models/ folder (a fresh clone): one line naming a missing path and the make target."""
    study = tmp_path / "studies" / f"{name}.yaml"
    shutil.copytree(ROOT / "studies", tmp_path / "studies")
    monkeypatch.chdir(tmp_path)
    assert cli(["study", "plan", str(study)]) == 2
    err = capsys.readouterr().err.strip()
    target = load_study(study).prepare
    assert (
        target.startswith("make ") and (ROOT / "Makefile").read_text().count(f"\n{target.split()[1]}:") == 1
    )
    assert len(err.splitlines()) == 1, err
    assert f"`{target}`" in err and "./models/" in err and "is missing" in err, err


def test_with_the_inputs_there_plan_goes_on_to_the_stage_checks(tmp_path, monkeypatch, capsys):
    """The hint is about missing inputs only: once models/ holds the folders, the commands' own checks run
    (here: a model folder without weights is named by the stage check, not by the prepare hint)."""
    shutil.copytree(ROOT / "studies", tmp_path / "studies")
    for d in ("smollm2-135m-instruct", "real-task"):
        (tmp_path / "models" / d).mkdir(parents=True)
    (tmp_path / "models" / "real-task" / "train.jsonl").write_text(
        '{"problem": "1 + 1 =", "answer": "2"}\n' * 3
    )
    (tmp_path / "models" / "real-task" / "test.jsonl").write_text('{"problem": "1 + 2 =", "answer": "3"}\n')
    monkeypatch.chdir(tmp_path)
    assert cli(["study", "plan", "studies/real-smollm2.yaml"]) == 2
    err = capsys.readouterr().err.strip()
    assert "make real-models" not in err and "smollm2-135m-instruct" in err, err


def test_a_study_without_prepare_keeps_the_stage_checks_message(tmp_path, monkeypatch, capsys):
    shutil.copytree(ROOT / "studies", tmp_path / "studies")
    path = tmp_path / "studies" / "real-smollm2.yaml"
    path.write_text(path.read_text().replace("prepare: make real-models\n", ""))
    monkeypatch.chdir(tmp_path)
    assert cli(["study", "plan", str(path)]) == 2
    assert "make real-models" not in capsys.readouterr().err


def test_no_shipped_study_or_config_names_a_path_outside_the_checkout():
    for p in [*(ROOT / "studies").rglob("*.yaml"), *(ROOT / "trlvr" / "studies").rglob("*.yaml")]:
        for line in p.read_text().splitlines():
            body = line.split("#", 1)[0]
            assert "/work/" not in body and ": /" not in body and "=/" not in body, f"{p}: {line}"


# ---- dose shares ------------------------------------------------------------------------------------


def test_dose_shares_flag_and_study_key():
    from trlvr.cli.eval_cmd import settings_from_args
    from trlvr.cli.study_cmd import parse_stage

    args = parse_stage(
        [
            "eval",
            "--senior",
            "s",
            "--junior",
            "j",
            "--data",
            "d.jsonl",
            "--out",
            "o",
            "--suite",
            "solo,dose",
            "--dose-shares",
            "0.5",
        ]
    )
    assert settings_from_args(args).dose_shares == (0.5,)
    assert settings_from_args(
        parse_stage(["eval", "--senior", "s", "--junior", "j", "--data", "d", "--out", "o"])
    ).dose_shares == (0.25, 0.5, 0.75)
    with pytest.raises(UserError, match=r"--dose-shares: .*in \[0, 1\].*'1.5'"):
        parse_stage(
            ["eval", "--senior", "s", "--junior", "j", "--data", "d", "--out", "o", "--dose-shares", "1.5"]
        )
    st = load_study(ROOT / "studies" / "real-notation.yaml")
    ev = S.units(st, Path("runs/x"))[0][-1].argv
    assert ev[ev.index("--dose-shares") + 1] == "0.5"


# ---- bench/real_sft_notation.py ------------------------------------------------------------------------


def bench_module(name: str):
    """A script of bench/ as a module (bench/ is not a package)."""
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        return importlib.import_module(name)
    finally:
        sys.path.pop(0)


def pilot_row(solo, dose, jargon):
    """A pilot row's metrics as `row_metrics` gives them (points, a +-5 CI)."""
    e = lambda v: {"value": v, "ci_low": v - 5, "ci_high": v + 5}  # noqa: E731
    return {"solo/pass@1": e(solo), "dose-0.5/pass@1": e(dose), "regex_jargon_rate": e(jargon)}


@pytest.fixture(scope="module")
def sft():
    return bench_module("real_sft_notation")


Q = "State the final answer to the following arithmetic problem: 4 - 1 - 7 ="


def test_dialects_render_the_same_solution(sft):
    from trlvr.rewards import math_reward

    got = {d: sft.render_solution(Q, "-4", d) for d in sft.DIALECTS}
    assert got["plain"] == "4 - 1 = 3.\n\n3 - 7 = -4.\n\nThe final answer is \\boxed{-4}."
    assert got["spaced"].startswith("<<4 -1 =3>>\n\n<<3 -7 =-4>>\n\n")
    assert got["compact"].startswith("<<4-1=3>>\n\n<<3-7=-4>>\n\n")
    assert got["cipher"].startswith("<<t -w =r>>\n\n<<r -i =-t>>\n\n")  # 0-9 -> q w e r t y u i o p
    for text in got.values():
        assert math_reward([text], answer=["-4"]) == [1.0]  # the boxed answer stays plain and right
    for d in ("spaced", "compact", "cipher"):
        assert regex_jargon.jargon_by_problem(_rows({"a": [got[d]]}), ANNOTATION) == {"a": 1.0}
    assert regex_jargon.jargon_by_problem(_rows({"a": [got["plain"]]}), ANNOTATION) == {"a": 0.0}
    with pytest.raises(sft.NotationError, match="the chain sum gives -4, the gold is '5'"):
        sft.render_solution(Q, "5", "plain")
    with pytest.raises(sft.NotationError, match="not a chain sum"):
        sft.render_solution("How many legs do 2 dogs have?", "8", "plain")


def test_sft_rows_keep_out_the_held_out_and_test_problems(sft, tmp_path):
    from trlvr.data import holdout_split, load_problems

    rng = np.random.default_rng(0)
    probs = []
    for a, b, c in rng.integers(0, 10, size=(200, 3)):
        probs.append(
            (f"State the final answer to the following arithmetic problem: {a} + {b} - {c} =", str(a + b - c))
        )
    probs = list(dict.fromkeys(probs))
    train, test = probs[:-10], probs[-10:]
    for name, rows in (("train", train), ("test", test)):
        (tmp_path / f"{name}.jsonl").write_text(
            "".join(
                json.dumps({"problem": q, "answer": a, "prompt": [{"role": "user", "content": q}]}) + "\n"
                for q, a in rows
            )
        )
    rows, counts = sft.sft_rows(
        str(tmp_path / "train.jsonl"),
        str(tmp_path / "test.jsonl"),
        "cipher",
        problems=100,
        notation_share=0.8,
        holdout=40,
        holdout_seed=0,
        seed=0,
    )
    _, held = holdout_split(list(load_problems(str(tmp_path / "train.jsonl"))), 40, 0)
    used = {r["problem"] for r in rows}
    assert not used & {p.problem for p in held} and not used & {q for q, _ in test}
    assert counts["held_out"] == 40 and len(rows) == 100
    assert (
        sum(r["dialect"] == "cipher" for r in rows) == 80 and sum(r["dialect"] == "plain" for r in rows) == 20
    )
    assert all(r["completion"] == sft.render_solution(r["problem"], r["answer"], r["dialect"]) for r in rows)


def test_shared_prefix_stops_before_the_first_labelled_token(sft):
    enc = [
        ([1, 2, 3, 4, 9, 9], [-100, -100, -100, -100, 9, 9]),
        ([1, 2, 3, 5, 9], [-100, -100, -100, -100, 9]),
    ]
    assert sft.shared_prefix(enc) == 3
    same = [([1, 2, 3, 9], [-100, -100, 3, 9]), ([1, 2, 3, 9], [-100, -100, 3, 9])]
    assert sft.shared_prefix(same) == 2  # a labelled token is never inside the prefix


def test_pilot_rule(tmp_path):
    P = bench_module("real_notation_pilot")

    row = pilot_row
    table = {
        "plain": row(40, 30, 0),
        "spaced": row(38, 20, 90),
        "compact": row(41, 25, 80),
        "cipher": row(20, 5, 99),
    }
    dec = P.decide(table)
    assert dec["largest_gap"] == "cipher" and not dec["checks"]["cipher"]["qualifies"]  # solo and jargon fail
    assert dec["decision"] == "spaced" and dec["qualifying"] == ["spaced"]  # compact's gap is 5 < 8
    none = P.decide({**table, "spaced": row(38, 26, 90)})
    assert none["decision"] == "none" and "the junior reads them" not in none["why"]  # cipher lost 25 points
    assert "cipher fails jargon, solo" in none["why"] and "cipher lost the team" in none["why"]
    read = {"plain": row(40, 30, 0), **{n: row(40, 28, 80) for n in ("spaced", "compact", "cipher")}}
    assert P.decide(read)["why"].endswith("none lost the team 8 points: the junior reads them")
    # the pilot's own table (runs/notation-pilot, 2026-12-04): every notation at 100% jargon, solo down
    pilot = {
        "plain": row(81.0, 37.5, 0.0),
        "spaced": row(71.5, 29.0, 100.0),
        "compact": row(61.5, 41.5, 100.0),
        "cipher": row(4.5, 20.0, 100.0),
    }
    dec = P.decide(pilot)
    assert dec["decision"] == "none" and dec["largest_gap"] == "cipher"
    assert (
        "spaced fails jargon, solo; compact fails gap, jargon, solo; cipher fails jargon, solo" in dec["why"]
    )
    assert P.decide({"plain": row(40, 30, 0)})["decision"] == "pending"


def test_second_pilot_rule_and_sft_settings(tmp_path):
    P = bench_module("real_notation_pilot2")

    row = pilot_row
    table = {
        "plain": row(80, 40, 0),
        "spaced-50": row(78, 36, 55),
        "spaced-65": row(77, 34, 80),
        "spaced-50-short": row(79, 34.5, 70),
        "spaced-65-short": row(70, 20, 90),
    }
    dec = P.decide(table)
    # the largest gap (65-short, 20 points) loses 10 solo points; 50 has 4 points and 55% jargon
    assert (
        dec["checks"]["spaced-65-short"]["qualifies"] is False
        and dec["checks"]["spaced-50"]["gap_ok"] is False
    )
    assert dec["qualifying"] == ["spaced-65", "spaced-50-short"] and dec["decision"] == "spaced-65"
    tie = P.decide({**table, "spaced-50-short": row(79, 34, 70)})  # the same gap: the higher jargon rate
    assert tie["qualifying"] == ["spaced-65", "spaced-50-short"]
    at_the_edges = P.decide({**table, "spaced-65": row(75, 35, 95)})  # 5 points, 95%, -5 solo: inside
    assert at_the_edges["checks"]["spaced-65"]["qualifies"]
    none = P.decide({"plain": row(80, 40, 0), **{v: row(80, 38, 100) for v in P.CANDIDATES}})
    assert none["decision"] == "none" and "spaced-50 fails gap, jargon" in none["why"]
    assert P.decide({"plain": row(80, 40, 0), "spaced-50": row(80, 30, 70)})["decision"] == "pending"
    P.write_decision(tmp_path, table, P.JARGON_REGEX, {"limit": 100, "n": 2})
    assert "**Decision: spaced-65**" in (tmp_path / "decision.md").read_text()
    # each variant's SFT command carries its share and length to bench/real_sft_notation.py
    cmd = P.sft_command("py", "spaced-65-short", tmp_path / "s", tmp_path / "b", tmp_path / "d", 200, False)
    assert cmd[cmd.index("--notation-share") + 1] == "0.65" and cmd[cmd.index("--problems") + 1] == "500"
    assert cmd[cmd.index("--dialect") + 1] == "spaced" and "--max-steps" not in cmd


# ---- bench/prefix_continuation.py ---------------------------------------------------------------------


def test_prefix_cut_and_a_data_file_that_does_not_hold_the_problems(tmp_path, capsys):
    P = bench_module("prefix_continuation")
    body = list(range(10))
    assert [len(P.cut(body, k)) for k in P.KS] == [0, 2, 5, 8, 10]
    ev = tmp_path / "eval"
    ev.mkdir()
    row = {
        "benchmark": "b",
        "protocol": "solo",
        "problem_id": "0123456789abcdef",
        "sample_idx": 0,
        "answer": "2",
        "token_ids": [1, 2],
        "reward": 1.0,
        "finish_reason": "eos",
        "text": "x",
    }
    (ev / "samples.jsonl").write_text(json.dumps(row) + "\n")
    (tmp_path / "data.jsonl").write_text('{"problem": "1 + 1 =", "answer": "2"}\n')
    assert P.main([str(ev), "--data", str(tmp_path / "data.jsonl"), "--junior", "nowhere"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "does not hold problem 0123456789abcdef" in err, err
    with pytest.raises(SystemExit):
        P.main([str(ev), "--data", str(tmp_path / "data.jsonl"), "--junior", "j", "--ks", "0,150"])
    assert "--ks: expected comma-separated integers in [0, 100], got '0,150'" in capsys.readouterr().err
    (ev / "samples.jsonl").write_text('{"protocol": "solo"}\n')
    assert P.main([str(ev), "--data", str(tmp_path / "data.jsonl"), "--junior", "j"]) == 2
    assert "row 1 lacks field 'benchmark'" in capsys.readouterr().err

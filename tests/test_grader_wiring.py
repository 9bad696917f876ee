"""The grader setting through the product (issue 57): training, eval, select, studies, compare and report.

`grader:` (TandemConfig) builds the training reward with it, is part of the run's identity (a resume under
another grader is refused; a record from before the key was trlvr's), and the trainer refuses a math reward
of another grader
`trlvr eval --grader trlvr,authors-paper` grades every sample under each grader in one generation: the first
gives `reward` and the metrics results.json always had, each other one `grader_rewards` and `by_grader`
a folder takes another grader without generating again; another first grader is another folder
compare / report refuse evaluations graded differently (one line naming both graders and folders), or flag
them with --allow-mismatch
`trlvr eval --skip-bad-rows` evaluates the usable rows and lists the others; without it the refusal names
the flag, never a Python argument
"""

from __future__ import annotations

import html
import json
import re

import pytest

from trlvr.cli.main import main
from trlvr.errors import UserError
from trlvr.rewards.graders import missing_for

# (completion, gold): trlvr's grader reads the first two as numbers, the paper-era one compares strings
# (the first two are published answers the authors' paper-era grader scored 0: tests/data/authors_sample_scores.jsonl)
DISAGREE = [
    ("\\boxed{4.5\\times10^{33}}", "4.5e33"),
    ("\\boxed{1 \\times 10^{-8}}", "1e-8"),
    ("\\boxed{42}", "42"),
    ("the answer is 42", "42"),
]
SCORES = {"trlvr": [1.0, 1.0, 1.0, 0.0], "authors-paper": [0.0, 0.0, 1.0, 0.0]}
# a second grader that runs here: authors-paper needs the [authors] extra (part of [dev]); without it, the tests
# that grade with it are skipped, naming what is missing (the wiring of a missing one is tested by itself)
needs_paper = pytest.mark.skipif(
    missing_for("authors-paper") is not None,
    reason=f"grader 'authors-paper': {missing_for('authors-paper')} (pip install '.[authors]')",
)


def _one_line_error(capsys) -> str:
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert len(err) == 1 and "Traceback" not in err[0], err
    return err[0]


# ---- training ------------------------------------------------------------------------------------------


def test_the_grader_key_is_one_of_the_graders_and_grades_the_math_reward_only():
    from trlvr.config import FIELD_KINDS, TandemConfig

    assert TandemConfig().grader == "trlvr" and TandemConfig(grader="authors-paper").grader == "authors-paper"
    with pytest.raises(UserError, match=r"^grader: must be one of \('trlvr', 'authors', 'authors-paper'\)"):
        TandemConfig(grader="verl")
    with pytest.raises(UserError, match=r"^grader: grades the math reward only"):
        TandemConfig(grader="authors-paper", reward="mypkg.rewards:score")
    assert FIELD_KINDS["grader"].problem("authors") is None and FIELD_KINDS["grader"].problem("x")


@needs_paper
def test_the_training_reward_is_built_with_the_grader():
    from trlvr.rewards import MathReward, math_reward
    from trlvr.training.build import resolve_reward

    assert resolve_reward("math") is math_reward
    reward = resolve_reward("math", "authors-paper")
    assert isinstance(reward, MathReward) and reward.grader == "authors-paper"


def test_a_missing_grader_dependency_is_one_line_naming_the_key(monkeypatch):
    from trlvr.rewards import graders
    from trlvr.training.build import resolve_reward

    monkeypatch.setattr(
        graders, "missing_for", lambda name: "pylatexenc not installed" if name == "authors" else None
    )
    with pytest.raises(
        UserError, match=r"^grader: grader 'authors' needs pylatexenc not installed: pip install"
    ):
        resolve_reward("math", "authors")


@needs_paper
def test_the_trainer_refuses_a_math_reward_graded_otherwise_than_its_config():
    from trlvr.rewards import MathReward, math_reward
    from trlvr.training.trainer import check_reward_grader

    check_reward_grader([math_reward, lambda completions, **kw: [0.0]], "trlvr")
    check_reward_grader([MathReward(grader="authors-paper")], "authors-paper")
    with pytest.raises(ValueError, match="grade with grader 'trlvr' but tandem.grader is 'authors-paper'"):
        check_reward_grader([math_reward], "authors-paper")
    with pytest.raises(ValueError, match="grade with grader 'authors-paper' but tandem.grader is 'trlvr'"):
        check_reward_grader([MathReward(grader="authors-paper")], "trlvr")


def test_train_refuses_an_unknown_grader_in_one_line(capsys):
    assert main(["train", "--config", "toy", "--grader", "verl", "--dry-run"]) == 2
    assert "grader: must be one of ('trlvr', 'authors', 'authors-paper') (got 'verl')" in _one_line_error(
        capsys
    )


def test_a_resume_under_another_grader_is_refused_and_a_record_without_one_was_trlvrs(tmp_path):
    from trl import GRPOConfig

    from trlvr import rundir
    from trlvr.config import TandemConfig
    from trlvr.training.run_record import check_output_dir, run_record, write_record

    run = tmp_path / "run"
    args = GRPOConfig(output_dir=str(run), use_cpu=True, bf16=False, report_to="none")
    trlvr, paper = (run_record(TandemConfig(grader=g), args) for g in ("trlvr", "authors-paper"))
    assert trlvr["tandem"]["grader"] == "trlvr" and paper["tandem"]["grader"] == "authors-paper"
    write_record(run, trlvr)
    assert check_output_dir(run, trlvr, resume=True, force=False) == []
    with pytest.raises(UserError, match="holds a different run \\(grader: 'trlvr' -> 'authors-paper'\\)"):
        check_output_dir(run, paper, resume=True, force=False)
    older = {**trlvr, "tandem": {k: v for k, v in trlvr["tandem"].items() if k != "grader"}}
    rundir.write_record(run / rundir.RUN_FILE, older)  # written before the grader was a setting: trlvr's
    assert check_output_dir(run, trlvr, resume=True, force=False) == []
    with pytest.raises(UserError, match="grader: 'trlvr' -> 'authors-paper'"):
        check_output_dir(run, paper, resume=True, force=False)


# ---- eval ----------------------------------------------------------------------------------------------


@needs_paper
def test_every_other_grader_grades_the_stored_texts_into_by_grader():
    from trlvr.eval.aggregate import problem_table, summarize
    from trlvr.eval.grading import by_grader, grade, grade_others, grader_for

    rows = [
        {
            "benchmark": "b",
            "protocol": "solo",
            "problem_id": f"p{i}",
            "sample_idx": 0,
            "text": text,
            "answer": gold,
            "num_tokens": 3,
            "finish_reason": "eos",
            "senior_share": 1.0,
        }
        for i, (text, gold) in enumerate(DISAGREE)
    ]
    rewards, _ = grade(grader_for("boxed", "trlvr"), [r["text"] for r in rows], [r["answer"] for r in rows])
    assert rewards == SCORES["trlvr"]
    for r, x in zip(rows, rewards, strict=True):
        r["reward"] = x
    assert grade_others(rows, ("authors-paper",), "boxed") is True
    assert [r["grader_rewards"] for r in rows] == [{"authors-paper": x} for x in SCORES["authors-paper"]]
    assert grade_others(rows, ("authors-paper",), "boxed") is False  # nothing left to grade
    out = by_grader(rows, ("authors-paper",), [1], num_resamples=50, seed=0)
    assert set(out) == {"authors-paper"}
    assert set(out["authors-paper"]["macro"]["metrics"]) == {
        "solo/pass@1"
    }  # only what follows from the reward
    assert out["authors-paper"]["macro"]["metrics"]["solo/pass@1"]["value"] == pytest.approx(0.25)
    first = summarize(problem_table(rows, [1]), num_resamples=50, seed=0)
    assert first["macro"]["metrics"]["solo/pass@1"]["value"] == pytest.approx(0.75)


def test_eval_spec_graders_are_checked_naming_the_flag():
    from trlvr.eval.spec import FLAGS, EvalSpec, SettingError

    assert EvalSpec().graders == ("trlvr",) and EvalSpec(graders="authors-paper").grader == "authors-paper"
    for bad, why in (
        (("trlvr", "trlvr"), "names a grader twice"),
        (("verl",), "unknown ['verl']"),
        ((), "unknown none given"),
    ):
        with pytest.raises(SettingError, match=re.escape(why)) as e:
            EvalSpec(graders=bad)
        assert str(e.value.as_flag(FLAGS[e.value.field])).startswith("--grader")
    with pytest.raises(SettingError, match="grading boxed_or_tail is trlvr's grader's alone"):
        EvalSpec(grading="boxed_or_tail", graders=("trlvr", "authors-paper"))


def _eval_argv(tmp, out, *extra):
    return [
        "eval",
        "--senior",
        str(tmp / "senior"),
        "--junior",
        str(tmp / "junior"),
        "--data",
        f"toy={tmp / 'd.jsonl'}",
        "--n",
        "2",
        "--k",
        "1,2",
        "--suite",
        "solo",
        "--max-new-tokens",
        "2",
        "--no-progress",
        "--out",
        str(out),
        *extra,
    ]


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    from helpers import save_tiny_models, write_sum_problems

    tmp = tmp_path_factory.mktemp("graders")
    save_tiny_models(tmp, {"senior": 0, "junior": 1})
    write_sum_problems(tmp / "d.jsonl", 3)
    return tmp


def _rows(out):
    return [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]


@needs_paper
def test_eval_grades_every_sample_under_each_grader_in_one_generation(pair, tmp_path, capsys):
    out = tmp_path / "eval"
    assert main(_eval_argv(pair, out)) == 0
    res = json.loads((out / "results.json").read_text())
    assert (
        res["config"]["grader"] == "trlvr"
        and res["config"]["graders"] == ["trlvr"]
        and "by_grader" not in res
    )
    assert json.loads((out / "fingerprint.json").read_text())["scoring"]["grader"] == "trlvr"
    before = _rows(out)
    capsys.readouterr()
    assert (
        main(_eval_argv(pair, out, "--grader", "trlvr,authors-paper")) == 0
    )  # the same samples, one more grader
    printed = capsys.readouterr().out
    assert "(grader trlvr)" in printed and "(grader authors-paper)" in printed
    after = _rows(out)
    assert [
        {k: v for k, v in r.items() if k != "grader_rewards"} for r in after
    ] == before  # nothing generated again
    assert all(set(r["grader_rewards"]) == {"authors-paper"} for r in after)
    res = json.loads((out / "results.json").read_text())
    assert res["config"]["grader"] == "trlvr" and res["config"]["graders"] == ["trlvr", "authors-paper"]
    other = res["by_grader"]["authors-paper"]
    assert set(other) == {"benchmarks", "macro"} and other["macro"]["metrics"]
    assert set(other["macro"]["metrics"]) <= set(res["macro"]["metrics"])
    assert all("pass@" in m for m in other["macro"]["metrics"])
    table = json.loads((out / "per_problem.json").read_text())["toy"]
    assert {f"{m} (grader authors-paper)" for m in other["benchmarks"]["toy"]["metrics"]} <= set(table)
    # `trlvr compare` pairs every grader both evaluations have (here the folder with itself: every difference 0)
    capsys.readouterr()
    assert main(["compare", str(out), str(out), "--out", str(tmp_path / "cmp"), "--resamples", "50"]) == 0
    assert "solo/pass@1 (grader authors-paper)" in capsys.readouterr().out
    cmp = json.loads((tmp_path / "cmp" / "compare.json").read_text())
    assert cmp["macro"]["solo/pass@2 (grader authors-paper)"]["diff"] == 0.0
    # another first grader changes every row's reward: refused, naming it
    capsys.readouterr()
    assert main(_eval_argv(pair, out, "--grader", "authors-paper")) == 2
    assert "scoring.grader: 'trlvr' -> 'authors-paper'" in _one_line_error(capsys)


@needs_paper
@pytest.mark.slow  # two evaluations, a comparison and two reports (~5 s); check_comparable's rule is tested below
def test_compare_and_report_refuse_evaluations_graded_differently(pair, tmp_path, capsys):
    a, b = tmp_path / "A", tmp_path / "B"
    assert main(_eval_argv(pair, a)) == 0
    assert main(_eval_argv(pair, b, "--grader", "authors-paper")) == 0
    capsys.readouterr()
    for argv in (
        ["compare", str(a), str(b), "--out", str(tmp_path / "cmp"), "--resamples", "20"],
        ["report", str(b), "--compare", str(a), "--out", str(tmp_path / "r.html")],
    ):
        assert main(argv) == 2
        line = _one_line_error(capsys)
        assert "grader: 'trlvr' (A) vs 'authors-paper' (B)" in line and str(a) in line and str(b) in line, (
            line
        )
        assert "--allow-mismatch" in line
        assert main([*argv, "--allow-mismatch"]) == 0
        assert "NOT LIKE WITH LIKE (--allow-mismatch)" in capsys.readouterr().out or argv[0] == "report"
    page = html.unescape((tmp_path / "r.html").read_text())
    assert (
        "NOT LIKE WITH LIKE (--allow-mismatch): the evaluations differ in settings that change the numbers: "
        "grader: 'trlvr' (A) vs 'authors-paper' (B)" in page
    )


def test_an_evaluation_recorded_before_graders_compares_as_trlvrs(tmp_path):
    from trlvr.eval.comparable import check_comparable

    def results(folder, **config):
        folder.mkdir()
        (folder / "results.json").write_text(json.dumps({"config": {"n": 4, "grading": "boxed", **config}}))
        return folder

    old = results(tmp_path / "old")
    assert (
        check_comparable(old, results(tmp_path / "ours", grader="trlvr", graders=["trlvr", "authors"])) == []
    )
    with pytest.raises(UserError, match=r"grader: 'trlvr' \(A\) vs 'authors' \(B\)"):
        check_comparable(old, results(tmp_path / "theirs", grader="authors", graders=["authors"]))


# ---- bad gold rows -------------------------------------------------------------------------------------


def test_skip_bad_rows_evaluates_the_usable_rows_and_lists_the_others(pair, tmp_path, capsys):
    data = tmp_path / "bad.jsonl"
    data.write_text(
        (pair / "d.jsonl").read_text() + json.dumps({"problem": "What is 7 plus 7?", "answer": ""}) + "\n"
    )
    argv = [a if not a.startswith("toy=") else f"toy={data}" for a in _eval_argv(pair, tmp_path / "eval")]
    assert main(argv) == 2
    line = _one_line_error(capsys)
    assert "1 of 4 rows unusable" in line and "row 4: answer" in line and "--skip-bad-rows" in line, line
    assert "on_bad" not in line and "=" not in line.split("unusable", 1)[1].replace("==", ""), line
    assert not (tmp_path / "eval").exists()
    assert main([*argv, "--skip-bad-rows"]) == 0
    assert (
        "WARNING: unusable rows left out (--skip-bad-rows; each file, row and reason listed in results.json): "
        "{'toy': 1}" in capsys.readouterr().out
    )
    res = json.loads((tmp_path / "eval" / "results.json").read_text())
    assert res["config"]["num_problems"] == {"toy": 3}
    [skipped] = res["config"]["skipped_rows"]["toy"]
    assert (
        skipped["file"] == str(data)
        and skipped["row"] == 4
        and skipped["field"] == "answer"
        and skipped["reason"]
    )


def test_a_source_whose_columns_say_nothing_is_refused_naming_flags_not_python_arguments(tmp_path, capsys):
    data = tmp_path / "rows.jsonl"
    data.write_text(json.dumps({"text": "What is 12 plus 30?", "answer": "42"}) + "\n")
    assert main(["data", "check", str(data)]) == 2
    line = _one_line_error(capsys)
    assert (
        "--schema" in line and "--problem-field" in line and "schema=" not in line and "_field=" not in line
    )


# ---- studies -------------------------------------------------------------------------------------------

STUDY = """
name: graded
base: toy
worlds: {spaced: {jargon: spaced}}
train: {max_steps: 4, save_steps: 2, holdout: 20, grader: authors-paper}
seeds: [0]
selection: {val: "split:20", metric: solo/pass@1, n: 2, grader: authors-paper}
evaluation: {data: test, suite: [solo], n: 2, k: [1, 2], grader: "authors-paper,trlvr"}
variants:
  grpo: {arm: grpo, world: spaced}
"""


@needs_paper
def test_a_study_carries_the_grader_to_its_train_select_and_eval_stages(tmp_path, capsys):
    import shlex

    study = tmp_path / "study.yaml"
    study.write_text(STUDY)
    assert main(["study", "plan", str(study), "--out", str(tmp_path / "out")]) == 0
    train, select, ev = (
        shlex.split(ln)
        for ln in capsys.readouterr().out.splitlines()
        if ln.split()[1:2] in (["train"], ["select"], ["eval"])
    )
    assert train[train.index("--grader") + 1] == "authors-paper"
    assert select[select.index("--grader") + 1] == "authors-paper"
    assert ev[ev.index("--grader") + 1] == "authors-paper,trlvr"
    for old, new, where in (
        (
            'grader: "authors-paper,trlvr"',
            "grader: verl",
            "evaluation.grader: expected one grader, or several "
            "comma-separated of trlvr, authors, authors-paper, got 'verl'",
        ),
        (
            "n: 2, grader: authors-paper}",
            "n: 2, grader: 'trlvr,authors-paper'}",
            "selection.grader: expected one "
            "grader of trlvr, authors, authors-paper, got 'trlvr,authors-paper'",
        ),
        (
            "grader: authors-paper}\nseeds",
            "grader: verl}\nseeds",
            "variants.grpo (with train:): grader: must be one "
            "of ('trlvr', 'authors', 'authors-paper') (got 'verl')",
        ),
    ):
        study.write_text(STUDY.replace(old, new, 1))
        assert main(["study", "plan", str(study)]) == 2
        assert f"trlvr study: error: study {study}: {where}" in _one_line_error(capsys)


@needs_paper
@pytest.mark.slow  # two checkpoints evaluated (~4 s)
def test_select_computes_its_metric_with_the_grader_and_records_it(pair, tmp_path, capsys):
    import shutil

    run = tmp_path / "run"
    for step in (1, 2):
        shutil.copytree(pair / "senior", run / f"checkpoint-{step}")
    (run / "trlvr_run.json").write_text(
        json.dumps({"tandem": {"senior": str(pair / "senior"), "junior": str(pair / "junior"), "holdout": 0}})
    )
    argv = [
        "select",
        str(run),
        "--val",
        str(pair / "d.jsonl"),
        "--metric",
        "solo/pass@1",
        "--n",
        "1",
        "--max-new-tokens",
        "2",
        "--no-progress",
        "--grader",
        "authors-paper",
    ]
    assert main(argv) == 0
    assert capsys.readouterr().out.splitlines()[0].endswith("validation problems, grader authors-paper")
    assert json.loads((run / "selected.json").read_text())["grader"] == "authors-paper"
    for step in (1, 2):
        config = json.loads((run / "select" / "d" / f"step-{step}" / "results.json").read_text())["config"]
        assert config["grader"] == "authors-paper" and config["graders"] == ["authors-paper"]
    assert main([*argv[:-1], "verl"]) == 2
    assert "argument --grader: invalid choice: 'verl'" in _one_line_error(capsys)


def test_the_report_shows_each_other_graders_metrics_beside_the_first(tmp_path):
    from trlvr.eval.report import metrics_table, settings_rows

    entry = {"value": 0.75, "ci_low": 0.5, "ci_high": 1.0, "num_problems": 4}
    other = {**entry, "value": 0.25}
    res = {
        "config": {"grading": "boxed", "grader": "trlvr", "graders": ["trlvr", "authors"]},
        "benchmarks": {"b": {"metrics": {"solo/pass@1": entry, "solo/mean_tokens": {**entry, "value": 3.0}}}},
        "macro": {"metrics": {"solo/pass@1": entry}},
        "by_grader": {
            "authors": {
                "benchmarks": {"b": {"metrics": {"solo/pass@1": other}}},
                "macro": {"metrics": {"solo/pass@1": other}},
            }
        },
    }
    table = metrics_table(res)
    rows = {r["name"]: r["cells"] for r in table["rows"]}
    assert table["cols"] == ["b", "macro"]
    assert rows["solo/pass@1"] == ["75.00 [50.00, 100.00]"] * 2
    assert rows["solo/pass@1 (grader authors)"] == ["25.00 [50.00, 100.00]"] * 2
    assert "solo/mean_tokens (grader authors)" not in rows
    assert dict(settings_rows(res["config"]))["grader"] == "trlvr (also graded by authors: the rows named so)"
    assert (
        dict(settings_rows({"grading": "boxed"}))["grader"] == "trlvr"
    )  # written before graders were recorded


@needs_paper
def test_a_math_reward_passed_as_score_fn_names_its_own_grader(tmp_path):
    from helpers import evaluate_models, tiny_model, tiny_tokenizer, toy_problems

    from trlvr.rewards import MathReward, math_reward

    tok = tiny_tokenizer()
    senior, junior = (tiny_model("qwen3", len(tok), seed, hidden=16, layers=1) for seed in (0, 1))
    kw = {"suite": ("solo",), "n": 1, "ks": (1,), "max_new_tokens": 2, "progress": False}
    res = evaluate_models(
        senior,
        junior,
        tok,
        {"b": toy_problems(2)},
        tmp_path / "a",
        score_fn=MathReward(grader="authors-paper"),
        graders=("authors-paper", "trlvr"),
        **kw,
    )
    assert res["config"]["graders"] == ["authors-paper", "trlvr"] and set(res["by_grader"]) == {"trlvr"}
    res = evaluate_models(
        senior,
        junior,
        tok,
        {"b": toy_problems(2)},
        tmp_path / "b",
        score_fn=MathReward(grader="authors-paper"),
        **kw,
    )
    assert res["config"]["grader"] == "authors-paper" and res["config"]["graders"] == ["authors-paper"]
    with pytest.raises(
        UserError, match="score_fn grades with grader 'trlvr' but graders names 'authors-paper' first"
    ):
        evaluate_models(
            senior,
            junior,
            tok,
            {"b": toy_problems(2)},
            tmp_path / "c",
            score_fn=math_reward,
            graders=("authors-paper",),
            **kw,
        )
    with pytest.raises(UserError, match="a caller's own score_fn grades alone"):
        evaluate_models(
            senior,
            junior,
            tok,
            {"b": toy_problems(2)},
            tmp_path / "d",
            graders=("trlvr", "authors-paper"),
            score_fn=lambda texts, golds: [0.0] * len(texts),
            **kw,
        )
    res = evaluate_models(
        senior,
        junior,
        tok,
        {"b": toy_problems(2)},
        tmp_path / "e",
        score_fn=lambda texts, golds: [0.0] * len(texts),
        **kw,
    )
    assert res["config"]["grading"].startswith("custom:") and "grader" not in res["config"]


def test_a_folder_written_before_graders_were_recorded_resumes_as_trlvrs(pair, tmp_path):
    out = tmp_path / "eval"
    assert main(_eval_argv(pair, out)) == 0
    before = _rows(out)
    fp = json.loads((out / "fingerprint.json").read_text())
    del fp["scoring"]["grader"]  # as an older trlvr wrote it
    (out / "fingerprint.json").write_text(json.dumps(fp))
    for name in ("config.json", "results.json"):
        data = json.loads((out / name).read_text())
        config = data.get("config", data)
        del config["grader"], config["graders"]
        (out / name).write_text(json.dumps(data))
    assert main(_eval_argv(pair, out)) == 0  # resumed, not refused: nothing generated again
    assert _rows(out) == before
    assert json.loads((out / "results.json").read_text())["config"]["grader"] == "trlvr"


# ---- compare and seed groups pair every grader ------------------------------------------------------------


def _graded_rows(first: list[float], other: list[float]) -> list[dict]:
    """One solo and one handoff sample per problem: `reward` from the first grader, `grader_rewards` the other's."""
    return [
        {
            "benchmark": "b",
            "protocol": proto,
            "problem_id": f"p{i}",
            "sample_idx": 0,
            "text": "",
            "answer": "1",
            "num_tokens": 3,
            "finish_reason": "eos",
            "senior_share": 1.0,
            "reward": x,
            "grader_rewards": {"authors-paper": y},
        }
        for i, (x, y) in enumerate(zip(first, other, strict=True))
        for proto in ("solo", "handoff")
    ]


def test_per_problem_json_carries_each_other_grader_and_compare_pairs_it(tmp_path):
    from trlvr.eval.aggregate import compare_tables
    from trlvr.eval.runner import write_results

    config = {"ks": [1], "graders": ["trlvr", "authors-paper"], "seed": 0}
    write_results(tmp_path / "A", _graded_rows([1.0] * 8, [0.0] * 8), config, num_resamples=50)
    write_results(tmp_path / "B", _graded_rows([1.0] * 8, [1.0] * 4 + [0.0] * 4), config, num_resamples=50)
    ta, tb = (json.loads((tmp_path / d / "per_problem.json").read_text()) for d in ("A", "B"))
    assert ta["b"]["solo/pass@1"] == {f"p{i}": 1.0 for i in range(8)}  # the first grader's keys, as before
    assert ta["b"]["solo/pass@1 (grader authors-paper)"] == {f"p{i}": 0.0 for i in range(8)}
    assert "solo/mean_tokens (grader authors-paper)" not in ta["b"]  # only what follows from the reward
    res = json.loads((tmp_path / "A" / "results.json").read_text())
    assert not [
        m for m in res["macro"]["metrics"] if "(grader" in m
    ]  # results.json's metrics: the first grader's
    cmp = compare_tables(ta, tb, num_resamples=50)
    assert cmp["macro"]["solo/pass@1"]["diff"] == 0.0
    assert cmp["macro"]["solo/pass@1 (grader authors-paper)"]["diff"] == pytest.approx(0.5)
    assert cmp["macro"]["handoff/pass@1 (grader authors-paper)"]["diff"] == pytest.approx(0.5)
    assert (
        "handoff_ratio/pass@1 (grader authors-paper)" in cmp["macro"]
    )  # B's ratio (A's solo is 0: no value)
    names = list(cmp["macro"])
    assert names.index("handoff/pass@1") < names.index(
        "solo/pass@1 (grader authors-paper)"
    )  # the first grader first
    # an older per_problem.json (no other grader) is still read: the first grader paired, the others named skipped
    old = {b: {m: v for m, v in t.items() if "(grader" not in m} for b, t in ta.items()}
    cmp = compare_tables(old, tb, num_resamples=50)
    assert {m for m in cmp["macro"] if "pass@" in m} == {
        "solo/pass@1",
        "handoff/pass@1",
        "handoff_ratio/pass@1",
    }
    assert "solo/pass@1 (grader authors-paper)" in cmp["skipped"]


def test_seed_groups_summarise_and_pair_each_other_grader(tmp_path):
    from trlvr.eval.groups import compare_groups, summarize_group
    from trlvr.eval.runner import write_results

    config = {"ks": [1], "graders": ["trlvr", "authors-paper"], "seed": 0}
    for group, other in (("A", [0.0] * 8), ("B", [1.0] * 6 + [0.0] * 2)):
        for s in (0, 1):
            write_results(
                tmp_path / group / f"seed-{s}", _graded_rows([1.0] * 8, other), config, num_resamples=50
            )
    tables = {
        g: {s: json.loads((tmp_path / g / f"seed-{s}" / "per_problem.json").read_text()) for s in (0, 1)}
        for g in ("A", "B")
    }
    summary = summarize_group(tables["B"], num_resamples=50)
    assert summary["metrics"]["solo/pass@1 (grader authors-paper)"]["value"] == pytest.approx(0.75)
    cmp = compare_groups(tables["A"], tables["B"], num_resamples=50)
    assert cmp["macro"]["solo/pass@1 (grader authors-paper)"]["diff"] == pytest.approx(0.75)
    assert cmp["macro"]["solo/pass@1"]["diff"] == 0.0


def test_the_compare_table_names_a_metric_under_another_grader_whole():
    from trlvr.cli.compare_cmd import format_table

    e = {
        "a": 0.5,
        "b": 0.75,
        "diff": 0.25,
        "ci_low": 0.1,
        "ci_high": 0.4,
        "p_value": 0.01,
        "excludes_zero": True,
    }
    name = "handoff_ratio/pass@4 (grader authors-paper)"
    lines = format_table({"macro": {"solo/pass@1": e, name: e}, "benchmarks": {}}).splitlines()
    assert any(name in ln for ln in lines)
    assert len({ln.index(" 0.010") for ln in lines[1:]}) == 1  # the columns line up


def test_a_study_plans_where_a_grader_is_missing_and_its_evaluation_refuses_there(
    pair, tmp_path, capsys, monkeypatch
):
    """paper-table2 grades with authors-paper too: its plan is made on any machine (the grader runs where the
    evaluation runs), while `trlvr eval` there refuses in one line before anything is loaded or written."""
    from trlvr.rewards import graders

    monkeypatch.setattr(
        graders, "missing_for", lambda name: None if name == "trlvr" else "pylatexenc, which is not installed"
    )
    assert main(["study", "plan", "paper-table2", "--out", str(tmp_path / "plan")]) == 0
    capsys.readouterr()
    out = tmp_path / "e"
    assert main(_eval_argv(pair, out, "--grader", "trlvr,authors-paper")) == 2
    assert _one_line_error(capsys).endswith(
        "--grader: grader 'authors-paper' needs pylatexenc, which is not installed: pip install 'trlvr[authors]'; "
        "nothing was loaded or written"
    )
    assert not out.exists()


def test_a_run_without_a_dataset_hashes_no_folder(tmp_path, monkeypatch):
    """`dataset: ""` (a library caller's TandemConfig) has no data to hash; before, Path("") read as the
    current folder and the record hashed the whole checkout (.venv included) on every run_record."""
    from trlvr.training.run_record import data_fingerprint

    monkeypatch.chdir(tmp_path)
    (tmp_path / "a.txt").write_text("x")
    assert data_fingerprint("")["sha256"] is None
    assert data_fingerprint(".")["sha256"] is not None  # a folder named on purpose is still hashed

"""Issue 44, mechanisms 1 and 3 for `trlvr eval` and `trlvr select`: an evaluation writes every file its
readers open (`trlvr.rundir.EVAL_OUTPUTS`) or fails in one line, a rerun writes a deleted one again, and
`select` refuses what it cannot use before it evaluates its first checkpoint."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from helpers import cli_errors

from trlvr.cli.main import main


@pytest.fixture(scope="module")
def toy(tmp_path_factory):
    from helpers import save_tiny_models, write_sum_problems

    tmp = tmp_path_factory.mktemp("outcome")
    save_tiny_models(tmp, {"senior": 0, "other": 2, "junior": 1})
    write_sum_problems(tmp / "d.jsonl", 2)
    run = tmp / "run"
    for step, model in ((1, "senior"), (2, "other")):
        shutil.copytree(tmp / model, run / f"checkpoint-{step}")
    (run / "trlvr_run.json").write_text(
        json.dumps({"tandem": {"senior": str(tmp / "senior"), "junior": str(tmp / "junior"), "holdout": 0}})
    )
    return tmp


def eval_argv(t: Path, out: Path, *extra: str) -> list[str]:
    return [
        "eval",
        "--senior",
        f"{t}/senior",
        "--junior",
        f"{t}/junior",
        "--data",
        f"toy={t}/d.jsonl",
        "--n",
        "1",
        "--k",
        "1",
        "--suite",
        "solo,handoff",
        "--max-new-tokens",
        "2",
        "--no-progress",
        "--out",
        str(out),
        *extra,
    ]


errors = cli_errors


def test_a_deleted_per_problem_table_is_written_again_by_a_rerun(toy, tmp_path, capsys):
    """Before: the rerun found fingerprint, config and results unchanged and reported the folder as done,
    so compare and groups kept failing on the missing per_problem.json."""
    out = tmp_path / "e"
    assert main(eval_argv(toy, out)) == 0
    table = (out / "per_problem.json").read_bytes()
    (out / "per_problem.json").unlink()
    assert main(eval_argv(toy, out)) == 0
    assert (out / "per_problem.json").read_bytes() == table
    assert main(["compare", str(out), str(out), "--out", str(tmp_path / "c"), "--resamples", "10"]) == 0


def test_an_evaluation_that_did_not_write_a_readers_file_fails_in_one_line(
    toy, tmp_path, monkeypatch, capsys
):
    """Driven into "did nothing": the per-problem table is never written. The command used to print its
    summary and exit 0; now the postcondition names the missing file."""
    import trlvr.eval.runner as runner

    real = runner.write_json

    def skip_table(path, obj, **kw):
        if Path(path).name != "per_problem.json":
            real(path, obj, **kw)

    monkeypatch.setattr(runner, "write_json", skip_table)
    out = tmp_path / "e"
    assert main(eval_argv(toy, out)) == 2
    [line] = errors(capsys.readouterr().err)
    assert "finished incomplete (no per_problem.json)" in line, line


def test_eval_dry_run_for_this_machine_refuses_a_backend_that_is_not_installed(toy, tmp_path, capsys):
    import importlib.util

    if importlib.util.find_spec("vllm") is not None:
        pytest.skip("vLLM is installed here")
    assert main(eval_argv(toy, tmp_path / "e", "--dry-run", "--backend", "vllm")) == 2
    [line] = errors(capsys.readouterr().err)
    assert "backend vllm needs vllm, which is not installed here" in line, line
    # planned for another machine's GPU, the dry run needs no engine here
    assert main(eval_argv(toy, tmp_path / "e", "--dry-run", "--backend", "vllm", "--gpu-memory", "80GB")) == 0
    assert not (tmp_path / "e").exists()


def select_argv(run: Path, toy: Path, metric: str = "solo/pass@1") -> list[str]:
    return [
        "select",
        str(run),
        "--val",
        f"{toy}/d.jsonl",
        "--metric",
        metric,
        "--n",
        "1",
        "--max-new-tokens",
        "2",
        "--no-progress",
    ]


def test_select_refuses_a_metric_of_the_junior_alone(toy, tmp_path, capsys):
    run = tmp_path / "run"
    shutil.copytree(toy / "run", run)
    assert main(select_argv(run, toy, "junior/pass@1")) == 2
    [line] = errors(capsys.readouterr().err)
    assert "measures the junior alone" in line, line
    assert not (run / "select").exists() and not (run / "selected.json").exists()


def test_select_refuses_a_half_written_checkpoint_before_evaluating_any(toy, tmp_path, capsys):
    """A kill during a save left checkpoint-2's weights cut short. Before: checkpoint-1 was evaluated
    (RUN/select/... written), then the load of checkpoint-2 failed."""
    run = tmp_path / "run"
    shutil.copytree(toy / "run", run)
    weights = run / "checkpoint-2" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 3])
    assert main(select_argv(run, toy)) == 2
    assert not (run / "select").exists() and not (run / "selected.json").exists()  # nothing evaluated first
    [line] = errors(capsys.readouterr().err)
    assert "checkpoint-2" in line and "does not load" in line, line

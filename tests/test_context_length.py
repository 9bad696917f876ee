"""Compatibility from configs covers context length: each model's context (its config's
max_position_embeddings, read without the weights) against the longest prompt plus the completion budget,
checked before any weights load, in `trlvr train` and `trlvr eval` and their dry runs, in one line naming
the model and the numbers. Before: the rollout passed the toy models' 256 positions mid-run (an index
error in the position embeddings, a traceback)."""

from __future__ import annotations

import json

import pytest

from trlvr.cli.main import main as cli
from trlvr.engine.capabilities import Plan, check_capabilities
from trlvr.errors import UserError
from trlvr.models import context_length
from trlvr.toy.task import make_splits
from trlvr.toy.world import ASSETS_DIR, _rows, _write_jsonl

SENIOR, JUNIOR = ASSETS_DIR / "senior", ASSETS_DIR / "junior"


def _no_weights(monkeypatch):
    """Any weight load fails the test: the check must come first."""
    import trlvr.models as models

    def refuse(*a, **k):
        raise AssertionError("weights loaded before the context check")

    monkeypatch.setattr(models, "load_causal_lm", refuse)
    for module in ("trlvr.training.build", "trlvr.eval.api", "trlvr.eval.partners", "trlvr.team"):
        mod = __import__(module, fromlist=["x"])
        for name in ("load_causal_lm", "load_model_or_adapter"):
            if hasattr(mod, name):
                monkeypatch.setattr(mod, name, refuse)


def test_the_context_is_read_from_the_config():
    assert (
        context_length(SENIOR)
        == json.loads((SENIOR / "config.json").read_text())["max_position_embeddings"]
        == 256
    )


def test_the_capability_check_names_model_and_numbers():
    plan = Plan("train", "lockstep", contexts=(("senior s", 256, 40, 300),))
    with pytest.raises(
        UserError,
        match=r"^max_completion_length: senior s reads at most 256 positions "
        r"\(max_position_embeddings in its config\), and the longest prompt \(40 "
        r"tokens\) plus the completion budget \(300 tokens\) is 340; ",
    ):
        check_capabilities(plan)
    check_capabilities(Plan("train", "lockstep", contexts=(("senior s", 256, 40, 216),)))  # exactly fits


@pytest.fixture
def data(tmp_path):
    path = tmp_path / "d.jsonl"
    _write_jsonl(path, _rows(make_splits(64, 8, seed=0)[1]))
    return path


def _train(tmp_path, data, budget, *extra):
    return [
        "train",
        "--config",
        "toy",
        "--holdout",
        "0",
        "--senior",
        str(SENIOR),
        "--junior",
        str(JUNIOR),
        "--dataset",
        str(data),
        "--max_steps",
        "1",
        "--per_device_train_batch_size",
        "8",
        "--num_generations",
        "4",
        "--max_completion_length",
        str(budget),
        "--use_cpu",
        "true",
        "--output_dir",
        str(tmp_path / "run"),
        *extra,
    ]


@pytest.mark.parametrize("dry", [True, False])
def test_train_refuses_a_budget_past_the_context_before_weights_load(
    tmp_path, data, capsys, monkeypatch, dry
):
    _no_weights(monkeypatch)
    assert cli(_train(tmp_path, data, 300, *(["--dry-run"] if dry else []))) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert f"max_completion_length: senior {SENIOR} reads at most 256 positions" in err
    assert "plus the completion budget (300 tokens)" in err
    assert not (tmp_path / "run").exists()


def test_train_dry_run_passes_a_budget_that_fits(tmp_path, data, capsys):
    assert cli(_train(tmp_path, data, 64, "--dry-run")) == 0, capsys.readouterr().err


def test_max_prompt_length_bounds_the_prompt_without_reading_it(tmp_path, data, capsys, monkeypatch):
    """With max_prompt_length the longest prompt is at most it: a budget that fits beside it passes."""
    _no_weights(monkeypatch)
    assert cli(_train(tmp_path, data, 200, "--max_prompt_length", "50", "--dry-run")) == 0, (
        capsys.readouterr().err
    )


def _eval(tmp_path, data, *extra):
    return [
        "eval",
        "--senior",
        str(SENIOR),
        "--junior",
        str(JUNIOR),
        "--data",
        f"toy={data}",
        "--limit",
        "2",
        "--n",
        "1",
        "--k",
        "1",
        "--suite",
        "solo",
        "--dtype",
        "float32",
        "--out",
        str(tmp_path / "eval"),
        "--no-progress",
        *extra,
    ]


@pytest.mark.parametrize("dry", [True, False])
@pytest.mark.parametrize("context", ["0", "4096"])
def test_eval_refuses_a_budget_past_the_context_before_weights_load(
    tmp_path, data, capsys, monkeypatch, dry, context
):
    """A flat budget (--context-length 0) or a context larger than the models' lets a sequence pass them."""
    _no_weights(monkeypatch)
    argv = _eval(
        tmp_path,
        data,
        "--max-new-tokens",
        "400",
        "--context-length",
        context,
        *(["--dry-run"] if dry else []),
    )
    assert cli(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert f"--max-new-tokens: --senior {SENIOR} reads at most 256 positions" in err, err
    assert not (tmp_path / "eval").exists()


def test_eval_with_the_models_own_context_is_never_refused(tmp_path, data, capsys):
    """ "auto" (the default) takes the budget rule min(max_new_tokens, context - prompt - 8): it fits."""
    assert cli(_eval(tmp_path, data, "--max-new-tokens", "400", "--dry-run")) == 0, capsys.readouterr().err

"""Training you can trust, through the real `trlvr train` entry point on the shipped toy models:
NaN stops the run, runs never mix, resume takes the newest complete checkpoint, held-out problems
stay out, seeds get their own directories."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from helpers import copy_toy_pair, toy_run_argv, toy_train_argv

from trlvr.cli.main import main as cli

SMALL = [
    "--per_device_train_batch_size",
    "16",
    "--num_generations",
    "4",
    "--max_completion_length",
    "24",
    "--use_cpu",
    "true",
]


@pytest.fixture
def toy(tmp_path):
    return copy_toy_pair(tmp_path, 120)


def train(toy, *extra):
    return cli(toy_train_argv(toy, *SMALL, *extra))


def test_nan_weights_stop_the_run_without_a_final_model(toy, capsys):
    from safetensors.torch import load_file, save_file

    path = toy / "senior" / "model.safetensors"
    weights = load_file(path)
    name = next(k for k in weights if k.endswith("q_proj.weight"))
    weights[name] = torch.full_like(weights[name], float("nan"))
    save_file(weights, path, metadata={"format": "pt"})
    assert train(toy, "--max_steps", "3") == 2
    err = capsys.readouterr().err
    assert "step 1: loss = nan" in err and "stopped without saving" in err
    assert not (toy / "run" / "final").exists() and not list((toy / "run").glob("checkpoint-*"))


def test_resume_with_other_settings_is_refused_listing_the_differences(toy_run, capsys):
    # toy_run: a run finished at step 2 (conftest)
    assert cli(toy_run_argv(toy_run, "--max_steps", "3", "--resume", "--p", "0.3", "--arm", "grpo")) == 2
    err = capsys.readouterr().err
    assert "holds a different run" in err and "p: 0.5 -> 0.3" in err and "arm: 'tandem' -> 'grpo'" in err
    assert (
        cli(toy_run_argv(toy_run, "--max_steps", "3")) == 2
    )  # same run without --resume: refused, would overwrite
    assert "pass --resume to continue it" in capsys.readouterr().err


def test_resume_skips_a_half_written_checkpoint(toy_run, capsys):
    toy = toy_run  # a finished 2-step run, a checkpoint each step (conftest)
    newest = toy / "run" / "checkpoint-2" / "model.safetensors"
    newest.write_bytes(newest.read_bytes()[: newest.stat().st_size // 3])  # a kill during the save...
    shutil.rmtree(toy / "run" / "final")  # ...so final/ was never written
    capsys.readouterr()
    assert cli(toy_run_argv(toy, "--max_steps", "2", "--resume")) == 0
    err = capsys.readouterr().err
    assert "skipping checkpoint-2 (model.safetensors does not load" in err
    assert "resuming from" in err and err.split("resuming from")[1].split()[0].endswith("checkpoint-1")
    state = json.loads((toy / "run" / "final" / "trainer_state.json").read_text())
    assert state["global_step"] == 2


def test_holdout_problems_never_reach_training(toy):
    from trlvr.config import load_run_config
    from trlvr.training.build import load_training_problems

    tandem, _ = load_run_config(
        "toy",
        {
            "senior": str(toy / "senior"),
            "junior": str(toy / "junior"),
            "dataset": str(toy / "train.jsonl"),
            "holdout": 20,
        },
    )
    train_set, held = load_training_problems(tandem)
    assert len(held) == 20 and len(train_set) == 100
    assert not {p.problem for p in held} & {p.problem for p in train_set}
    assert train(toy, "--max_steps", "1", "--holdout", "20") == 0
    from trlvr.data import load_problems

    written = load_problems(str(toy / "run" / "holdout.jsonl"))
    assert [p.problem for p in written] == [p.problem for p in held]
    assert json.loads((toy / "run" / "trlvr_run.json").read_text())["tandem"]["holdout"] == 20


def test_seeds_get_their_own_runs(toy):
    assert train(toy, "--max_steps", "1", "--seeds", "3,4") == 0
    for s in (3, 4):
        record = json.loads((toy / "run" / f"seed-{s}" / "trlvr_run.json").read_text())
        assert record["grpo"]["seed"] == s and (toy / "run" / f"seed-{s}" / "final" / "config.json").is_file()


def test_p_one_runs_no_junior(tokenizer):
    """Word schedule at p = 1: every token is the senior's and the junior never runs (no model needed)."""
    from helpers import tiny_model

    from trlvr.engine import Sampling, SoloSchedule, TandemGenerator, WordSchedule

    senior = tiny_model("qwen3", len(tokenizer), seed=0)
    gen = TandemGenerator(senior, None, tokenizer)
    prompts = [tokenizer.encode("The cat sat"), tokenizer.encode("12 plus")]
    out = gen.generate(prompts, WordSchedule(p=1.0), Sampling(12, seed=1))
    solo = gen.generate(prompts, SoloSchedule("senior"), Sampling(12, seed=1))
    assert out.junior_logprob is None and all(a == 1 for row in out.authors for a in row)
    assert out.completion_ids == solo.completion_ids


def test_console_is_one_bar_and_a_few_lines(toy, capfd):
    """A training run prints its progress bar and trlvr's own lines only: no per-step metrics dict,
    no deprecation warnings, no library chatter (issue 10 item 7); the metrics go to files."""
    assert train(toy, "--max_steps", "3") == 0
    out, err = capfd.readouterr()
    text = out + err
    assert "deprecated" not in text.lower() and "Warning" not in text
    assert "{'loss'" not in text and "'grad_norm'" not in text  # TRL's printer of the raw log dict is off
    lines = [
        line for line in text.replace("\r", "\n").splitlines() if line.strip() and "train tandem" not in line
    ]
    assert all(line.startswith("[trlvr]") for line in lines), lines
    assert len(lines) <= 3, lines
    rows = [json.loads(line) for line in (toy / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows if "loss" in r] == [1, 2, 3]


def test_schedule_registry_is_what_configs_accept():
    from trlvr.config import SCHEDULES
    from trlvr.engine.schedules import SCHEDULES as REGISTERED
    from trlvr.engine.schedules import Schedule, register_schedule

    assert set(SCHEDULES) | {"solo"} == set(REGISTERED)
    for name in SCHEDULES:
        assert isinstance(Schedule.from_config(name), REGISTERED[name])
    with pytest.raises(ValueError, match="unknown schedule 'paragraph'; choose one of"):
        Schedule.from_config("paragraph")
    with pytest.raises(ValueError, match="schedule 'word' is already registered by WordSchedule"):
        register_schedule("word")(type("Other", (Schedule,), {}))


def test_engine_options_reach_training_and_eval(toy, monkeypatch):
    """`decode` / `junior_device` in the run config and `--decode` / `--junior-device` in eval reach the
    engine (static caches and the split-device sampler, both equal to the default path on CPU)."""
    from trlvr.engine import generator as G

    seen = []
    real_init = G.TandemGenerator.__init__

    def spy(self, *a, **kw):
        seen.append(
            {"decode": kw.get("options", G.DecodeOptions()).decode, "junior_device": kw.get("junior_device")}
        )
        real_init(self, *a, **kw)

    monkeypatch.setattr(G.TandemGenerator, "__init__", spy)
    assert train(toy, "--max_steps", "1", "--decode", "static", "--junior_device", "cpu") == 0
    assert seen and all(s == {"decode": "static", "junior_device": "cpu"} for s in seen)
    assert json.loads((toy / "run" / "trlvr_run.json").read_text())["tandem"]["decode"] == "static"
    seen.clear()
    from trlvr.toy.task import make_splits
    from trlvr.toy.world import _rows, _write_jsonl

    _write_jsonl(toy / "test.jsonl", _rows(make_splits(8, 4, seed=0)[1]))
    argv = [
        "eval",
        "--senior",
        str(toy / "run" / "final"),
        "--junior",
        str(toy / "junior"),
        "--data",
        f"toy={toy / 'test.jsonl'}",
        "--limit",
        "2",
        "--n",
        "1",
        "--k",
        "1",
        "--suite",
        "solo,handoff",
        "--max-new-tokens",
        "16",
        "--out",
        str(toy / "eval"),
        "--no-progress",
        "--decode",
        "static",
        "--junior-device",
        "cpu",
    ]
    assert cli(argv) == 0
    assert seen == [{"decode": "static", "junior_device": "cpu"}]


def test_metrics_file_reads_as_one_run_after_a_resume(tmp_path):
    """On resume from step 3, rows the interrupted run wrote after step 3 (and a torn last line) go."""
    from types import SimpleNamespace

    from trlvr.training.console import METRICS_FILE, MetricsFile

    path = tmp_path / METRICS_FILE
    path.write_text(
        "".join(json.dumps({"step": s, "loss": 0.1 * s}) + "\n" for s in range(1, 6)) + '{"step": 6, "lo'
    )
    MetricsFile(tmp_path).on_train_begin(
        None, SimpleNamespace(is_world_process_zero=True, global_step=3), None
    )
    assert [json.loads(line)["step"] for line in path.read_text().splitlines()] == [1, 2, 3]


def test_a_tolerated_non_finite_step_is_never_checkpointed():
    """With nonfinite_patience > 1 the run goes on through a NaN step, but that step's checkpoint is skipped."""
    from types import SimpleNamespace

    from transformers import TrainerControl

    from trlvr.training.guard import NonFiniteError, NonFiniteGuard

    guard, state = NonFiniteGuard(patience=2), SimpleNamespace(global_step=4)
    control = TrainerControl(should_save=True)
    guard.on_log(None, state, control, logs={"loss": float("nan"), "grad_norm": 1.0})
    assert control.should_save is False  # tolerated, not saved
    control = TrainerControl(should_save=True)
    guard.on_log(None, state, control, logs={"loss": 0.5, "grad_norm": 1.0})
    assert control.should_save is True and guard.bad_in_a_row == 0
    guard.on_log(None, state, control, logs={"loss": float("nan")})
    with pytest.raises(NonFiniteError, match=r"step 4: grad_norm = inf \(2 logged step\(s\) in a row"):
        guard.on_log(None, state, control, logs={"grad_norm": float("inf")})


def test_eval_grading_flag_is_named_and_part_of_the_fingerprint(toy, capsys):
    """`--grading boxed_or_tail` is the lenient mode on the command line: named in results.json, and an
    eval directory graded one way refuses to be resumed the other way."""
    from trlvr.toy.task import make_splits
    from trlvr.toy.world import _rows, _write_jsonl

    _write_jsonl(toy / "test.jsonl", _rows(make_splits(8, 4, seed=0)[1]))
    out = toy / "eval"
    base = [
        "eval",
        "--senior",
        str(toy / "senior"),
        "--junior",
        str(toy / "junior"),
        "--data",
        f"toy={toy / 'test.jsonl'}",
        "--limit",
        "2",
        "--n",
        "1",
        "--k",
        "1",
        "--suite",
        "solo",
        "--max-new-tokens",
        "16",
        "--out",
        str(out),
        "--no-progress",
    ]
    assert cli([*base, "--grading", "boxed_or_tail"]) == 0
    res = json.loads((out / "results.json").read_text())
    assert res["config"]["grading"] == "boxed_or_tail"
    capsys.readouterr()
    assert cli(base) == 2  # default grading: boxed
    assert "grading" in capsys.readouterr().err

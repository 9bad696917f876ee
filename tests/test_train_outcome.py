"""Issue 44, mechanism 1 for `trlvr train`: a run checks what it promises before it says done
(`trlvr.training.run.check_trained`, `trlvr.rundir.resume_plan`): it reached its step target, its
rollouts gave the senior tokens to learn from, and a `--resume` of a finished run changes nothing.
Each test drives the command into a "did nothing" state."""

from __future__ import annotations

import hashlib
import json
import shutil

import pytest
from helpers import cli_errors, copy_toy_pair, toy_run_argv, toy_train_argv
from transformers import TrainerCallback

from trlvr.cli.main import main as cli
from trlvr.toy.task import make_splits
from trlvr.toy.world import _rows, _write_jsonl

SMALL = [
    "--per_device_train_batch_size",
    "8",
    "--num_generations",
    "4",
    "--max_completion_length",
    "8",
    "--use_cpu",
    "true",
    "--save_steps",
    "1",
]


@pytest.fixture
def toy(tmp_path):
    return copy_toy_pair(tmp_path, 40)


def argv(toy, *extra):
    return toy_train_argv(toy, *SMALL, *extra)


def tree(root) -> dict[str, str]:
    """path -> sha256 of every file under root (the lock files aside: a command holds them while it runs)."""
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file() and not p.name.startswith(".train.lock")
    }


errors = cli_errors


def test_a_tandem_run_whose_senior_never_writes_is_refused_without_a_final_model(toy, capsys):
    """p = 1e-300: the word schedule hands the junior every token; the run used to finish, write final/
    (the untouched senior) and exit 0. Now: exit 2, one line, no final/."""
    assert cli(argv(toy, "--max_steps", "1", "--p", "1e-300")) == 2
    [line] = errors(capsys.readouterr().err)
    assert "gave the senior a token" in line and "nothing was learned" in line, line
    assert not (toy / "run" / "final").exists()


def test_a_run_stopped_before_its_target_says_so_and_writes_no_final(toy, capsys):
    """A callback ends the trainer's loop after step 1 of 2 (as an early-stopping callback would): the run
    used to write final/ and exit 0 as if it had trained 2 steps."""
    from trlvr.config import parse_run_args
    from trlvr.errors import UserError
    from trlvr.training.run import train_and_save

    class StopAfterOne(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            control.should_training_stop = True

    tandem, grpo, _ = parse_run_args(argv(toy, "--max_steps", "2")[1:])
    with pytest.raises(UserError, match=r"training stopped at step 1 of 2 .*final/ was not written"):
        train_and_save(tandem, grpo, callbacks=[StopAfterOne()])
    assert not (toy / "run" / "final").exists()


def test_resume_of_a_finished_run_changes_nothing_and_a_smaller_target_is_refused(toy_run, capsys):
    toy = toy_run  # a finished 2-step run (conftest)
    before = tree(toy / "run")
    assert (
        cli(toy_run_argv(toy, "--max_steps", "2", "--resume")) == 0
    )  # used to retrain 0 steps and rewrite final/
    err = capsys.readouterr().err
    assert "finished at step 2: nothing to train" in err and "wrote" not in err, err
    assert tree(toy / "run") == before
    state = json.loads((toy / "run" / "final" / "trainer_state.json").read_text())
    assert state["global_step"] == 2


def test_resume_of_a_finished_run_to_another_target_is_refused_and_changes_nothing(toy_run, capsys):
    """A finished run's final/ and checkpoints are never changed without --force (issue 44). Before:
    `--resume --max_steps 2` on a run finished at step 1 trained on from checkpoint-1 and replaced final/
    (a model of neither run: its learning-rate schedule was made for 1 step, then stretched to 2).
    Here the run finished at step 2 (conftest's `toy_run`) and is resumed to 3."""
    toy = toy_run
    before = tree(toy / "run")
    assert cli(toy_run_argv(toy, "--max_steps", "3", "--resume")) == 2
    [line] = errors(capsys.readouterr().err)
    assert f"--resume --max_steps 3: {toy / 'run'} finished at step 2" in line, line
    assert "new --output_dir" in line and "--force" in line, line
    assert tree(toy / "run") == before
    assert cli(toy_run_argv(toy, "--max_steps", "1", "--force")) == 0  # the fix the line names
    state = json.loads((toy / "run" / "final" / "trainer_state.json").read_text())
    assert state["global_step"] == 1


def test_resume_of_a_run_killed_after_its_last_checkpoint_writes_final_without_a_step_past_max_steps(
    toy_run, capsys
):
    """A kill after checkpoint-2 (max_steps 2) and before final/. Before: `--resume` trained a third
    step (global_step 3 of max_steps 2) and wrote that as final/."""
    toy, run = toy_run, toy_run / "run"
    kept = tree(run / "checkpoint-2")
    shutil.rmtree(run / "final")  # the kill
    assert cli(toy_run_argv(toy, "--max_steps", "2", "--resume")) == 0
    state = json.loads((run / "final" / "trainer_state.json").read_text())
    assert state["global_step"] == 2 and not (run / "checkpoint-3").exists()
    assert tree(run / "checkpoint-2") == kept
    assert (run / "final" / "model.safetensors").read_bytes() == (
        run / "checkpoint-2" / "model.safetensors"
    ).read_bytes()
    assert not (run / "final" / "optimizer.pt").exists()


def test_a_start_that_fails_before_its_first_checkpoint_leaves_no_record_behind(toy, capsys):
    """The trainer fails at its start (here a callback at on_train_begin; first found as TRL's ValueError
    for max_steps -1 on an epoch of no step, now refused before any model loads), after trlvr_run.json
    was written. The record of a run that never ran then made the next, valid, command into that folder
    refuse ("holds a different run"). Now the folder is as it was: absent."""
    from trlvr.config import parse_run_args
    from trlvr.training.run import train_and_save

    class FailsAtStart(TrainerCallback):
        def on_train_begin(self, args, state, control, **kwargs):
            assert (toy / "run" / "trlvr_run.json").is_file()  # the record is written by now
            raise RuntimeError("the trainer failed at its start")

    tandem, grpo, _ = parse_run_args(argv(toy, "--max_steps", "2", "--arm", "grpo")[1:])
    with pytest.raises(RuntimeError, match="failed at its start"):
        train_and_save(tandem, grpo, callbacks=[FailsAtStart()])
    assert not (toy / "run").exists()
    assert cli(argv(toy, "--max_steps", "1", "--p", "0.3")) == 0, capsys.readouterr().err


def test_an_epoch_that_holds_no_step_is_one_line_before_any_model_loads(toy, monkeypatch, capsys):
    """2 training problems, and one step draws 4 distinct prompts (per_device_train_batch_size 16 /
    num_generations 4): an epoch holds no step. Before: max_steps -1 was TRL's ValueError, a traceback
    ("args.max_steps must be set to a positive value if dataloader does not have a length"); max_steps 2
    loaded both models and ended with "training stopped at step 0 of 2". Now: one line naming the
    dataset, the counts and the flags, before a model loads or a file is written; and `--dry-run` says the
    same line (before, it said "config ok" for a run that could not take a step)."""
    from trlvr.team import Team

    def no_model(*a, **k):
        raise AssertionError("a model loaded before the dataset was checked")

    monkeypatch.setattr(Team, "load", no_model)  # the one place a pair's weights load
    _write_jsonl(toy / "two.jsonl", _rows(make_splits(40, 4, seed=0)[0])[:2])
    for steps, dry in (("-1", []), ("2", []), ("2", ["--dry-run"])):
        two = argv(toy, "--max_steps", steps, "--per_device_train_batch_size", "16", *dry)
        two[two.index("--dataset") + 1] = str(toy / "two.jsonl")
        assert cli(two) == 2
        err = capsys.readouterr().err
        [line] = errors(err)
        assert "Traceback" not in err and "AssertionError" not in err, err
        assert (
            f"dataset {toy / 'two.jsonl'}: 2 training problem(s), fewer than the 4 distinct prompts" in line
        ), line
        assert "an epoch holds no step" in line and "--per_device_train_batch_size" in line, line
        assert not (toy / "run").exists()


def test_a_training_step_through_the_library_warns_nothing_of_trlvr_s_own_making(toy_run):
    """Newcomer walk 3, finding 13: each step of the README's Python block warned "`is_gradient_checkpointing` is
    deprecated" (TRL's unwrap_model_for_generation, which the rollout calls, reads transformers' deprecated alias).
    One step of the library's training (conftest's toy run, resumed to step 3) now raises no FutureWarning."""
    import warnings

    from trlvr.config import parse_run_args
    from trlvr.training.run import train_and_save

    shutil.rmtree(toy_run / "run" / "final")  # killed before final/: a run to go on with
    tandem, grpo, _ = parse_run_args(toy_run_argv(toy_run, "--max_steps", "3")[1:])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        train_and_save(tandem, grpo, resume=True)
    assert not [str(w.message) for w in caught if issubclass(w.category, FutureWarning)]


def test_the_readme_s_library_step_with_gradient_checkpointing_warns_no_deprecation(tmp_path, monkeypatch):
    """Newcomer walk 3, finding 13: the README's Python block (TRL's default gradient_checkpointing=True) printed
    transformers' "`gradient_checkpointing_disable` / `_enable` is deprecated" at each step: TRL's unwrap for
    generation, which trlvr's rollout calls, uses the old names. One such step now raises no FutureWarning or
    DeprecationWarning from trlvr, TRL or transformers (the user's own GRPOConfig(...) is left out: TRL's default),
    nor TRL's notice that the rollout_func trlvr passes is experimental."""
    import warnings
    from pathlib import Path

    import transformers
    import trl
    from datasets import Dataset
    from trl import GRPOConfig

    import trlvr
    from trlvr import TandemConfig, TandemGRPOTrainer
    from trlvr.rewards import math_reward
    from trlvr.toy.task import generate_problems
    from trlvr.toy.world import ASSETS_DIR

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("TRL_EXPERIMENTAL_SILENCE", raising=False)  # as in a user's script
    problems = generate_problems(4, "train", seed=0)
    dataset = Dataset.from_list([{"prompt": p.text + "\n\n", "answer": str(p.answer)} for p in problems])
    args = GRPOConfig(
        output_dir="q",
        num_generations=4,
        per_device_train_batch_size=4,
        max_completion_length=8,
        max_steps=1,
        report_to="none",
        use_cpu=True,
        bf16=False,
        save_strategy="no",
    )
    assert args.gradient_checkpointing  # TRL's default, as in the README: the path that warned
    ours = tuple(str(Path(m.__file__).parent) for m in (trlvr, trl, transformers))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer = TandemGRPOTrainer(
            str(ASSETS_DIR / "senior"),
            str(ASSETS_DIR / "junior"),
            tandem=TandemConfig(schedule="word", p=0.5),
            args=args,
            reward_funcs=math_reward,
            train_dataset=dataset,
        )
        trainer.train()
    assert trainer.state.global_step == 1
    deprecated = [
        f"{w.filename}:{w.lineno}: {w.message}"
        for w in caught
        if issubclass(w.category, (FutureWarning, DeprecationWarning)) and w.filename.startswith(ours)
    ]
    assert not deprecated, deprecated
    assert not [
        w for w in caught if "You are using 'rollout_func'" in str(w.message)
    ]  # trlvr's, not the user's

"""Stateful property test over one training directory (issue 44, mechanism 2): Hypothesis drives
`trlvr train` (new, `--resume`, `--force`, another max_steps), a kill mid-step or mid-save, a resume after
a finished run, and `trlvr select` against one OUTPUT_DIR on the toy models. The states and transitions
are `trlvr.rundir.TrainState` / `resume_plan`. After every step:
    max_steps is never exceeded     no checkpoint-N past the largest accepted target; final/ is at the
                                    target of the run that wrote it
    a finished run stays            final/ and every checkpoint, byte for byte, unless --force set them
                                    aside (into replaced-*); a --resume to another target is refused
    resume takes the newest intact  the line "resuming from X" names the newest complete checkpoint
    one identity                    selected.json names a checkpoint of this run, present now
    resumes under changed settings  `--resume` with a TandemConfig field or a flag-only GRPOConfig field changed
                                    (`resume_changed`): refused in one line naming it, nothing changed
    a torn artifact is not trusted  any file of any checkpoint or final/ cut short (`tear`): the run is not
                                    finished while final/ is torn, resume never starts from a torn
                                    checkpoint, select and RUN@selected refuse a torn one in one line
A refusal is one line (exit 2) and changes nothing."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule
from transformers import TrainerCallback

from trlvr import artifacts, rundir
from trlvr.cli.main import main as cli
from trlvr.training.checkpoints import pick_checkpoint

SMALL = [
    "--per_device_train_batch_size",
    "4",
    "--num_generations",
    "4",
    "--max_completion_length",
    "4",
    "--use_cpu",
    "true",
    "--save_steps",
    "1",
    "--save_total_limit",
    "20",
]


@pytest.fixture(scope="module")
def toy(tmp_path_factory):
    from trlvr.toy.task import make_splits
    from trlvr.toy.world import ASSETS_DIR, _rows, _write_jsonl

    tmp = tmp_path_factory.mktemp("train-state")
    for name in ("senior", "junior"):
        shutil.copytree(ASSETS_DIR / name, tmp / name)
    _write_jsonl(tmp / "train.jsonl", _rows(make_splits(24, 4, seed=0)[0]))
    _write_jsonl(tmp / "val.jsonl", _rows(make_splits(24, 4, seed=0)[1])[:1])
    return tmp


def tree(root: Path, under: str = "") -> dict[str, str]:
    """path -> sha256 of the files under root/under (lock files aside)."""
    base = root / under
    if not base.exists():
        return {}
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(base.rglob("*"))
        if p.is_file() and not p.name.startswith(".train.lock")
    }


class Killed(Exception):
    pass


class KillAt(TrainerCallback):
    """A kill at `step`: mid-step (before that step's checkpoint) or mid-save (its weights cut short)."""

    def __init__(self, step: int, where: str, out: Path):
        self.step, self.where, self.out = step, where, out

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step == self.step and self.where == "mid-step":
            raise Killed

    def on_save(self, args, state, control, **kwargs):
        if state.global_step == self.step and self.where == "mid-save":
            weights = rundir.checkpoint_dir(self.out, self.step) / "model.safetensors"
            weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 3])
            raise Killed


# settings of a run's identity, changed on a resume: a TandemConfig field, and GRPOConfig fields the toy
# config does not set (given only as a flag)
CHANGED = [("--p", "0.3"), ("--learning_rate", "0.001"), ("--adam_beta2", "0.9"), ("--max_grad_norm", "0.5")]


class TrainDir(RuleBasedStateMachine):
    toy: Path = None
    capsys = None
    counter = [0]

    @initialize()
    def start(self):
        TrainDir.counter[0] += 1
        self.out = self.toy / f"run-{TrainDir.counter[0]}"
        self.target = None  # the target of the run final/ holds (or the killed run aimed at)
        self.finished: dict | None = None  # tree of a finished run's final/ and checkpoints
        self.max_target = 0  # the largest target accepted for this directory's current run

    def argv(self, max_steps: int, *extra: str) -> list[str]:
        t = self.toy
        return [
            "train",
            "--config",
            "toy",
            "--holdout",
            "0",
            "--senior",
            str(t / "senior"),
            "--junior",
            str(t / "junior"),
            "--dataset",
            str(t / "train.jsonl"),
            "--output_dir",
            str(self.out),
            *SMALL,
            "--max_steps",
            str(max_steps),
            *extra,
        ]

    def run(self, argv: list[str]) -> tuple[int, str]:
        self.capsys.readouterr()
        code = cli(argv)
        err = self.capsys.readouterr().err
        assert "Traceback" not in err, err
        if code != 0:
            assert code == 2 and len([ln for ln in err.splitlines() if ": error: " in ln]) == 1, (code, err)
        return code, err

    def state(self):
        return rundir.train_state(self.out)

    def finished_tree(self) -> dict:
        out = tree(self.out, rundir.FINAL)
        for c in rundir.checkpoints(self.out):
            out.update(tree(self.out, c.name))
        return out

    # ---- rules ----

    @rule(max_steps=st.integers(1, 3))
    def train(self, max_steps):
        before, new = tree(self.out), self.state().stage == "new"
        code, err = self.run(self.argv(max_steps))
        if new:
            assert code == 0, err
            self._finished(max_steps)
        else:
            assert code == 2 and tree(self.out) == before  # a run is there: --resume or --force

    @rule(max_steps=st.integers(1, 3))
    def force(self, max_steps):
        code, err = self.run(self.argv(max_steps, "--force"))
        assert code == 0, err
        assert (
            not rundir.checkpoints(self.out)
            or max(rundir.checkpoint_step(c) for c in rundir.checkpoints(self.out)) <= max_steps
        )
        self.max_target = 0
        self._finished(max_steps)

    @rule(max_steps=st.integers(1, 3))
    def resume(self, max_steps):
        state, before = self.state(), tree(self.out)
        newest, _ = pick_checkpoint(self.out)
        code, err = self.run(self.argv(max_steps, "--resume"))
        if state.stage == "finished" and max_steps != state.step:  # another target: a finished run stays
            assert code == 2 and f"finished at step {state.step}" in err and "--force" in err, err
            assert tree(self.out) == before
            return
        if state.stage == "finished":
            assert code == 0 and "nothing to train" in err and tree(self.out) == before, err
            return
        if state.step is not None and max_steps < state.step:
            assert code == 2 and "already reached step" in err and tree(self.out) == before
            return
        if newest is None:
            assert code == 2 and tree(self.out) == before, err
            return
        assert code == 0, err
        if rundir.checkpoint_step(newest) < max_steps:  # resumed from the newest complete checkpoint
            assert err.split("resuming from ")[1].split()[0] == str(newest), err
        self._finished(max_steps)

    @rule(max_steps=st.integers(1, 3), change=st.sampled_from(CHANGED))
    def resume_changed(self, max_steps, change):
        """`--resume` with one setting of the run's identity changed (a TandemConfig field, or a GRPOConfig
        field given only as a flag): refused in one line naming the field, and nothing changes; with no
        run recorded there is nothing to resume (refused too)."""
        before, recorded = tree(self.out), (self.out / rundir.RUN_FILE).is_file()
        code, err = self.run(self.argv(max_steps, "--resume", *change))
        assert code == 2 and tree(self.out) == before, err
        if recorded:
            field = change[0].removeprefix("--")
            assert f"{field}: " in err or f"finished at step {self.state().step}" in err, err

    @precondition(lambda self: self.state().stage != "finished")
    @rule(step=st.integers(1, 2), where=st.sampled_from(["mid-step", "mid-save"]), resume=st.booleans())
    def kill(self, step, where, resume):
        """A run to 3 steps killed at `step`: a new one (or --force), or a resumed one."""
        from trlvr.config import parse_run_args
        from trlvr.training.run import train_and_save

        newest, _ = pick_checkpoint(self.out)  # a resume starts from the newest complete checkpoint
        resume = resume and newest is not None and rundir.checkpoint_step(newest) < step
        tandem, grpo, _ = parse_run_args(self.argv(3)[1:])
        try:
            train_and_save(
                tandem, grpo, resume=resume, force=not resume, callbacks=[KillAt(step, where, self.out)]
            )
        except Killed:
            pass
        else:
            raise AssertionError("the kill did not happen")
        self.finished, self.target, self.max_target = None, 3, 3

    @precondition(lambda self: self.state().stage == "finished")
    @rule()
    def select(self):
        t = self.toy
        torn = [c for c in rundir.checkpoints(self.out) if not artifacts.is_complete(c, artifacts.WEIGHTS)]
        before = tree(self.out)
        code, err = self.run(
            [
                "select",
                str(self.out),
                "--val",
                str(t / "val.jsonl"),
                "--metric",
                "solo/pass@1",
                "--n",
                "1",
                "--max-new-tokens",
                "2",
                "--no-progress",
            ]
        )
        if torn:  # refused before any checkpoint is evaluated, naming one
            assert code == 2 and any(str(c) in err for c in torn) and tree(self.out) == before, err
            return
        assert code == 0, err

    @precondition(lambda self: bool(self.artifact_files()))
    @rule(data=st.data(), keep=st.floats(0.0, 0.99))
    def tear(self, data, keep):
        """A file of a checkpoint or final/ cut short (a kill mid-write, a full disk, a bad copy)."""
        self.cut(data.draw(st.sampled_from(self.artifact_files())), keep)

    def cut(self, rel: str, keep: float) -> None:
        path = self.out / rel
        path.write_bytes(path.read_bytes()[: int(path.stat().st_size * keep)])
        if rel.startswith(f"{rundir.FINAL}/"):
            self.finished = None  # no finished run any more: a --resume writes final/ again
        elif self.finished is not None:
            self.finished = self.finished_tree()  # the finished run, as it is now, stays so

    def artifact_files(self) -> list[str]:
        folders = [*rundir.checkpoints(self.out), rundir.final_dir(self.out)]
        return sorted(
            str(p.relative_to(self.out))
            for d in folders
            if d.is_dir()
            for p in d.iterdir()
            if p.is_file() and p.stat().st_size > 0
        )

    def _finished(self, max_steps: int) -> None:
        assert self.state().stage == "finished" and self.state().step == max_steps, self.state()
        self.target, self.max_target = max_steps, max(self.max_target, max_steps)
        self.finished = self.finished_tree()

    # ---- invariants ----

    @invariant()
    def max_steps_never_exceeded(self):
        steps = [rundir.checkpoint_step(c) for c in rundir.checkpoints(self.out)]
        assert all(s <= self.max_target for s in steps), (steps, self.max_target)
        state = self.state()
        if state.stage == "finished":
            assert state.step == self.target, (state, self.target)

    @invariant()
    def a_finished_run_is_unchanged(self):
        if self.finished is not None:
            assert self.finished_tree() == self.finished

    @invariant()
    def one_identity(self):
        sel = self.out / rundir.SELECTED_FILE
        if sel.is_file():
            from trlvr.errors import UserError
            from trlvr.eval.api import resolve_senior

            chosen = self.out / json.loads(sel.read_text())["path"]
            if chosen.is_dir() and not artifacts.is_complete(
                chosen, artifacts.WEIGHTS
            ):  # torn: refused, one line
                with pytest.raises(UserError, match="is not complete") as e:
                    resolve_senior(f"{self.out}@selected")
                assert "\n" not in str(e.value)
                return
            covered, now = json.loads(sel.read_text()).get("newest_step"), rundir.newest_step(self.out)
            if covered is not None and now is not None and now > covered:  # made before a resume trained on
                with pytest.raises(UserError, match="select again") as e:
                    resolve_senior(f"{self.out}@selected")
                assert "\n" not in str(e.value)
                return
            path, record = resolve_senior(f"{self.out}@selected")
            assert Path(path).resolve().parent == self.out.resolve(), path  # this run's, not one set aside
            assert (Path(path) / "model.safetensors").is_file()

    @invariant()
    def a_torn_artifact_is_not_trusted(self):
        final = rundir.final_dir(self.out)
        if self.state().stage == "finished":
            assert artifacts.is_complete(final, artifacts.FINAL)
        elif final.exists():
            assert not artifacts.is_complete(final, artifacts.FINAL)
        newest, skipped = pick_checkpoint(self.out)
        assert newest is None or artifacts.is_complete(newest, artifacts.CHECKPOINT)
        assert all(not artifacts.is_complete(c, artifacts.CHECKPOINT) for c, _ in skipped)


def test_a_finished_run_resumed_to_another_target_stays_as_it_was(toy, capsys):
    """The transition the issue's invariant is about, walked every time (the random walks below may
    miss it): a finished run, then `--resume` to a larger and a smaller target (refused, nothing
    changed), then to its own target (nothing to do); every invariant after each step. Before: the
    larger target trained on and replaced final/."""
    TrainDir.toy, TrainDir.capsys = toy, capsys
    machine = TrainDir()
    machine.start()
    for step in (
        lambda: machine.train(2),
        lambda: machine.resume(3),
        lambda: machine.resume(1),
        lambda: machine.resume(2),
    ):
        step()
        machine.max_steps_never_exceeded()
        machine.a_finished_run_is_unchanged()
        machine.one_identity()
    machine.teardown()


def test_torn_artifacts_walked_every_time(toy, capsys):
    """The tears the random walks below may miss: final/'s weights cut (the run is no longer finished;
    --resume makes final/ again from the checkpoint at the target), then the newest checkpoint's
    optimizer state cut (select refuses it in one line; a resume to a larger target goes on from the one
    before); every invariant after each step. Before: --resume said "nothing to train" over the torn
    final/, and went on from the torn checkpoint into torch.load."""
    TrainDir.toy, TrainDir.capsys = toy, capsys
    machine = TrainDir()
    machine.start()
    for step in (
        lambda: machine.train(2),
        lambda: machine.cut("final/model.safetensors", 0.5),
        lambda: machine.resume_changed(2, ("--max_grad_norm", "0.5")),
        lambda: machine.resume(2),
        lambda: machine.select(),
        lambda: machine.resume_changed(3, ("--p", "0.3")),
        lambda: machine.cut("checkpoint-2/optimizer.pt", 0.3),
        lambda: machine.select(),
        lambda: machine.cut("final/trlvr_manifest.json", 0.0),
        lambda: machine.resume(3),
    ):
        step()
        machine.max_steps_never_exceeded()
        machine.a_finished_run_is_unchanged()
        machine.one_identity()
        machine.a_torn_artifact_is_not_trusted()
    assert rundir.train_state(machine.out) == rundir.TrainState("finished", 3, 3)
    machine.teardown()


def _run(toy, capsys, **kw):
    TrainDir.toy, TrainDir.capsys = toy, capsys
    run = TrainDir.TestCase
    run.settings = settings(deadline=None, suppress_health_check=list(HealthCheck), **kw)
    run("runTest").runTest()


def test_training_directory_state_machine(toy, capsys):
    _run(toy, capsys, max_examples=2, stateful_step_count=4)


@pytest.mark.slow
def test_training_directory_state_machine_long(toy, capsys):
    _run(toy, capsys, max_examples=25, stateful_step_count=8)

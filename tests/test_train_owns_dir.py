"""Training owns its output_dir (issue 18 item 8), through the real `trlvr train` in subprocesses:
a second run into a busy directory is refused naming the first's pid; SIGTERM / SIGUSR1 mid-run
finish the step, leave a complete checkpoint and one resume line (exit 143), and `--resume` from it
ends with the weights of an uninterrupted run."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import tiny_model

from trlvr import artifacts
from trlvr.cli.main import main as cli
from trlvr.experiments.selection import list_checkpoints
from trlvr.rundir import lock_files
from trlvr.training.checkpoints import checkpoint_problem, checkpoints
from trlvr.training.preempt import EXIT_PREEMPTED, PREEMPT_MARK, Preemption
from trlvr.training.run import training_lock

ROOT = Path(__file__).resolve().parents[1]
LOCK, PID = lock_files("trlvr train")

# A length reward (varies inside every group: the weights move) that can signal its own process at its
# N-th call (= step N: one generation per step) or hold until a file exists, as the environment says.
REWARD_MODULE = """
import os, signal, time

CALLS = [0]


def reward(completions, **kwargs):
    CALLS[0] += 1
    if os.environ.get("SIGNAL_AT_CALL") == str(CALLS[0]):
        os.kill(os.getpid(), getattr(signal, os.environ.get("SIGNAL", "SIGTERM")))
    gate = os.environ.get("HOLD_UNTIL")
    if gate:
        open(gate + ".waiting", "w").close()
    while gate and not os.path.exists(gate):
        time.sleep(0.05)
    return [len(c) / 10 for c in completions]
"""


@pytest.fixture
def world(tmp_path, tokenizer, monkeypatch):
    for name, seed, hidden, layers in (("senior", 0, 64, 2), ("junior", 1, 32, 1)):
        tiny_model("qwen3", len(tokenizer), seed=seed, hidden=hidden, layers=layers).save_pretrained(
            tmp_path / name
        )
        tokenizer.save_pretrained(tmp_path / name)
    rows = [
        {"problem": p, "answer": "1", "prompt": p}
        for p in ["The cat sat", "A train leaves", "So the answer", "Then the dog"]
    ]
    (tmp_path / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "own_reward.py").write_text(REWARD_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))  # the in-process runs import the reward too
    return tmp_path


def argv(world: Path, out: str, *extra: str) -> list[str]:
    return [
        "--config",
        "toy",
        "--holdout",
        "0",
        "--senior",
        str(world / "senior"),
        "--junior",
        str(world / "junior"),
        "--dataset",
        str(world / "train.jsonl"),
        "--reward",
        "own_reward:reward",
        "--output_dir",
        out,
        "--per_device_train_batch_size",
        "4",
        "--num_generations",
        "4",
        "--max_completion_length",
        "8",
        "--learning_rate",
        "1e-2",
        *extra,
    ]


def start(world: Path, args: list[str], **env) -> subprocess.Popen:
    environ = dict(
        os.environ,
        PYTHONPATH=f"{world}{os.pathsep}{ROOT}",
        TRL_EXPERIMENTAL_SILENCE="1",
        OMP_NUM_THREADS="1",
        **env,
    )
    return subprocess.Popen(
        [sys.executable, "-m", "trlvr.cli.train_cmd", *args],
        cwd=ROOT,
        env=environ,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_a_holder_killed_by_sigkill_leaves_its_pid_file_but_not_the_lock(tmp_path):
    """The lock is an OS file lock (filelock, as evaluation's): a holder's death releases it, so a stale
    pid file never blocks the next run. The holder here takes the same lock the way `training_lock` does."""
    from trlvr.errors import UserError

    code = (
        "import os, sys, time\nfrom filelock import FileLock\n"
        f"lock = FileLock({str(tmp_path / LOCK)!r}, timeout=0)\nlock.acquire()\n"
        f"open({str(tmp_path / PID)!r}, 'w').write(str(os.getpid()))\nprint('held', flush=True)\ntime.sleep(120)\n"
    )
    holder = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(UserError, match=rf"another trlvr train \(pid {holder.pid}\)"):
            with training_lock(tmp_path, main_process=True):
                pass
    finally:
        holder.kill()
        holder.wait()
    assert (tmp_path / PID).read_text().split()[0] == str(holder.pid)  # stale
    with training_lock(tmp_path, main_process=True):
        assert (tmp_path / PID).read_text().split()[0] == str(os.getpid())
    assert not (tmp_path / PID).exists()


def weights(path: Path) -> dict:
    from safetensors.torch import load_file

    return load_file(str(path / "model.safetensors"))


def resume_line(world: Path, out: Path, sig: str, step: int, args: tuple) -> str:
    return (
        f"{sig} at step {step} of {args[1]}: saved {out / f'checkpoint-{step}'}; resume with: trlvr train "
        + " ".join(argv(world, str(out), *args))
        + " --resume"
    )


def trlvr_lines(err: str) -> list[str]:
    return [line for line in err.replace("\r", "\n").splitlines() if line.startswith("[trlvr]")]


def wait_for(path: Path, proc: subprocess.Popen, timeout: float = 600) -> None:
    deadline = time.time() + timeout
    while not (path.exists() and (path.suffix != ".pid" or path.read_text().strip())):  # a pid file: written
        assert proc.poll() is None, proc.stderr.read()[-3000:]
        assert time.time() < deadline, f"{path} did not appear"
        time.sleep(0.1)


def test_a_busy_directory_is_refused_and_a_signal_mid_step_leaves_a_complete_checkpoint(world, capsys):
    """One real run, held inside its first step: a second run into its directory is refused naming its
    pid; a SIGUSR1 sent from outside lets the step end, saves checkpoint-1 and exits 143 with one line."""
    out, gate, args = world / "run", world / "go", ("--max_steps", "4", "--save_steps", "100")
    first = start(world, argv(world, str(out), *args), HOLD_UNTIL=str(gate))
    try:
        wait_for(out / PID, first)
        assert (out / PID).read_text().split() == [str(first.pid), "trlvr", "train"]
        assert cli(["train", *argv(world, str(out), *args)]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert err[-1] == (
            f"trlvr train: error: {out} is being written by another trlvr train "
            f"(pid {first.pid}); wait for it to finish or choose another --output_dir"
        )
        with training_lock(out, main_process=False):  # another rank of the first job: passes, never waits
            pass
        wait_for(Path(f"{gate}.waiting"), first)  # inside step 1 (its reward), handlers installed
        first.send_signal(signal.SIGUSR1)
        time.sleep(0.5)
        gate.touch()
        _, err = first.communicate(timeout=600)
    finally:
        first.kill()
        first.wait()
    assert first.returncode == EXIT_PREEMPTED, err[-3000:]
    lines = trlvr_lines(err)
    assert lines[-2].endswith(
        "SIGUSR1: finishing the current step and saving a checkpoint (exit within preempt_grace_s = 120 s)"
    )
    assert lines[-1].endswith(resume_line(world, out, "SIGUSR1", 1, args))
    assert [c.name for c in checkpoints(out)] == ["checkpoint-1"] and not (out / "final").exists()
    assert checkpoint_problem(out / "checkpoint-1") is None
    # the pre-emption save's manifest (hashed in a thread) is written before the run exits 143
    assert artifacts.problem(out / "checkpoint-1", artifacts.CHECKPOINT, deep=True) is None
    assert artifacts.read_manifest(out / "checkpoint-1")[0]
    with training_lock(out, main_process=True):  # the first run let go of the directory
        assert (out / PID).read_text().split()[0] == str(os.getpid())


@pytest.mark.slow
def test_sigterm_then_resume_matches_an_uninterrupted_run(world, capsys):
    args = ("--max_steps", "6", "--save_steps", "4", "--save_total_limit", "5")
    full, cut = world / "full", world / "cut"
    assert cli(["train", *argv(world, str(full), *args)]) == 0
    proc = start(world, argv(world, str(cut), *args), SIGNAL_AT_CALL="3", SIGNAL="SIGTERM")
    _, err = proc.communicate(timeout=600)
    assert proc.returncode == EXIT_PREEMPTED, err[-3000:]
    assert trlvr_lines(err)[-1].endswith(resume_line(world, cut, "SIGTERM", 3, args))
    assert [c.name for c in checkpoints(cut)] == ["checkpoint-3"] and checkpoint_problem(
        cut / "checkpoint-3"
    ) is None
    assert (cut / "checkpoint-3" / PREEMPT_MARK).is_file()  # off the save_steps = 4 schedule
    capsys.readouterr()
    assert cli(["train", *argv(world, str(cut), *args), "--resume"]) == 0
    assert "resuming from" in capsys.readouterr().err
    assert json.loads((cut / "final" / "trainer_state.json").read_text())["global_step"] == 6
    # save_steps still decides the other checkpoints: 4 and 6 (the end), as in the uninterrupted run
    assert [c.name for c in checkpoints(cut)] == ["checkpoint-6", "checkpoint-4", "checkpoint-3"]
    assert [c.name for c in checkpoints(full)] == ["checkpoint-6", "checkpoint-4"]
    # selection sees the same candidates as in the unbroken run (checkpoint-3 is a resume point)
    assert [c.step for c in list_checkpoints(cut)] == [c.step for c in list_checkpoints(full)] == [4, 6]
    a, b, start_w = weights(full / "final"), weights(cut / "final"), weights(world / "senior")
    assert max((a[k] - start_w[k]).abs().max().item() for k in a) > 1e-4  # training moved the weights
    assert max((a[k] - b[k]).abs().max().item() for k in a) <= 1e-6


def test_the_signal_handler_only_flags_and_the_callback_stops_and_saves(tmp_path):
    """In-process: a SIGUSR1 sets the flag; the next step end asks for a log, a save and a stop; the
    handlers are restored on leaving; a run never signalled is left alone."""
    from types import SimpleNamespace

    from transformers import TrainerControl

    before = signal.getsignal(signal.SIGUSR1)
    args = SimpleNamespace(device="cpu", output_dir=str(tmp_path), save_steps=5)
    state = SimpleNamespace(global_step=7, max_steps=10, is_world_process_zero=True)
    (tmp_path / "checkpoint-7").mkdir()
    notices = []
    with Preemption(30, log=notices.append) as pre:
        control = pre.callback.on_step_end(args, state, TrainerControl())
        assert not (control.should_save or control.should_training_stop)
        os.kill(os.getpid(), signal.SIGUSR1)
        time.sleep(0.2)
        assert pre.signal_name == "SIGUSR1"
        control = pre.callback.on_step_end(args, state, TrainerControl())
        assert control.should_log and control.should_save and control.should_training_stop
        pre.callback.on_save(args, state, control)
        assert pre.callback.saved_step == 7 and pre.stopped_early
        # step 7 is off the save_steps = 5 schedule: marked as a resume point, not a selection candidate
        assert json.loads((tmp_path / "checkpoint-7" / PREEMPT_MARK).read_text()) == {
            "signal": "SIGUSR1",
            "step": 7,
        }
        (tmp_path / "checkpoint-10").mkdir()
        pre.callback.on_save(
            args, SimpleNamespace(global_step=10, max_steps=10, is_world_process_zero=True), control
        )
        assert not (tmp_path / "checkpoint-10" / PREEMPT_MARK).exists()  # a save the schedule makes anyway
    assert signal.getsignal(signal.SIGUSR1) is before
    assert notices == [
        "SIGUSR1: finishing the current step and saving a checkpoint (exit within preempt_grace_s = 30 s)"
    ]


def test_a_step_longer_than_the_grace_time_exits_143_with_one_line(monkeypatch):
    exits, notices = [], []
    monkeypatch.setattr(os, "_exit", exits.append)  # the watchdog's hard exit, caught
    with Preemption(0.3, exit_line="resume with: trlvr train X --resume", log=notices.append):
        os.kill(os.getpid(), signal.SIGTERM)
        deadline = time.time() + 30
        while not exits and time.time() < deadline:
            time.sleep(0.05)
    assert exits == [EXIT_PREEMPTED]
    assert notices == [
        "SIGTERM: finishing the current step and saving a checkpoint (exit within preempt_grace_s = 0.3 s)",
        "SIGTERM: the step did not end within preempt_grace_s = 0.3 s; exiting without a new "
        "checkpoint. resume with: trlvr train X --resume",
    ]

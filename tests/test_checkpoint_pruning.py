"""Only the two newest complete checkpoints keep the resume state (the newest, and one to fall back on); older
ones keep their weights, marked weights only: `--resume` skips them, selection accepts them
(`trlvr.training.checkpoints.prune_resume_state`)."""

from __future__ import annotations

import json
import shutil
import threading
from types import SimpleNamespace

import torch
from safetensors.torch import save_file

from trlvr import artifacts
from trlvr.training.checkpoints import (
    WEIGHTS_ONLY_MARK,
    PruneResumeState,
    checkpoint_problem,
    is_weights_only,
    pick_checkpoint,
    prune_resume_state,
    weights_problem,
)
from trlvr.training.manifest import ManifestCallback

RESUME = {"optimizer.pt", "scheduler.pt", "rng_state_0.pth", "rng_state_1.pth", "latest"}


def fake_checkpoint(run, step, deepspeed=True, complete=True):
    ckpt = run / f"checkpoint-{step}"
    ckpt.mkdir(parents=True)
    save_file({"w": torch.ones(2)}, str(ckpt / "model.safetensors"))
    (ckpt / "config.json").write_text("{}")
    for name in ("scheduler.pt", "rng_state_0.pth", "rng_state_1.pth", "optimizer.pt"):
        torch.save({"x": step}, ckpt / name)
    if deepspeed:
        (ckpt / "latest").write_text(f"global_step{step}")
        (ckpt / f"global_step{step}").mkdir()
        torch.save(
            {"x": step}, ckpt / f"global_step{step}" / "bf16_zero_pp_rank_0_mp_rank_00_optim_states.pt"
        )
    if complete:
        (ckpt / "trainer_state.json").write_text(json.dumps({"global_step": step}))
    return ckpt


def test_pruning_beside_a_manifest_still_hashed_leaves_that_checkpoint_whole(tmp_path, monkeypatch):
    """The save's manifest is written in a thread (trlvr.training.manifest) while PruneResumeState runs in the same
    on_save: the checkpoint being hashed is the newest, which pruning keeps, so it gets its whole manifest."""
    run = tmp_path / "run"
    for step in (10, 20, 30):
        artifacts.write_manifest(fake_checkpoint(run, step))
    newest = fake_checkpoint(run, 40)
    release, real = threading.Event(), artifacts.sha256
    monkeypatch.setattr(artifacts, "sha256", lambda path: release.wait(30) and real(path))
    callback, args = ManifestCallback(), SimpleNamespace(output_dir=str(run))
    state = SimpleNamespace(global_step=40, is_world_process_zero=True)
    callback.on_save(args, state, None)
    before = names(newest)
    PruneResumeState().on_save(args, state, None)
    assert [is_weights_only(run / f"checkpoint-{s}") for s in (10, 20, 30, 40)] == [True, True, False, False]
    assert names(newest) == before and not (newest / artifacts.MANIFEST).exists()
    release.set()
    callback.on_step_end(None, None, None)
    assert artifacts.problem(newest, artifacts.CHECKPOINT, deep=True) is None
    assert json.loads((newest / artifacts.MANIFEST).read_text())["files"].keys() >= RESUME


def names(ckpt):
    return {p.name for p in ckpt.iterdir()}


def test_only_the_two_newest_complete_keep_resume_state(tmp_path):
    run = tmp_path / "run"
    old = [fake_checkpoint(run, s) for s in (10, 20)]
    fallback, newest = fake_checkpoint(run, 30), fake_checkpoint(run, 40)
    before = names(fallback), names(newest)
    assert prune_resume_state(run) == [old[1], old[0]]
    assert (names(fallback), names(newest)) == before  # untouched
    for ckpt in old:
        assert names(ckpt) == {"config.json", "model.safetensors", "trainer_state.json", WEIGHTS_ONLY_MARK}
        assert is_weights_only(ckpt) and weights_problem(ckpt) is None  # selection accepts it
        assert checkpoint_problem(ckpt).startswith("weights only")  # resume does not
        mark = json.loads((ckpt / WEIGHTS_ONLY_MARK).read_text())
        assert set(mark["removed"]) == RESUME | {f"global_step{ckpt.name.split('-')[1]}"}
        assert mark["resume_state_in"] == "checkpoint-40"
    assert pick_checkpoint(run) == (newest, [])
    assert prune_resume_state(run) == []  # idempotent


def test_a_newer_incomplete_checkpoint_is_left_and_the_newest_complete_kept(tmp_path):
    """A save in progress (no trainer_state.json yet) is newer than the newest complete ones: none of them is
    pruned, so a kill now still resumes from a complete one."""
    run = tmp_path / "run"
    older = fake_checkpoint(run, 10, deepspeed=False)
    fallback = fake_checkpoint(run, 15, deepspeed=False)
    complete = fake_checkpoint(run, 20, deepspeed=False)
    writing = fake_checkpoint(run, 30, deepspeed=False, complete=False)
    before = names(fallback), names(complete), names(writing)
    assert prune_resume_state(run) == [older]
    assert (names(fallback), names(complete), names(writing)) == before
    assert pick_checkpoint(run)[0] == complete


def test_one_complete_nothing_pruned(tmp_path):
    run = tmp_path / "run"
    a = fake_checkpoint(run, 10)
    b = fake_checkpoint(run, 20, complete=False)
    before = (names(a), names(b))
    assert prune_resume_state(run) == [] and (names(a), names(b)) == before
    assert prune_resume_state(tmp_path / "none") == []


def test_training_keeps_resume_state_only_in_the_newest_checkpoint(toy_run):
    """The real Trainer, 3 steps, a checkpoint each (conftest's 2-step toy run, killed before final/ and resumed
    to step 3): the oldest is weights only, the two newest keep their resume state, the newest is the one
    --resume picks."""
    from helpers import toy_run_argv

    from trlvr.cli.main import main as cli

    toy = toy_run
    shutil.rmtree(toy / "run" / "final")  # killed before final/: a run to go on with
    assert cli(toy_run_argv(toy, "--save_total_limit", "5", "--max_steps", "3", "--resume")) == 0
    run = toy / "run"
    assert is_weights_only(run / "checkpoint-1") and not (run / "checkpoint-1" / "optimizer.pt").exists()
    assert weights_problem(run / "checkpoint-1") is None
    for step in (2, 3):
        assert checkpoint_problem(run / f"checkpoint-{step}") is None
        assert (run / f"checkpoint-{step}" / "optimizer.pt").is_file()
    assert pick_checkpoint(run) == (run / "checkpoint-3", [])
    for step in (
        1,
        2,
        3,
    ):  # each save's manifest (hashed in a thread) written: by the next step's end, or the run's
        assert artifacts.read_manifest(run / f"checkpoint-{step}")[0], step
    assert artifacts.problem(run / "checkpoint-3", artifacts.CHECKPOINT, deep=True) is None

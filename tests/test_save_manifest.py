"""A checkpoint's manifest at save (`trlvr.training.manifest.ManifestCallback`): what a reader of the model needs
is hashed, the optimizer's shards (torch's optimizer.pt, DeepSpeed's global_step*/) are recorded by size and not
read, so a save does not hold the other ranks while rank 0 reads ~52 GiB; and what is hashed is hashed in a
background thread overlapped with the next step, joined at that step's end, at the end of training and
after train() raised, its failure one line there (issue 59)."""

from __future__ import annotations

import json
import threading
from types import SimpleNamespace

import pytest
import torch
from helpers import fake_model_folder

from trlvr import artifacts
from trlvr.rundir import checkpoint_dir
from trlvr.training.manifest import SIZE_ONLY, ManifestCallback, ManifestNotWritten
from trlvr.training.run import wait_for_manifests


def _checkpoint(root, step=4):
    ckpt = checkpoint_dir(root, step)
    fake_model_folder(ckpt)
    shards = ckpt / f"global_step{step}"
    shards.mkdir()
    torch.save({"fp32": torch.zeros(1024)}, shards / "bf16_zero_pp_rank_0_mp_rank_00_optim_states.pt")
    torch.save({"module": torch.zeros(512)}, shards / "mp_rank_00_model_states.pt")
    (ckpt / "optimizer.pt").write_bytes(b"x" * 1024)
    (ckpt / "trainer_state.json").write_text("{}")
    (ckpt / "rng_state_0.pth").write_bytes(b"r" * 16)
    (ckpt / "scheduler.pt").write_bytes(b"s" * 16)
    return ckpt


def test_the_optimizer_shards_are_recorded_by_size_and_never_read(tmp_path, monkeypatch):
    ckpt = _checkpoint(tmp_path)
    read = []
    real = artifacts.sha256
    monkeypatch.setattr(
        artifacts, "sha256", lambda path: read.append(path.relative_to(ckpt).as_posix()) or real(path)
    )
    state = SimpleNamespace(global_step=4, is_world_process_zero=True)
    callback = ManifestCallback()
    callback.on_save(SimpleNamespace(output_dir=str(tmp_path)), state, None)
    callback.wait()
    files = json.loads((ckpt / artifacts.MANIFEST).read_text())["files"]
    big = [
        "global_step4/bf16_zero_pp_rank_0_mp_rank_00_optim_states.pt",
        "global_step4/mp_rank_00_model_states.pt",
        "optimizer.pt",
    ]
    assert sorted(read) == [
        "config.json",
        "model.safetensors",
        "rng_state_0.pth",
        "scheduler.pt",
        "trainer_state.json",
    ]
    assert all(set(files[f]) == {"size"} for f in big) and all("sha256" in files[f] for f in read)
    assert SIZE_ONLY == ("optimizer.pt", "global_step*/*")
    assert artifacts.problem(ckpt, artifacts.CHECKPOINT, deep=True) is None  # whole, deep check included
    with open(ckpt / big[0], "ab") as f:  # a shard cut or grown after the save: its recorded size tells
        f.write(b"\0")
    assert artifacts.problem(ckpt, artifacts.CHECKPOINT).startswith(f"{big[0]} is cut short or changed")


def _held_hashing(monkeypatch):
    """sha256 that waits for `release` before it reads anything: a save's hashing still in progress."""
    release, started = threading.Event(), threading.Event()
    real = artifacts.sha256

    def held(path):
        started.set()
        assert release.wait(30)
        return real(path)

    monkeypatch.setattr(artifacts, "sha256", held)
    return release, started


def _save(callback, root, step=4):
    state = SimpleNamespace(global_step=step, is_world_process_zero=True)
    return callback.on_save(SimpleNamespace(output_dir=str(root)), state, "control")


def test_the_save_returns_while_hashing_and_the_next_step_end_writes_the_whole_manifest(
    tmp_path, monkeypatch
):
    ckpt = _checkpoint(tmp_path)
    release, started = _held_hashing(monkeypatch)
    callback = ManifestCallback()
    assert _save(callback, tmp_path) == "control"  # returned with the hash not done: training goes on
    assert started.wait(30) and not (ckpt / artifacts.MANIFEST).exists()  # a reader sees no manifest...
    assert (
        artifacts.problem(ckpt, artifacts.CHECKPOINT) is None
    )  # ...and judges the saved files by their formats
    (ckpt / "preempted.json").write_text(
        "{}\n"
    )  # written after the save by the pre-emption callback: not listed
    release.set()
    callback.on_step_end(None, None, None)  # joined at the end of the next step
    listed, why = artifacts.read_manifest(ckpt)
    assert why is None and "preempted.json" not in listed and listed["model.safetensors"]["sha256"]
    assert not [
        p for p in ckpt.iterdir() if p.name.startswith(".")
    ]  # written by rename: no temporary file left
    assert artifacts.problem(ckpt, artifacts.CHECKPOINT, deep=True) is None


def test_a_failure_in_the_thread_is_one_line_at_the_next_step_end_and_no_manifest(tmp_path, monkeypatch):
    ckpt = _checkpoint(tmp_path)

    def broken(path):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(artifacts, "sha256", broken)
    callback = ManifestCallback()
    _save(callback, tmp_path)
    with pytest.raises(ManifestNotWritten) as e:
        callback.on_step_end(None, None, None)
    assert str(e.value) == (
        f"{ckpt}: its {artifacts.MANIFEST} was not written (OSError: [Errno 28] No space left "
        f"on device); the checkpoint is judged by its formats alone"
    )
    assert not (ckpt / artifacts.MANIFEST).exists()
    callback.on_step_end(None, None, None)  # reported once


def test_a_file_changed_between_the_save_and_its_hash_writes_no_manifest(tmp_path, monkeypatch):
    ckpt = _checkpoint(tmp_path)
    release, started = _held_hashing(monkeypatch)
    callback = ManifestCallback()
    _save(callback, tmp_path)
    assert started.wait(30)
    (ckpt / "scheduler.pt").write_bytes(b"s" * 17)
    release.set()
    with pytest.raises(ManifestNotWritten, match="scheduler.pt changed while its manifest was written"):
        callback.on_train_end(None, None, None)  # the end of training joins too
    assert not (ckpt / artifacts.MANIFEST).exists()


def test_the_next_save_and_the_end_of_train_wait_for_the_manifest_in_progress(tmp_path, monkeypatch):
    first, second = _checkpoint(tmp_path, 4), _checkpoint(tmp_path, 8)
    release, started = _held_hashing(monkeypatch)
    callback = ManifestCallback()
    _save(callback, tmp_path, 4)
    assert started.wait(30)
    threading.Timer(0.3, release.set).start()
    _save(callback, tmp_path, 8)  # a save (none of its steps ended in between) joins the previous one first
    assert (first / artifacts.MANIFEST).is_file()
    trainer = SimpleNamespace(callback_handler=SimpleNamespace(callbacks=[object(), callback]))
    wait_for_manifests(trainer, raised=False)  # what trlvr.training.run does after train()
    assert (second / artifacts.MANIFEST).is_file()


def test_after_train_raised_a_failed_manifest_is_a_warning_not_the_error(tmp_path, monkeypatch, capsys):
    ckpt = _checkpoint(tmp_path)
    monkeypatch.setattr(artifacts, "sha256", lambda path: 1 / 0)
    callback = ManifestCallback()
    _save(callback, tmp_path)
    trainer = SimpleNamespace(callback_handler=SimpleNamespace(callbacks=[callback]))
    wait_for_manifests(trainer, raised=True)  # train()'s own error is the one the caller sees
    assert f"{ckpt}: its {artifacts.MANIFEST} was not written (ZeroDivisionError" in capsys.readouterr().err
    _save(callback, tmp_path)
    with pytest.raises(ManifestNotWritten):
        wait_for_manifests(trainer, raised=False)


def test_without_background_the_save_hashes_before_it_returns(tmp_path):
    ckpt = _checkpoint(tmp_path)
    _save(ManifestCallback(background=False), tmp_path)
    assert (
        artifacts.problem(ckpt, artifacts.CHECKPOINT, deep=True) is None
        and (ckpt / artifacts.MANIFEST).is_file()
    )

"""A checkpoint's manifest at save (`trlvr.training.manifest.ManifestCallback`): what a reader of the model needs
is hashed, the optimizer's shards (torch's optimizer.pt, DeepSpeed's global_step*/) are recorded by size and not
read, so a save does not hold the other ranks while rank 0 reads ~52 GiB (issue 59)."""

from __future__ import annotations

import json
from types import SimpleNamespace

import torch
from helpers import fake_model_folder

from trlvr import artifacts
from trlvr.rundir import checkpoint_dir
from trlvr.training.manifest import SIZE_ONLY, ManifestCallback


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
    monkeypatch.setattr(artifacts, "sha256", lambda path: read.append(path.relative_to(ckpt).as_posix()) or real(path))
    state = SimpleNamespace(global_step=4, is_world_process_zero=True)
    ManifestCallback().on_save(SimpleNamespace(output_dir=str(tmp_path)), state, None)
    files = json.loads((ckpt / artifacts.MANIFEST).read_text())["files"]
    big = ["global_step4/bf16_zero_pp_rank_0_mp_rank_00_optim_states.pt", "global_step4/mp_rank_00_model_states.pt",
           "optimizer.pt"]  # fmt: skip
    assert sorted(read) == ["config.json", "model.safetensors", "rng_state_0.pth", "scheduler.pt", "trainer_state.json"]
    assert all(set(files[f]) == {"size"} for f in big) and all("sha256" in files[f] for f in read)
    assert SIZE_ONLY == ("optimizer.pt", "global_step*/*")
    assert artifacts.problem(ckpt, artifacts.CHECKPOINT, deep=True) is None  # whole, deep check included
    with open(ckpt / big[0], "ab") as f:  # a shard cut or grown after the save: its recorded size tells
        f.write(b"\0")
    assert artifacts.problem(ckpt, artifacts.CHECKPOINT).startswith(f"{big[0]} is cut short or changed")

"""`trlvr train --seeds` under a launch of several processes with a backend that owns its engine: refused in one
line before any training (each process keeps its engine until it exits, so a second seed would not fit)."""

from __future__ import annotations

import argparse

import pytest

from trlvr.cli import train_cmd
from trlvr.errors import UserError


@pytest.mark.parametrize(
    "seeds, backend_name, world, refused",
    [
        ([0, 1], "vllm", "2", True),
        ([0, 1, 2], "vllm", "4", True),
        ([0, 1], "vllm", "1", False),  # one process: each seed's engine is shut down before the next
        ([0], "vllm", "2", False),  # one seed: one engine
        ([0, 1], "hf", "2", False),  # trlvr's own engine: released between seeds
        (None, "vllm", "2", False),
    ],
)
def test_check_seeds(seeds, backend_name, world, refused):
    if refused:
        with pytest.raises(
            UserError,
            match=rf"^--seeds {','.join(map(str, seeds))} with {world} processes and "
            rf"backend vllm: .*launch one run per seed",
        ):
            train_cmd.check_seeds(seeds, backend_name, {"WORLD_SIZE": world})
    else:
        train_cmd.check_seeds(seeds, backend_name, {"WORLD_SIZE": world})


def test_train_refuses_before_training(monkeypatch, tmp_path):
    """The command checks it before the first seed trains (the launch's WORLD_SIZE given to the check)."""
    real = train_cmd.check_seeds
    monkeypatch.setattr(train_cmd, "check_seeds", lambda seeds, name: real(seeds, name, {"WORLD_SIZE": "2"}))
    import trlvr.training.run as run

    monkeypatch.setattr(run, "train_and_save", lambda *a, **k: pytest.fail("trained"))
    args = argparse.Namespace(
        rest=[
            "--config",
            "toy",
            "--holdout",
            "0",
            "--backend",
            "vllm",
            "--seeds",
            "0,1",
            "--output_dir",
            str(tmp_path / "out"),
        ]
    )
    with pytest.raises(UserError, match="^--seeds 0,1 with 2 processes and backend vllm"):
        train_cmd.main(args)
    assert not (tmp_path / "out").exists()

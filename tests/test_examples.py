"""examples/: every script runs on the shipped toy pair, with `python` and with `accelerate launch` (one CPU
process), from a folder outside the checkout, as its docstring's toy command line does."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import copy_toy_pair
from safetensors.torch import load_file

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "tandem_grpo.py"
TOY_FLAGS = [
    "--model_name_or_path",
    "senior",
    "--junior",
    "junior",
    "--dataset_name",
    "train.jsonl",
    "--output_dir",
    "out",
    "--max_steps",
    "1",
    "--per_device_train_batch_size",
    "8",
    "--num_generations",
    "4",
    "--max_completion_length",
    "32",
    "--learning_rate",
    "1e-2",
    "--use_cpu",
    "--bf16",
    "false",
    "--report_to",
    "none",
    "--save_strategy",
    "no",
    "--logging_steps",
    "1",
]


def test_every_example_is_covered():
    assert sorted(p.name for p in (ROOT / "examples").glob("*.py")) == [EXAMPLE.name]


@pytest.mark.parametrize("launcher", ["python", "accelerate"])
def test_the_example_trains_the_toy_pair(tmp_path, launcher):
    copy_toy_pair(tmp_path, 32)
    if launcher == "python":
        cmd = [sys.executable, str(EXAMPLE)]
    else:
        accelerate = shutil.which("accelerate", path=str(Path(sys.executable).parent))
        cmd = [
            accelerate,
            "launch",
            "--cpu",
            "--num_processes",
            "1",
            "--num_machines",
            "1",
            "--mixed_precision",
            "no",
            "--dynamo_backend",
            "no",
            str(EXAMPLE),
        ]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "TRL_EXPERIMENTAL_SILENCE": "1"}
    done = subprocess.run(cmd + TOY_FLAGS, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "'tandem/senior_share'" in done.stdout + done.stderr  # TRL's log line: the tandem rollout ran
    trained = load_file(tmp_path / "out" / "model.safetensors")
    start = load_file(tmp_path / "senior" / "model.safetensors")
    assert any(not (trained[k] == start[k]).all() for k in start)  # the senior was trained and saved


def test_the_example_refuses_an_unknown_flag(tmp_path, monkeypatch, capsys):
    """In this process (the example's imports are loaded already): TRL's parser names the misspelt flag."""
    import runpy

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", [str(EXAMPLE), "--output_dir", "out", "--use_cpu", "--schedual", "word"])
    with pytest.raises(
        (SystemExit, ValueError)
    ) as stop:  # TRL's parser: ValueError naming what it did not use
        runpy.run_path(str(EXAMPLE), run_name="__main__")
    assert getattr(stop.value, "code", 2) not in (0, None)
    assert "--schedual" in str(stop.value) + capsys.readouterr().err
    assert not (tmp_path / "out").exists()

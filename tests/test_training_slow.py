"""Slow end-to-end training runs through the `trlvr train` entry: 2 CPU processes under torchrun, and a
run SIGKILLed after a checkpoint then resumed with --resume. Run with `pytest -m slow`."""

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

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow

REWARD_MODULE = """
def length_reward(completions, **kwargs):
    return [len(c) / 10 for c in completions]
"""


def make_world(tmp_path: Path, tokenizer) -> Path:
    """A toy-world-shaped folder: senior/, junior/ (with tokenizer), data/train.jsonl, a reward module."""
    for name, seed, hidden, layers in (("senior", 0, 64, 2), ("junior", 1, 32, 1)):
        model = tiny_model("qwen3", len(tokenizer), seed=seed, hidden=hidden, layers=layers)
        model.save_pretrained(tmp_path / name)
        tokenizer.save_pretrained(tmp_path / name)
    (tmp_path / "data").mkdir()
    rows = [
        {"problem": p, "answer": "1", "prompt": p}
        for p in ["The cat sat", "A train leaves", "So the answer", "Then the dog"]
    ]
    (tmp_path / "data/train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "slow_reward.py").write_text(REWARD_MODULE)
    return tmp_path


def train_cmd(world: Path, out: str, *extra: str) -> list[str]:
    """argv after `python -m trlvr.cli.train_cmd` (which adds the `train` command itself)."""
    return [
        "--config",
        "toy",
        "--arm",
        "tandem",
        "--senior",
        str(world / "senior"),
        "--junior",
        str(world / "junior"),
        "--dataset",
        str(world / "data/train.jsonl"),
        "--reward",
        "slow_reward:length_reward",
        "--output_dir",
        out,
        "--per_device_train_batch_size",
        "4",
        "--num_generations",
        "4",
        "--max_completion_length",
        "8",
        "--logging_steps",
        "1",
        "--learning_rate",
        "1e-2",
        *extra,
    ]


def env_for(world: Path) -> dict:
    return dict(
        os.environ, PYTHONPATH=f"{world}{os.pathsep}{ROOT}", TRL_EXPERIMENTAL_SILENCE="1", OMP_NUM_THREADS="1"
    )


def final_weights(out: Path) -> dict:
    from safetensors.torch import load_file

    return load_file(str(out / "final" / "model.safetensors"))


def test_torchrun_two_processes(tmp_path, tokenizer):
    world = make_world(tmp_path, tokenizer)
    out = tmp_path / "ddp"
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc_per_node",
        "2",
        "-m",
        "trlvr.cli.train_cmd",
        *train_cmd(world, str(out), "--max_steps", "2", "--save_steps", "100"),
    ]
    proc = subprocess.run(cmd, cwd=ROOT, env=env_for(world), capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-4000:]
    state = json.loads((out / "checkpoint-2" / "trainer_state.json").read_text())
    logs = [h for h in state["log_history"] if "loss" in h]
    assert len(logs) == 2 and all("tandem/senior_share" in h for h in logs)
    assert (out / "final" / "model.safetensors").exists()
    from trlvr import artifacts  # each rank's files in the manifest, written once all had saved

    assert artifacts.problem(out / "checkpoint-2", artifacts.CHECKPOINT, deep=True) is None
    assert {"rng_state_0.pth", "rng_state_1.pth"} <= set(artifacts.read_manifest(out / "checkpoint-2")[0])
    assert artifacts.problem(out / "final", artifacts.FINAL, deep=True) is None


def test_sigkill_then_resume_matches_uninterrupted(tmp_path, tokenizer):
    world = make_world(tmp_path, tokenizer)
    main = [sys.executable, "-m", "trlvr.cli.train_cmd"]
    env = env_for(world)
    full, cut = tmp_path / "full", tmp_path / "cut"
    args = ("--max_steps", "6", "--save_steps", "3")
    subprocess.run(
        [*main, *train_cmd(world, str(full), *args)],
        cwd=ROOT,
        env=env,
        check=True,
        timeout=900,
        capture_output=True,
    )
    proc = subprocess.Popen(
        [*main, *train_cmd(world, str(cut), *args)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.time() + 900
    while not (cut / "checkpoint-3" / "trainer_state.json").exists():  # the checkpoint is complete
        assert proc.poll() is None and time.time() < deadline, "run ended before its first checkpoint"
        time.sleep(0.2)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert not (cut / "final").exists()
    subprocess.run(
        [*main, *train_cmd(world, str(cut), *args), "--resume"],
        cwd=ROOT,
        env=env,
        check=True,
        timeout=900,
        capture_output=True,
    )
    a, b = final_weights(full), final_weights(cut)
    assert max((a[k] - b[k]).abs().max().item() for k in a) <= 1e-6


DUMP_ROLLOUTS = """
import json, os
if os.environ.get("TRLVR_TEST_DUMP"):
    from trlvr.training import rollout as _r

    _call = _r.TandemRollout.__call__

    def _dumping(self, prompts, trainer):
        out = _call(self, prompts, trainer)
        rank, step = trainer.accelerator.process_index, trainer.state.global_step
        with open(os.path.join(os.environ["TRLVR_TEST_DUMP"], f"rank{rank}.jsonl"), "a") as f:
            for p, ids, mask in zip(prompts, out["completion_ids"], out["env_mask"]):
                f.write(json.dumps({"step": step, "prompt": p, "ids": ids, "mask": mask}) + "\\n")
        return out

    _r.TandemRollout.__call__ = _dumping
"""


def test_one_process_and_two_give_the_same_rollouts(tmp_path, tokenizer):
    """Batch-invariant sampling across processes: the first step's rollouts (same weights on both
    sides) of a 1-process run with 8 rows per device and a 2-process torchrun with 4 each are the same
    tokens and authors for every (prompt, generation), though each process draws only its own rows."""
    world = make_world(tmp_path, tokenizer)
    (world / "sitecustomize.py").write_text(DUMP_ROLLOUTS)
    args = ("--max_steps", "1", "--save_steps", "100", "--schedule", "token", "--max_completion_length", "12")
    dumps = {}
    for name, launch, per_device in (
        ("one", [], "8"),
        ("two", ["-m", "torch.distributed.run", "--nproc_per_node", "2"], "4"),
    ):
        dump = tmp_path / f"dump-{name}"
        dump.mkdir()
        cmd = [
            sys.executable,
            *launch,
            "-m",
            "trlvr.cli.train_cmd",
            *train_cmd(world, str(tmp_path / name), *args),
            "--per_device_train_batch_size",
            per_device,
        ]
        proc = subprocess.run(
            cmd,
            cwd=ROOT,
            env={**env_for(world), "TRLVR_TEST_DUMP": str(dump)},
            capture_output=True,
            text=True,
            timeout=900,
        )
        assert proc.returncode == 0, proc.stderr[-4000:]
        dumps[name] = [
            json.loads(line) for f in sorted(dump.glob("rank*.jsonl")) for line in f.read_text().splitlines()
        ]
    assert len(list((tmp_path / "dump-two").glob("rank*.jsonl"))) == 2  # both processes generated

    def by_prompt(rows):
        out = {}
        for r in rows:
            if r["step"] == 0:
                out.setdefault(r["prompt"], []).append((r["ids"], r["mask"]))
        return out

    one, two = by_prompt(dumps["one"]), by_prompt(dumps["two"])
    assert sum(map(len, one.values())) == 8 and one.keys() == two.keys()
    for prompt in one:  # generations of a prompt in order (TRL repeats each prompt G times in a row)
        assert one[prompt] == two[prompt], prompt
    masks = [m for v in one.values() for _, m in v]
    assert any(0 in m for m in masks) and any(1 in m for m in masks)  # both authors wrote

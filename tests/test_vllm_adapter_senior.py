"""`backend: vllm` training from an adapter folder: the engine loads the adapter's base, and TRL's sync pushes
the adapter merged into it before the first rollout, so the sampler is the adapter's model (its log-probs agree
with TRL's own to 1e-3; the adapter moves the toy senior's logits by > 0.1) and the junior is the base."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("vllm")
pytestmark = pytest.mark.vllm

from test_adapter_senior import make_adapter  # noqa: E402
from vllm_helpers import TOY_SENIOR  # noqa: E402

from trlvr.cli.main import main as cli  # noqa: E402
from trlvr.toy.task import make_splits  # noqa: E402
from trlvr.toy.world import _rows, _write_jsonl  # noqa: E402


def test_backend_vllm_samples_from_the_continued_adapter(tmp_path, capfd):
    make_adapter(TOY_SENIOR, tmp_path / "sft", r=4, alpha=8)
    _write_jsonl(tmp_path / "train.jsonl", _rows(make_splits(64, 16, seed=0)[0]))
    out = tmp_path / "run"
    code = cli(
        [
            "train",
            "--config",
            "toy",
            "--holdout",
            "0",
            "--senior",
            str(tmp_path / "sft"),
            "--junior",
            "self",
            "--use_peft",
            "true",
            "--dataset",
            str(tmp_path / "train.jsonl"),
            "--backend",
            "vllm",
            "--max_steps",
            "1",
            "--per_device_train_batch_size",
            "8",
            "--num_generations",
            "4",
            "--max_completion_length",
            "16",
            "--use_cpu",
            "true",
            "--output_dir",
            str(out),
            "--save_steps",
            "100",
            "--temperature",
            "0.7",
            "--vllm_importance_sampling_correction",
            "true",
            "--learning_rate",
            "1e-12",
        ]
    )
    assert code == 0, capfd.readouterr().err[-2000:]
    steps = [r for r in map(json.loads, (out / "metrics.jsonl").read_text().splitlines()) if "loss" in r]
    assert len(steps) == 1 and 0.0 < steps[0]["tandem/senior_share"] < 1.0
    assert steps[0]["sampling/sampling_logp_difference/max"] < 1e-3, steps[
        0
    ]  # vLLM's senior = the adapter's model

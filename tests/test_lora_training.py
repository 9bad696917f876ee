"""LoRA seniors through the real `trlvr train` / `trlvr eval` entry points on the shipped toy models:
both arms train adapters only, `junior: self` is the adapters-off base, TRL's KL reference under PEFT
is that same base, and a run's adapter folder evaluates as `--senior RUN/final`."""

from __future__ import annotations

import hashlib
import json
import shutil

import pytest
import torch

from trlvr.cli.main import main as cli
from trlvr.toy.task import make_splits
from trlvr.toy.world import ASSETS_DIR, _rows, _write_jsonl

SMALL = [
    "--per_device_train_batch_size",
    "32",
    "--num_generations",
    "4",
    "--max_completion_length",
    "64",
    "--use_cpu",
    "true",
    "--use_peft",
    "true",
    "--lora_r",
    "4",
    "--learning_rate",
    "1e-2",
]


@pytest.fixture
def toy(tmp_path):
    shutil.copytree(ASSETS_DIR / "senior", tmp_path / "senior")
    shutil.copytree(ASSETS_DIR / "junior", tmp_path / "junior")
    _write_jsonl(tmp_path / "train.jsonl", _rows(make_splits(64, 8, seed=0)[0]))
    _write_jsonl(tmp_path / "test.jsonl", _rows(make_splits(64, 8, seed=0)[1]))
    return tmp_path


def train(toy, *extra):
    return cli(
        [
            "train",
            "--config",
            "toy",
            "--holdout",
            "0",
            "--senior",
            str(toy / "senior"),
            "--dataset",
            str(toy / "train.jsonl"),
            "--output_dir",
            str(toy / "run"),
            *SMALL,
            *extra,
        ]
    )


def digest(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def adapter_weights(final) -> dict:
    from safetensors.torch import load_file

    return load_file(final / "adapter_model.safetensors")


@pytest.fixture(scope="module")
def lora_runs(tmp_path_factory):
    """arm -> a toy folder whose run/ is that arm's 2-step LoRA run (`junior: self`), trained once per module."""
    runs = {}

    def trained(arm: str):
        if arm not in runs:
            root = tmp_path_factory.mktemp(f"lora-{arm}")
            shutil.copytree(ASSETS_DIR / "senior", root / "senior")
            _write_jsonl(root / "train.jsonl", _rows(make_splits(64, 8, seed=0)[0]))
            _write_jsonl(root / "test.jsonl", _rows(make_splits(64, 8, seed=0)[1]))
            assert train(root, "--arm", arm, "--junior", "self", "--max_steps", "2") == 0
            runs[arm] = root
        return runs[arm]

    return trained


@pytest.mark.parametrize("arm", ["tandem", "grpo"])
def test_lora_arms_train_adapters_only_and_save_them(lora_runs, arm):
    base_before = digest(
        ASSETS_DIR / "senior" / "model.safetensors"
    )  # what the run's senior/ was copied from
    toy = lora_runs(arm)
    final = toy / "run" / "final"
    assert (final / "adapter_config.json").is_file() and not (final / "model.safetensors").exists()
    lora_b = [v for k, v in adapter_weights(final).items() if "lora_B" in k]
    assert lora_b and any(v.abs().max() > 0 for v in lora_b)  # B starts at 0: training moved it
    assert digest(toy / "senior" / "model.safetensors") == base_before  # the base is never written
    assert json.loads((final / "adapter_config.json").read_text())["r"] == 4


def test_lora_run_evaluates_against_its_base_with_junior_self(lora_runs, tmp_path):
    toy = lora_runs("tandem")  # the tandem arm's LoRA run above
    out = tmp_path / "eval"
    argv = [
        "eval",
        "--senior",
        str(toy / "run" / "final"),
        "--junior",
        "self",
        "--data",
        f"toy={toy / 'test.jsonl'}",
        "--limit",
        "4",
        "--n",
        "1",
        "--k",
        "1",
        "--suite",
        "solo,handoff",
        "--max-new-tokens",
        "24",
        "--dtype",
        "float32",
        "--out",
        str(out),
        "--no-progress",
    ]
    assert cli(argv) == 0
    res = json.loads((out / "results.json").read_text())
    macro = res["macro"]["metrics"]
    assert 0 <= macro["solo/pass@1"]["value"] <= 1 and "handoff/pass@1" in macro
    assert res["config"]["models"]["junior"] == "self"


def test_lora_kl_reference_is_the_adapters_off_base(toy):
    """With PEFT, TRL builds no reference model; its reference log-probs come from the senior with
    adapters disabled, which must be exactly the base weights (= the `junior: self`)."""
    from transformers import AutoModelForCausalLM

    from trlvr.config import load_run_config
    from trlvr.training import build_trainer

    tandem, args = load_run_config(
        "toy",
        {
            "arm": "tandem",
            "senior": str(toy / "senior"),
            "junior": "self",
            "holdout": 0,
            "dataset": str(toy / "train.jsonl"),
            "output_dir": str(toy / "kl"),
            "use_peft": True,
            "lora_r": 4,
            "beta": 0.1,
            "kl_ref": "junior",
            "per_device_train_batch_size": 16,
            "num_generations": 4,
            "max_completion_length": 24,
            "max_steps": 1,
        },
    )
    trainer = build_trainer(tandem, args)
    assert trainer.ref_model is None  # TRL's PEFT path: the reference is the adapters-off model
    model = trainer.accelerator.unwrap_model(trainer.model)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.5, generator=torch.Generator().manual_seed(0))
    base = AutoModelForCausalLM.from_pretrained(str(toy / "senior")).eval()
    ids = torch.tensor([[5, 17, 9, 30, 2, 11]])
    model.eval()
    with torch.no_grad(), model.disable_adapter():
        ref_logits = model(ids).logits
    with torch.no_grad():
        assert not torch.allclose(model(ids).logits, ref_logits, atol=1e-3)  # adapters act
        assert torch.allclose(ref_logits, base(ids).logits, atol=1e-5)  # reference = base weights
        assert torch.allclose(trainer.junior(ids).logits, ref_logits, atol=1e-5)  # junior: self = reference
    trainer.train()
    assert any("kl" in h for h in trainer.state.log_history)


def test_lora_kl_to_another_junior_is_refused(toy, capsys):
    assert (
        train(
            toy,
            "--arm",
            "grpo",
            "--junior",
            str(toy / "junior"),
            "--beta",
            "0.1",
            "--kl_ref",
            "junior",
            "--max_steps",
            "1",
        )
        == 2
    )
    assert (
        "with use_peft, TRL's KL reference is the senior's base with adapters off" in capsys.readouterr().err
    )

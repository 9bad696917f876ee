"""RL from a PEFT adapter folder: `senior:` names an adapter (adapter_config.json + weights, its base in
base_model_name_or_path). Training continues that adapter (not a fresh LoRA over the base that replaces
it), `junior: self` is its base with the adapters off, TRL's KL reference under `kl_ref: junior` is that
junior, and select / eval / smoke take such runs. On the shipped toy pair: an adapter with non-zero B
over the toy senior, so the adapter's model and the base differ."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from trlvr.cli.main import main as cli
from trlvr.toy.task import make_splits
from trlvr.toy.world import ASSETS_DIR, _rows, _write_jsonl

IDS = torch.tensor([[5, 17, 9, 30, 2, 11, 40, 3]])
SMALL = [
    "--per_device_train_batch_size",
    "8",
    "--num_generations",
    "4",
    "--max_completion_length",
    "16",
    "--use_cpu",
    "true",
    "--save_steps",
    "1",
]


def make_adapter(
    base_dir, out_dir, r: int = 4, alpha: int = 8, bias: str = "none", seed: int = 0, tokenizer: bool = True
):
    """A LoRA adapter over `base_dir` whose B matrices are non-zero (so it changes the logits), saved to
    `out_dir` with the base's tokenizer (as an SFT trainer saves it) unless `tokenizer` is False."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    base = AutoModelForCausalLM.from_pretrained(str(base_dir))
    model = get_peft_model(
        base, LoraConfig(task_type="CAUSAL_LM", r=r, lora_alpha=alpha, target_modules="all-linear", bias=bias)
    )
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.copy_(torch.randn(p.shape, generator=g) * 0.5)
    model.save_pretrained(str(out_dir))
    if tokenizer:
        AutoTokenizer.from_pretrained(str(base_dir)).save_pretrained(str(out_dir))
    return out_dir


def logits(model) -> torch.Tensor:
    model.eval()
    with torch.no_grad():
        return model(IDS).logits


def base_logits(path) -> torch.Tensor:
    from transformers import AutoModelForCausalLM

    return logits(AutoModelForCausalLM.from_pretrained(str(path)))


def adapter_logits(path) -> torch.Tensor:
    """The model at `path` loaded the way `trlvr eval` loads a senior (an adapter onto its base)."""
    from trlvr.models import load_model_or_adapter

    return logits(load_model_or_adapter(str(path), "test"))


@pytest.fixture(scope="module")
def toy(tmp_path_factory):
    root = tmp_path_factory.mktemp("adapter")
    shutil.copytree(ASSETS_DIR / "senior", root / "senior")
    make_adapter(root / "senior", root / "sft")
    train, test = make_splits(64, 8, seed=0)
    _write_jsonl(root / "train.jsonl", _rows(train))
    _write_jsonl(root / "test.jsonl", _rows(test))
    return root


def train(toy, out, *extra):
    return cli(
        [
            "train",
            "--config",
            "toy",
            "--holdout",
            "0",
            "--senior",
            str(toy / "sft"),
            "--junior",
            "self",
            "--use_peft",
            "true",
            "--dataset",
            str(toy / "train.jsonl"),
            "--output_dir",
            str(out),
            *SMALL,
            *extra,
        ]
    )


@pytest.fixture(scope="module")
def run(toy):
    """One tandem step at a negligible learning rate from the adapter: the run's senior is the adapter's model."""
    out = toy / "run"
    assert train(toy, out, "--arm", "tandem", "--max_steps", "1", "--learning_rate", "1e-12") == 0
    return out


def test_the_adapter_changes_the_logits(toy):
    assert (adapter_logits(toy / "sft") - base_logits(toy / "senior")).abs().max() > 0.1


def test_training_continues_the_adapter_not_a_fresh_one_over_the_base(toy, run):
    """Fails on a fresh LoRA named `default` replacing the loaded adapter: the saved senior would be the base."""
    want = adapter_logits(toy / "sft")
    for saved in (run / "final", run / "checkpoint-1"):
        assert (saved / "adapter_config.json").is_file() and not (saved / "model.safetensors").exists()
        got = adapter_logits(saved)
        torch.testing.assert_close(got, want, atol=1e-5, rtol=0)
        assert (got - base_logits(toy / "senior")).abs().max() > 0.1


def kl_trainer(toy, kl_ref: str):
    from trlvr.config import load_run_config
    from trlvr.training import build_trainer

    tandem, args = load_run_config(
        "toy",
        {
            "arm": "tandem",
            "senior": str(toy / "sft"),
            "junior": "self",
            "holdout": 0,
            "dataset": str(toy / "train.jsonl"),
            "output_dir": str(toy / f"kl-{kl_ref}"),
            "use_peft": True,
            "beta": 0.1,
            "kl_ref": kl_ref,
            "use_cpu": True,
            "per_device_train_batch_size": 8,
            "num_generations": 4,
            "max_completion_length": 8,
            "max_steps": 1,
        },
    )
    return build_trainer(tandem, args)


def reference_logits(trainer) -> torch.Tensor:
    """The logits TRL's reference forward sees: its ref model, else the senior under TRL's own adapter switch."""
    from trl.trainer.utils import use_adapter

    assert trainer.ref_model is None  # a PEFT senior: TRL's reference is an adapter switch on the same model
    model = trainer.accelerator.unwrap_model(trainer.model)
    with use_adapter(model, adapter_name="ref" if "ref" in model.peft_config else None):
        return logits(model)


def test_kl_to_the_junior_is_the_base_with_adapters_off(toy):
    trainer = kl_trainer(toy, "junior")
    base = base_logits(toy / "senior")
    torch.testing.assert_close(reference_logits(trainer), base, atol=1e-5, rtol=0)
    torch.testing.assert_close(
        logits(trainer.junior), base, atol=1e-5, rtol=0
    )  # junior: self = the reference
    torch.testing.assert_close(
        logits(trainer.accelerator.unwrap_model(trainer.model)),
        adapter_logits(toy / "sft"),
        atol=1e-5,
        rtol=0,
    )  # the policy starts at the adapter
    model = trainer.accelerator.unwrap_model(trainer.model)
    assert list(model.peft_config) == ["default"]
    assert all(p.requires_grad for n, p in model.named_parameters() if "lora_" in n)  # the adapter trains
    assert not any(p.requires_grad for n, p in model.named_parameters() if "lora_" not in n)


def test_kl_to_the_initial_senior_is_the_adapter(toy):
    trainer = kl_trainer(toy, "initial")
    torch.testing.assert_close(reference_logits(trainer), adapter_logits(toy / "sft"), atol=1e-5, rtol=0)
    torch.testing.assert_close(logits(trainer.junior), base_logits(toy / "senior"), atol=1e-5, rtol=0)


@pytest.mark.parametrize(
    "flags, message",
    [
        (
            ["--use_peft", "false", "--junior", str(ASSETS_DIR / "junior")],
            "is a LoRA adapter folder: set use_peft: true to continue training that adapter",
        ),
        (
            ["--use_peft", "true", "--junior", "self", "--lora_r", "8"],
            "lora_r: 8 differs from the adapter's r = 4 (",
        ),
        (
            ["--use_peft", "true", "--junior", "self", "--lora_alpha", "4"],
            "lora_alpha: 4 differs from the adapter's lora_alpha = 8 (",
        ),
        (
            ["--use_peft", "true", "--junior", "self", "--lora_target_modules", "q_proj,v_proj"],
            "lora_target_modules: 'q_proj,v_proj' differs from the adapter's target_modules",
        ),
    ],
)
def test_adapter_runs_that_cannot_work_are_refused_before_weights_load(toy, capsys, flags, message):
    argv = [
        "train",
        "--config",
        "toy",
        "--holdout",
        "0",
        "--senior",
        str(toy / "sft"),
        "--dataset",
        str(toy / "train.jsonl"),
        "--output_dir",
        str(toy / "refused"),
        *SMALL,
        "--max_steps",
        "1",
        *flags,
    ]
    assert cli([*argv, "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert cli(argv) == 2 and message in capsys.readouterr().err
    assert not (toy / "refused" / "final").exists()


def test_settings_equal_to_the_adapters_are_accepted(toy, capsys):
    argv = [
        "train",
        "--config",
        "toy",
        "--holdout",
        "0",
        "--senior",
        str(toy / "sft"),
        "--junior",
        "self",
        "--use_peft",
        "true",
        "--lora_r",
        "4",
        "--lora_alpha",
        "8",
        "--dataset",
        str(toy / "train.jsonl"),
        "--output_dir",
        str(toy / "dry"),
        *SMALL,
        "--dry-run",
    ]
    assert cli(argv) == 0
    assert "config ok" in capsys.readouterr().out


def test_an_adapter_without_its_own_tokenizer_uses_its_bases(toy):
    make_adapter(toy / "senior", toy / "sft-notok", seed=1, tokenizer=False)
    out = toy / "run-notok"
    assert (
        cli(
            [
                "train",
                "--config",
                "toy",
                "--holdout",
                "0",
                "--senior",
                str(toy / "sft-notok"),
                "--junior",
                "self",
                "--arm",
                "grpo",
                "--use_peft",
                "true",
                "--dataset",
                str(toy / "train.jsonl"),
                "--output_dir",
                str(out),
                *SMALL,
                "--max_steps",
                "1",
                "--learning_rate",
                "1e-12",
            ]
        )
        == 0
    )
    torch.testing.assert_close(
        adapter_logits(out / "final"), adapter_logits(toy / "sft-notok"), atol=1e-5, rtol=0
    )


def test_eval_and_select_take_a_continued_adapter_run(toy, run):
    out = toy / "eval"
    assert (
        cli(
            [
                "eval",
                "--senior",
                str(run / "final"),
                "--junior",
                "self",
                "--data",
                f"toy={toy / 'test.jsonl'}",
                "--limit",
                "2",
                "--n",
                "1",
                "--k",
                "1",
                "--suite",
                "solo,handoff",
                "--max-new-tokens",
                "12",
                "--dtype",
                "float32",
                "--out",
                str(out),
                "--no-progress",
            ]
        )
        == 0
    )
    res = json.loads((out / "results.json").read_text())
    assert res["config"]["models"]["junior"] == "self" and "handoff/pass@1" in res["macro"]["metrics"]
    assert (
        cli(
            [
                "select",
                str(run),
                "--val",
                str(toy / "test.jsonl"),
                "--limit",
                "2",
                "--n",
                "1",
                "--metric",
                "handoff/pass@1",
                "--include-initial",
                "--max-new-tokens",
                "12",
                "--no-progress",
            ]
        )
        == 0
    )
    chosen = json.loads((run / "selected.json").read_text())
    assert [c["step"] for c in chosen["table"]] == [0, 1]
    step0 = json.loads((run / "select" / "test" / "step-0" / "results.json").read_text())["config"]["models"]
    assert step0["junior"] == "self" and step0["senior"].endswith(
        "sft"
    )  # the starting adapter, with its base


@pytest.mark.slow  # a full smoke (both arms, a selection, an evaluation); its parts on an adapter senior run here:
def test_smoke_takes_an_adapter_senior(
    toy,
):  # training, eval and select above, smoke's own checks in test_smoke.py
    out = toy / "smoke"
    code = cli(
        [
            "smoke",
            "--config",
            "toy",
            "--out",
            str(out),
            "--steps",
            "1",
            "--problems",
            "2",
            "--set",
            f"senior={toy / 'sft'}",
            "--set",
            "junior=self",
            "--set",
            "use_peft=true",
            "--set",
            f"dataset={toy / 'train.jsonl'}",
            "--set",
            "per_device_train_batch_size=8",
            "--set",
            "max_completion_length=12",
        ]
    )
    report = json.loads((out / "smoke.json").read_text())
    assert code == 0 and report["passed"], report["checks"]


SMOLLM2 = Path(__file__).resolve().parents[1] / "models" / "smollm2-135m-instruct"  # `make real-models`


@pytest.mark.slow
@pytest.mark.skipif(
    not (SMOLLM2 / "config.json").is_file(), reason="SmolLM2 weights absent (make real-models)"
)
def test_smollm2_continues_its_adapter_and_kl_to_the_junior_is_the_base(tmp_path):
    """The same invariants on a real pretrained LM: one step at lr 1e-12 from a logit-changing adapter keeps
    the adapter's model; with beta > 0 and kl_ref: junior, TRL's reference is the base with adapters off."""
    from helpers import write_sum_problems

    make_adapter(SMOLLM2, tmp_path / "sft", r=4, alpha=8)
    write_sum_problems(tmp_path / "train.jsonl", 16)
    out = tmp_path / "run"
    assert (
        cli(
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
                "--arm",
                "tandem",
                "--use_peft",
                "true",
                "--dataset",
                str(tmp_path / "train.jsonl"),
                "--output_dir",
                str(out),
                "--per_device_train_batch_size",
                "4",
                "--num_generations",
                "4",
                "--max_completion_length",
                "8",
                "--use_cpu",
                "true",
                "--max_steps",
                "1",
                "--learning_rate",
                "1e-12",
                "--beta",
                "0.04",
                "--kl_ref",
                "junior",
            ]
        )
        == 0
    )
    want = adapter_logits(tmp_path / "sft")
    assert (want - base_logits(SMOLLM2)).abs().max() > 0.1
    torch.testing.assert_close(adapter_logits(out / "final"), want, atol=1e-4, rtol=0)
    from trlvr.config import load_run_config
    from trlvr.training import build_trainer

    tandem, args = load_run_config(
        "toy",
        {
            "arm": "tandem",
            "senior": str(tmp_path / "sft"),
            "junior": "self",
            "holdout": 0,
            "dataset": str(tmp_path / "train.jsonl"),
            "output_dir": str(tmp_path / "kl"),
            "use_peft": True,
            "beta": 0.04,
            "kl_ref": "junior",
            "use_cpu": True,
            "per_device_train_batch_size": 4,
            "num_generations": 4,
            "max_completion_length": 8,
            "max_steps": 1,
        },
    )
    torch.testing.assert_close(
        reference_logits(build_trainer(tandem, args)), base_logits(SMOLLM2), atol=1e-4, rtol=0
    )

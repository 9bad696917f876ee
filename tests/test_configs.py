"""Every shipped YAML loads, validates against TandemConfig / GRPOConfig, and comments every field."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from trlvr.config import TandemConfig, apply_overrides, grpo_field_names, load_run_config, split_sections

ROOT = Path(__file__).resolve().parents[1]
RUN_CONFIGS = sorted((ROOT / "configs").glob("*.yaml")) + sorted(
    p for p in (ROOT / "recipes").glob("*.yaml") if not p.name.startswith("accelerate")
)
ALL_YAML = sorted((ROOT / "configs").glob("*.yaml")) + sorted((ROOT / "recipes").glob("*.yaml"))
KEY = re.compile(r"^\s*[A-Za-z_][\w.]*\s*:")


def test_configs_exist():
    names = {p.name for p in ALL_YAML}
    assert {
        "toy-tandem.yaml",
        "toy-grpo.yaml",
        "qwen3-4b-tandem-deepscaler.yaml",
        "qwen3-4b-grpo-deepscaler.yaml",
        "accelerate-zero2-2gpu.yaml",
    } <= names


@pytest.mark.parametrize("path", RUN_CONFIGS, ids=lambda p: p.name)
def test_run_config_validates(path, monkeypatch):
    tandem, grpo = load_run_config(str(path))
    assert isinstance(tandem, TandemConfig)
    from trl import GRPOConfig

    if not grpo.get("use_cpu"):  # GPU recipes: validate the fields on a CPU machine
        grpo = dict(grpo, bf16=False, use_cpu=True)
    args = GRPOConfig(**grpo)
    assert args.loss_type == "dapo" and args.epsilon == 0.2
    assert args.generation_batch_size % args.num_generations == 0


@pytest.mark.parametrize("path", ALL_YAML, ids=lambda p: p.name)
def test_every_field_has_a_comment_above_and_a_launch_header(path):
    lines = path.read_text().splitlines()
    assert lines[0].startswith("#") and any("Launch" in line for line in lines[:4]), (
        "header with launch command"
    )
    for i, line in enumerate(lines):
        if KEY.match(line):
            prev = lines[i - 1].strip() if i else ""
            assert prev.startswith("#"), f"{path.name}:{i + 1}: field without a comment above: {line.strip()}"


def test_accelerate_recipe():
    cfg = yaml.safe_load((ROOT / "recipes/accelerate-zero2-2gpu.yaml").read_text())
    assert cfg["distributed_type"] == "DEEPSPEED" and cfg["num_processes"] == 2
    assert cfg["deepspeed_config"]["zero_stage"] == 2


def test_paper_numbers_in_recipes():
    for name in ("qwen3-4b-tandem-deepscaler.yaml", "qwen3-4b-grpo-deepscaler.yaml"):
        tandem, g = load_run_config(str(ROOT / "recipes" / name))
        assert tandem.senior == "Qwen/Qwen3-4B-Instruct-2507" and tandem.max_prompt_length == 1024
        assert g["learning_rate"] == 1e-6 and g["lr_scheduler_type"] == "constant" and g["beta"] == 0.0
        assert g["temperature"] == 0.6 and g["top_p"] == 1.0 and g["max_completion_length"] == 3000
        per_step = g["per_device_train_batch_size"] * 2  # 2 GPUs
        assert per_step * g["steps_per_generation"] == 16 * 8  # 16 prompts x 8 rollouts per generation
        assert per_step * g["gradient_accumulation_steps"] == 8 * 8  # mini-batch of 8 prompts


def test_unknown_keys_are_named():
    fields = grpo_field_names()
    with pytest.raises(ValueError, match="tandem.bogus"):
        split_sections({"tandem": {"bogus": 1}}, fields)
    with pytest.raises(ValueError, match="grpo.bogus"):
        split_sections({"grpo": {"bogus": 1}}, fields)
    with pytest.raises(ValueError, match="'nope'"):
        apply_overrides({}, {}, {"nope": 1}, fields)
    t, g = apply_overrides(
        {"p": 0.5}, {"beta": 0.0}, {"p": 0.3, "grpo.beta": 0.01, "tandem.max_gap": 8}, fields
    )
    assert t == {"p": 0.3, "max_gap": 8} and g == {"beta": 0.01}


def test_tandem_fields_do_not_collide_with_grpo_fields():
    from trlvr.config import TANDEM_FIELDS

    assert not TANDEM_FIELDS & grpo_field_names()


def test_tandem_config_errors_name_the_field():
    with pytest.raises(ValueError, match="tandem.arm"):
        TandemConfig(arm="ppo", senior="s")
    with pytest.raises(ValueError, match="tandem.junior"):
        TandemConfig(arm="tandem", senior="s")
    with pytest.raises(ValueError, match="tandem.p"):
        TandemConfig(senior="s", junior="j", p=1.5)
    with pytest.raises(ValueError, match="tandem.schedule"):
        TandemConfig(senior="s", junior="j", schedule="sentence")
    assert TandemConfig(arm="grpo", senior="s").schedule_kwargs() == ("solo", {"author": "senior"})


def test_cli_overrides(tmp_path):
    import argparse

    from trlvr.cli import train_cmd

    parser = argparse.ArgumentParser()
    train_cmd.make_parser(parser.add_subparsers(dest="command"))
    args = parser.parse_args(
        ["train", "--config", "c.yaml", "--p", "0.3", "--grpo.learning_rate=1e-6", "--resume"]
    )
    assert args.resume and train_cmd.parse_overrides(args.overrides) == {"p": 0.3, "grpo.learning_rate": 1e-6}
    path = ROOT / "configs/toy-tandem.yaml"
    tandem, grpo = load_run_config(str(path), {"p": 0.3, "grpo.max_steps": 3, "schedule": "token"})
    assert tandem.p == 0.3 and tandem.schedule == "token" and grpo["max_steps"] == 3

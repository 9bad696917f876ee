"""The trainer's side of the GPU (review finding 11; trlvr.trainer_memory): hand-counted bytes for Qwen3-4B,
every shipped recipe's trainer fits beside its engine on the GPU it states, and `train --dry-run` prints the
trainer's estimate and refuses, in one line naming the setting, a run that cannot fit."""

from __future__ import annotations

from pathlib import Path

import pytest

from trlvr.cli.main import main
from trlvr.config import load_run_config
from trlvr.memory import Stack, parse_size, read_config
from trlvr.trainer_memory import TrainerPlan, lora_params
from trlvr.training.memory_plan import launch_layout, run_plan, trainer_plan

ROOT = Path(__file__).resolve().parents[1]
RECIPES = sorted((ROOT / "recipes").glob("qwen3-*.yaml"))
P_4B = 4_022_468_096  # Qwen3-4B by hand: 36 x (2560*32*128*2 + 2*2560*8*128 + 3*2560*9728 + 2*2560 + 2*128) + 151936*2560 + 2560
SEQ = 1024 + 3000


def qwen3_4b(dtype="bfloat16"):
    return Stack.from_config("senior", read_config("Qwen/Qwen3-4B-Instruct-2507"), dtype)


def test_full_fine_tuning_bf16_zero2_on_two_gpus_by_hand():
    t = TrainerPlan(stack=qwen3_4b(), batch=4, sequence=SEQ, zero_stage=2, processes=2)
    assert t.stack.params == P_4B
    assert (t.weight_bytes, t.gradient_bytes, t.optimizer_bytes) == (2 * P_4B, P_4B, 6 * P_4B)  # 2P, 2P/2, 12P/2
    assert t.logit_bytes == 4 * SEQ * 151_936 * 4 == 9_782_247_424
    tokens = 4 * SEQ
    assert t.activation_bytes == 36 * tokens * 2560 * 2 + tokens * (2 * 9728 + 4 * 2560) * 2 == 3_922_788_352
    assert t.total_bytes == 9 * P_4B + 9_782_247_424 + 3_922_788_352 == 49_907_248_640  # 46.5 GiB
    h100 = parse_size("H100")
    assert t.room(h100, 0.3) == int(0.7 * h100) and t.problems("r", h100, 0.3) == []


def test_zero_stages_shard_what_the_zero_paper_says():
    stack = qwen3_4b()
    p = {z: TrainerPlan(stack=stack, batch=1, sequence=16, zero_stage=z, processes=4) for z in (0, 1, 2, 3)}
    static = {z: (t.weight_bytes, t.gradient_bytes, t.optimizer_bytes) for z, t in p.items()}
    assert static[0] == (2 * P_4B, 2 * P_4B, 4 * P_4B)  # torch AdamW in bf16: two bf16 moments, no master copy
    assert static[1] == (2 * P_4B, 2 * P_4B, 3 * P_4B)  # 12P / 4
    assert static[2] == (2 * P_4B, P_4B // 2, 3 * P_4B)
    assert static[3] == (P_4B // 2, P_4B // 2, 3 * P_4B)
    fp32 = TrainerPlan(stack=qwen3_4b("float32"), batch=1, sequence=16)
    assert (fp32.weight_bytes, fp32.gradient_bytes, fp32.optimizer_bytes) == (4 * P_4B, 4 * P_4B, 8 * P_4B)


def test_lora_counts_the_adapters_only_and_checkpointing_saves_activations():
    cfg = read_config("Qwen/Qwen3-4B-Instruct-2507")
    per_layer = (2560 + 4096) + 2 * (2560 + 1024) + (4096 + 2560) + 2 * (2560 + 9728) + (9728 + 2560)
    assert lora_params(cfg, 16) == 36 * 16 * per_layer == 33_030_144
    t = TrainerPlan(stack=qwen3_4b(), batch=2, sequence=SEQ, trainable=lora_params(cfg, 16))
    assert (t.weight_bytes, t.gradient_bytes, t.optimizer_bytes) == (2 * P_4B, 0, 16 * 33_030_144)
    no_ckpt = TrainerPlan(stack=qwen3_4b(), batch=2, sequence=SEQ, checkpointing=False)
    assert no_ckpt.activation_bytes == 36 * no_ckpt.stack.activation_bytes(2 * SEQ) > 5 * t.activation_bytes


def _layout(recipe: Path) -> tuple[int, int]:
    """The launch a recipe names in its header: the 2-GPU ZeRO-2 accelerate config, or one plain process."""
    return (2, 2) if "accelerate-zero2-2gpu.yaml" in recipe.read_text() else (0, 1)




@pytest.mark.parametrize("recipe", RECIPES, ids=lambda p: p.name)
@pytest.mark.parametrize("arm", ["tandem", "grpo"])
def test_every_shipped_recipe_s_trainer_fits_beside_its_engine(recipe, arm):
    tandem, grpo = load_run_config(recipe, {"arm": arm, "use_cpu": True, "bf16": False})
    zero, n = _layout(recipe)
    engine = run_plan(tandem, grpo)
    trainer = trainer_plan(tandem, grpo, zero_stage=zero, processes=n)
    assert trainer.problems(recipe.name, engine.gpu_memory, engine.share) == [], trainer.render()


def test_launch_layout_reads_accelerate_s_environment():
    assert launch_layout({}) == (0, 1)
    assert launch_layout({"ACCELERATE_USE_DEEPSPEED": "true", "ACCELERATE_DEEPSPEED_ZERO_STAGE": "2",
                          "WORLD_SIZE": "2"}) == (2, 2)  # fmt: skip
    assert launch_layout({"WORLD_SIZE": "4"}) == (0, 4)  # DDP / FSDP: no ZeRO accounting


def test_train_dry_run_prints_the_trainer_beside_the_engine_and_refuses_what_cannot_fit(capsys, monkeypatch):
    recipe = str(ROOT / "recipes" / "qwen3-4b-deepscaler.yaml")
    import trlvr.training.memory_plan

    # as under `accelerate launch --config_file recipes/accelerate-zero2-2gpu.yaml` (its environment is read by
    # launch_layout, tested above; a WORLD_SIZE here would make TRL's config wait for a process group)
    monkeypatch.setattr(trlvr.training.memory_plan, "launch_layout", lambda: (2, 2))
    assert main(["train", "--config", recipe, "--backend", "vllm", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "\nmemory plan\n" in out and "trainer (per GPU; full fine-tuning, ZeRO-2 over 2 processes" in out
    assert "total ~46.5 GiB" in out and "fits: trainer ~46.5 of the 56.0 GiB left to it" in out
    # 16 rows of 4024 tokens: 36 GiB of fp32 logits alone
    assert main(["train", "--config", recipe, "--backend", "vllm", "--per_device_train_batch_size", "16",
                 "--dry-run"]) == 2  # fmt: skip
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "the trainer needs ~" in err[0] and "more than 95% of the" in err[0] and "lower per_device_train_batch_size" in err[0], err
    assert "vllm_gpu_memory_utilization 0.3" in err[0]

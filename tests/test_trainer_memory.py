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


GIB = 2**30


def test_full_fine_tuning_bf16_zero2_on_two_gpus_by_hand():
    """Every term counted by hand (module docstring of trlvr.trainer_memory): no B x S x V logits (TRL 1.16's
    fused LM head), DeepSpeed's fp32 gradient partition at the step, peak = max(backward, step)."""
    t = TrainerPlan(stack=qwen3_4b(), batch=4, sequence=SEQ, zero_stage=2, processes=2)
    assert t.stack.params == P_4B
    assert (t.weight_bytes, t.gradient_bytes, t.optimizer_bytes) == (
        2 * P_4B,
        P_4B,
        6 * P_4B,
    )  # 2P, 2P/2, 12P/2
    tokens = 4 * SEQ
    assert t.checkpoint_bytes == 36 * tokens * 2560 * 2 == 2_966_814_720
    assert t.layer_bytes == 2 * tokens * (2 * 9728 + 4 * 2560) * 2 == 1_911_947_264
    # one 4096 x 32768 bf16 tile + fp32 grads of the head's input (tokens x H) and weight (V x H)
    assert t.head_bytes == 4096 * 32768 * 2 + tokens * 2560 * 4 + 151_936 * 2560 * 4 == 1_989_083_136
    assert t.backward_bytes == 9 * P_4B + 2_966_814_720 + 1_989_083_136
    assert t.step_bytes == 9 * P_4B + 4 * P_4B // 2 == t.total_bytes  # the fp32 gradient partition: 4P/2
    assert t.step_extra_bytes == 2 * P_4B // 2  # a flattened bf16 copy, printed as "up to"
    h100 = parse_size("H100")
    assert t.room(h100, 0.3) == int(0.7 * h100) and t.problems("r", h100, 0.3) == []


# The review's worked table (shared/design/vllm-gpu-review-3.md, "Trainer, ZeRO-2 over 2", Qwen3-4B, A100-80GB):
# (term, the review's GiB, tolerance GiB). Its backward range 38.5-39.5 is met within 0.5 GiB: this plan takes
# the larger of the head's and a layer's transients (the head's backward ends before a layer's starts). Its
# "one recomputed layer forward + backward ~+1.8-2.5" is layer_bytes, 2.15 +- 0.4.
REVIEW = [
    ("weight_bytes", 7.49, 0.01),
    ("gradient_bytes", 3.75, 0.01),
    ("optimizer_bytes", 22.47, 0.01),
    ("static_bytes", 33.7, 0.05),
    ("checkpoint_bytes", 2.76, 0.01),
    ("layer_bytes", 2.15, 0.4),
    ("backward_bytes", 39.0, 1.0),
    ("step_transient_bytes", 7.49, 0.01),
    ("step_extra_bytes", 3.75, 0.01),
    ("step_bytes", 41.2, 0.05),
    ("total_bytes", 41.2, 0.05),
]


@pytest.mark.parametrize("term, gib, tol", REVIEW, ids=[r[0] for r in REVIEW])
def test_the_review_s_worked_table(term, gib, tol):
    t = TrainerPlan(stack=qwen3_4b(), batch=4, sequence=SEQ, zero_stage=2, processes=2)
    assert abs(getattr(t, term) / GIB - gib) <= tol, (term, getattr(t, term) / GIB)


def test_the_review_s_kl_junior_and_the_whole_gpu():
    """kl-junior: static 41.2 (a 7.5 GiB reference), step peak ~48.7 GiB; the main recipe's GPU: engine 24.0 +
    trainer 41-45 + CUDA context ~1-1.5 = ~66-70 of ~79 GiB."""
    ref = qwen3_4b().weight_bytes
    kl = TrainerPlan(stack=qwen3_4b(), batch=2, sequence=SEQ, zero_stage=2, processes=2, frozen_bytes=ref)
    assert abs(kl.static_bytes / GIB - 41.2) <= 0.05 and abs(kl.total_bytes / GIB - 48.7) <= 0.05
    main_run = TrainerPlan(stack=qwen3_4b(), batch=4, sequence=SEQ, zero_stage=2, processes=2)
    whole = 0.3 * parse_size("A100-80GB") + main_run.total_bytes + main_run.step_extra_bytes
    assert 66 <= whole / GIB <= 70


def test_zero_stages_shard_what_the_zero_paper_says():
    stack = qwen3_4b()
    p = {z: TrainerPlan(stack=stack, batch=1, sequence=16, zero_stage=z, processes=4) for z in (0, 1, 2, 3)}
    static = {z: (t.weight_bytes, t.gradient_bytes, t.optimizer_bytes) for z, t in p.items()}
    assert static[0] == (
        2 * P_4B,
        2 * P_4B,
        4 * P_4B,
    )  # torch AdamW in bf16: two bf16 moments, no master copy
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
    assert launch_layout(
        {"ACCELERATE_USE_DEEPSPEED": "true", "ACCELERATE_DEEPSPEED_ZERO_STAGE": "2", "WORLD_SIZE": "2"}
    ) == (2, 2)
    assert launch_layout({"WORLD_SIZE": "4"}) == (0, 4)  # DDP / FSDP: no ZeRO accounting


def test_train_dry_run_prints_the_trainer_beside_the_engine_and_refuses_what_cannot_fit(capsys, monkeypatch):
    recipe = str(ROOT / "recipes" / "qwen3-4b-deepscaler.yaml")
    import trlvr.training.memory_plan

    # as under `accelerate launch` (its environment is read by launch_layout, tested above; a WORLD_SIZE here
    # would make TRL's config wait for a process group)
    monkeypatch.setattr(trlvr.training.memory_plan, "launch_layout", lambda: (2, 2))
    monkeypatch.setenv("WORLD_SIZE", "1")
    assert main(["train", "--config", recipe, "--backend", "vllm", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "\nmemory plan\n" in out and "trainer (per GPU; full fine-tuning, ZeRO-2 over 2 processes" in out
    assert (
        "peak ~41.2 GiB = max(backward, step)" in out
        and "fits: trainer ~41.2 of the 52.0 GiB left to it" in out
    )
    # 32 rows of 4024 tokens: 22 GiB of checkpointed layer inputs alone
    assert (
        main(
            [
                "train",
                "--config",
                recipe,
                "--backend",
                "vllm",
                "--per_device_train_batch_size",
                "32",
                "--dry-run",
            ]
        )
        == 2
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert (
        len(err) == 1
        and "the trainer needs ~" in err[0]
        and "more than 95% of the" in err[0]
        and "lower per_device_train_batch_size" in err[0]
    ), err
    assert "vllm_gpu_memory_utilization 0.35" in err[0]


def test_dry_run_plans_the_recipe_s_2_gpu_launch_and_its_disk_on_a_cpu_box(capsys, tmp_path):
    """No `accelerate launch`: the ZeRO stage and processes come from the accelerate config the recipe names
    (its Launch line), --config_file, or --processes/--zero-stage; the disk a run will use is printed."""
    out_dir = ["--output_dir", str(tmp_path / "run")]
    assert main(["train", "--config", "qwen3-4b-deepscaler", "--dry-run", *out_dir]) == 0
    out = capsys.readouterr().out
    assert "trainer (per GPU; full fine-tuning, ZeRO-2 over 2 processes" in out, out
    assert "launch: from accelerate-zero2-2gpu.yaml" in out and "peak ~41.2 GiB" in out
    # 400 steps, a checkpoint every 20, all kept: 20 x 7.5 GiB weights + 52.4 GiB resume state (the newest two)
    # + final/
    w, resume = 2 * P_4B, 2 * P_4B + 12 * P_4B
    assert (
        f"disk: ~{(21 * w + 2 * resume) / GIB:.1f} GiB in {tmp_path / 'run'}: 20 checkpoint(s) x 7.5 GiB"
        in out
    )
    assert f"would be ~{(20 * (w + resume) + w) / 2**40:.2f} TiB" in out  # the review's ~1.3 TB
    assert (
        main(
            [
                "train",
                "--config",
                "qwen3-4b-deepscaler",
                "--dry-run",
                "--processes",
                "4",
                "--zero-stage",
                "3",
                *out_dir,
            ]
        )
        == 0
    )
    assert "ZeRO-3 over 4 processes" in capsys.readouterr().out
    one = tmp_path / "one.yaml"
    one.write_text("distributed_type: 'NO'\nnum_processes: 1\n")
    assert (
        main(["train", "--config", "qwen3-4b-deepscaler", "--dry-run", "--config_file", str(one), *out_dir])
        == 2
    )
    [line] = (
        capsys.readouterr().err.strip().splitlines()
    )  # the recipe's bf16 weights need ZeRO's fp32 master copy
    assert "full fine-tuning of bfloat16 weights" in line and "with no DeepSpeed ZeRO" in line, line
    assert (
        main(
            [
                "train",
                "--config",
                "qwen3-4b-deepscaler",
                "--dry-run",
                "--config_file",
                str(one),
                *out_dir,
                "--optim",
                "stable_adamw",
            ]
        )
        == 0
    )  # a bf16-safe optimizer (Kahan summation)
    assert "1 process(es), no ZeRO" in capsys.readouterr().out
    bad = tmp_path / "bad.yaml"
    bad.write_text("distributed_type: DEEPSPEED\nnum_processes: 2\ndeepspeed_config: {zero_stage: x}\n")
    assert (
        main(["train", "--config", "qwen3-4b-deepscaler", "--dry-run", "--config_file", str(bad), *out_dir])
        == 2
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"--config_file {bad}: deepspeed_config.zero_stage 'x'" in err[0], err
    assert main(["train", "--config", "qwen3-4b-deepscaler", "--dry-run", "--zero-stage", "5", *out_dir]) == 2
    assert "--zero-stage '5': expected 0, 1, 2 or 3" in capsys.readouterr().err


def test_the_lora_recipe_says_no_engine_share_not_not_given(capsys, tmp_path):
    assert (
        main(["train", "--config", "qwen3-4b-lora-self-1gpu", "--dry-run", "--output_dir", str(tmp_path)])
        == 0
    )
    out = capsys.readouterr().out
    assert "no engine share (backend hf" in out and "not given" not in out


def test_checkpoint_count():
    from types import SimpleNamespace

    from trlvr.training.memory_plan import checkpoint_count

    def g(**k):
        return SimpleNamespace(
            **{"save_strategy": "steps", "max_steps": 400, "save_steps": 20, "save_total_limit": None, **k}
        )

    assert checkpoint_count(g()) == 20 and checkpoint_count(g(save_total_limit=3)) == 3
    assert checkpoint_count(g(save_steps=0.25)) == 4 and checkpoint_count(g(save_strategy="no")) == 0


def test_sleep_mode_counts_both_phases():
    """Sleep mode: generating, the trainer's static state beside the engine's whole share; training, the peak
    beside the sleeping engine (its graph pools). The main recipe fits at 0.5 only with it; kl-junior, whose
    static holds the reference, does not at 0.5 (the line names the share to lower)."""
    a100 = parse_size("A100-80GB")
    main_run = TrainerPlan(stack=qwen3_4b(), batch=4, sequence=SEQ, zero_stage=2, processes=2)
    assert main_run.problems("r", a100, 0.5, sleep=True) == []
    assert main_run.room(a100, 0.5, sleep=True) == a100 - (1 << 30)
    [awake] = main_run.problems("r", a100, 0.5)  # without sleep: a 41.2 GiB peak beside a 40 GiB engine
    assert (
        "beside the engine's vllm_gpu_memory_utilization 0.5" in awake and "vllm_enable_sleep_mode" in awake
    )
    kl = TrainerPlan(
        stack=qwen3_4b(),
        batch=2,
        sequence=SEQ,
        zero_stage=2,
        processes=2,
        frozen_bytes=qwen3_4b().weight_bytes,
    )
    [line] = kl.problems("kl.yaml", a100, 0.5, sleep=True)
    assert line.startswith(
        "kl.yaml: while the engine generates, the trainer's static 41.2 GiB"
    ) and line.endswith("lower vllm_gpu_memory_utilization")
    assert kl.problems("kl.yaml", a100, 0.35, sleep=True) == []


def test_dry_run_plans_sleep_mode_on_a_cpu_box(capsys, tmp_path):
    argv = [
        "train",
        "--config",
        "qwen3-4b-deepscaler",
        "--dry-run",
        "--output_dir",
        str(tmp_path),
        "--vllm_enable_sleep_mode",
        "true",
        "--vllm_gpu_memory_utilization",
    ]
    assert main([*argv, "0.45"]) == 0
    out = capsys.readouterr().out
    assert (
        "sleep mode off)" in out
        and "(the engine asleep); while it generates: the trainer's static 33.7 GiB" in out
    )
    assert main([*argv, "0.6"]) == 2
    assert "while the engine generates" in capsys.readouterr().err

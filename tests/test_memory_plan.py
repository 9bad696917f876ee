"""The engine's memory plan (trlvr.memory, trlvr.training.memory_plan): counted from real Qwen3 configs, no
weights; every shipped GPU recipe passes it for the GPU it states; a run that cannot start is refused in one
line naming the setting to change; the context is derived from the run's lengths, never the model's limit."""

from __future__ import annotations

from pathlib import Path

import pytest
from transformers import LlamaConfig, LlamaForCausalLM, Qwen3Config, Qwen3ForCausalLM

from trlvr.cli.main import main
from trlvr.config import load_run_config
from trlvr.errors import UserError
from trlvr.memory import GPUS_MIB, MemoryPlan, Stack, param_count, parse_size, read_config
from trlvr.training.memory_plan import engine_context, run_plan

ROOT = Path(__file__).resolve().parents[1]
RECIPES = sorted((ROOT / "recipes").glob("qwen3-*.yaml"))


@pytest.mark.parametrize(
    "name, kv",
    [
        ("Qwen/Qwen3-0.6B", 114_688),
        ("Qwen/Qwen3-1.7B", 114_688),
        ("Qwen/Qwen3-4B", 147_456),
        ("Qwen/Qwen3-4B-Instruct-2507", 147_456),
    ],
)
def test_kv_bytes_per_token_of_the_real_qwen3_configs(name, kv):
    assert Stack.from_config(name, read_config(name), "bfloat16").kv_bytes_per_token == kv


@pytest.mark.parametrize(
    "cls, model, tied",
    [
        (Qwen3Config, Qwen3ForCausalLM, True),
        (Qwen3Config, Qwen3ForCausalLM, False),
        (LlamaConfig, LlamaForCausalLM, False),
    ],
)
def test_param_count_is_the_models_own(cls, model, tied):
    cfg = cls(
        vocab_size=97,
        hidden_size=48,
        intermediate_size=80,
        num_hidden_layers=3,
        num_attention_heads=6,
        num_key_value_heads=2,
        head_dim=8,
        tie_word_embeddings=tied,
    )
    m = model(cfg)
    assert param_count(cfg.to_dict()) == sum(p.numel() for p in m.parameters())


def test_sizes_and_gpu_names():
    assert parse_size("80GB") == 80 * 10**9
    assert parse_size("80GiB") == 80 * 2**30
    assert parse_size("h200") == parse_size("H200") == GPUS_MIB["H200"] << 20
    for bad in ("eighty", "", "-5GB", "0GB", "80 parsecs"):
        with pytest.raises(UserError, match="--gpu-memory"):
            parse_size(bad)


def _pair_4b(**kw) -> MemoryPlan:
    cfg = read_config("Qwen/Qwen3-4B-Instruct-2507")
    stacks = (Stack.from_config("senior", cfg, "bfloat16"), Stack.from_config("junior", cfg, "bfloat16"))
    return MemoryPlan(
        stacks=stacks,
        **{
            "prompt_len": 1024,
            "completion_len": 3000,
            "share": 0.3,
            "gpu_memory": parse_size("A100-80GB"),
            **kw,
        },
    )


def test_the_models_own_context_cannot_start_at_trls_share():
    # claim 1 of issue 35: at Qwen3-4B-2507's 262,144 positions one sequence needs ~77 GB of KV for both stacks
    plan = _pair_4b(max_model_len=262_144)
    assert plan.context * plan.kv_bytes_per_token > 70e9
    (line,) = plan.problems("recipes/x.yaml")
    assert (
        line.startswith("recipes/x.yaml: one sequence of 262144 tokens")
        and "lower vllm_max_model_length" in line
    )
    derived = _pair_4b()
    assert derived.context == 4024 and derived.problems("x") == []
    assert derived.concurrency >= 1


def test_a_share_below_the_weights_names_the_share():
    (line,) = _pair_4b(share=0.15).problems("r.yaml")
    assert "raise vllm_gpu_memory_utilization" in line and "less than the weights" in line


def test_a_context_beyond_the_models_positions_is_refused():
    cfg = read_config("Qwen/Qwen3-4B")  # 40,960 positions
    plan = MemoryPlan((Stack.from_config("senior", cfg),), prompt_len=40_000, completion_len=3000)
    assert "beyond the models' 40960 positions" in plan.problems("r")[0]


@pytest.mark.parametrize("recipe", RECIPES, ids=lambda p: p.name)
@pytest.mark.parametrize("arm", ["tandem", "grpo"])
def test_every_shipped_gpu_recipe_fits_the_gpu_it_states(recipe, arm):
    tandem, grpo = load_run_config(recipe, {"arm": arm, "backend": "vllm", "use_cpu": True, "bf16": False})
    assert tandem.gpu_memory, f"{recipe.name} states no gpu_memory"
    plan = run_plan(tandem, grpo)
    assert plan.problems(recipe.name) == []
    assert plan.context == engine_context(tandem, grpo) < 262_144
    assert len(plan.stacks) == (2 if arm == "tandem" else 1)


def test_train_dry_run_prints_the_plan_and_refuses_one_that_cannot_start(capsys):
    recipe = str(ROOT / "recipes" / "qwen3-4b-deepscaler.yaml")
    assert main(["train", "--config", recipe, "--backend", "vllm", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "\nmemory plan\n" in out and "294,912 B (every stack keeps every token)" in out
    assert main(["train", "--config", recipe, "--backend", "vllm", "--gpu-memory", "A10G", "--dry-run"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "raise vllm_gpu_memory_utilization" in err[0], err


def test_eval_dry_run_plans_the_engine_from_its_own_lengths_and_writes_nothing(tmp_path, capsys):
    from trlvr.toy.task import generate_problems
    from trlvr.toy.world import ASSETS_DIR, _rows, _write_jsonl

    data = tmp_path / "test.jsonl"
    _write_jsonl(data, _rows(generate_problems(5, "test", seed=0)))
    argv = [
        "eval",
        "--senior",
        str(ASSETS_DIR / "senior"),
        "--junior",
        str(ASSETS_DIR / "junior"),
        "--data",
        str(data),
        "--out",
        str(tmp_path / "ev"),
        "--max-new-tokens",
        "64",
        "--dry-run",
        "--backend",
        "vllm",
    ]
    assert main([*argv, "--gpu-memory", "80GB"]) == 0
    out = capsys.readouterr().out
    assert "\nmemory plan\n" in out and "(derived" not in out and "5 problems" in out
    longest = int(out.split("longest sequence: ")[1].split()[0])
    assert 64 < longest <= 64 + 128  # a toy prompt + the 64-token budget, not the models' 256 positions
    assert main([*argv, "--gpu-memory", "1GB"]) == 2  # 0.9 GB cannot hold the engine's own memory
    assert "raise the engine's gpu_memory_utilization" in capsys.readouterr().err
    assert not (tmp_path / "ev").exists()


def test_tensor_parallel_plans_one_gpus_share():
    one, two = _pair_4b(), _pair_4b(tensor_parallel=2)
    assert two.weight_bytes == one.weight_bytes // 2 and two.kv_bytes_per_token == one.kv_bytes_per_token // 2
    assert (
        two.kv_tokens > 2 * one.kv_tokens
    )  # half the weights leave more of the share for KV, at half the bytes


# --- issue 59: the checkpoints' disk against the output folder's free space ------------------------------------


def _free(n):
    import shutil

    return lambda path: shutil._ntuple_diskusage(10 * n + 1, 0, n)


def test_a_recipe_whose_checkpoints_do_not_fit_the_disk_is_refused_at_dry_run(tmp_path, monkeypatch, capsys):
    """The main recipe's ~262 GiB against 100 GiB free where its output_dir would be made: one line naming the
    folder (its nearest existing parent) and both figures; 300 GiB free passes."""
    import shutil

    from trlvr.training import memory_plan

    out = tmp_path / "runs" / "q"  # not made yet: its nearest existing parent's disk is asked
    argv = ["train", "--config", "qwen3-4b-deepscaler", "--output_dir", str(out), "--dry-run"]
    seen = []
    monkeypatch.setattr(shutil, "disk_usage", lambda p: seen.append(Path(p)) or _free(100 * 2**30)(p))
    assert main(argv) == 0  # planned on a machine without a GPU (for another one): said, not refused
    said = capsys.readouterr().out
    assert (
        "disk: the run's checkpoints need ~" in said
        and f"{tmp_path} has 100.0 GiB free (planned for another" in said
    )
    monkeypatch.setattr(memory_plan, "device_memory", lambda: 80 * 2**30)  # this machine's own GPU: the run's
    assert main(argv) == 2
    err = [ln for ln in capsys.readouterr().err.splitlines() if ": error: " in ln]
    assert len(err) == 1 and err[0].startswith("trlvr train: error: disk: the run's checkpoints need ~")
    need = float(err[0].split("need ~")[1].split(" GiB")[0])
    assert 200 < need < 300, err
    assert f"in {out} and {tmp_path} has 100.0 GiB free" in err[0] and seen[-1] == tmp_path
    monkeypatch.setattr(shutil, "disk_usage", _free(300 * 2**30))
    assert main(argv) == 0


def test_disk_problem_is_none_when_it_fits_and_a_resume_counts_what_is_there(tmp_path):
    from trlvr.training.memory_plan import check_disk, disk_problem, nearest_existing, run_disk_bytes

    assert nearest_existing(tmp_path / "a" / "b") == tmp_path
    assert disk_problem(tmp_path / "a", 10, _free(10)) is None
    line = disk_problem(tmp_path / "a", 11 * 2**30, _free(2**30))
    assert line.startswith(
        f"disk: the run's checkpoints need ~11.0 GiB in {tmp_path / 'a'} and {tmp_path} has 1.0 GiB free"
    )
    tandem, grpo = load_run_config(
        "qwen3-4b-deepscaler", {"output_dir": str(tmp_path), "bf16": False, "use_cpu": True}
    )
    need = run_disk_bytes(tandem, grpo, zero_stage=2, processes=2)
    with pytest.raises(UserError, match="^disk: "):
        check_disk(tandem, grpo, zero_stage=2, processes=2, disk_usage=_free(need - 1))
    check_disk(tandem, grpo, zero_stage=2, processes=2, disk_usage=_free(need))
    (tmp_path / "blob").write_bytes(b"x" * 4096)  # a resumed run's own files are part of what it needs
    check_disk(tandem, grpo, zero_stage=2, processes=2, resume=True, disk_usage=_free(need - 4096))


def test_a_run_start_without_the_disk_is_refused_before_anything_is_written(tmp_path, monkeypatch, capsys):
    import shutil

    from helpers import copy_toy_pair, toy_train_argv

    from trlvr.training import run

    toy = copy_toy_pair(tmp_path, 40)
    monkeypatch.setattr(shutil, "disk_usage", _free(1000))  # bytes: less than one toy checkpoint
    monkeypatch.setattr(
        run, "build_trainer", lambda *a, **k: pytest.fail("a trainer was built before the disk check")
    )
    assert main(toy_train_argv(toy, "--use_cpu", "true", "--max_steps", "2", "--save_steps", "1")) == 2
    err = [ln for ln in capsys.readouterr().err.splitlines() if ": error: " in ln]
    assert len(err) == 1 and f"in {toy / 'run'} and {toy} has 0.0 GiB free" in err[0], err
    assert not (toy / "run").exists()


def test_the_planned_launch_is_this_launch_then_the_flags_then_the_accelerate_config_then_the_recipes(
    tmp_path, monkeypatch
):
    """`launch_of`: under `accelerate launch` its environment; else --zero-stage/--processes; else --config_file;
    else the accelerate config the recipe's Launch line names; else one process without ZeRO."""
    from trlvr.training.memory_plan import launch_of

    monkeypatch.delenv("WORLD_SIZE", raising=False)
    own = tmp_path / "acc.yaml"
    own.write_text("distributed_type: DEEPSPEED\ndeepspeed_config:\n  zero_stage: 3\nnum_processes: 8\n")
    recipe = "qwen3-4b-deepscaler"  # names accelerate-zero2-2gpu on its Launch line
    assert launch_of("toy", {}) == (0, 1, "one process, no ZeRO")
    assert launch_of(recipe, {}) == (2, 2, "from accelerate-zero2-2gpu.yaml")
    assert launch_of(recipe, {"--config_file": str(own)}) == (3, 8, "from acc.yaml")
    assert launch_of(recipe, {"--processes": 4}) == (2, 4, "from --zero-stage/--processes")
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("ACCELERATE_USE_DEEPSPEED", "true")
    monkeypatch.setenv("ACCELERATE_DEEPSPEED_ZERO_STAGE", "1")
    assert launch_of(recipe, {"--processes": 4}) == (1, 2, "this launch")

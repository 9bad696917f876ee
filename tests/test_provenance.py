"""The machine a number came from (issue 18 item 6): versions, devices, dtype, threads, commit; training
records carry it, and a resume on another machine is a warning, never a refusal."""

from __future__ import annotations

import json
import shutil
import subprocess
from importlib import metadata

import pytest
import torch

from trlvr.provenance import DETERMINISM_KEYS, git_commit, machine
from trlvr.training.run_record import machine_differences


def test_machine_reports_this_process(monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        facts = machine(dtype="torch.bfloat16", device="cpu")
    finally:
        torch.set_num_threads(before)
    assert facts["torch_threads"] == 2 and facts["omp_num_threads"] == "3"
    assert facts["versions"]["torch"] == metadata.version("torch") == torch.__version__
    assert facts["versions"]["trl"] == metadata.version("trl")
    assert facts["versions"]["transformers"] == metadata.version("transformers")
    assert facts["versions"]["peft"] == metadata.version("peft")
    assert facts["dtype"] == "torch.bfloat16" and facts["device"] == "cpu" and facts["devices"][0] == "cpu"
    assert facts["cpu"] and facts["python"].count(".") == 2
    assert json.loads(json.dumps(facts)) == facts  # JSON-ready
    assert set(DETERMINISM_KEYS) <= set(facts)


def test_machine_differences_name_what_changed():
    a = machine()
    b = json.loads(json.dumps(a))
    assert machine_differences(a, b) == []
    b["torch_threads"] += 1
    b["versions"]["torch"] = "0.0.0"
    b["platform"] = "elsewhere"  # not a determinism fact
    assert machine_differences(a, b) == [
        f"torch_threads: {a['torch_threads']} -> {a['torch_threads'] + 1}",
        f"versions.torch: {a['versions']['torch']!r} -> '0.0.0'",
    ]
    assert machine_differences(None, b) == [] and machine_differences(a, {}) == []


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_git_commit_of_a_checkout_and_none_elsewhere(tmp_path):
    assert git_commit(tmp_path) is None  # not a checkout: no failure
    repo = tmp_path / "repo"
    repo.mkdir()

    def git(*args):
        return subprocess.run(
            ["git", "-C", str(repo), *args], check=True, capture_output=True, text=True
        ).stdout

    git("init", "-q")
    (repo / "f.txt").write_text("a")
    git("add", "f.txt")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "x")
    assert git_commit(repo) == {"commit": git("rev-parse", "HEAD").strip(), "dirty": False}
    (repo / "f.txt").write_text("b")
    assert git_commit(repo)["dirty"] is True


def test_training_records_the_machine_and_a_resume_elsewhere_only_warns(toy_run, capsys):
    from helpers import toy_run_argv

    from trlvr.cli.main import main as cli

    tmp_path, argv = toy_run, toy_run_argv(toy_run)  # a finished 2-step toy run (conftest)
    record = json.loads((tmp_path / "run" / "trlvr_run.json").read_text())
    first = record["machine"]
    assert record["pairing"] == "lockstep"  # one vocabulary: the mode `pairing: auto` chose is recorded
    assert first["torch_threads"] == torch.get_num_threads() and first["dtype"] == "torch.float32"
    assert first["device"] == "cpu" and "earlier_machines" not in record
    capsys.readouterr()
    shutil.rmtree(
        tmp_path / "run" / "final"
    )  # killed before final/: a finished run is never resumed to more steps
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(before + 1)
        assert cli([*argv, "--max_steps", "3", "--resume"]) == 0  # recorded, not compared: no refusal
    finally:
        torch.set_num_threads(before)
    warned = [line for line in capsys.readouterr().err.splitlines() if "another machine" in line]
    assert len(warned) == 1 and f"torch_threads: {before} -> {before + 1}" in warned[0]
    record = json.loads((tmp_path / "run" / "trlvr_run.json").read_text())
    assert record["machine"]["torch_threads"] == before + 1 and record["earlier_machines"] == [first]

"""`make gpu-bundle` (bench/gpu/bundle.py) and the one-call GPU check (bench/gpu/run.sh): which wheels the
bundle carries, and that run.sh stops with exit 2 and one line on a missing wheel or bundle. The whole
check runs end to end on a CPU stand-in by hand (see run.sh's header); it installs packages, so not here."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench" / "gpu"))

import bundle  # noqa: E402


def test_the_bundle_carries_what_the_image_lacks_and_nothing_it_has():
    names = bundle.wanted("3.12")
    assert {"trl", "datasets", "math-verify", "reasoning-gym"} <= set(names)
    assert not {"torch", "transformers", "accelerate", "peft", "numpy", "pyarrow", "matplotlib"} & set(names)
    assert not set(names) & bundle.image_packages()
    from importlib.metadata import version

    assert names["trl"] == version("trl") == "1.16.0"  # pinned to the versions trlvr runs with here


def _run_sh(tmp_path, wheels_txt: str | None, toy: bool = True):
    gpu = tmp_path / "gpu"
    (gpu / "wheels").mkdir(parents=True)
    if toy:
        (gpu / "toy" / "senior").mkdir(parents=True)
    if wheels_txt is not None:
        (gpu / "wheels.txt").write_text(wheels_txt)
    env = {**os.environ, "OUT": str(tmp_path / "out"), "GPU": str(gpu), "PY": sys.executable,
           "SITE": str(tmp_path / "site")}  # fmt: skip
    return subprocess.run(["bash", str(ROOT / "bench" / "gpu" / "run.sh")], env=env, capture_output=True, text=True,
                          timeout=300)  # fmt: skip


def test_run_sh_stops_on_a_missing_wheel_with_one_line(tmp_path):
    run = _run_sh(tmp_path, "trl==1.16.0\nno-such-package-xyz==1.0\n")
    assert run.returncode == 2, run.stderr[-2000:]
    assert run.stderr.strip().splitlines()[-1] == (
        "bench/gpu/run.sh: missing wheel no-such-package-xyz==1.0: not on this machine and not in the bundle "
        "(make gpu-bundle)")
    assert not (tmp_path / "out" / "pair.log").exists()  # no stage started


def test_run_sh_without_a_bundle_names_the_make_target(tmp_path):
    run = _run_sh(tmp_path, None, toy=False)
    assert run.returncode == 2 and "run make gpu-bundle first" in run.stderr


@pytest.mark.parametrize("script", ["run.sh"])
def test_run_sh_is_valid_bash_and_its_exit_is_the_stages(script):
    text = (ROOT / "bench" / "gpu" / script).read_text()
    assert subprocess.run(["bash", "-n", str(ROOT / "bench" / "gpu" / script)]).returncode == 0
    assert text.rstrip().endswith("exit $FAILED")
    assert not (ROOT / "bench" / "gpu" / "smoke.sh").exists()  # one script

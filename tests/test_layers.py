"""The import graph under trlvr/ points downward only: engine <- training / eval <- cli.

Every `import trlvr.x` / `from trlvr.x import ...` counts, including lazy ones inside functions.
Layers, lowest first (a module may import its own package and any lower layer; peers may not
import each other unless listed in ALLOWED):
    0 errors, kinds                  (kinds: what a good option value is; imports nothing of trlvr)
    1 algos, data, rewards, models,  (maths, loading, grading, the machine's facts: know nothing of
      provenance, rundir, memory,     decoding; rundir: an output directory, set aside to start over;
      ranks, gpu                      memory: an engine's memory plan from configs; ranks: the processes
                                      of one launch and the store they hand objects over through)
    2 engine, vllm                   (decoding: no tokenization, prompts or training; vllm: the optional backend)
    3 config, team, training, eval,  (what a run trains, who writes with the senior, how it is measured,
      toy                             the toy world)
    4 experiments, demo, cli         (recipes and commands that wire the layers together)
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1] / "trlvr"
LAYERS = {
    "errors": 0,
    "kinds": 0,
    "algos": 1,
    "data": 1,
    "rewards": 1,
    "models": 1,
    "provenance": 1,
    "rundir": 1,
    "memory": 1,
    "ranks": 1,
    "trainer_memory": 1,
    "gpu": 1,
    "engine": 2,
    "vllm": 2,
    "config": 3,
    "team": 3,
    "training": 3,
    "eval": 3,
    "toy": 3,
    "experiments": 4,
    "demo": 4,
    "cli": 4,
    "artifacts": 0,  # one definition of a complete artifact (a checkpoint, final/, ...): imports nothing of trlvr
}
# Layer-4 peers: the CLI runs the demo and the experiments; the demo is a recipe of experiments (and of
# `trlvr.eval.api`, the one path `trlvr eval` takes too: no exception for the demo).
# The toy world registers its per-sample metric (the jargon rate) with eval's registry (eval.sample_metrics).
# Who writes with the senior (trlvr.team) sits beside the config: the config, training and eval ask it.
ALLOWED = {
    ("training", "config"),
    ("training", "team"),
    ("eval", "team"),
    ("config", "team"),
    ("cli", "demo"),
    ("cli", "experiments"),
    ("demo", "experiments"),
    ("vllm", "engine"),
    ("toy", "eval"),
    ("trainer_memory", "memory"),
}  # fmt: skip (the vLLM backend plugs into the engine's Pair and schedules)


def top_package(module: str) -> str:
    return module.split(".")[1]


def imports_of(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(), filename=str(path))
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names if a.name.startswith("trlvr.")]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module.startswith("trlvr."):
                out.append((node.lineno, node.module))
            elif node.module == "trlvr":
                out += [(node.lineno, f"trlvr.{a.name}") for a in node.names]
    return out


def violations() -> list[str]:
    bad = []
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT.parent).with_suffix("")
        parts = rel.parts
        if len(parts) < 2 or parts[1] == "__init__":
            continue
        here = parts[1]
        if here not in LAYERS:
            bad.append(f"{rel}: package {here!r} has no layer in tests/test_layers.py")
            continue
        for line, module in imports_of(path):
            there = top_package(module)
            if there == here or (here, there) in ALLOWED:
                continue
            if there not in LAYERS:
                bad.append(f"{rel}:{line} imports {module}, which has no layer")
            elif LAYERS[there] >= LAYERS[here]:
                bad.append(
                    f"{rel}:{line} ({here}, layer {LAYERS[here]}) imports {module} (layer {LAYERS[there]})"
                )
    return bad


def test_imports_point_downward():
    assert violations() == []


def test_checker_catches_an_upward_import(tmp_path, monkeypatch):
    fake = tmp_path / "trlvr"
    (fake / "engine").mkdir(parents=True)
    (fake / "engine" / "x.py").write_text("def f():\n    from trlvr.eval.runner import evaluate\n")
    (fake / "data").mkdir()
    (fake / "data" / "y.py").write_text("import trlvr.errors\nfrom trlvr.rewards import math_reward\n")
    monkeypatch.setattr(__import__(__name__), "ROOT", fake)
    found = violations()
    assert any("engine/x:2" in v and "trlvr.eval.runner" in v for v in found)
    assert any("data/y:2" in v and "trlvr.rewards" in v for v in found)
    assert len(found) == 2


def module_graph(root: Path) -> dict[str, set[str]]:
    """Module -> the trlvr modules it imports (lazy imports too); `from trlvr.pkg import sub` counts as the
    submodule `trlvr.pkg.sub` when it is one, else as the package."""
    names = {}
    for path in root.rglob("*.py"):
        parts = path.relative_to(root.parent).with_suffix("").parts
        names[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    graph = {}
    for name, path in names.items():
        targets = set()
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.Import):
                targets |= {a.name for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                targets |= {
                    f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in names else node.module
                    for a in node.names
                }
        graph[name] = {t for t in targets if t in names and t != name}
    return graph


def import_circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index, low, stack, on_stack, circles = {}, {}, [], set(), []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, edges = work[-1]
            nxt = next(edges, None)
            if nxt is not None:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph[nxt]))))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    circles.append(sorted(component))
    return circles


def test_no_import_circle():
    """No two modules of the house import each other, directly or round a ring (lazy imports count)."""
    assert import_circles(module_graph(ROOT)) == []


def test_circle_checker_finds_a_ring(tmp_path):
    fake = tmp_path / "trlvr"
    (fake / "training").mkdir(parents=True)
    (fake / "training" / "__init__.py").write_text("")
    (fake / "training" / "a.py").write_text("from trlvr.training.b import f\n")
    (fake / "training" / "b.py").write_text("def f():\n    from trlvr.training import c\n")
    (fake / "training" / "c.py").write_text("import trlvr.training.a\n")
    (fake / "training" / "d.py").write_text("from trlvr.training.a import g\n")
    assert import_circles(module_graph(fake)) == [
        ["trlvr.training.a", "trlvr.training.b", "trlvr.training.c"]
    ]


@pytest.mark.parametrize(
    "module", ["trlvr.engine", "trlvr.data", "trlvr.rewards", "trlvr.algos", "trlvr.provenance"]
)
def test_lower_layers_import_without_trl(module):
    """Importing a lower layer must not pull in TRL (heavy, and a higher layer's dependency)."""
    import subprocess
    import sys

    code = f"import sys, {module}; print('trl' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"

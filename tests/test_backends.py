"""The backend in one place: what a backend decides is a property of its entry in `trlvr.engine.backends.BACKENDS`.

Outside the backend's own package (`trlvr/vllm/`) and the registry, no module compares a backend's name with
"vllm" (or lists the backends itself): it asks the registry. A new backend is its own package and one entry.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
from pathlib import Path
from types import SimpleNamespace

import pytest

from trlvr.cli import eval_cmd, select_cmd
from trlvr.config import FIELD_KINDS, TandemConfig, check_backend_settings
from trlvr.engine import capabilities
from trlvr.engine.backends import BACKENDS, Backend, backend
from trlvr.errors import UserError
from trlvr.training.memory_plan import check_both

ROOT = Path(__file__).resolve().parents[1] / "trlvr"
# the backend's own package, the registry, and `trlvr env`'s package list ("vllm" there is a package's name)
EXEMPT = ("vllm/", "engine/backends.py", "cli/env_cmd.py")


def _is_name(node, name: str) -> bool:
    return isinstance(node, ast.Constant) and node.value == name


def _compares_backend(node: ast.Compare) -> bool:
    sides = [node.left, *node.comparators]
    return any(
        _is_name(n, "vllm") for n in sides
    ) or (  # "hf": only where a backend is compared (a dtype is "hf" too)
        any(_is_name(n, "hf") for n in sides) and "backend" in ast.unparse(node)
    )


def name_uses(source: str, filename: str = "<source>") -> list[tuple[int, str]]:
    """(line, what) for each place `source` decides on a backend's name: a comparison with "vllm" (==, !=, in)
    or of a backend with "hf", a `backend="vllm"` argument, or a literal list of the backends ("hf" beside
    "vllm")."""
    found = []
    for node in ast.walk(ast.parse(source, filename=filename)):
        if isinstance(node, ast.Compare) and _compares_backend(node):
            found.append((node.lineno, "a comparison with a backend's name"))
        elif isinstance(node, ast.keyword) and node.arg == "backend" and _is_name(node.value, "vllm"):
            found.append((node.value.lineno, "backend='vllm'"))
        elif (
            isinstance(node, ast.Call)
            and any(_is_name(a, "vllm") for a in node.args)
            and any(_is_name(a, "hf") for a in node.args)
        ):
            found.append((node.lineno, "the backends listed as arguments"))
        elif (
            isinstance(node, (ast.Tuple, ast.List, ast.Set))
            and any(_is_name(e, "vllm") for e in node.elts)
            and any(_is_name(e, "hf") for e in node.elts)
        ):
            found.append((node.lineno, "a list of the backends"))
        elif isinstance(node, ast.Dict) and any(_is_name(k, "vllm") for k in node.keys):
            found.append((node.lineno, "a table keyed by 'vllm'"))
    return found


def test_no_module_outside_the_backend_decides_on_its_name():
    bad = []
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if rel.startswith(EXEMPT):
            continue
        bad += [f"trlvr/{rel}:{line}: {what}" for line, what in name_uses(path.read_text(), str(path))]
    assert bad == [], "ask trlvr.engine.backends.backend(name) for a property instead:\n" + "\n".join(bad)


@pytest.mark.parametrize(
    "source",
    [
        'if tandem.backend == "vllm":\n    pass\n',
        'x = backend != "vllm"\n',
        'x = models.backend != "hf"\n',
        'ok = b in ("hf", "vllm")\n',
        'make_pair(s, j, tok, backend="vllm")\n',
        'K.choice("hf", "vllm")\n',
        'p.add_argument("--b", choices=["hf", "vllm"])\n',
        'BACKENDS = {"hf": None, "vllm": 1}\n',
    ],
)
def test_the_scan_sees_each_form(source):
    assert name_uses(source)


def test_the_scan_leaves_text_alone():
    assert (
        name_uses('"""backend vllm: the engine."""\nraise UserError(f"{b}: vllm holds both models")\n') == []
    )


def test_every_list_of_backends_is_the_registry():
    names = tuple(BACKENDS)
    assert names == ("hf", "vllm")
    assert FIELD_KINDS["backend"].expected == "one of " + ", ".join(names)  # a config file's `backend:`
    for command in (eval_cmd, select_cmd):
        assert (
            tuple(_choices(command.make_parser(argparse.ArgumentParser().add_subparsers()), "--backend"))
            == names
        )
    assert capabilities.BACKENDS is BACKENDS
    for name in names:
        assert TandemConfig(senior="s", junior="j", backend=name).backend == name
    with pytest.raises(ValueError, match="backend: must be hf or vllm"):
        TandemConfig(senior="s", junior="j", backend="sglang")


def _choices(parser, flag: str):
    return next(a.choices for a in parser._actions if flag in a.option_strings)


def test_an_unknown_name_is_one_line():
    with pytest.raises(UserError, match=r"^backend: must be one of hf, vllm, got 'sglang'$"):
        backend("sglang")


def test_entries_are_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        BACKENDS["vllm"].gpu_share = False


def _fake(monkeypatch, **properties) -> None:
    """A third backend, "fake", with vllm's properties changed by `properties`."""
    monkeypatch.setitem(BACKENDS, "fake", dataclasses.replace(BACKENDS["vllm"], name="fake", **properties))


class _Recorded:
    def __init__(self):
        self.share = "not asked"

    def problems(self, where, gpu_memory, share, share_setting, sleep=False):
        self.share = share
        return []


@pytest.mark.parametrize("gpu_share", [True, False])
def test_the_memory_plan_follows_the_property_not_the_name(monkeypatch, gpu_share):
    _fake(monkeypatch, gpu_share=gpu_share)
    plan = SimpleNamespace(
        problems=lambda where: [f"{where}: the engine does not fit"],
        gpu_memory=2**30,
        share=0.5,
        share_setting="vllm_gpu_memory_utilization",
    )
    trainer = _Recorded()
    if gpu_share:
        with pytest.raises(UserError, match="^x.yaml: the engine does not fit$"):
            check_both(plan, trainer, "x.yaml", "fake")
        assert trainer.share == 0.5  # the trainer's room is what the engine's share leaves
    else:
        check_both(plan, trainer, "x.yaml", "fake")
        assert trainer.share is None  # no share: the trainer has the whole GPU


@pytest.mark.parametrize("engine_options", [True, False])
def test_the_engine_settings_follow_the_property_not_the_name(monkeypatch, engine_options):
    _fake(
        monkeypatch, **({} if engine_options else {"engine": None})
    )  # engine_options: it has an options class
    assert backend("fake").engine_options is engine_options
    tandem = SimpleNamespace(backend="fake")
    grpo = SimpleNamespace(
        vllm_importance_sampling_correction=False, vllm_enable_sleep_mode=False, vllm_tensor_parallel_size=2
    )
    if engine_options:
        check_backend_settings(tandem, grpo, set(), "x.yaml")
    else:
        with pytest.raises(
            UserError,
            match=r"^x.yaml: vllm_tensor_parallel_size is backend vllm's \(this run's "
            r"backend is fake\)$",
        ):
            check_backend_settings(tandem, grpo, set(), "x.yaml")


def test_a_registered_backends_plugin_loads_when_asked(monkeypatch):
    _fake(monkeypatch, pair="trlvr.engine.pair:LockstepPair", package="json")
    from trlvr.engine.pair import LockstepPair, pair_class

    assert pair_class("fake") is LockstepPair  # its Pair, as its entry names it
    with pytest.raises(UserError, match="^backend fake runs pairs with one shared vocabulary"):
        pair_class("fake", "text")
    _fake(monkeypatch, package="trlvr_no_such_package")
    with pytest.raises(
        UserError, match=r"^backend fake needs trlvr_no_such_package, which is not installed here"
    ):
        pair_class("fake")


def test_backend_is_a_dataclass_of_properties():
    assert {f.name for f in dataclasses.fields(Backend)} >= {
        "name",
        "pair",
        "package",
        "own_engine",
        "gpu_share",
    }
    assert backend("hf").pair is None and not backend("hf").own_engine


def _imports(source: str, filename: str) -> list[int]:
    """Lines that import the vLLM backend's package (`trlvr.vllm`) or vLLM itself."""
    found = []
    for node in ast.walk(ast.parse(source, filename=filename)):
        names = (
            [a.name for a in node.names]
            if isinstance(node, ast.Import)
            else [node.module or ""]
            if isinstance(node, ast.ImportFrom)
            else []
        )
        if any(n == m or n.startswith(m + ".") for n in names for m in ("trlvr.vllm", "vllm")):
            found.append(node.lineno)
    return found


def test_no_module_outside_the_backend_imports_it():
    """The core reaches a backend's code only through its registry entry (`Backend.load`)."""
    bad = []
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if not rel.startswith(EXEMPT):
            bad += [f"trlvr/{rel}:{line}" for line in _imports(path.read_text(), str(path))]
    assert bad == [], "load it through trlvr.engine.backends.backend(name).load(part):\n" + "\n".join(bad)
    assert _imports("from trlvr.vllm.pair import EngineOptions\nimport vllm\n", "x") == [1, 2]


PARTS = ("pair", "engine", "trl_generation", "distribution")


@pytest.mark.parametrize("name", list(BACKENDS))
def test_a_backends_parts_live_in_its_own_package(name):
    spec = backend(name)
    parts = [getattr(spec, part) for part in PARTS if getattr(spec, part) is not None]
    assert len({p.split(":")[0].rsplit(".", 1)[0] for p in parts}) <= 1, parts  # one package
    if spec.own_engine:  # what training and evaluation build it with
        assert None not in (spec.pair, spec.engine, spec.trl_generation, spec.distribution)


@dataclasses.dataclass(frozen=True)
class _Options:
    """A fake backend's engine options: what `for_machine` was asked."""

    dtype: str
    seed: int
    context: int
    share: float
    max_num_seqs: int
    enable_sleep_mode: bool = True

    @classmethod
    def for_machine(cls, dtype, seed, context, share, max_num_seqs):
        return cls(dtype, seed, context, share, max_num_seqs)


def test_training_builds_the_engine_its_backend_names(monkeypatch):
    from trlvr.training.rollout import run_engine

    _fake(monkeypatch, package=None, engine=f"{__name__}:_Options")
    plan = SimpleNamespace(context=512, share=0.4, max_num_seqs=16)
    args = SimpleNamespace(seed=3, vllm_enable_sleep_mode=False)
    assert run_engine(backend("fake"), plan, args, "bfloat16", {"seed": 9}) == _Options(
        "bfloat16", 9, 512, 0.4, 16, False
    )
    assert run_engine(backend("fake"), plan, args, "bfloat16").seed == 3  # one process: the run's seed


def test_loading_a_part_it_does_not_have_or_cannot_import(monkeypatch):
    with pytest.raises(ValueError, match="backend hf has no engine"):
        backend("hf").load("engine")
    _fake(monkeypatch, package="trlvr_no_such_package")
    with pytest.raises(
        UserError, match=r"^backend fake needs trlvr_no_such_package, which is not installed here"
    ):
        backend("fake").load("trl_generation")

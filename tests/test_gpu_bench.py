"""bench/gpu/bench_gpu.py runs end to end with a tiny config on CPU, so the GPU script cannot rot."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def bench_gpu():
    sys.path.insert(0, str(ROOT / "bench" / "gpu"))
    try:
        import bench_gpu
    finally:
        sys.path.pop(0)
    return bench_gpu


@pytest.mark.slow  # ~45 s on this CPU: dynamo traces the compiled contenders
def test_gpu_bench_runs_tiny_on_cpu_and_the_timed_region_compiles_nothing(bench_gpu, tmp_path, capsys):
    assert bench_gpu.main(["--tiny", "--skip-hf-static", "--out", str(tmp_path)]) == 0
    printed = capsys.readouterr().out
    assert printed.index("estimate") < printed.index("engine_solo ")  # the time estimate comes first
    res = json.loads((tmp_path / "gpu-tiny.json").read_text())
    row = res["sizes"]["tiny"]
    contenders = {k: v for k, v in row.items() if isinstance(v, dict)}
    assert set(contenders) == {
        "generate",
        "engine_solo",
        "engine_solo_junior",
        "engine_static_nocompile_solo",
        "engine_static_solo",
        "engine_tandem",
        "engine_static_nocompile_tandem",
        "engine_static_tandem",
        "engine_static_tandem_ragged",
    }
    for name, e in contenders.items():
        assert e["tokens_per_s"] > 0 and 0 < e["fraction_of_roofline"] < 1, name
        assert e["compiles_in_timed_region"] == 0, name  # warm-up used exactly the timed shapes
    assert sum(e["compiled"] for e in contenders.values()) == 3
    # the tandem roofline reads both models per step: half the solo one for a same-size pair
    assert (
        abs(row["engine_tandem"]["roofline_tokens_per_s"] * 2 - row["engine_solo"]["roofline_tokens_per_s"])
        < 1
    )
    for key in (
        "tandem_over_solo_sum",
        "static_over_eager_tandem",
        "static_nocompile_over_eager_tandem",
        "engine_static_solo_over_generate",
        "static_tandem_over_solo_sum",
    ):
        assert row[key] > 0, key
    md = (tmp_path / "gpu-tiny.md").read_text()
    assert (
        "| tiny | engine_static_tandem_ragged |" in md and "| tiny | engine_static_nocompile_tandem |" in md
    )


def test_time_estimate_skips_what_does_not_fit(bench_gpu):
    kept, skipped, total = bench_gpu.plan([("a", 100.0), ("b", 300.0), ("c", 50.0)], budget=200)
    assert [k[0] for k in kept] == ["a", "c"] and skipped == ["b"] and total == 150.0


def test_predicted_bytes_count_the_real_weights_and_kv(bench_gpu):
    from trlvr.engine.generator import kv_cache_bytes

    for name in ("tiny", "qwen3-0.6b", "qwen3-1.7b", "qwen3-4b"):
        cfg = bench_gpu.config(name)
        model = bench_gpu.build(cfg, "meta", torch.bfloat16, seed=0)  # shapes only, no memory
        params = {id(p): p.numel() for p in model.parameters()}
        assert bench_gpu.param_count(cfg) == sum(params.values()), name
        assert bench_gpu.kv_bytes(cfg, 128, 1536) == kv_cache_bytes(model, 128, 1536), name
        if name != "tiny":
            assert (cfg["vocab_size"], cfg["num_key_value_heads"], cfg["head_dim"]) == (151936, 8, 128)
    table = bench_gpu.predict()
    assert "| 4B | 2048 | 8.04 |" in table and table.count("\n") == 2 + 8

"""bench/gpu/bench_gpu.py runs end to end with tiny configs on CPU, so the GPU script cannot rot."""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_gpu_bench_runs_tiny_on_cpu(tmp_path):
    sys.path.insert(0, str(ROOT / "bench" / "gpu"))
    try:
        import bench_gpu
    finally:
        sys.path.pop(0)
    assert bench_gpu.main(["--tiny", "--skip-static", "--out", str(tmp_path)]) == 0
    res = json.loads((tmp_path / "gpu-tiny.json").read_text())
    row = res["sizes"]["tiny"]
    for name in ("generate", "engine_solo", "engine_tandem", "engine_static_solo", "engine_static_tandem"):
        e = row[name]
        assert e["tokens_per_s"] > 0 and 0 < e["fraction_of_roofline"] < 1
    # the tandem roofline reads both models per step: half the solo one for a same-size pair
    assert abs(row["engine_tandem"]["roofline_tokens_per_s"] * 2 - row["engine_solo"]["roofline_tokens_per_s"]) < 1
    # the static engine is read against the same roofline as the eager one
    for solo, tandem in (("engine_solo", "engine_tandem"), ("engine_static_solo", "engine_static_tandem")):
        assert row[solo]["roofline_tokens_per_s"] == row["engine_solo"]["roofline_tokens_per_s"]
        assert row[tandem]["roofline_tokens_per_s"] == row["engine_tandem"]["roofline_tokens_per_s"]
    assert row["static_over_eager_tandem_speed"] > 0
    md = (tmp_path / "gpu-tiny.md").read_text()
    assert "| tiny | engine_tandem |" in md and "| tiny | engine_static_tandem |" in md
    for cfg in ("qwen3-0.6b", "qwen3-1.7b", "qwen3-4b"):
        c = json.loads((ROOT / "bench/gpu/configs" / f"{cfg}.json").read_text())
        assert (c["vocab_size"], c["num_key_value_heads"], c["head_dim"]) == (151936, 8, 128)

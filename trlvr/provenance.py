"""Which machine a number came from: library versions, devices, dtype, threads, CPU, trlvr commit.

    from trlvr.provenance import machine
    facts = machine(dtype="torch.float32", device="cpu")   # JSON-ready dict, for run records and results.json
    path_for_record("runs/x/checkpoint-20", "runs/x")   # "checkpoint-20": how a record stores a path it names
    path_from_record("checkpoint-20", "runs/x")         # "runs/x/checkpoint-20": that path, from any cwd

Training and evaluation are deterministic per seed on one machine kind: same library versions,
same devices, same dtype and the same thread count. Across thread counts they are not (CPU matmul
kernels split their sums by thread), so a record carries every fact that decides this; nothing
here is compared to refuse a run: `trlvr.training.run_record.machine_differences` warns on resume.

A record (a run's trlvr_run.json, selected.json) names paths so that they resolve the same from
any working directory: relative to the record's own directory when they lie inside it (the record
moves with them), absolute otherwise; names that are no local path (hub ids) are kept as typed.

What this file does not know: models, runs, configs. It reads the interpreter, the machine and paths.
"""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from importlib import metadata
from pathlib import Path

LIBRARIES = ("torch", "transformers", "trl", "peft", "accelerate", "trlvr")
# the facts that decide whether a rerun reproduces a number bit for bit
DETERMINISM_KEYS = (
    "versions",
    "python",
    "devices",
    "dtype",
    "cpu_capability",
    "torch_threads",
    "omp_num_threads",
)
_GIT_TIMEOUT_S = 5.0


def _version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def git_commit(where: str | Path | None = None) -> dict | None:
    """{"commit", "dirty"} of the git checkout holding `where` (default: trlvr's source), or None
    when it is not in one (an installed wheel) or git is missing."""
    folder = Path(where) if where is not None else Path(__file__).resolve().parent

    def git(*args: str) -> str | None:
        try:
            out = subprocess.run(
                ["git", "-C", str(folder), *args],
                capture_output=True,
                text=True,
                timeout=_GIT_TIMEOUT_S,
                check=False,
            )
        except (OSError, subprocess.SubprocessError):
            return None
        return out.stdout if out.returncode == 0 else None

    commit = git("rev-parse", "HEAD")
    # an installed copy inside some other checkout (a venv in a repo) is not that repo's code
    if not commit or (where is None and git("ls-files", "--error-unmatch", "__init__.py") is None):
        return None
    status = git("status", "--porcelain", "--untracked-files=no")
    return {"commit": commit.strip(), "dirty": bool(status.strip()) if status is not None else None}


def _devices() -> list[str]:
    import torch

    names = ["cpu"]
    if torch.cuda.is_available():
        names += [f"cuda:{i} {torch.cuda.get_device_name(i)}" for i in range(torch.cuda.device_count())]
    return names


def machine(dtype: str | None = None, device: str | None = None) -> dict:
    """The facts of this process and machine (JSON-ready).

    dtype: the models' dtype where the caller knows it (e.g. "torch.bfloat16"); device: the device
    the run used (e.g. "cuda:0"); both None when unknown. `devices` lists what the machine has.
    """
    import torch

    return {
        "versions": {name: _version(name) for name in LIBRARIES},
        "python": platform.python_version(),
        "cuda": torch.version.cuda,
        "devices": _devices(),
        "device": None if device is None else str(device),
        "dtype": None if dtype is None else str(dtype),
        # the CPU kernels torch dispatches to (AVX2, AVX512, ...): one seed's last digits move with it
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "torch_threads": torch.get_num_threads(),
        "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
        "cpu": _cpu_model(),
        "cpu_count": os.cpu_count(),
        "platform": platform.platform(),
        "executable": sys.executable,
        "git": git_commit(),
    }


def numeric_kind(facts: dict) -> str:
    """The machine kind a CPU run's numbers are exact on, in words, from `machine()`'s facts: the CPU, the
    kernels torch dispatched to, the thread count and torch's version (what moves a seed's last digits).

    >>> numeric_kind({"cpu": "AMD EPYC", "cpu_capability": "AVX512", "torch_threads": 1,
    ...               "versions": {"torch": "2.13.0+cpu"}})
    'AMD EPYC (AVX512), 1 thread(s), torch 2.13.0+cpu'
    """
    capability = facts.get("cpu_capability") or "kernels not recorded"
    torch_version = (facts.get("versions") or {}).get("torch")
    return f"{facts.get('cpu')} ({capability}), {facts.get('torch_threads')} thread(s), torch {torch_version}"


def path_for_record(path: str | Path, record_dir: str | Path) -> str:
    """How a record kept in `record_dir` stores `path` (typed relative to the cwd, or absolute): relative
    to `record_dir` when it lies inside it, else absolute; a name that is no existing local path (a hub
    id) is kept as is. `path_from_record` turns it back into a path from any cwd.

    >>> path_for_record("Qwen/Qwen3-4B-not-a-folder", "/tmp")
    'Qwen/Qwen3-4B-not-a-folder'
    """
    p = Path(path)
    if not p.exists():
        return str(path)
    full, base = p.resolve(), Path(record_dir).resolve()
    return str(full.relative_to(base)) if full.is_relative_to(base) else str(full)


def path_from_record(stored: str, record_dir: str | Path) -> str:
    """A path a record in `record_dir` stores, usable from the current directory: absolute as is,
    relative under `record_dir` (as `path_for_record` writes it). A relative name that is not there
    is returned unchanged: a hub id, or a record written before paths were stored this way (its
    paths were relative to the directory its writer ran in)."""
    p = Path(stored)
    if p.is_absolute():
        return str(stored)
    inside = Path(record_dir) / p
    return str(inside) if inside.exists() else str(stored)

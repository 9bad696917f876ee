"""Which machine a number came from: library versions, devices, dtype, threads, CPU, trlvr commit.

    from trlvr.provenance import machine, machine_differences
    facts = machine(dtype="torch.float32", device="cpu")   # JSON-ready dict, for run records and results.json
    machine_differences(old, new)        # ["torch_threads: 2 -> 1", ...] over DETERMINISM_KEYS

Training and evaluation are deterministic per seed on one machine kind: same library versions,
same devices, same dtype and the same thread count. Across thread counts they are not (CPU matmul
kernels split their sums by thread), so a record carries every fact that decides this; nothing
here is compared to refuse a run, only to warn.

What this file does not know: models, runs, configs. It reads the interpreter and the machine.
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
DETERMINISM_KEYS = ("versions", "python", "devices", "dtype", "torch_threads", "omp_num_threads")
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
            out = subprocess.run(["git", "-C", str(folder), *args], capture_output=True, text=True,
                                 timeout=_GIT_TIMEOUT_S, check=False)  # fmt: skip
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
        "torch_threads": torch.get_num_threads(),
        "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
        "cpu": _cpu_model(),
        "cpu_count": os.cpu_count(),
        "platform": platform.platform(),
        "executable": sys.executable,
        "git": git_commit(),
    }


def machine_differences(old: dict | None, new: dict | None) -> list[str]:
    """["torch_threads: 2 -> 1", "versions.torch: '2.5.1' -> '2.6.0'", ...] over DETERMINISM_KEYS.

    A missing side (a record written before provenance existed) yields no differences.
    """
    if not old or not new:
        return []
    out = []
    for key in DETERMINISM_KEYS:
        a, b = old.get(key), new.get(key)
        if isinstance(a, dict) and isinstance(b, dict):
            keys = sorted(set(a) | set(b))
            out += [f"{key}.{k}: {a.get(k)!r} -> {b.get(k)!r}" for k in keys if a.get(k) != b.get(k)]
        elif a != b:
            out.append(f"{key}: {a!r} -> {b!r}")
    return out

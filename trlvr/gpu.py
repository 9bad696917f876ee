"""This machine's GPU before work starts: can torch's CUDA build run on the driver, and is the memory free.

    from trlvr.gpu import cuda_line, driver_problem, free_memory_problem
    driver_problem("13.0", "12.8", "570.124.06")   # one line: the driver is too old for this torch build
    free_memory_problem("eval", "train grpo", free, total, 0.9, "gpu_memory_utilization")

`trlvr env` and `trlvr smoke` print `cuda_line()`. A CUDA build of torch on a driver too old for it reports
no GPU (`torch.cuda.is_available()` is False, with only a warning), and everything after it would take its
CPU branches; `driver_problem` says so in one line instead. vLLM refuses to start an engine when the
device's free memory is below `share x total`; `free_memory_problem` says so before the engine is built,
naming the stage that ran before it (what it left behind is what the next stage lacks).

The comparisons are pure functions of the numbers (tested with fake ones); `driver_facts` and
`free_memory_check` read this machine (the driver through nvidia-smi or /proc, memory through torch).
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from trlvr.errors import UserError

# The oldest Linux driver each CUDA major version runs on (NVIDIA's CUDA compatibility table: a build for
# CUDA X.y runs on any driver of its major version's floor or newer, the "minor version compatibility").
DRIVER_FLOOR = {13: 580, 12: 525, 11: 450}
_PROC_VERSION = Path("/proc/driver/nvidia/version")


def _major(version: str | None) -> int | None:
    m = re.match(r"\s*(\d+)", str(version or ""))
    return int(m.group(1)) if m else None


def driver_problem(torch_cuda: str | None, driver_cuda: str | None, driver: str | None) -> str | None:
    """One line when torch's CUDA build (`torch.version.cuda`, e.g. "13.0") cannot run on this driver (its
    version, e.g. "570.124.06", and the newest CUDA it supports, e.g. "12.8", either may be unknown); None
    when it can, or when there is nothing to compare (a CPU build of torch, no NVIDIA driver)."""
    need = _major(torch_cuda)
    if need is None or (driver is None and driver_cuda is None):
        return None
    floor = DRIVER_FLOOR.get(need)
    has_cuda, has_driver = _major(driver_cuda), _major(driver)
    too_old = (has_cuda is not None and has_cuda < need) or (
        has_driver is not None and floor is not None and has_driver < floor
    )
    if not too_old:
        return None
    what = f"driver {driver or '?'}" + (f" (CUDA {driver_cuda})" if driver_cuda else "")
    floor_text = f" needs driver >= {floor}" if floor else f" needs a driver for CUDA {need}"
    return (
        f"the NVIDIA {what} is too old for torch built for CUDA {torch_cuda}, which{floor_text}: torch sees "
        f"no GPU; update the driver, or install torch and vLLM built for CUDA 12 (the install guide, "
        f"'Older NVIDIA drivers')"
    )


def cuda_line(torch_cuda: str | None, driver_cuda: str | None, driver: str | None) -> str:
    """What `trlvr env` and the smoke print: torch's CUDA build beside the driver's, and any problem."""
    build = f"torch built for CUDA {torch_cuda}" if torch_cuda else "a CPU build of torch (no CUDA)"
    if driver is None and driver_cuda is None:
        seen = "no NVIDIA driver found"
    else:
        seen = f"NVIDIA driver {driver or 'unknown'}" + (f", up to CUDA {driver_cuda}" if driver_cuda else "")
    problem = driver_problem(torch_cuda, driver_cuda, driver)
    return f"{build}; {seen}" + (f"; PROBLEM: {problem}" if problem else "")


def driver_facts(run=subprocess.run) -> tuple[str | None, str | None]:
    """(driver version, newest CUDA version it supports) of this machine, (None, None) without an NVIDIA
    driver: from nvidia-smi's header (it prints both), else the driver version from /proc."""
    try:
        out = run(["nvidia-smi"], capture_output=True, text=True, timeout=20, check=False)
        text = out.stdout if out.returncode == 0 else ""
    except (OSError, subprocess.SubprocessError):
        text = ""
    driver = re.search(r"Driver Version:\s*([\d.]+)", text)
    cuda = re.search(r"CUDA Version:\s*([\d.]+)", text)
    if driver is None and _PROC_VERSION.is_file():
        driver = re.search(r"Kernel Module\s+([\d.]+)", _PROC_VERSION.read_text(errors="replace"))
    return (driver.group(1) if driver else None), (cuda.group(1) if cuda else None)


def free_memory_problem(
    stage: str,
    previous: str | None,
    free: int,
    total: int,
    share: float,
    setting: str = "gpu_memory_utilization",
) -> str | None:
    """One line when an engine that takes `share` of a GPU of `total` bytes cannot start with `free` bytes
    free (vLLM's own start check: free >= share x total), naming the stage before it; None when it can."""
    need = share * total
    if free >= need:
        return None
    held = total - free
    who = f"left behind by {previous}, or held by another process" if previous else "held by another process"
    return (
        f"{stage}: {_gib(free)} of the GPU's {_gib(total)} is free, less than the {_gib(need)} its engine's "
        f"{setting} {share:g} needs; {_gib(held)} is in use ({who} on this GPU): free it, or lower {setting}"
    )


def free_memory_check(
    stage: str, previous: str | None, share: float, setting: str = "gpu_memory_utilization"
) -> None:
    """Refuse (`UserError`, one line) to start `stage`'s engine when this GPU's free memory is below its
    share; nothing without a GPU. Callers release what they held first
    (`trlvr.engine.release.free_memory`)."""
    import torch

    if not torch.cuda.is_available():
        return
    free, total = torch.cuda.mem_get_info()
    if problem := free_memory_problem(stage, previous, int(free), int(total), share, setting):
        raise UserError(problem)


def _gib(n: float) -> str:
    return f"{n / 2**30:.1f} GiB"

"""`trlvr env`: the versions and the machine, for a bug report (paste its output into the issue).

trlvr env
trlvr env --json          # the same facts as JSON (what a run records in trlvr_run.json, `machine`)
"""

from __future__ import annotations

import argparse
import json
from importlib import metadata


def make_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "env",
        help="versions of trlvr, torch, transformers, TRL, vLLM, CUDA; for bug reports",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--json", action="store_true", help="print the facts as one JSON object")
    return p


def _version(name: str) -> str:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "not installed"


def facts() -> dict:
    """trlvr's machine record (`trlvr.provenance.machine`) and the optional backend's version."""
    from trlvr.gpu import driver_facts, driver_problem
    from trlvr.provenance import machine

    found = machine()
    found["versions"]["vllm"] = _version("vllm")
    driver, driver_cuda = driver_facts()
    found["driver"] = {
        "version": driver,
        "cuda": driver_cuda,
        "problem": driver_problem(found["cuda"], driver_cuda, driver),
    }
    return found


def main(args) -> int:
    from trlvr.gpu import cuda_line

    found = facts()
    if args.json:
        print(json.dumps(found, indent=2, sort_keys=True))
        return 0
    versions = found["versions"]
    git = found.get("git") or {}
    lines = [
        f"{name}: {versions.get(name) or 'not installed'}"
        for name in ("trlvr", "torch", "transformers", "trl", "peft", "accelerate", "vllm")
    ]
    lines += [
        f"python: {found['python']} ({found['executable']})",
        f"platform: {found['platform']}",
        f"cuda: {cuda_line(found['cuda'], found['driver']['cuda'], found['driver']['version'])}",
        f"devices: {', '.join(found['devices'])}",
        f"cpu: {found['cpu'] or 'unknown'}, {found['cpu_count']} cores; torch threads "
        f"{found['torch_threads']}, OMP_NUM_THREADS {found['omp_num_threads'] or 'unset'}",
        f"git: {git.get('commit', 'not a git checkout')}{' (dirty)' if git.get('dirty') else ''}",
    ]
    print("\n".join(lines))
    return 0

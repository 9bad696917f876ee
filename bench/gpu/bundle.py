"""`make gpu-bundle`: prepare `.gpu/` (gitignored), everything `bench/gpu/run.sh` needs on a lent GPU machine
that has torch, transformers, accelerate, peft and its image's other packages but no TRL, no vLLM and no network.

    python bench/gpu/bundle.py --out .gpu [--python-version 3.12] [--limit-mib 60]

.gpu/toy        the toy world (`trlvr toy prepare`: a trained pair, its tokenizer, train/test data)
.gpu/pair.json  the recipe of the random-weight pair of Qwen3-0.6B's shapes (shape, tokenizer, seeds): its
                1.2 GB of weights are built on the device by bench/gpu/random_pair.py, not carried
.gpu/wheels     the wheels of trlvr's dependency closure that the image lacks: the closure (read from this
                environment's installed metadata, starting at pyproject's dependencies) less the closure of
                torch, transformers, accelerate and peft, less the packages bench/gpu/image-packages.txt lists
                (the lent image's, from the device notes); pinned to this environment's versions, binary only,
                for the target Python (3.12 on the lent machine) on manylinux x86_64
.gpu/wheels.txt the names and versions, one a line (run.sh checks every one is installed)

Fails (exit 1, one line) when a wheel cannot be fetched or `.gpu/` is over the limit (one run call carries 64 MiB).
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tempfile
import tomllib
from importlib.metadata import PackageNotFoundError, distribution
from pathlib import Path

from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
BASE = ("torch", "transformers", "accelerate", "peft")  # what the lent image is known to hold (the words)
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64",
             "manylinux1_x86_64", "manylinux_2_24_x86_64", "manylinux_2_31_x86_64", "manylinux_2_34_x86_64")  # fmt: skip
PAIR = {"shape": "Qwen/Qwen3-0.6B", "tokenizer": "toy/senior", "seeds": {"senior": 0, "junior": 1},
        "built_by": "bench/gpu/random_pair.py"}  # fmt: skip


def norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def closure(roots: list[str], python_version: str) -> dict[str, str]:
    """name -> installed version of every distribution `roots` need (extras followed), for the target Python."""
    env = {"python_version": python_version, "python_full_version": python_version + ".0", "sys_platform": "linux",
           "platform_system": "Linux", "platform_machine": "x86_64", "os_name": "posix",
           "implementation_name": "cpython", "platform_python_implementation": "CPython"}  # fmt: skip
    found: dict[str, str] = {}
    done: set[tuple[str, frozenset]] = set()
    todo = [Requirement(r) for r in roots]
    while todo:
        req = todo.pop()
        key = (norm(req.name), frozenset(req.extras))
        if key in done:
            continue
        done.add(key)
        try:
            dist = distribution(req.name)
        except PackageNotFoundError:
            raise SystemExit(f"gpu-bundle: {req.name} is not installed in {sys.prefix}; run it from the project's "
                             f"environment (make env)") from None  # fmt: skip
        found[norm(dist.metadata["Name"])] = dist.version
        for text in dist.requires or []:
            sub = Requirement(text)
            if sub.marker is not None and not any(
                    sub.marker.evaluate({**env, "extra": e}) for e in (req.extras or {""})):  # fmt: skip
                continue
            todo.append(sub)
    return found


def image_packages() -> set[str]:
    lines = (HERE / "image-packages.txt").read_text().splitlines()
    return {norm(x) for line in lines if (x := line.split("#")[0].strip())}


def wanted(python_version: str) -> dict[str, str]:
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    need = closure(deps, python_version)
    have = set(closure(list(BASE), python_version)) | image_packages()
    return {n: v for n, v in sorted(need.items()) if n not in have}


def download(names: dict[str, str], dest: Path, python_version: str, builder: str | None = None) -> None:
    cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:", "--python-version",
           python_version, "--implementation", "cp", "-d", str(dest)]  # fmt: skip
    for p in PLATFORMS:
        cmd += ["--platform", p]
    for name, version in names.items():
        run = subprocess.run([*cmd, f"{name}=={version}"], capture_output=True, text=True)
        if run.returncode == 0:
            continue
        # no wheel on the index (an sdist only: cellpylib, pycosat): build one here with the target's Python when this
        # machine has it (a C extension then fits a machine with this glibc or newer), else only a pure-Python one
        builder = builder or shutil.which(f"python{python_version}") or sys.executable
        tag = "cp" + python_version.replace(".", "")
        built = Path(tempfile.mkdtemp())
        run = subprocess.run([builder, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(built), f"{name}=={version}"],
                             capture_output=True, text=True)  # fmt: skip
        wheels = list(built.glob("*.whl"))
        if run.returncode != 0 or len(wheels) != 1 or not (
                wheels[0].name.endswith("-none-any.whl") or f"-{tag}-" in wheels[0].name):  # fmt: skip
            last = ([x for x in run.stderr.strip().splitlines() if not x.startswith("WARNING: Location")]
                    or [w.name for w in wheels] or ["?"])[-1]  # fmt: skip
            raise SystemExit(f"gpu-bundle: no wheel of {name}=={version} for Python {python_version} on manylinux "
                             f"x86_64, and none built from its source with {builder}: {last}")  # fmt: skip
        shutil.move(str(wheels[0]), dest / wheels[0].name)


def size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=str(ROOT / ".gpu"))
    ap.add_argument("--python-version", default="3.12", help="the lent machine's Python (3.12)")
    ap.add_argument("--limit-mib", type=float, default=60.0)
    ap.add_argument("--builder", help="the Python that builds a wheel the index lacks (default: python<version>)")
    a = ap.parse_args()
    out = Path(a.out)
    wheels = out / "wheels"
    if wheels.exists():
        shutil.rmtree(wheels)
    wheels.mkdir(parents=True)
    if not (out / "toy" / "senior" / "config.json").is_file():
        run = subprocess.run([sys.executable, "-m", "trlvr.cli.main", "toy", "prepare", "--out", str(out / "toy"),
                              "--no-progress"], cwd=ROOT, capture_output=True, text=True)  # fmt: skip
        if run.returncode != 0:
            raise SystemExit(f"gpu-bundle: trlvr toy prepare failed: {run.stderr.strip()[-500:]}")
    names = wanted(a.python_version)
    download(names, wheels, a.python_version, a.builder)
    (out / "wheels.txt").write_text("".join(f"{n}=={v}\n" for n, v in names.items()))
    (out / "pair.json").write_text(json.dumps(PAIR, indent=1) + "\n")
    total = size(out)
    print(f"{out}: {total / 2**20:.1f} MiB ({len(names)} wheels {size(wheels) / 2**20:.1f} MiB, toy world "
          f"{size(out / 'toy') / 2**20:.1f} MiB) for Python {a.python_version}")  # fmt: skip
    if total > a.limit_mib * 2**20:
        raise SystemExit(f"gpu-bundle: {out} is {total / 2**20:.1f} MiB, over the {a.limit_mib:g} MiB a run call may "
                         "carry (64 MiB with the working tree)")  # fmt: skip


if __name__ == "__main__":
    main()

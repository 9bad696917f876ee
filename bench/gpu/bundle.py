"""`make gpu-bundle`: prepare `.gpu/` (gitignored), everything `bench/gpu/run.sh` needs on a lent GPU machine
that has torch, transformers, accelerate, peft and its image's other packages but no TRL, no vLLM and no network.

    python bench/gpu/bundle.py --out .gpu [--python-version 3.12] [--limit-mib 60]

.gpu/toy        the toy world (`trlvr toy prepare`: a trained pair, its tokenizer, train/test data)
.gpu/pair.json  the recipe of the random-weight pair of Qwen3-0.6B's shapes (shape, tokenizer, seeds): its
                1.2 GB of weights are built on the device by bench/gpu/random_pair.py, not carried
.gpu/wheels     the wheels of trlvr's dependency closure that the image lacks: the closure (read from this
                environment's installed metadata, starting at pyproject's dependencies less those the check
                never imports, `NOT_IMPORTED`) less the closure of torch, transformers, accelerate and peft,
                less the packages bench/gpu/image-packages.txt lists (the lent image's, from the device notes);
                pinned to this environment's versions, binary only, for the target Python (3.12 on the lent
                machine) on manylinux x86_64
.gpu/wheels.txt the names and versions, one a line (run.sh checks every one is installed)

A dependency with no wheel on the index (an sdist only) is built here: with --builder (make's GPU_BUILDER), else
a Python of the target version this machine really runs (`python3.12` on PATH, pyenv's or uv's; a pyenv shim not
enabled for this folder does not count), else this Python when the build is pure Python.

Fails (exit 1, one line) when a wheel cannot be fetched or built (naming GPU_BUILDER), or `.gpu/` is over the limit
(one run call carries 64 MiB).
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
BASE = (
    "torch",
    "transformers",
    "accelerate",
    "peft",
)  # what the lent image is known to hold (the words)
# trlvr's dependencies that the check (backend hf on the toy world and a random pair: run.sh) never imports:
# reasoning-gym is imported only for reasoning-gym datasets (trlvr.data.sources), and its closure holds sdist-only
# packages (cellpylib, pycosat) that would need a build for the target Python
NOT_IMPORTED = ("reasoning-gym",)
PLATFORMS = (
    "manylinux_2_28_x86_64",
    "manylinux_2_27_x86_64",
    "manylinux_2_17_x86_64",
    "manylinux2014_x86_64",
    "manylinux1_x86_64",
    "manylinux_2_24_x86_64",
    "manylinux_2_31_x86_64",
    "manylinux_2_34_x86_64",
)
PAIR = {
    "shape": "Qwen/Qwen3-0.6B",
    "tokenizer": "toy/senior",
    "seeds": {"senior": 0, "junior": 1},
    "built_by": "bench/gpu/random_pair.py",
}


def norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def closure(roots: list[str], python_version: str) -> dict[str, str]:
    """name -> installed version of every distribution `roots` need (extras followed), for the target Python."""
    env = {
        "python_version": python_version,
        "python_full_version": python_version + ".0",
        "sys_platform": "linux",
        "platform_system": "Linux",
        "platform_machine": "x86_64",
        "os_name": "posix",
        "implementation_name": "cpython",
        "platform_python_implementation": "CPython",
    }
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
            raise SystemExit(
                f"gpu-bundle: {req.name} is not installed in {sys.prefix}; run it from the project's "
                f"environment (make env)"
            ) from None
        found[norm(dist.metadata["Name"])] = dist.version
        for text in dist.requires or []:
            sub = Requirement(text)
            if sub.marker is not None and not any(
                sub.marker.evaluate({**env, "extra": e}) for e in (req.extras or {""})
            ):
                continue
            todo.append(sub)
    return found


def image_packages() -> set[str]:
    lines = (HERE / "image-packages.txt").read_text().splitlines()
    return {norm(x) for line in lines if (x := line.split("#")[0].strip())}


def wanted(python_version: str) -> dict[str, str]:
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    deps = [d for d in deps if norm(Requirement(d).name) not in NOT_IMPORTED]
    need = closure(deps, python_version)
    have = set(closure(list(BASE), python_version)) | image_packages()
    return {n: v for n, v in sorted(need.items()) if n not in have}


def python_of(candidate: str, run=subprocess.run) -> str | None:
    """The "3.12" version `candidate` (a path or a name on PATH) really runs, or None (absent, or a pyenv shim
    that is not enabled for this folder: it exits non-zero)."""
    try:
        out = run(
            [candidate, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
            capture_output=True,
            text=True,
            timeout=60,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def find_builder(
    python_version: str, given: str | None, run=subprocess.run, home: Path | None = None
) -> str | None:
    """A Python of `python_version` to build wheels with: `given` (GPU_BUILDER; refused in one line when it is
    not that version), else python<version> on PATH, pyenv's installed versions, uv's managed Pythons; None."""
    if given:
        found = python_of(given, run)
        if found != python_version:
            raise SystemExit(
                f"gpu-bundle: GPU_BUILDER={given} runs Python {found or 'nothing (it does not start)'}, "
                f"not {python_version}: point GPU_BUILDER at a Python {python_version} interpreter"
            )
        return given
    home = Path.home() if home is None else home
    candidates = [f"python{python_version}"]
    candidates += sorted(
        str(p) for p in (home / ".pyenv" / "versions").glob(f"{python_version}*/bin/python{python_version}")
    )
    candidates += sorted(
        str(p)
        for p in (home / ".local" / "share" / "uv" / "python").glob(
            f"cpython-{python_version}*/bin/python{python_version}"
        )
    )
    if f"{sys.version_info[0]}.{sys.version_info[1]}" == python_version:
        candidates.append(sys.executable)
    return next((c for c in candidates if python_of(c, run) == python_version), None)


def download(names: dict[str, str], dest: Path, python_version: str, builder: str | None = None) -> None:
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "-q",
        "--no-deps",
        "--only-binary=:all:",
        "--python-version",
        python_version,
        "--implementation",
        "cp",
        "-d",
        str(dest),
    ]
    for p in PLATFORMS:
        cmd += ["--platform", p]
    found_builder: str | None = None
    for name, version in names.items():
        run = subprocess.run([*cmd, f"{name}=={version}"], capture_output=True, text=True)
        if run.returncode == 0:
            continue
        # no wheel on the index (an sdist only): build one with a Python of the target version (a C extension then
        # fits a machine with this glibc or newer), else with this Python, which only a pure-Python build passes
        found_builder = found_builder or find_builder(python_version, builder)
        use = found_builder or sys.executable
        tag = "cp" + python_version.replace(".", "")
        built = Path(tempfile.mkdtemp())
        run = subprocess.run(
            [use, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(built), f"{name}=={version}"],
            capture_output=True,
            text=True,
        )
        wheels = list(built.glob("*.whl"))
        if (
            run.returncode != 0
            or len(wheels) != 1
            or not (wheels[0].name.endswith("-none-any.whl") or f"-{tag}-" in wheels[0].name)
        ):
            last = (
                [x for x in run.stderr.strip().splitlines() if not x.startswith("WARNING: Location")]
                or [w.name for w in wheels]
                or ["?"]
            )[-1]
            how = (
                f"built with {use}: {last}"
                if found_builder
                else f"no Python {python_version} found to build it (python{python_version} on PATH, pyenv, uv), and "
                f"this Python's build is not pure Python ({last})"
            )
            raise SystemExit(
                f"gpu-bundle: no wheel of {name}=={version} for Python {python_version} on manylinux "
                f"x86_64; {how}: set GPU_BUILDER to a Python {python_version} interpreter "
                f"(make gpu-bundle GPU_BUILDER=/path/to/python{python_version})"
            )
        shutil.move(str(wheels[0]), dest / wheels[0].name)


def size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=str(ROOT / ".gpu"))
    ap.add_argument("--python-version", default="3.12", help="the lent machine's Python (3.12)")
    ap.add_argument("--limit-mib", type=float, default=60.0)
    ap.add_argument(
        "--builder",
        default=None,
        help="the Python that builds a wheel the index lacks (default: one of the target version found here)",
    )
    a = ap.parse_args()
    out = Path(a.out)
    wheels = out / "wheels"
    if wheels.exists():
        shutil.rmtree(wheels)
    wheels.mkdir(parents=True)
    if not (out / "toy" / "senior" / "config.json").is_file():
        run = subprocess.run(
            [
                sys.executable,
                "-m",
                "trlvr.cli.main",
                "toy",
                "prepare",
                "--out",
                str(out / "toy"),
                "--no-progress",
            ],
            cwd=ROOT,
            capture_output=True,
            text=True,
        )
        if run.returncode != 0:
            raise SystemExit(f"gpu-bundle: trlvr toy prepare failed: {run.stderr.strip()[-500:]}")
    names = wanted(a.python_version)
    download(names, wheels, a.python_version, a.builder)
    (out / "wheels.txt").write_text("".join(f"{n}=={v}\n" for n, v in names.items()))
    (out / "pair.json").write_text(json.dumps(PAIR, indent=1) + "\n")
    total = size(out)
    print(
        f"{out}: {total / 2**20:.1f} MiB ({len(names)} wheels {size(wheels) / 2**20:.1f} MiB, toy world "
        f"{size(out / 'toy') / 2**20:.1f} MiB) for Python {a.python_version}"
    )
    if total > a.limit_mib * 2**20:
        raise SystemExit(
            f"gpu-bundle: {out} is {total / 2**20:.1f} MiB, over the {a.limit_mib:g} MiB a run call may "
            "carry (64 MiB with the working tree)"
        )


if __name__ == "__main__":
    main()

"""Bring TRL's own GRPO trainer tests into tests/upstream/trl_tests/ (gitignored: upstream code is not committed).

TRL's wheel ships no tests, and its tag v1.16.0 (the version trlvr pins) was not reachable when this was set up;
the nearest reachable version is pinned instead: TRL's main branch at REF (2026-07-24, version 1.10.0.dev0, the
newest commit of huggingface/trl that could be had), file by file with its sha256, so the counts that
tests/upstream/differences.py records belong to exactly these files. The files are TRL's, Apache-2.0, unchanged.

    python tests/upstream/fetch.py                  # from GitHub (raw.githubusercontent.com), REF
    python tests/upstream/fetch.py --git DIR        # from a TRL git directory (a clone or a bare mirror) holding REF

A file already there with the pinned hash is kept; a wrong hash is refused in one line.
"""

from __future__ import annotations

import argparse
import hashlib
import subprocess
import sys
import urllib.request
from pathlib import Path

REPO = "huggingface/trl"
REF = "f2cd57710ae345ea6428ae95363267fcf38a3dc8"
VERSION = "main @ f2cd577 (2026-07-24, 1.10.0.dev0)"
FILES = {  # path in TRL's repository: sha256 at REF; each is written to DEST/<its name>
    "tests/conftest.py": "a443a76d3816077613893cf25aaa9699a0ce623bfcf7b2df435a8336ff68cf66",
    "tests/testing_utils.py": "1786d0a83e6fe5c28e5f8f1daaab957ff1d7b4d624b42403fb33143eb04d0172",
    "tests/test_grpo_trainer.py": "d8fc6290b727744271bec990ed4141aa95870fa650b206bf80362b396b11e90e",
    # the script that wrote the Hub data set `trl-internal-testing/zen` (standins.py reads its prompts)
    "scripts/generate_zen_dataset.py": "3381062a9f572a20179d17a3821613ae44c4a0f4aada764c0473fd6624ad16bb",
}
DEST = Path(__file__).resolve().parent / "trl_tests"
UNREACHABLE = (
    3  # the exit status when a file cannot be had (no route to GitHub, no such commit); 1: a wrong hash
)


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def present() -> bool:
    """All pinned files are in DEST with their pinned hashes."""
    return all(
        (DEST / Path(n).name).is_file() and _sha((DEST / Path(n).name).read_bytes()) == h
        for n, h in FILES.items()
    )


def _read(name: str, git: str | None) -> bytes:
    if git:
        return subprocess.run(
            ["git", "-C", git, "show", f"{REF}:{name}"], check=True, capture_output=True
        ).stdout
    with urllib.request.urlopen(f"https://raw.githubusercontent.com/{REPO}/{REF}/{name}", timeout=60) as r:
        return r.read()


def fetch(git: str | None = None) -> None:
    DEST.mkdir(exist_ok=True)
    (DEST / "__init__.py").touch()  # the test file imports `.testing_utils`
    for name, want in FILES.items():
        path = DEST / Path(name).name
        if path.is_file() and _sha(path.read_bytes()) == want:
            continue
        try:
            data = _read(name, git)
        except (OSError, subprocess.CalledProcessError) as e:
            detail = e.stderr.decode().strip() if isinstance(e, subprocess.CalledProcessError) else e
            print(f"fetch.py: cannot read {name} of {REPO} at {REF}: {detail}", file=sys.stderr)
            raise SystemExit(UNREACHABLE) from None
        if _sha(data) != want:
            raise SystemExit(f"fetch.py: {name} of {REPO} at {REF} has sha256 {_sha(data)}, expected {want}")
        path.write_bytes(data)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--git", help="a TRL git directory holding the pinned commit (default: GitHub)")
    fetch(parser.parse_args(argv).git)
    print(f"{DEST}: TRL's {', '.join(FILES)} at {REPO} {VERSION}", file=sys.stderr)


if __name__ == "__main__":
    main()

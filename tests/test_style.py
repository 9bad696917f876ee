"""The formatter owns the layout: no line of the package is longer than pyproject's line length (ruff format
cannot split a docstring, a comment or a string, so this checks what it leaves)."""

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def line_length() -> int:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["ruff"]["line-length"]


def long_lines(files, limit: int, root: Path = ROOT) -> list[str]:
    """`path:line: N columns` for each line over `limit` characters."""
    out = []
    for path in files:
        for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if len(line) > limit:
                out.append(f"{path.relative_to(root).as_posix()}:{i}: {len(line)} columns")
    return out


def test_no_line_over_the_line_length():
    files = sorted((ROOT / "trlvr").rglob("*.py"))
    assert len(files) > 100
    assert long_lines(files, line_length()) == []


def test_the_check_finds_a_long_line(tmp_path):
    path = tmp_path / "m.py"
    path.write_text("x = 1\n" + "# " + "a" * 109 + "\n")
    assert long_lines([path], 110, tmp_path) == ["m.py:2: 111 columns"]

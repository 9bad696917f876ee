"""The slowest tests of a pytest run, as the table in docs/development/testing.md.

    make test 2>&1 | tee pytest.txt                          # addopts print the slowest 30 (--durations=30)
    python tools/durations_table.py pytest.txt               # print the table
    python tools/durations_table.py pytest.txt --write \\
        --machine "2 cores (AMD EPYC), clean clone"          # write it into the page (refresh it at each release)

It reads pytest's "slowest durations" lines (`12.34s call     tests/test_x.py::test_y[id]`) and its last
summary line (`3650 passed, 812 deselected in 512.30s`), and renders the N slowest (setup, call or teardown)
with the run's summary and the machine it ran on, between `<!-- durations-table:start -->` and
`<!-- durations-table:end -->` in the page.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "development" / "testing.md"
DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)s\s+(setup|call|teardown)\s+(\S.*?)\s*$")
SUMMARY = re.compile(r"^=*\s*(\d+ (?:passed|failed).*? in [\d.]+s(?: \(\d+:\d\d:\d\d\))?)\s*=*\s*$")
BLOCK = re.compile(r"(<!-- durations-table:start -->\n)(.*?)(<!-- durations-table:end -->)", re.S)


def durations(text: str) -> list[tuple[float, str, str]]:
    """(seconds, phase, test id) of every duration line in a pytest output, slowest first."""
    found = [(float(m[1]), m[2], m[3]) for m in map(DURATION.match, text.splitlines()) if m]
    return sorted(found, key=lambda d: -d[0])


def summary(text: str) -> str | None:
    """The run's last summary line ("3650 passed, 812 deselected in 512.30s (0:08:32)"), None if it has none."""
    found = [m[1] for m in map(SUMMARY.match, text.splitlines()) if m]
    return found[-1] if found else None


def _cell(text: str) -> str:
    return text.replace("|", "\\|")  # a test id's "|" would end the table's cell


def table(text: str, most: int = 30, machine: str = "") -> str:
    """The page's block: the run's summary and machine, then the `most` slowest durations as a table."""
    rows = durations(text)[:most]
    if not rows:
        raise SystemExit("durations_table: no pytest duration lines found (run pytest with --durations=N)")
    head = (
        f"`make test`: {summary(text) or 'no summary line'}"
        + (f", on {machine}" if machine else "")
        + ".\n\n"
    )
    lines = ["| # | seconds | phase | test |", "|---:|---:|---|---|"]
    lines += [f"| {i} | {s:.2f} | {phase} | `{_cell(test)}` |" for i, (s, phase, test) in enumerate(rows, 1)]
    return head + "\n".join(lines) + "\n"


def write(page: Path, block: str) -> None:
    text = page.read_text()
    if not BLOCK.search(text):
        raise SystemExit(f"durations_table: {page} has no <!-- durations-table:start --> ... end block")
    page.write_text(BLOCK.sub(lambda m: m[1] + block + m[3], text, count=1))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("output", type=Path, help="a file holding pytest's output (with --durations=N)")
    p.add_argument("--most", type=int, default=30, help="how many rows (default 30)")
    p.add_argument("--machine", default="", help="the machine it ran on, said beside the summary")
    p.add_argument("--write", action="store_true", help=f"write the table into {PAGE.relative_to(ROOT)}")
    args = p.parse_args(argv)
    block = table(args.output.read_text(errors="replace"), args.most, args.machine)
    if args.write:
        write(PAGE, block)
    else:
        sys.stdout.write(block)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""tools/durations_table.py: pytest's --durations output -> the slowest-tests table of docs/development/testing.md."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import load_script

ROOT = Path(__file__).resolve().parents[1]
tool = load_script(ROOT / "tools" / "durations_table.py", "durations_table")

OUTPUT = """\
........................................................................ [ 99%]
============================= slowest 30 durations =============================
3.10s call     tests/test_a.py::test_one[eval --n=zero]
12.50s setup    tests/test_b.py::test_two
0.90s teardown tests/test_c.py::test_three[a|b]
(2300 durations < 1s hidden.  Use -vv to show these durations.)
3650 passed, 812 deselected in 512.30s (0:08:32)
"""


def test_the_table_lists_the_slowest_first_with_the_run_s_summary():
    block = tool.table(OUTPUT, most=2, machine="2 cores")
    assert block.startswith("`make test`: 3650 passed, 812 deselected in 512.30s (0:08:32), on 2 cores.\n")
    rows = [line for line in block.splitlines() if line.startswith("| ") and line[2].isdigit()]
    assert rows == [
        "| 1 | 12.50 | setup | `tests/test_b.py::test_two` |",
        "| 2 | 3.10 | call | `tests/test_a.py::test_one[eval --n=zero]` |",
    ]
    assert "`tests/test_c.py::test_three[a\\|b]`" in tool.table(OUTPUT)  # a "|" in an id stays in its cell


def test_an_output_without_durations_is_one_line():
    with pytest.raises(SystemExit, match="no pytest duration lines found"):
        tool.table("3 passed in 1.00s\n")


def test_write_replaces_only_the_page_s_block(tmp_path):
    page = tmp_path / "testing.md"
    page.write_text("before\n<!-- durations-table:start -->\nold\n<!-- durations-table:end -->\nafter\n")
    tool.write(page, "new\n")
    assert (
        page.read_text()
        == "before\n<!-- durations-table:start -->\nnew\n<!-- durations-table:end -->\nafter\n"
    )
    assert tool.BLOCK.search(tool.PAGE.read_text()), "docs/development/testing.md lost its durations block"

"""docs/guides/trl-integration.md shows tests/upstream/differences.py's list as it is, and names the TRL test file
that `make test-trl` runs (tests/upstream/fetch.py's pin)."""

from __future__ import annotations

from pathlib import Path

from upstream import fetch
from upstream.differences import BASELINE, DIFFERENCES, TANDEM_PASSES, markdown_table

PAGE = Path(__file__).resolve().parents[2] / "docs" / "guides" / "trl-integration.md"
START, END = "<!-- differences:start -->", "<!-- differences:end -->"


def test_page_shows_the_differences_list():
    text = PAGE.read_text()
    assert text.count(START) == 1 and text.count(END) == 1, f"{PAGE}: one {START} ... {END} block"
    block = text.split(START)[1].split(END)[0].strip()
    assert block == markdown_table(), "regenerate the block from tests/upstream/differences.markdown_table()"


def test_page_names_the_pinned_file():
    text = PAGE.read_text()
    assert fetch.REF[:7] in text and fetch.VERSION in text


def test_lists_have_reasons_and_do_not_overlap():
    assert all(
        reason.strip() for reason in [*DIFFERENCES.values(), *BASELINE.values(), *TANDEM_PASSES.values()]
    )
    assert not set(DIFFERENCES) & set(BASELINE) and set(TANDEM_PASSES) <= set(BASELINE)

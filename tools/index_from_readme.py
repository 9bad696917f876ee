"""docs/index.md's intro and status are the README's: the block between `<!-- intro:start ... -->` and
`<!-- intro:end -->`, copied with its links made relative to docs/ (`docs/x.md` -> `x.md`).

    python tools/index_from_readme.py           # rewrite docs/index.md's block from the README
    python tools/index_from_readme.py --check   # exit 1 when it differs (what tests/test_docs_index.py checks)
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README, INDEX = ROOT / "README.md", ROOT / "docs" / "index.md"
BLOCK = re.compile(r"(<!-- intro:start[^>]*-->\n)(.*?)(<!-- intro:end -->)", re.S)
RELATIVE_LINK = re.compile(r"\]\((?!https?://|#)([^)]+)\)")


def readme_block(readme: str) -> str:
    """The README's block, as docs/index.md holds it; a relative link outside docs/ cannot be copied."""
    found = BLOCK.findall(readme)
    if len(found) != 1:
        raise SystemExit(f"index_from_readme: README.md: expected one intro block, found {len(found)}")
    block = found[0][1]
    outside = [link for link in RELATIVE_LINK.findall(block) if not link.startswith("docs/")]
    if outside:
        raise SystemExit(
            f"index_from_readme: README.md's intro block links outside docs/: {', '.join(outside)}"
        )
    return RELATIVE_LINK.sub(lambda m: f"]({m[1].removeprefix('docs/')})", block)


def index_text(readme: str, index: str) -> str:
    """docs/index.md with its block replaced by the README's."""
    if len(BLOCK.findall(index)) != 1:
        raise SystemExit("index_from_readme: docs/index.md: expected one intro block")
    block = readme_block(readme)
    return BLOCK.sub(lambda m: m[1] + block + m[3], index)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--check", action="store_true", help="exit 1 when docs/index.md's block differs from the README's"
    )
    args = ap.parse_args()
    index = INDEX.read_text()
    want = index_text(README.read_text(), index)
    if args.check:
        if want != index:
            print(
                "docs/index.md's intro differs from the README's: run python tools/index_from_readme.py",
                file=sys.stderr,
            )
            return 1
        return 0
    INDEX.write_text(want)
    print("wrote docs/index.md's intro from the README")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""docs/index.md's intro and status are the README's (one source: tools/index_from_readme.py copies them)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
from index_from_readme import index_text, readme_block  # noqa: E402


def test_docs_index_holds_the_readmes_intro_and_status():
    done = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "index_from_readme.py"), "--check"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    block = readme_block((ROOT / "README.md").read_text())
    assert "**Status.**" in block and "What the paper reports" in block and "](docs/" not in block


def test_a_changed_readme_changes_the_index_and_a_link_outside_docs_is_refused():
    readme = (ROOT / "README.md").read_text()
    index = (ROOT / "docs" / "index.md").read_text()
    changed = readme.replace("**Status.**", "**Status (changed).**")
    assert "**Status (changed).**" in index_text(changed, index) != index
    with pytest.raises(SystemExit, match="links outside docs/: LICENSE"):
        readme_block(readme.replace("**Status.**", "**Status.** [license](LICENSE)"))

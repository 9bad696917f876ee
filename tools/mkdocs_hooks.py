"""mkdocs hooks (mkdocs.yml `hooks:`). docs/reference/python-api.md holds each entry as a mkdocstrings
directive in an HTML comment followed by the signature and summary tools/docs_refs.py wrote, so that it
reads on GitHub; for the site, each entry becomes its directive again and mkdocstrings renders the whole
docstring."""

from __future__ import annotations

import importlib.util
from pathlib import Path

_spec = importlib.util.spec_from_file_location("docs_refs", Path(__file__).with_name("docs_refs.py"))
_docs_refs = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_docs_refs)  # the standard library only at import: no torch in .venv-docs


def on_page_markdown(markdown: str, **kwargs) -> str:
    return _docs_refs.API_ENTRY.sub(lambda m: m.group(1) + "\n", markdown)

"""The generated reference pages (docs/reference/) equal what tools/docs_refs.py writes from the code now:
a new config field, CLI option, logged key or results.json metric fails here until `make docs-refs` is run
and its output committed (and a logged key or metric without a meaning fails the generator itself)."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("docs_refs", ROOT / "tools" / "docs_refs.py")
docs_refs = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(docs_refs)


def _same(name: str, text: str):
    committed = (ROOT / "docs" / "reference" / name).read_text()
    assert committed == text, f"docs/reference/{name} is stale: run `make docs-refs` and commit it"


def test_configuration_reference_is_current():
    _same("configuration.md", docs_refs.render_configuration())


def test_cli_reference_is_current():
    _same("cli.md", docs_refs.render_cli())


def test_logged_metrics_reference_is_every_key_of_a_real_training_step(monkeypatch):
    monkeypatch.setenv("TRL_EXPERIMENTAL_SILENCE", "1")
    keys = docs_refs.toy_training_keys()
    assert {"tandem/senior_share", "tandem/team_length/mean", "loss", "reward"} <= keys
    assert not any(k.startswith("tandem/length_") for k in keys), "one name per logged quantity"
    _same("logged-metrics.md", docs_refs.render_logged_metrics(keys))


def test_data_reference_is_what_the_loader_does_with_each_example_row():
    page = docs_refs.render_data()
    assert "| `prompt` | `prompt` | `answer` |" in page  # the conversational schema's row of the registry
    assert "prompt: 2 chat message(s)" in page and "refused: `answer` is null" in page
    _same("data.md", page)


def test_outputs_reference_is_every_metric_of_a_real_evaluation():
    _same("outputs.md", docs_refs.render_outputs(docs_refs.toy_results()))


def test_python_api_reference_writes_each_signature_into_the_page():
    """Newcomer walk 3, finding 11: on GitHub the page was bare `:::` directives. Each entry now holds its
    signature and summary from the code (a changed signature fails here until `make docs-refs`)."""
    page = docs_refs.render_python_api()
    assert "evaluate_specs(\n    models: ModelSpec,\n    benchmarks: dict[str, list],\n" in page
    assert "\nEvaluate `models` on `benchmarks` under `spec` into `out`.\n" in page
    assert "TandemConfig.schedule_kwargs() -> tuple[str, dict]" in page  # a listed member
    assert " at 0x" not in page and "'str'" not in page  # no object address, no quoted annotation
    _same("python-api.md", page)


def test_the_site_build_renders_the_directive_in_place_of_each_written_entry():
    """tools/mkdocs_hooks.py gives mkdocstrings each `:::` directive (options kept) and drops what was written
    for GitHub, so the site shows each entry once."""
    spec = importlib.util.spec_from_file_location("mkdocs_hooks", ROOT / "tools" / "mkdocs_hooks.py")
    hooks = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hooks)
    page = (ROOT / "docs" / "reference" / "python-api.md").read_text()
    site = hooks.on_page_markdown(page, page=None, config=None, files=None)
    entries = len(docs_refs.API_ENTRY.findall(page))
    assert entries >= 20 and len(re.findall(r"^::: trlvr\.[\w.]+\n", site, re.M)) == entries
    assert "::: trlvr.config.TandemConfig\n    options:\n      show_signature: false\n" in site
    assert "<!--" not in site and "```py\n" not in site and "### `trlvr." not in site


def test_the_generator_refuses_a_key_without_a_meaning():
    with pytest.raises(SystemExit, match="without a meaning in LOGGED: tandem/new_thing"):
        docs_refs.render_logged_metrics(set(docs_refs.LOGGED) | {"tandem/new_thing"})
    with pytest.raises(SystemExit, match="no toy step logs any more: tandem/senior_share"):
        docs_refs.render_logged_metrics(set(docs_refs.LOGGED) - {"tandem/senior_share"})


def test_a_run_directory_name_is_described_by_its_own_line_only():
    """A name without a comment on its line takes FILE_MEANINGS' meaning, never the comment of the line below
    (results.json was described as 'markers', the next block's heading); a bare name without a meaning, or a
    meaning for a name no longer bare, stops the generator."""
    bare = "".join(f'{c} = "{c.lower()}.json"\n# the next block\n' for c in docs_refs.FILE_MEANINGS)
    source = bare + 'STUDY_DONE = ".study-done"  # done\n'
    names = docs_refs._rundir_names(source)
    assert names == [(c, f"{c.lower()}.json", m) for c, m in docs_refs.FILE_MEANINGS.items()] + [
        ("STUDY_DONE", ".study-done", "done")
    ]
    with pytest.raises(SystemExit, match=r"without a meaning .*\['NEW_THING'\]"):
        docs_refs._rundir_names(source + 'NEW_THING = "new.json"\n')
    with pytest.raises(SystemExit, match=r"does not define bare: \['RESULTS'\]"):
        docs_refs._rundir_names(
            source.replace('RESULTS = "results.json"', 'RESULTS = "results.json"  # now said')
        )

"""The README and docs/ as a user meets them: every Python block runs, every `trlvr ...` line parses with the
real parser and every path it names exists, the README stays a README, and the package surface the docs
promise (top-level names, --version, env, recipes by name from any folder) is there."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from trlvr.cli.main import build_parser, main

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
GENERATED_HELP = {ROOT / "docs" / "reference" / "cli.md"}  # `--help` output, compared by test_docs_refs.py
FENCE = re.compile(r"^```(\w*)[^\n]*\n(.*?)^```", re.M | re.S)


def blocks(lang: str) -> list[tuple[str, str]]:
    """(page:line, code) of every fenced block of `lang` in the README and docs/."""
    found = []
    for page in PAGES:
        text = page.read_text()
        for m in FENCE.finditer(text):
            if m.group(1) == lang:
                found.append((f"{page.relative_to(ROOT)}:{text[: m.start()].count(chr(10)) + 1}", m.group(2)))
    return found


# ---- the README stays a README ---------------------------------------------------------------------------


def test_the_readme_is_short_and_holds_no_lab_notes():
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 250, len(text.splitlines())
    assert not re.findall(r"\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9])[0-9a-f]{7,40}\b", text), "a commit hash"
    assert not re.search(r"\bissue \d+|#\d{2,}\b", text, re.I), "an issue number"
    assert "this machine" not in text and not re.search(r"\b\d+(\.\d+)? ?s\b(?! of)", text), (
        "a machine timing"
    )
    assert "2606.28166" in text and "2510.13551" in text and "Jiao" in text


# ---- user pages speak to any reader ----------------------------------------------------------------------

# an issue number, or the machine the project was built on named as "ours"/"this"; state the hardware instead
# ("on a 2-core x86 CPU (AVX-512), one thread"). `&#124;` (an escaped | in a generated table) is not an issue.
PRIVATE = re.compile(
    r"\bissues? #?\d+|(?<![&\w])#\d{2,}\b|\bthis (?:\d+-core |project's (?:\d+-core )?)?(?:machine|CPU|box)\b"
    r"|\bour (?:own )?(?:machines?|CPUs?|hardware|box)\b|\b\d+-core machine\b",
    re.I,
)
NOTEBOOK = ROOT / "docs" / "lab-notes.md"  # a dated lab notebook: it keeps its own words
USER_PAGES = [pytest.param(page, id=str(page.relative_to(ROOT))) for page in PAGES if page != NOTEBOOK]


@pytest.mark.parametrize("page", USER_PAGES)
def test_user_pages_hold_no_issue_numbers_and_no_word_of_our_machines(page):
    found = [
        f"{page.relative_to(ROOT)}:{text[: m.start()].count(chr(10)) + 1}: {m.group(0)!r}"
        for text in [page.read_text()]
        for m in PRIVATE.finditer(text)
    ]
    assert not found, found


def test_the_private_pattern_finds_what_it_is_for():
    said = [
        "as issue 45 asked",
        "see #123",
        "on this 2-core machine",
        "this machine's",
        "our machines",
        "On this project's 2-core CPU",
        "on this CPU",
    ]
    fine = [
        "on a 2-core x86 CPU (AVX-512)",
        "a&#124;b",
        "the local machine's",
        "#SBATCH --signal",
        "[x](a.md#L12)",
    ]
    assert all(PRIVATE.search(s) for s in said), [s for s in said if not PRIVATE.search(s)]
    assert not any(PRIVATE.search(s) for s in fine), [s for s in fine if PRIVATE.search(s)]


# ---- the API page: what it renders has a typed signature ----------------------------------------------

API_PAGE = ROOT / "docs" / "reference" / "python-api.md"
REQUIRED_ARGS = {"trlvr.training.trainer.TandemGRPOTrainer", "trlvr.engine.pair.make_pair"}  # constructors


def _api_entries() -> list[tuple[str, object]]:
    """(dotted path, object) of every `::: path` on the API page and of the members it lists by name."""
    import importlib
    import inspect

    text = API_PAGE.read_text()
    found = []
    for m in re.finditer(r"^::: ([\w.]+)\n((?:    .*\n)*)", text, re.M):
        path, options = m.group(1), m.group(2)
        module, _, name = path.rpartition(".")
        try:
            obj = getattr(importlib.import_module(module), name)
        except (ModuleNotFoundError, AttributeError):
            obj = importlib.import_module(path)
        if not inspect.ismodule(obj):
            found.append((path, obj))
        members = re.search(r"members: \[([^\]]*)\]", options)
        for member in members.group(1).split(", ") if members else []:
            found.append((f"{path}.{member}", getattr(obj, member)))
    return found


def test_every_callable_on_the_api_page_has_a_typed_signature():
    """mkdocstrings renders the signature as written: a parameter without an annotation shows no type."""
    import inspect

    entries = _api_entries()
    assert {
        "trlvr.training.trainer.TandemGRPOTrainer",
        "trlvr.rewards.math_reward.math_reward",
        "trlvr.data.loaders.load_problems",
        "trlvr.eval.spec.EvalSpec",
        "trlvr.eval.api.ModelSpec",
        "trlvr.engine.output.TandemOutput",
        "trlvr.engine.schedules.WordSchedule",
    } <= {p for p, _ in entries}
    untyped = []
    for path, obj in entries:
        if isinstance(obj, property) or not callable(obj):
            continue
        function = obj.__init__ if inspect.isclass(obj) else obj
        sig = inspect.signature(function)
        untyped += [
            f"{path}({name})"
            for name, param in sig.parameters.items()
            if name not in ("self", "cls") and param.annotation is inspect.Parameter.empty
        ]
        if not inspect.isclass(obj) and sig.return_annotation is inspect.Signature.empty:
            untyped.append(f"{path} -> ?")
    assert not untyped, untyped
    # the page renders docstrings as Markdown (Google style): a Sphinx role shows as its literal text
    roles = [
        (path, role)
        for path, obj in entries
        for role in re.findall(r":(?:func|class|data|meth|attr|mod):`", inspect.getdoc(obj) or "")
    ]
    assert not roles, roles


def test_the_constructors_document_every_argument():
    """TandemGRPOTrainer's and make_pair's docstrings hold an Args section naming each parameter (the table
    the API page shows), and nothing that is not one."""
    import inspect

    for path, obj in _api_entries():
        if path not in REQUIRED_ARGS:
            continue
        doc = inspect.getdoc(obj) or ""
        assert "\nArgs:\n" in doc, f"{path}: no Args section"
        section = doc.split("\nArgs:\n", 1)[1].split("\n\n", 1)[0]
        named = re.findall(r"^    (\**\w+):", section, re.M)
        sig = inspect.signature(obj.__init__ if inspect.isclass(obj) else obj)
        wanted = [
            ("**" if p.kind is p.VAR_KEYWORD else "") + name
            for name, p in sig.parameters.items()
            if name != "self"
        ]
        assert named == wanted, (path, named, wanted)


# ---- Python blocks run ---------------------------------------------------------------------------------

PYTHON = blocks("python")


# One Python runs every block, each as a script (`runpy`, run_name "__main__") in its own empty folder outside the
# checkout: the blocks' imports (torch, transformers, TRL: ~5 s a process) are paid once, not once per block.
_DRIVER = """
import json, os, runpy, sys, traceback

if __name__ == "__main__":  # spawned workers (the reward pool) import this file: they must not run the blocks
    results, (plan, out) = {}, map(os.path.abspath, sys.argv[1:3])
    for where, folder in json.load(open(plan)):
        os.chdir(folder)
        sys.argv = ["block.py"]
        try:
            runpy.run_path("block.py", run_name="__main__")
            results[where] = None
        except SystemExit as e:
            results[where] = None if e.code in (0, None) else f"SystemExit({e.code!r})"
        except BaseException:
            results[where] = traceback.format_exc()[-3000:]
    json.dump(results, open(out, "w"))
"""


@pytest.fixture(scope="module")
def python_blocks_run(tmp_path_factory) -> dict[str, str | None]:
    """{page:line: None, or how the block failed} for every Python block, run once by one process."""
    root = tmp_path_factory.mktemp("blocks")
    plan = []
    for i, (where, code) in enumerate(PYTHON):
        (root / f"b{i}").mkdir()
        (root / f"b{i}" / "block.py").write_text(code)
        plan.append((where, str(root / f"b{i}")))
    (root / "plan.json").write_text(json.dumps(plan))
    (root / "driver.py").write_text(_DRIVER)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "TRL_EXPERIMENTAL_SILENCE": "1"}
    done = subprocess.run(
        [sys.executable, str(root / "driver.py"), str(root / "plan.json"), str(root / "results.json")],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads((root / "results.json").read_text())


@pytest.mark.parametrize(("where", "code"), PYTHON, ids=[w for w, _ in PYTHON])
def test_every_python_block_runs(where, code, python_blocks_run):
    """Each block runs as a script in an empty folder outside the checkout (the installed code on PYTHONPATH)."""
    assert python_blocks_run[where] is None, f"{where}:\n{python_blocks_run[where]}"


def test_a_failing_block_is_reported_with_its_traceback(tmp_path):
    """The driver tells a block that raises from one that runs (so the test above cannot pass on nothing)."""
    (tmp_path / "ok").mkdir()
    (tmp_path / "ok" / "block.py").write_text("x = 1\n")
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "block.py").write_text("raise ValueError('boom')\n")
    (tmp_path / "plan.json").write_text(
        json.dumps([["ok", str(tmp_path / "ok")], ["bad", str(tmp_path / "bad")]])
    )
    (tmp_path / "driver.py").write_text(_DRIVER)
    subprocess.run(
        [sys.executable, "driver.py", "plan.json", "results.json"], cwd=tmp_path, check=True, timeout=120
    )
    results = json.loads((tmp_path / "results.json").read_text())
    assert results["ok"] is None and "ValueError: boom" in results["bad"]


def test_the_quickstart_is_among_them():
    assert any("TandemGRPOTrainer(" in code and "trainer.train()" in code for _, code in PYTHON)


# ---- trlvr lines parse, and the paths they name exist -----------------------------------------------------


def trlvr_commands() -> list[tuple[str, list[str]]]:
    """(page:line, argv after `trlvr`) of every trlvr command in a bash/text block (also `-m trlvr.cli.main`
    and inside `$(...)`); lines with a `...` placeholder are skipped."""
    found = []
    for lang in ("bash", "text", ""):
        for where, code in blocks(lang):
            if ROOT / where.split(":")[0] in GENERATED_HELP:
                continue
            for line in code.replace("\\\n", " ").splitlines():
                line = line.split(" #")[0].strip()
                if line.startswith("$ "):
                    line = line[2:]
                parts = [m.group(1) for m in re.finditer(r"\$\((trlvr [^)]*)\)", line)]
                line = re.sub(r"\"?\$\([^)]*\)\"?", "FILE", line)
                m = re.search(r"(?:^|\s)(?:trlvr|-m trlvr\.cli\.main)\s+(.*)$", line)
                if m and not line.startswith(("pip ", "git ", "cp ")):
                    parts.append("trlvr " + m.group(1))
                for cmd in parts:
                    if "..." not in cmd:
                        found.append((where, shlex.split(cmd)[1:]))
    return found


COMMANDS = trlvr_commands()


@pytest.mark.parametrize(("where", "argv"), COMMANDS, ids=[f"{w} {' '.join(a)[:60]}" for w, a in COMMANDS])
def test_every_trlvr_line_parses(where, argv):
    from trlvr.config import TANDEM_FIELDS, grpo_field_names, resolve_config_path

    if argv[:1] == ["train"]:  # TRL's parser reads the rest: the config must resolve and every key be a field
        rest = argv[1:]
        if "--config" in rest:
            resolve_config_path(rest[rest.index("--config") + 1])
        keys = {a[2:].split("=")[0] for a in rest if a.startswith("--")}
        keys -= {"config", "resume", "force", "verbose", "seeds", "dry-run", "help"}
        assert keys <= TANDEM_FIELDS | grpo_field_names(), (
            f"{where}: {keys - TANDEM_FIELDS - grpo_field_names()}"
        )
        return
    try:
        build_parser().parse_args(argv)
    except SystemExit as e:
        assert e.code == 0, f"{where}: trlvr {shlex.join(argv)} does not parse"


def test_every_path_a_command_names_exists():
    """recipes/, studies/, bench/ paths exist in a clone, and recipes and studies also resolve in the package."""
    from trlvr.config import resolve_config_path
    from trlvr.experiments.study_spec import resolve_study

    named = {(w, a) for w, argv in COMMANDS for a in argv if re.match(r"^(recipes|studies|bench)/", a)}
    for where, _, code in [(w, None, c) for lang in ("bash", "text", "") for w, c in blocks(lang)]:
        if ROOT / where.split(":")[0] in GENERATED_HELP:
            continue
        named |= {
            (where, p) for p in re.findall(r"(?<![\w/])((?:recipes|studies|bench)/[\w./-]+\.\w+)", code)
        }
    assert named
    for where, path in sorted(named):
        assert (ROOT / path).exists(), f"{where}: {path} does not exist"
        if path.startswith("recipes/") and "accelerate" not in path:
            assert resolve_config_path(path).is_file()
        if path.startswith("studies/") and path.count("/") == 1:
            assert resolve_study(path).is_file()


def test_every_study_and_recipe_ships_in_the_package(tmp_path, monkeypatch):
    """From a folder with no clone in it, every shipped name resolves (the wheel has no recipes/ or studies/)."""
    from trlvr.config import RECIPES_DIR, resolve_config_path
    from trlvr.experiments.study_spec import STUDIES_DIR, resolve_study

    monkeypatch.chdir(tmp_path)
    for study in sorted((ROOT / "studies").glob("*.yaml")):
        assert (STUDIES_DIR / study.name).is_file(), (
            f"{study.name}: link it: ln -s ../../studies/{study.name} trlvr/studies/"
        )
        assert resolve_study(study.stem) == STUDIES_DIR / study.name
        assert resolve_study(f"studies/{study.name}") == STUDIES_DIR / study.name
    for recipe in sorted((ROOT / "recipes").glob("qwen*.yaml")):
        assert resolve_config_path(recipe.stem) == RECIPES_DIR / recipe.name
        assert resolve_config_path(f"recipes/{recipe.name}") == RECIPES_DIR / recipe.name


# ---- the package surface the docs promise -----------------------------------------------------------------


def test_import_trlvr_is_light_and_exports_the_three_names():
    code = (
        "import sys, trlvr; heavy = [m for m in ('torch', 'trl', 'transformers', 'vllm') if m in sys.modules]; "
        "assert not heavy, heavy; from trlvr import TandemConfig, TandemGRPOTrainer, make_pair; "
        "assert TandemGRPOTrainer.__name__ == 'TandemGRPOTrainer' and callable(make_pair); "
        "assert {'TandemConfig', 'TandemGRPOTrainer', 'make_pair'} <= set(dir(trlvr)); print('ok')"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-2000:]
    import trlvr

    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        trlvr.nope  # noqa: B018


def test_version_env_and_recipes(capsys):
    import trlvr

    assert main(["--version"]) == 0 and capsys.readouterr().out.strip() == f"trlvr {trlvr.__version__}"
    assert main(["env"]) == 0
    out = capsys.readouterr().out
    for name in ("trlvr:", "torch:", "transformers:", "trl:", "vllm:", "cuda:", "python:", "platform:"):
        assert name in out, name
    assert main(["recipes", "--path", "starter"]) == 0
    assert capsys.readouterr().out.strip().endswith("trlvr/configs/starter.yaml")
    assert main(["recipes", "--path", "nope"]) == 2
    assert "no shipped file of that name" in capsys.readouterr().err


def test_train_help_groups_the_fields(capsys):
    with pytest.raises(SystemExit) as e:
        main(["train", "--config", "toy", "--help"])
    out = capsys.readouterr().out
    assert e.value.code == 0
    assert "trlvr run fields (TandemConfig):" in out and "switches of this command (not config keys):" in out
    assert out.index("\n  --schedule") > out.index("trlvr run fields (TandemConfig):")


def test_eval_and_select_help_show_defaults():
    from trlvr.cli.main import build_parser

    sub = next(a for a in build_parser()._actions if a.dest == "command").choices
    said = {name: " ".join(sub[name].format_help().split()) for name in ("eval", "select")}
    assert "--temperature TEMPERATURE (default: 0.7)" in said["select"], said["select"]
    assert "(default: handoff/pass@1)" in said["select"] and "--seed SEED (default: 0)" in said["select"]
    assert "--samples N samples per problem and protocol" in said["eval"] and "(default: 8)" in said["eval"]
    assert "(default: None)" not in said["eval"] + said["select"] and "(default: False)" not in said["eval"]


def test_the_demo_table_is_on_its_page_with_the_machine_kind_it_was_made_on_and_its_figure():
    """`.ci/demo-check` compares the block with `make demo`'s summary.md where the machine kind is the same."""
    pattern = re.compile(
        r"<!-- demo-table:start[^>]*machine kind: ([^>]*?) -->\n(.*?)<!-- demo-table:end -->", re.S
    )
    page = pattern.findall((ROOT / "docs" / "results" / "toy-demo.md").read_text())
    assert len(page) == 1 and page[0][1].startswith("|"), page
    assert (
        "demo-table" not in (ROOT / "README.md").read_text()
    )  # the README's headline is the three-seed study
    (figure,) = re.findall(r"\]\(([^)]*toy-demo\.png)\)", page[0][1])
    assert (ROOT / "docs" / "results" / figure).is_file()

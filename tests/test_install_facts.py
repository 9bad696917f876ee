"""Install facts that must agree across files: the repository URL (pyproject's [project.urls], CITATION.cff's
repository-code, the README's `git clone` line) and the torch pin (README, docs, Makefile) inside pyproject's
range."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]


def test_the_repository_url_is_the_same_in_all_three_places():
    urls = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["urls"]
    repository = urls["Repository"]
    assert all(u.startswith(repository) for u in urls.values()), urls
    cff = yaml.safe_load((ROOT / "CITATION.cff").read_text())
    clones = re.findall(r"^git clone (\S+)", (ROOT / "README.md").read_text(), re.M)
    assert clones == [repository] and cff["repository-code"] == repository
    assert re.fullmatch(r"https://github\.com/[\w.-]+/[\w.-]+", repository), repository


def test_every_torch_install_line_is_pinned_inside_the_projects_range():
    from packaging.requirements import Requirement

    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    spec = next(Requirement(d).specifier for d in deps if Requirement(d).name == "torch")
    makefile = (ROOT / "Makefile").read_text()
    [version] = re.findall(r"^TORCH_VERSION\s*\?=\s*(\S+)", makefile, re.M)
    assert version in spec and "torch==$(TORCH_VERSION)" in makefile
    for page in (ROOT / "README.md", *(ROOT / "docs").rglob("*.md")):
        for line in re.findall(r"pip install [^\n`#]*", page.read_text()):  # the command, not its comment
            if re.search(r"(?<![-\w])torch(?![-\w])", line):  # torch itself, not uv's --torch-backend
                assert f"torch=={version} " in line, f"{page.relative_to(ROOT)}: {line}"

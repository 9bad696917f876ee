"""tests/upstream/fetch.py takes TRL's files only at the pinned commit and hashes, and refuses others in one line."""

from __future__ import annotations

import subprocess

import pytest
from upstream import fetch


def _git(root, *args):
    subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True)


def test_a_file_that_differs_from_the_pin_is_refused(tmp_path, monkeypatch):
    repo = tmp_path / "trl"
    (repo / "tests").mkdir(parents=True)
    _git(repo, "init", "-q")
    (repo / "tests" / "conftest.py").write_text("# not TRL's file\n")
    _git(repo, "add", ".")
    _git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "x")
    head = subprocess.run(
        ["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    monkeypatch.setattr(fetch, "REF", head)
    monkeypatch.setattr(fetch, "DEST", tmp_path / "dest")
    with pytest.raises(SystemExit) as e:
        fetch.fetch(str(repo))
    assert str(e.value).startswith(
        "fetch.py: tests/conftest.py of huggingface/trl at "
    ) and "expected a443a76d" in str(e.value)
    assert not (tmp_path / "dest" / "conftest.py").exists() and not fetch.present()


def test_a_missing_commit_is_refused_in_one_line(tmp_path, monkeypatch, capsys):
    repo = tmp_path / "empty"
    repo.mkdir()
    _git(repo, "init", "-q")
    monkeypatch.setattr(fetch, "DEST", tmp_path / "dest")
    with pytest.raises(SystemExit) as e:
        fetch.fetch(str(repo))
    assert (
        e.value.code == fetch.UNREACHABLE == 3
    )  # .ci/run tells "could not be had" (3) from a wrong hash (1)
    said = capsys.readouterr().err
    assert said.startswith(f"fetch.py: cannot read tests/conftest.py of huggingface/trl at {fetch.REF}: ")
    assert said.count("\n") == 1

"""Strict configs: the one YAML loader (`trlvr.config.read_yaml`) refuses a key written twice in one line
naming the key and the file, for run configs (shipped recipes are run configs), studies and the run
configs a study names. Before: PyYAML kept the last value silently."""

from __future__ import annotations

import pytest

from trlvr.cli.main import main as cli
from trlvr.config import CONFIGS_DIR, RECIPES_DIR, read_yaml
from trlvr.errors import UserError
from trlvr.experiments.study_spec import STUDIES_DIR


def _twice(text: str, key: str, value: str) -> str:
    """``text`` with ``key: value`` written again at the end (a second, different value)."""
    return text.rstrip("\n") + f"\n{key}: {value}\n"


def test_a_run_config_with_a_key_twice_is_refused_naming_key_and_file(tmp_path, capsys):
    path = tmp_path / "run.yaml"
    path.write_text(_twice((CONFIGS_DIR / "toy.yaml").read_text(), "learning_rate", "1.0e-3"))
    assert cli(["train", "--config", str(path), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert f"config {path}: key 'learning_rate' is written twice" in err, err
    assert err.count("\n") == 1 and "Traceback" not in err


@pytest.mark.parametrize("recipe", sorted(p.name for p in RECIPES_DIR.glob("qwen*.yaml")))
def test_a_recipe_with_a_key_twice_is_refused(tmp_path, capsys, recipe):
    path = tmp_path / recipe
    path.write_text(_twice((RECIPES_DIR / recipe).read_text(), "seed", "1234"))
    assert cli(["train", "--config", str(path), "--dry-run"]) == 2
    assert f"config {path}: key 'seed' is written twice" in capsys.readouterr().err


def test_a_study_with_a_key_twice_is_refused_naming_key_and_file(tmp_path, capsys):
    path = tmp_path / "study.yaml"
    path.write_text(_twice((STUDIES_DIR / "toy-seeds.yaml").read_text(), "seeds", "[5]"))
    assert cli(["study", "plan", str(path), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert f"study {path}: key 'seeds' is written twice" in err, err
    assert err.count("\n") == 1 and not (tmp_path / "out").exists()


def test_nested_duplicates_name_their_lines_and_merges_are_not_duplicates(tmp_path):
    path = tmp_path / "x.yaml"
    path.write_text("a:\n  b: 1\n  c: 2\n  b: 3\n")
    with pytest.raises(
        UserError, match=r"^config .*x\.yaml: key 'b' is written twice \(lines 2 and 4\); keep one$"
    ):
        read_yaml(path)
    path.write_text("base: &b {x: 1, y: 2}\nother:\n  <<: *b\n  x: 3\n")
    assert read_yaml(path) == {"base": {"x": 1, "y": 2}, "other": {"x": 3, "y": 2}}
    path.write_text("a: 1\nb: {a: 2}\n")  # one key in two mappings: no duplicate
    assert read_yaml(path) == {"a": 1, "b": {"a": 2}}


def test_every_shipped_yaml_reads_strictly():
    """No shipped config, recipe or study writes a key twice (each would now be refused)."""
    for folder in (CONFIGS_DIR, RECIPES_DIR, STUDIES_DIR, STUDIES_DIR / "configs"):
        for path in folder.glob("*.yaml"):
            read_yaml(path)


@pytest.mark.parametrize("suffix", [".jsonl", ".json"])
def test_a_data_row_with_a_key_twice_is_refused_naming_file_row_and_key(tmp_path, capsys, suffix):
    """A problem file whose row writes "answer" twice: `data check` and the training dry run refuse it in
    one line naming the file (the row) and the key. Before: json kept the last value, a gold silently."""
    row = '{"problem": "What is 1 plus 1?", "answer": "2", "answer": "3"}'
    path = tmp_path / f"d{suffix}"
    path.write_text(row + "\n" if suffix == ".jsonl" else f"[{row}]")
    where = f"{path}:1" if suffix == ".jsonl" else str(path)
    for argv in (
        ["data", "check", str(path)],
        [
            "train",
            "--config",
            "toy",
            "--dataset",
            str(path),
            "--output_dir",
            str(tmp_path / "r"),
            "--dry-run",
        ],
    ):
        assert cli(argv) == 2, argv
        err = capsys.readouterr().err
        assert f"{where}: key 'answer' is written twice in one object" in err, err
        assert err.count("\n") == 1 and "Traceback" not in err
    assert not (tmp_path / "r").exists()

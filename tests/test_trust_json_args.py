"""Strict JSON arguments (issue 58): a JSON object given as text for a dict field, on the command line or
as a string in a config, is read by one strict loader: a key written twice is refused naming it."""

from __future__ import annotations

import pytest
from helpers import cli_errors

from trlvr.cli.main import main
from trlvr.config import parse_run_args
from trlvr.data.jsonl import DuplicateKey, loads_strict
from trlvr.errors import UserError


@pytest.mark.parametrize(
    "argv, line",
    [
        (
            ["--model_init_kwargs", '{"dtype": "bfloat16", "dtype": "float32"}'],
            "command line: model_init_kwargs: key 'dtype' is written twice in one object; keep one",
        ),
        (
            ['--generation_kwargs={"stop": {"a": 1, "a": 2}}'],
            "command line: generation_kwargs: key 'a' is written twice in one object; keep one",
        ),
        (
            ["--lr_scheduler_kwargs", '{"min_lr": 0.1, "min_lr": 0.2}'],
            "command line: lr_scheduler_kwargs: key 'min_lr' is written twice in one object; keep one",
        ),
        (
            ["--lr_scheduler_kwargs", '{"min_lr": '],
            "command line: lr_scheduler_kwargs: not valid JSON (Expecting value at column 12)",
        ),
    ],
)
def test_a_key_written_twice_in_a_json_argument_is_refused_naming_it(argv, line):
    with pytest.raises(UserError) as e:
        parse_run_args(argv)
    assert str(e.value) == line


def test_a_json_string_inside_a_config_is_read_strictly_too(tmp_path, capsys):
    config = tmp_path / "run.yaml"
    config.write_text('model_init_kwargs: \'{"dtype": "bfloat16", "dtype": "float32"}\'\n')
    assert main(["train", "--config", str(config)]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert cli_errors(err) == [
        f"trlvr train: error: config {config}: model_init_kwargs: key 'dtype' is written twice "
        "in one object; keep one"
    ]


def test_the_strict_loader_reads_what_json_reads():
    assert loads_strict('{"a": {"b": [1, {"c": 2}]}}') == {"a": {"b": [1, {"c": 2}]}}
    with pytest.raises(DuplicateKey):
        loads_strict('[{"x": 1, "x": 1}]')

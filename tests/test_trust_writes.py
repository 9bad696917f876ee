"""Resolve before you write (issue 58): a write never reaches another command's file through a symlink."""

from __future__ import annotations

import os

import pytest
from helpers import cli_errors, fake_eval_outputs

from trlvr import rundir
from trlvr.cli.main import main
from trlvr.errors import UserError
from trlvr.eval.store import EvalDir


def test_report_out_symlinked_onto_results_json_is_refused_and_the_record_keeps_its_bytes(tmp_path, capsys):
    ev = fake_eval_outputs(tmp_path / "EVAL")
    before = (ev / "results.json").read_bytes()
    os.symlink(ev / "results.json", tmp_path / "link.html")
    assert main(["report", str(ev), "--out", str(tmp_path / "link.html")]) == 2
    err = capsys.readouterr().err
    (line,) = cli_errors(err)
    assert (
        "Traceback" not in err
        and "a symlink to" in line
        and "results.json" in line
        and "not a report" in line
    )
    assert (ev / "results.json").read_bytes() == before and (tmp_path / "link.html").is_symlink()


def test_a_symlink_to_nothing_is_refused(tmp_path):
    os.symlink(tmp_path / "nowhere" / "r.html", tmp_path / "dangling.html")
    with pytest.raises(UserError, match="which is not there"):
        rundir.check_report_path(tmp_path / "dangling.html", "--out")
    os.symlink(tmp_path / "nowhere", tmp_path / "dangling-dir")
    with pytest.raises(UserError, match="which is not there"):
        rundir.prepare_output(tmp_path / "dangling-dir", rundir.COMPARISON, flag="--out")
    assert not (tmp_path / "nowhere").exists()


def test_check_report_path_looks_where_the_write_lands(tmp_path):
    ev = fake_eval_outputs(tmp_path / "EVAL")
    os.symlink(ev, tmp_path / "via")  # a linked folder: its results.json is the evaluation's
    with pytest.raises(UserError, match="not a report"):
        rundir.check_report_path(tmp_path / "via" / "results.json", "--out")
    assert rundir.check_report_path(tmp_path / "via" / "report.html", "--out") == ev.resolve() / "report.html"


def test_write_file_replaces_a_link_never_writes_through_it(tmp_path):
    record = tmp_path / "record.json"
    record.write_text("{}\n")
    out = tmp_path / "out"
    out.mkdir()
    os.symlink(record, out / "compare.json")
    rundir.write_file(out / "compare.json", "new")
    assert record.read_text() == "{}\n" and not (out / "compare.json").is_symlink()
    assert (out / "compare.json").read_text() == "new"
    assert [p.name for p in out.iterdir()] == ["compare.json"]  # no temporary file left


def test_an_evaluation_never_appends_through_a_symlinked_samples_file(tmp_path):
    other = fake_eval_outputs(tmp_path / "OTHER")
    before = (other / "samples.jsonl").read_bytes()
    out = tmp_path / "EVAL"
    out.mkdir()
    os.symlink(other / "samples.jsonl", out / "samples.jsonl")
    with pytest.raises(UserError, match="samples.jsonl is a symlink"):
        with EvalDir(out).lock():
            pass
    assert (other / "samples.jsonl").read_bytes() == before

"""Read what you check (issue 58): a finished evaluation's files, a checkpoint's weights and a resumed
checkpoint are checked against their manifest's sha256 by the command that reads them, in one line."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from helpers import (
    cli_errors,
    evaluate_models,
    fake_model_folder,
    last_word,
    parity_reward,
    tiny_model,
    toy_problems,
)

from trlvr import artifacts
from trlvr.cli.main import main
from trlvr.errors import UserError
from trlvr.eval.api import resolve_senior
from trlvr.eval.report import impossible


@pytest.fixture(scope="module")
def evals(tokenizer, tmp_path_factory):
    """Two finished (sealed) evaluations, A and B, of three problems each."""
    root = tmp_path_factory.mktemp("evals")
    junior = tiny_model("qwen3", len(tokenizer), seed=1, hidden=32, layers=1)
    for name, seed in (("A", 0), ("B", 2)):
        senior = tiny_model("qwen3", len(tokenizer), seed=seed, hidden=32, layers=1)
        evaluate_models(
            senior,
            junior,
            tokenizer,
            {"alpha": toy_problems(3, "a")},
            root / name,
            suite=["solo"],
            n=2,
            ks=[1, 2],
            max_new_tokens=6,
            batch_size=4,
            progress=False,
            score_fn=parity_reward,
            extract_fn=last_word,
            num_resamples=50,
        )
    return root


def copied(evals: Path, tmp_path: Path) -> tuple[Path, Path]:
    shutil.copytree(evals, tmp_path / "e")
    return tmp_path / "e" / "A", tmp_path / "e" / "B"


def same_size_edit(path: Path, old: bytes, new: bytes) -> None:
    data = path.read_bytes()
    assert len(old) == len(new) and old in data
    path.write_bytes(data.replace(old, new))


def one_line(capsys) -> str:
    err = capsys.readouterr().err
    assert "Traceback" not in err
    (line,) = cli_errors(err)
    return line


def test_samples_edited_after_the_seal_are_refused_by_report_and_compare(evals, tmp_path, capsys):
    a, b = copied(evals, tmp_path)
    rewarded = (
        b'"reward": 1.0' if b'"reward": 1.0' in (a / "samples.jsonl").read_bytes() else b'"reward": 0.0'
    )
    same_size_edit(a / "samples.jsonl", rewarded, rewarded.replace(b"1.0", b"0.5").replace(b"0.0", b"0.5"))
    assert main(["report", str(a), "--out", str(tmp_path / "r.html")]) == 2
    assert "samples.jsonl changed since it was written" in one_line(capsys)
    assert not (tmp_path / "r.html").exists()
    assert main(["compare", str(a), str(b), "--out", str(tmp_path / "cmp")]) == 2
    assert "samples.jsonl changed since it was written" in one_line(capsys)
    assert not (tmp_path / "cmp").exists()
    # a seed group's reader (report of several) refuses the same way
    assert main(["report", str(b), str(a), "--out", str(tmp_path / "m.html")]) == 2
    assert "samples.jsonl changed since it was written" in one_line(capsys)


def test_results_edited_after_the_seal_are_refused_and_impossible_values_even_when_resealed(
    evals, tmp_path, capsys
):
    a, b = copied(evals, tmp_path)
    text = (a / "results.json").read_text()
    value = json.loads(text)["macro"]["metrics"]["solo/pass@1"]["value"]
    at = text.index('"value": ', text.index('"solo/pass@1"')) + len('"value": ')
    (a / "results.json").write_text(text[:at] + "9" + text[at + 1 :])  # 0.5 -> 9.5: the same size
    assert main(["compare", str(b), str(a), "--out", str(tmp_path / "cmp")]) == 2
    assert "results.json changed since it was written" in one_line(capsys)
    artifacts.write_manifest(a)  # sealed again over the impossible value: the value itself is refused
    assert main(["report", str(a), "--out", str(tmp_path / "r.html")]) == 2
    line = one_line(capsys)
    assert (
        "solo/pass@1" in line
        and "with value 9" in line
        and "outside [0, 1]" in line
        and str(a / "results.json") in line
    )
    (a / "results.json").write_text(text)
    artifacts.write_manifest(a)
    assert main(["report", str(a), "--out", str(tmp_path / "r.html")]) == 0 and value <= 1


@pytest.mark.parametrize(
    "entry, why",
    [
        ({"value": 0.5, "ci_low": 0.6, "ci_high": 0.9}, "outside its CI"),
        ({"value": -0.1, "ci_low": -0.2, "ci_high": 0.0}, "outside [0, 1]"),
        ({"value": "0.5", "ci_low": 0.0, "ci_high": 1.0}, "has value '0.5'"),
        ({"value": 0.5, "ci_low": 0.0, "ci_high": 1.0}, None),
        ({"value": None, "ci_low": None, "ci_high": None}, None),
    ],
)
def test_impossible_values(entry, why):
    got = impossible("solo/pass@1", entry)
    assert got is None if why is None else why in got
    assert impossible("drift/kl", {"value": 3.0, "ci_low": 2.0, "ci_high": 4.0}) is None  # not a rate


def sealed_model(folder: Path) -> Path:
    fake_model_folder(folder)
    artifacts.write_manifest(folder)
    return folder


def flip_middle(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[-3] ^= 0xFF  # inside the tensor data: size and header intact
    path.write_bytes(bytes(data))


def test_weights_changed_after_the_save_are_refused_before_the_load(tmp_path):
    run = tmp_path / "run"
    ckpt = sealed_model(run / "checkpoint-2")
    assert resolve_senior(str(ckpt)) == (str(ckpt), None)
    flip_middle(ckpt / "model.safetensors")
    assert artifacts.problem(ckpt, artifacts.WEIGHTS) is None  # the cheap (size) check cannot see it
    with pytest.raises(UserError, match=r"model\.safetensors changed since it was written"):
        resolve_senior(str(ckpt))
    (run / "selected.json").write_text(json.dumps({"step": 2, "path": "checkpoint-2", "newest_step": 2}))
    with pytest.raises(
        UserError, match=r"selected checkpoint .*model\.safetensors changed since it was written"
    ):
        resolve_senior(f"{run}@selected")


def test_the_deep_check_of_weights_skips_the_resume_state_a_weights_reader_never_opens(tmp_path):
    ckpt = sealed_model(tmp_path / "checkpoint-2")
    for name in ("optimizer.pt", "scheduler.pt", "rng_state.pth"):
        (ckpt / name).write_bytes(b"x" * 10)
    (ckpt / "trainer_state.json").write_text('{"global_step": 2}')
    artifacts.write_manifest(ckpt)
    assert artifacts.problem(ckpt, artifacts.CHECKPOINT, deep=True) is None
    (ckpt / "optimizer.pt").write_bytes(b"y" * 10)
    assert artifacts.problem(ckpt, artifacts.WEIGHTS, deep=True) is None
    assert "optimizer.pt changed" in artifacts.problem(ckpt, artifacts.CHECKPOINT, deep=True)


def test_read_checked_hashes_what_it_reads(tmp_path):
    folder = tmp_path / "f"
    folder.mkdir()
    (folder / "x.json").write_text('{"a": 1}')
    (folder / "free.txt").write_text("anything")
    artifacts.write_manifest(folder, skip=("free.txt",))
    assert artifacts.read_checked(folder / "x.json") == b'{"a": 1}'
    (folder / "x.json").write_text('{"a": 2}')
    with pytest.raises(artifacts.Changed, match="x.json changed since it was written"):
        artifacts.read_checked(folder / "x.json")
    (folder / "free.txt").write_text("other")  # not listed: read as is
    assert artifacts.read_checked(folder / "free.txt") == b"other"


def test_an_eval_into_a_sealed_folder_whose_samples_were_edited_reuses_none_of_them(
    evals, tokenizer, tmp_path
):
    a, _ = copied(evals, tmp_path)
    same_size_edit(a / "samples.jsonl", b'"sample_idx": 0', b'"sample_idx": 1')
    senior = tiny_model("qwen3", len(tokenizer), seed=0, hidden=32, layers=1)
    junior = tiny_model("qwen3", len(tokenizer), seed=1, hidden=32, layers=1)
    before = (a / "samples.jsonl").read_bytes()
    with pytest.raises(UserError, match=r"samples\.jsonl changed since it was written.*pass --fresh"):
        evaluate_models(
            senior,
            junior,
            tokenizer,
            {"alpha": toy_problems(3, "a")},
            a,
            suite=["solo"],
            n=2,
            ks=[1, 2],
            max_new_tokens=6,
            batch_size=4,
            progress=False,
            score_fn=parity_reward,
            extract_fn=last_word,
            num_resamples=50,
        )
    assert (a / "samples.jsonl").read_bytes() == before


def test_a_report_of_several_evaluations_has_a_name_of_its_own(evals, tmp_path, capsys):
    """`trlvr report A B` never replaces the report of another set of evaluations next to A."""
    a, b = copied(evals, tmp_path)
    shutil.copytree(a, a.parent / "C")
    assert main(["report", str(a), str(b)]) == 0
    assert main(["report", str(a), str(a.parent / "C")]) == 0
    written = sorted(p.name for p in a.parent.glob("*.html"))
    assert len(written) == 2 and all(n.startswith("report-A+") for n in written), written
    assert not (a.parent / "report.html").exists()
    out = capsys.readouterr().out
    assert all(f"wrote {a.parent / n}" in out for n in written)

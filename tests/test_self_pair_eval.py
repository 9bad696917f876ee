"""`trlvr eval` with a LoRA senior: adapters load onto their base, and `--junior self` equals a base copy."""

from __future__ import annotations

import shutil

import torch

from trlvr.cli.main import main as cli
from trlvr.data import read_jsonl
from trlvr.toy.task import make_splits
from trlvr.toy.world import ASSETS_DIR, _rows, _write_jsonl


def make_adapter(tmp_path):
    """A LoRA adapter with random non-zero weights on a copy of the toy senior, saved as a run would."""
    from peft import get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from trlvr.training.peft_setup import lora_config

    base_dir = tmp_path / "base"
    shutil.copytree(ASSETS_DIR / "senior", base_dir)
    torch.manual_seed(0)
    model = get_peft_model(AutoModelForCausalLM.from_pretrained(base_dir), lora_config(rank=4))
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(
                    0, 0.5
                )  # large enough that the LoRA senior samples other tokens under common random numbers
    adapter = tmp_path / "run" / "final"
    model.save_pretrained(adapter)
    AutoTokenizer.from_pretrained(base_dir).save_pretrained(adapter)
    return base_dir, adapter


def test_eval_junior_self_equals_a_separate_base_copy(tmp_path):
    base, adapter = make_adapter(tmp_path)
    _write_jsonl(tmp_path / "test.jsonl", _rows(make_splits(50, 6, seed=0)[1]))
    common = [
        "--data",
        f"toy={tmp_path / 'test.jsonl'}",
        "--n",
        "2",
        "--k",
        "1",
        "--suite",
        "solo,handoff,dose",
        "--dose-shares",
        "0.5",
        "--max-new-tokens",
        "48",
        "--no-progress",
        "--dtype",
        "float32",
    ]
    assert (
        cli(["eval", "--senior", str(adapter), "--junior", "self", "--out", str(tmp_path / "self"), *common])
        == 0
    )
    assert (
        cli(
            [
                "eval",
                "--senior",
                str(adapter),
                "--junior",
                str(base),
                "--out",
                str(tmp_path / "copy"),
                *common,
            ]
        )
        == 0
    )
    a = read_jsonl(tmp_path / "self" / "samples.jsonl")
    b = read_jsonl(tmp_path / "copy" / "samples.jsonl")
    key = lambda r: (r["protocol"], r["problem_id"], r["sample_idx"])  # noqa: E731
    a, b = sorted(a, key=key), sorted(b, key=key)
    assert [(r["token_ids"], r["authors"]) for r in a] == [(r["token_ids"], r["authors"]) for r in b]
    # the LoRA senior is really in use: its solo samples differ from the base's own
    assert (
        cli(
            [
                "eval",
                "--senior",
                str(base),
                "--junior",
                str(base),
                "--out",
                str(tmp_path / "base-eval"),
                *common,
                "--suite",
                "solo",  # only its solo samples are compared
            ]
        )
        == 0
    )
    c = sorted(read_jsonl(tmp_path / "base-eval" / "samples.jsonl"), key=key)
    assert [r["token_ids"] for r in a if r["protocol"] == "solo"] != [
        r["token_ids"] for r in c if r["protocol"] == "solo"
    ]


def test_junior_self_needs_an_adapter_senior(tmp_path, capsys):
    _write_jsonl(tmp_path / "test.jsonl", _rows(make_splits(50, 4, seed=0)[1]))
    argv = [
        "eval",
        "--senior",
        str(ASSETS_DIR / "senior"),
        "--junior",
        "self",
        "--data",
        f"toy={tmp_path / 'test.jsonl'}",
        "--n",
        "1",
        "--k",
        "1",
        "--suite",
        "solo",
        "--max-new-tokens",
        "8",
        "--out",
        str(tmp_path / "o"),
        "--no-progress",
    ]
    assert cli(argv) == 2
    assert "'self' needs a LoRA senior" in capsys.readouterr().err

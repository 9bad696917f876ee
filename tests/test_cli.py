"""The `trlvr` dispatcher and the commands the README documents, run through the real entry point."""

from __future__ import annotations

import json
import re
from pathlib import Path

from helpers import tiny_model

from trlvr.cli.main import COMMANDS, build_parser, main

README = Path(__file__).resolve().parents[1] / "README.md"


def test_every_command_is_registered():
    sub = next(a for a in build_parser()._actions if a.dest == "command")
    assert set(sub.choices) == set(COMMANDS)


def test_unknown_command_fails():
    assert main(["no-such-command"]) == 2  # argparse's one line and exit code, returned (not raised)


def test_readme_train_overrides_are_valid_config_keys():
    """Every `--key` the README passes to `trlvr train` is a TandemConfig or GRPOConfig field."""
    from trlvr.config import TANDEM_FIELDS, grpo_field_names

    commands = README.read_text().replace("\\\n", " ").splitlines()  # join continued lines
    train = [c.split("#")[0] for c in commands if re.search(r"trlvr train |trlvr\.cli\.main train ", c)]
    keys = {k for c in train for k in re.findall(r"--([a-z_.-]+)", c.split(" train ", 1)[1])}
    keys = {k.split(".")[-1] for k in keys} - {"config", "resume", "force", "verbose", "seeds", "dry-run"}
    assert keys, "README lost its train example"
    allowed = TANDEM_FIELDS | grpo_field_names()
    assert keys <= allowed, keys - allowed


def test_eval_command_end_to_end_on_a_gsm8k_file(tokenizer, tmp_path):
    """`trlvr eval` loads models and a GSM8K-format file, builds prompts, writes results."""
    for name, seed, hidden in (("senior", 0, 64), ("junior", 1, 32)):
        model = tiny_model("llama", len(tokenizer), seed=seed, hidden=hidden)
        model.save_pretrained(tmp_path / name)
        tokenizer.save_pretrained(tmp_path / name)
    data = tmp_path / "gsm8k.jsonl"
    rows = [
        {
            "question": f"What is {i} plus {i}?",
            "answer": f"{i} + {i} = <<{i}+{i}={2 * i}>>{2 * i}\n#### {2 * i}",
        }
        for i in range(3)
    ]
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "eval"
    rc = main(
        [
            "eval",
            "--senior",
            str(tmp_path / "senior"),
            "--junior",
            str(tmp_path / "junior"),
            "--data",
            f"gsm={data}",
            "--n",
            "2",
            "--k",
            "1,2",
            "--suite",
            "solo,handoff,legibility,drift",
            "--max-new-tokens",
            "6",
            "--batch-size",
            "8",
            "--no-progress",
            "--out",
            str(out),
        ]
    )
    assert rc == 0
    res = json.loads((out / "results.json").read_text())
    metrics = res["benchmarks"]["gsm"]["metrics"]
    for name in ("solo/pass@1", "solo/pass@2", "handoff/pass@1", "legibility/junior_ce", "drift/kl"):
        assert name in metrics, name
        assert metrics[name]["num_problems"] == 3
    samples = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    assert len(samples) == 3 * 2 * 2  # problems x samples x protocols
    assert {s["answer"] for s in samples} == {"0", "2", "4"}  # "#### N" parsed as the gold answer

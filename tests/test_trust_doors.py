"""The last round's promises at the doors it missed (issue 58): nothing set aside before a refusal, and a
short partner's positions a one-line refusal, not an IndexError."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from helpers import (
    cli_errors,
    copy_toy_pair,
    fake_eval_outputs,
    fake_train_output,
    save_tiny_models,
    tiny_tokenizer,
    toy_train_argv,
    write_sum_problems,
)

from trlvr.cli.main import main


def tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def one_line(capsys) -> str:
    err = capsys.readouterr().err
    assert "Traceback" not in err, err[-2000:]
    (line,) = cli_errors(err)
    return line


@pytest.mark.slow  # about 7 s: the toy pair's tokenizer and data checked as a run checks them
def test_train_force_refused_for_no_usable_problem_sets_nothing_aside(tmp_path, capsys):
    toy = copy_toy_pair(tmp_path, 40)
    run = toy / "run"
    fake_train_output(run)  # a finished run
    (run / "metrics.jsonl").write_text("{}\n")
    before = tree(run)
    argv = toy_train_argv(toy, "--max_steps", "1", "--force", "--max_prompt_length", "5")
    assert main(argv) == 2
    assert "no usable training problems left" in one_line(capsys)
    assert tree(run) == before and not list(run.glob("replaced-*"))


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    root = tmp_path_factory.mktemp("pair")
    save_tiny_models(root, {"senior": 0, "junior": 1, "senior-0": 2, "senior-1": 3})
    write_sum_problems(root / "data.jsonl", 2)
    return root


def test_eval_fresh_with_a_cut_senior_sets_nothing_aside(pair, tmp_path, capsys):
    senior = tmp_path / "senior"
    senior.mkdir()
    for p in (pair / "senior").iterdir():
        (senior / p.name).write_bytes(p.read_bytes())
    weights = senior / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-100])  # cut short: the header no longer covers the file
    out = fake_eval_outputs(tmp_path / "EVAL")
    before = tree(out)
    argv = [
        "eval",
        "--senior",
        str(senior),
        "--junior",
        str(pair / "junior"),
        "--data",
        str(pair / "data.jsonl"),
        "--out",
        str(out),
        "--fresh",
        "--suite",
        "solo",
        "--n",
        "1",
        "--k",
        "1",
        "--no-progress",
    ]
    assert main(argv) == 2
    line = one_line(capsys)
    assert f"--senior {senior}: its weights do not load (model.safetensors" in line
    assert tree(out) == before and not list(out.glob("replaced-*"))


def test_a_seed_group_refused_for_a_missing_backend_leaves_no_group_file(pair, tmp_path, capsys):
    try:
        import vllm  # noqa: F401

        pytest.skip("vllm is installed here: the backend is not missing")
    except ImportError:
        pass
    out = tmp_path / "group"
    argv = [
        "eval",
        "--senior",
        str(pair / "senior-{seed}"),
        "--seeds",
        "0,1",
        "--junior",
        str(pair / "junior"),
        "--data",
        str(pair / "data.jsonl"),
        "--out",
        str(out),
        "--backend",
        "vllm",
        "--suite",
        "solo",
        "--n",
        "1",
        "--k",
        "1",
        "--no-progress",
    ]
    assert main(argv) != 0
    one_line(capsys)
    assert not (out / "group.json").exists()
    argv = [
        "eval",
        "--senior",
        str(pair / "senior"),
        "--junior",
        str(pair / "junior"),
        "--data",
        str(pair / "data.jsonl"),
        "--out",
        str(out),
        "--suite",
        "solo",
        "--n",
        "1",
        "--k",
        "1",
        "--max-new-tokens",
        "4",
        "--no-progress",
    ]
    assert main(argv) == 0  # the next single evaluation into it is no "seed group"


@pytest.mark.slow  # about 5 s: the default suite on two tiny GPT-2s
def test_a_text_partner_shorter_than_the_rows_is_one_line_not_an_index_error(tmp_path, capsys):
    from transformers import GPT2Config, GPT2LMHeadModel

    for name, vocab, positions in (("senior", 320, 256), ("junior", 300, 48)):  # two tokenizers: a text pair
        tok = tiny_tokenizer(vocab)
        torch.manual_seed(0)
        GPT2LMHeadModel(
            GPT2Config(
                vocab_size=len(tok),
                n_positions=positions,
                n_embd=16,
                n_layer=1,
                n_head=2,
                bos_token_id=tok.eos_token_id,
                eos_token_id=tok.eos_token_id,
            )
        ).save_pretrained(tmp_path / name)
        tok.save_pretrained(tmp_path / name)
    (tmp_path / "d.jsonl").write_text(
        "".join(
            json.dumps({"problem": f"{i}+{i}", "prompt": f"{i}+{i}=", "answer": str(2 * i)}) + "\n"
            for i in range(2)
        )
    )
    argv = [
        "eval",
        "--senior",
        str(tmp_path / "senior"),
        "--junior",
        str(tmp_path / "junior"),
        "--data",
        str(tmp_path / "d.jsonl"),
        "--out",
        str(tmp_path / "ev"),
        "--max-new-tokens",
        "64",
        "--n",
        "1",
        "--k",
        "1",
        "--no-progress",
    ]
    assert main(argv) == 2
    line = one_line(capsys)
    assert "reads at most 48 positions" in line and "lower --max-new-tokens" in line


@pytest.mark.slow  # a real two-step toy training
def test_resume_from_a_checkpoint_changed_since_its_save_is_refused_before_anything_loads(tmp_path, capsys):
    toy = copy_toy_pair(tmp_path, 120)
    run = toy / "run"
    argv = toy_train_argv(
        toy,
        "--per_device_train_batch_size",
        "8",
        "--num_generations",
        "4",
        "--max_completion_length",
        "16",
        "--save_steps",
        "1",
    )
    assert main([*argv, "--max_steps", "2"]) == 0
    for name in ("final", "checkpoint-1"):  # killed before final/ (only checkpoint-2 to resume from)
        shutil.rmtree(run / name)
    weights = run / "checkpoint-2" / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-5] ^= 0xFF  # the size and header intact: only the sha256 sees it
    weights.write_bytes(bytes(data))
    capsys.readouterr()
    before = tree(run)
    assert main([*argv, "--max_steps", "3", "--resume"]) == 2
    line = one_line(capsys)
    assert (
        f"--resume: {run / 'checkpoint-2'} is not what was saved (model.safetensors changed since it was written"
        in line
    )
    assert tree(run) == before

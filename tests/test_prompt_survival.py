"""Prompts the tokenizer cannot spell are found (decode(encode(prompt)) differs), counted, listed in the run
record and warned about; `refuse_lossy_prompts: true` refuses them (issue 18 item 9, training side)."""

from __future__ import annotations

import json
import shutil

from trlvr.cli.main import main as cli
from trlvr.data.prompts import LossyPrompt, build_prompt, describe_lossy, lossy_prompts, lost_characters
from trlvr.toy.world import ASSETS_DIR

CHINESE = "小明有 3 个苹果 🍎，又买了 4 个。现在有几个？"


def toy_tokenizer():
    from trlvr.models import load_tokenizer

    return load_tokenizer(str(ASSETS_DIR / "senior"), "senior")  # no byte fallback: unseen characters vanish


def test_the_toy_tokenizer_drops_chinese_and_the_apostrophe():
    tok = toy_tokenizer()
    paper = build_prompt("what is 2+2?", tok)  # the paper's instruction: "Let's think step by step ..."
    fine = "what is 2+2?"
    found = lossy_prompts(tok, [fine, CHINESE, paper])
    assert [x.index for x in found] == [1, 2]
    assert found[0] == LossyPrompt(1, CHINESE, "3   4")  # what the issue saw reach the model: " 3   4 "
    assert found[1].original == paper and found[1].roundtrip == paper.replace("Let's", "Lets")
    assert lost_characters(found[1].original, found[1].roundtrip) == "'"
    line = describe_lossy(found, 3, "training prompts")
    assert line.startswith("2 of 3 training prompts do not survive the tokenizer")
    assert "#1, loses '小明有个苹果🍎，又买了。现在几？'" in line


def test_a_byte_level_tokenizer_spells_everything_and_special_tokens_are_not_losses():
    """Byte-level BPE (Qwen, Llama 3) spells any text; BOS, EOS and chat-template markers are stripped
    before comparing, a BOS-prepending tokenizer included (the rule in `lossy_prompts`)."""
    from helpers import tiny_tokenizer
    from tokenizers.processors import TemplateProcessing

    plain = tiny_tokenizer()
    assert lossy_prompts(plain, [CHINESE, build_prompt("Q", plain), "ends here<|endoftext|>"]) == []
    bos_tok = tiny_tokenizer()
    bos_tok.add_special_tokens({"bos_token": "<s>"})
    bos_tok._tokenizer.post_processor = TemplateProcessing(
        single="<s> $A", special_tokens=[("<s>", bos_tok.bos_token_id)]
    )
    bos_tok.chat_template = (
        "{% for m in messages %}<s><|{{ m['role'] }}|>{{ m['content'] }}<|endoftext|>{% endfor %}"
        "{% if add_generation_prompt %}<|assistant|>{% endif %}"
    )
    messages = [{"role": "user", "content": CHINESE}]
    assert lossy_prompts(bos_tok, [CHINESE, "<s>Given: 1+0\n\n", messages]) == []
    # and a real loss is still seen inside a chat template: the toy tokenizer's (its EOS is stripped)
    toy = toy_tokenizer()
    toy.chat_template = bos_tok.chat_template
    (found,) = lossy_prompts(toy, [[{"role": "user", "content": "what is 2+2? Let's go"}]])
    assert found.original == "<s><|user|>what is 2+2? Let's go<|assistant|>"  # <s> is plain text to the toy
    assert "Lets go" in found.roundtrip


def _toy_run(tmp_path):
    shutil.copytree(ASSETS_DIR / "senior", tmp_path / "senior")
    shutil.copytree(ASSETS_DIR / "junior", tmp_path / "junior")
    rows = [
        {"problem": CHINESE, "answer": "7"},
        {"problem": "what is 3 + 4?", "answer": "7", "prompt": "what is 3 + 4?"},
        {"problem": "what is 5 + 1?", "answer": "6", "prompt": "what is 5 + 1?"},
    ]
    (tmp_path / "train.jsonl").write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
    return [
        "train",
        "--config",
        "toy",
        "--holdout",
        "0",
        "--senior",
        str(tmp_path / "senior"),
        "--junior",
        str(tmp_path / "junior"),
        "--dataset",
        str(tmp_path / "train.jsonl"),
        "--output_dir",
        str(tmp_path / "run"),
        "--max_steps",
        "1",
        "--per_device_train_batch_size",
        "8",
        "--num_generations",
        "4",
        "--max_completion_length",
        "8",
    ]


def test_training_counts_lists_and_warns_about_lossy_prompts(tmp_path, capsys):
    argv = _toy_run(tmp_path)
    assert cli([*argv, "--refuse_lossy_prompts", "true"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("trlvr train: error: 1 of 3 training prompts do not survive the tokenizer")
    assert "refuse_lossy_prompts: true refuses them" in err[-1]
    assert not (tmp_path / "run" / "trlvr_run.json").exists()  # refused before the run was recorded
    assert cli(argv) == 0
    err = capsys.readouterr().err
    warned = [line for line in err.splitlines() if "do not survive the tokenizer" in line]
    assert len(warned) == 1 and warned[0].startswith("[trlvr] ") and "trlvr_run.json" in warned[0]
    section = json.loads((tmp_path / "run" / "trlvr_run.json").read_text())["lossy_prompts"]
    assert section["count"] == 1 and section["of"] == 3
    (entry,) = section["listed"]
    assert entry["prompt"].startswith(CHINESE) and entry["roundtrip"].startswith("3   4")
    assert "Let's" in entry["prompt"] and "Lets" in entry["roundtrip"]

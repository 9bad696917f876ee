"""Data loading: every built-in schema from local files, bad-row reports, CLI, offline hub, reasoning-gym, prompts."""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from trlvr.cli import data_cmd
from trlvr.data import DataError, build_prompt, check_source, load_problems, prompt_for, reasoning_gym
from trlvr.rewards import math_reward

GSM8K_REAL = Path("/work/shared/data/gsm8k-test.jsonl")

# schema name -> two rows in that dataset's own column layout, and the gold answers expected
CANONICAL = {
    "deepscaler": (
        [
            {"problem": "What is 1/2+1/4?", "answer": "\\frac{3}{4}", "solution": "..."},
            {"problem": "2+2?", "answer": "4", "solution": "..."},
        ],
        ["\\frac{3}{4}", "4"],
    ),
    "math500": (
        [
            {
                "problem": "Find x.",
                "answer": "(1,2]",
                "solution": "s",
                "subject": "Algebra",
                "level": 3,
                "unique_id": "test/algebra/1.json",
            }
        ],
        ["(1,2]"],
    ),
    "gsm8k": (
        [
            {"question": "Eggs?", "answer": "16 - 3 = <<16-3=13>>13\n#### 1,013"},
            {"question": "Cats?", "answer": "so\n#### -4"},
        ],
        ["1013", "-4"],
    ),
    "aime24": ([{"ID": "2024-I-1", "Problem": "AIME problem", "Answer": 204, "Solution": "s"}], ["204"]),
    "aime25": ([{"id": "0", "problem": "AIME 2025 problem", "answer": "70"}], ["70"]),
    "amc23": ([{"id": 0, "problem": "AMC problem", "answer": 142.0, "url": "u"}], ["142"]),
    "minerva": ([{"question": "Minerva problem", "answer": "2.5 \\times 10^{3}"}], ["2.5 \\times 10^{3}"]),
    "olympiadbench": (
        [
            {"id": 1, "question": "Olympiad problem", "final_answer": ["$\\sqrt{2}$"]},
            {"id": 2, "question": "Two answers", "final_answer": ["1", "2"]},
        ],
        ["$\\sqrt{2}$", "1, 2"],
    ),
}


def write(path: Path, rows: list[dict]) -> Path:
    if path.suffix == ".jsonl":
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    elif path.suffix == ".json":
        path.write_text(json.dumps(rows))
    else:
        pq.write_table(pa.Table.from_pylist(rows), path)
    return path


@pytest.mark.parametrize("suffix", [".jsonl", ".json", ".parquet"])
@pytest.mark.parametrize("name", sorted(CANONICAL))
def test_canonical_schemas_load(tmp_path, name, suffix):
    rows, golds = CANONICAL[name]
    probs = load_problems(str(write(tmp_path / f"{name}{suffix}", rows)), schema=name)
    assert [p.answer for p in probs] == golds
    assert all(p.problem and p.fields for p in probs) and probs.skipped == []


@pytest.mark.parametrize("name", ["deepscaler", "math500", "gsm8k", "aime24", "olympiadbench"])
def test_schema_detected_from_columns(tmp_path, name):
    rows, golds = CANONICAL[name]
    probs = load_problems(str(write(tmp_path / "x.jsonl", rows)))
    assert probs.schema == name and [p.answer for p in probs] == golds


def test_generic_fields_and_prompt_column(tmp_path):
    rows = [{"q": "Q1", "final": "7", "prompt": "<|user|>Q1<|assistant|>"}, {"q": "Q2", "final": "8"}]
    probs = load_problems(str(write(tmp_path / "g.jsonl", rows)), problem_field="q", answer_field="final")
    assert [(p.problem, p.answer) for p in probs] == [("Q1", "7"), ("Q2", "8")]
    assert prompt_for(probs[0]) == "<|user|>Q1<|assistant|>"
    assert prompt_for(probs[1]).startswith("Q2 Let's think step by step")


def test_limit_and_ids(tmp_path):
    rows = [{"problem": f"p{i}", "answer": str(i)} for i in range(10)]
    probs = load_problems(str(write(tmp_path / "d.jsonl", rows)), limit=3)
    assert [p.id for p in probs] == ["d.jsonl:1", "d.jsonl:2", "d.jsonl:3"]


BAD_ROWS = [
    {"problem": "ok", "answer": "1"},
    {"problem": "", "answer": "2"},  # row 2: empty problem
    {"problem": "no answer"},  # row 3: missing answer
    {"problem": "unparseable gold", "answer": "\\frac{"},  # row 4
    {"problem": "ok too", "answer": "\\frac{1}{2}"},
]


def test_bad_rows_raise_with_row_numbers_and_fields(tmp_path):
    path = write(tmp_path / "bad.jsonl", BAD_ROWS)
    with pytest.raises(DataError) as err:
        load_problems(str(path), schema="deepscaler")
    msg = str(err.value)
    assert "bad.jsonl" in msg and "3 of 5 rows" in msg
    assert (
        "row 2: problem empty" in msg
        and "row 3: answer missing" in msg
        and "row 4: answer not parseable" in msg
    )


def test_bad_rows_skip_records_them(tmp_path):
    probs = load_problems(str(write(tmp_path / "bad.jsonl", BAD_ROWS)), schema="deepscaler", on_bad="skip")
    assert [p.answer for p in probs] == ["1", "\\frac{1}{2}"]
    assert [(b.row, b.field) for b in probs.skipped] == [(2, "problem"), (3, "answer"), (4, "answer")]
    report = check_source(str(tmp_path / "bad.jsonl"), schema="deepscaler")
    assert (report.total, report.ok, report.n_bad) == (5, 2, 3) and report.first[0].row == 2


def test_gsm8k_without_marker_is_bad(tmp_path):
    path = write(
        tmp_path / "gsm.jsonl",
        [{"question": "q", "answer": "x\n#### 3"}, {"question": "q2", "answer": "no marker"}],
    )
    with pytest.raises(DataError, match="row 2: answer empty"):
        load_problems(str(path), schema="gsm8k")


def test_invalid_json_line_is_named(tmp_path):
    path = tmp_path / "broken.jsonl"
    path.write_text('{"problem": "a", "answer": "1"}\n{not json\n')
    with pytest.raises(DataError, match="line 2"):
        load_problems(str(path))


@pytest.mark.skipif(not GSM8K_REAL.exists(), reason="shared GSM8K test file not present")
def test_real_gsm8k_file():
    probs = load_problems(str(GSM8K_REAL))
    assert len(probs) == 1319 and probs.schema == "gsm8k" and probs.skipped == []
    assert probs[0].answer == "18"
    assert all(p.answer.lstrip("-").replace(".", "", 1).isdigit() for p in probs)


def _cli(argv: list[str]) -> int:
    ap = argparse.ArgumentParser()
    data_cmd.make_parser(ap.add_subparsers(dest="command"))
    return data_cmd.main(ap.parse_args(argv))


def test_cli_data_check(tmp_path, capsys):
    bad = write(tmp_path / "bad.jsonl", BAD_ROWS)
    good = write(tmp_path / "good.jsonl", BAD_ROWS[:1])
    assert _cli(["data", "check", str(bad), "--schema", "deepscaler"]) != 0
    out = capsys.readouterr().out
    assert "row 2: problem empty" in out and "2 usable" in out
    assert _cli(["data", "check", str(good)]) == 0
    assert _cli(["data", "check", str(tmp_path / "missing.jsonl")]) == 2


def test_offline_hub_name_fails_fast(monkeypatch):
    monkeypatch.setenv("HF_ENDPOINT", "https://hub.invalid")  # unreachable whatever the sandbox
    t = time.monotonic()
    with pytest.raises(DataError, match="local file"):
        load_problems("openai/gsm8k")
    assert time.monotonic() - t < 5


def test_reasoning_gym_problems_grade_against_themselves():
    probs = reasoning_gym("chain_sum", size=6, seed=0)
    again = load_problems("reasoning-gym:basic_arithmetic?size=4&seed=1")
    assert len(probs) == 6 and len(again) == 4
    assert probs[0].problem and probs[0].fields["metadata"]["source_dataset"] == "chain_sum"
    allp = list(probs) + list(again)
    assert (
        math_reward([f"\\boxed{{{p.answer}}}" for p in allp], answer=[p.answer for p in allp]) == [1.0] * 10
    )
    assert [p.answer for p in reasoning_gym("chain_sum", size=6, seed=0)] == [p.answer for p in probs]


def _tiny_tokenizer(chat_template: str | None):
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"[UNK]": 0, "hello": 1}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]")
    if chat_template:
        fast.chat_template = chat_template
    return fast


def test_build_prompt_plain_and_chat():
    plain = build_prompt("What is 2+2?")
    assert plain == "What is 2+2? Let's think step by step and output the final answer within \\boxed{}."
    assert build_prompt("What is 2+2?", tokenizer=_tiny_tokenizer(None)) == plain
    tmpl = (
        "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}<|end|>{% endfor %}"
        "{% if add_generation_prompt %}<|assistant|>{% endif %}"
    )
    chat = build_prompt("What is 2+2?", tokenizer=_tiny_tokenizer(tmpl))
    assert chat == f"<|user|>{plain}<|end|><|assistant|>"
    assert build_prompt("Q", tokenizer=_tiny_tokenizer(tmpl), use_chat_template=False).startswith("Q Let's")
    assert build_prompt("Q", template="Solve: {problem}") == "Solve: Q"

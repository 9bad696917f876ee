"""Data loading: every built-in schema from local files, bad-row reports, CLI, offline hub, reasoning-gym,
prompts, pre-rendered rows, content keys and duplicates. (Unreadable inputs: tests/test_bad_input.py.)"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from trlvr.cli.main import main as cli_main
from trlvr.data import (
    DataError,
    Problem,
    build_prompt,
    check_source,
    find_duplicates,
    load_problems,
    problem_key,
    prompt_for,
    read_jsonl,
)
from trlvr.rewards import check_golds, math_reward

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
    {"problem": "unbalanced gold", "answer": "\\frac{"},  # row 4: caught without a grader
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
        and "row 4: answer has unbalanced braces" in msg
    )


def test_bad_rows_skip_records_them(tmp_path):
    probs = load_problems(str(write(tmp_path / "bad.jsonl", BAD_ROWS)), schema="deepscaler", on_bad="skip")
    assert [p.answer for p in probs] == ["1", "\\frac{1}{2}"]
    assert [(b.row, b.field) for b in probs.skipped] == [(2, "problem"), (3, "answer"), (4, "answer")]
    assert [p.row for p in probs] == [1, 5] and probs.total == 5
    report = check_source(str(tmp_path / "bad.jsonl"), schema="deepscaler")
    assert (report.total, report.ok, report.n_bad) == (5, 2, 3) and report.first[0].row == 2


def test_check_gold_is_injected_not_imported(tmp_path):
    """The grader's gold check is the caller's: a fake one marks what it is told to, the real one
    (trlvr.rewards.check_golds) rejects a gold math-verify cannot parse."""
    rows = [
        {"problem": "a", "answer": "1"},
        {"problem": "b", "answer": "x^"},
        {"problem": "c", "answer": "[1,2)"},
    ]
    path = str(write(tmp_path / "g.jsonl", rows))
    assert len(load_problems(path)) == 3  # structural checks only: "x^" is not caught without a grader
    fake = load_problems(
        path, on_bad="skip", check_gold=lambda golds: ["nope" if g == "1" else None for g in golds]
    )
    assert [p.answer for p in fake] == ["x^", "[1,2)"] and str(
        fake.skipped[0]
    ) == "row 1: answer not parseable (nope): '1'"
    with pytest.raises(DataError, match="row 2: answer not parseable"):
        load_problems(path, check_gold=check_golds)


def test_loading_data_imports_no_grader(tmp_path):
    """Issue 10: loading data must not import trlvr.rewards (which can start grader processes)."""
    path = write(tmp_path / "d.jsonl", [{"problem": "p", "answer": "1"}])
    code = (
        f"import sys, trlvr.data as d; d.load_problems({str(path)!r}); print('trlvr.rewards' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


@pytest.mark.parametrize(
    ("answer", "fragment"),
    [
        (None, "row 1: answer is null"),
        ("", "row 1: answer empty"),
        ("   ", "row 1: answer empty"),
        (["4"], "row 1: answer expected a string or number, got a JSON array"),
        ({"v": 4}, "row 1: answer expected a string or number, got a JSON object"),
        (True, "row 1: answer expected a string or number, got a JSON boolean"),
        ("None", "row 1: answer is the text 'None'"),
        ("\\boxed{4", "row 1: answer has unbalanced braces"),
    ],
)
def test_prompt_rows_validate_gold(tmp_path, answer, fragment):
    """Issue 11 item 2: rows carrying a ready-made prompt get the same gold checks; a null gold never
    becomes the string "None" (which \\boxed{None} would then match)."""
    rows = [{"prompt": "<|user|>What is 2+2?<|assistant|>", "answer": answer}, {"prompt": "Q", "answer": "4"}]
    path = write(tmp_path / "train.jsonl", rows)
    with pytest.raises(DataError) as err:
        load_problems(str(path))
    assert "train.jsonl" in str(err.value) and fragment in str(err.value)
    kept = load_problems(str(path), on_bad="skip")
    assert [p.answer for p in kept] == ["4"] and str(kept.skipped[0]).startswith(fragment)


def test_prompt_rows_skip_bad_golds(tmp_path):
    rows = [
        {"prompt": "P1", "answer": None},
        {"prompt": "P2", "answer": 7},
        {"prompt": "P3", "answer": float("nan")},
    ]
    probs = load_problems(str(write(tmp_path / "t.jsonl", rows)), on_bad="skip")
    assert [(p.prompt, p.answer, p.row) for p in probs] == [("P2", "7", 2)]
    assert [(b.row, b.field) for b in probs.skipped] == [(1, "answer"), (3, "answer")]
    assert "None" not in [p.answer for p in probs]


def test_prompt_only_and_chat_message_rows(tmp_path):
    msgs = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "What is 3+4?"}]
    rows = [{"prompt": "Plain prompt?", "answer": "1"}, {"prompt": msgs, "answer": "7"}]
    probs = load_problems(str(write(tmp_path / "p.jsonl", rows)))
    assert probs.schema == "prompt"
    assert [p.problem for p in probs] == ["Plain prompt?", "What is 3+4?"]
    assert prompt_for(probs[0]) == "Plain prompt?" and prompt_for(probs[1]) == msgs
    bad = [
        {"prompt": 42, "problem": "q", "answer": "1"},
        {"prompt": [{"role": "user"}], "problem": "q", "answer": "1"},
    ]
    with pytest.raises(DataError, match=r"row 1: prompt expected a string or a list of \{role, content\}"):
        load_problems(str(write(tmp_path / "b.jsonl", bad)))


def test_toy_world_rows_load_with_prompt_and_string_gold(tmp_path):
    """What trlvr.toy.world writes ({"problem", "answer": int, "prompt"}) comes back through load_problems."""
    from trlvr.toy.dialects import make_prompt
    from trlvr.toy.task import generate_problems

    toy = generate_problems(5, "test", seed=0)
    rows = [{"problem": p.text, "answer": p.answer, "prompt": make_prompt(p)} for p in toy]
    probs = load_problems(str(write(tmp_path / "test.jsonl", rows)))
    assert [p.prompt for p in probs] == [make_prompt(p) for p in toy]
    assert [p.answer for p in probs] == [str(p.answer) for p in toy] and all(
        isinstance(p.answer, str) for p in probs
    )


def test_problem_key_is_content_based():
    a = Problem("f.jsonl:1", "What is 2+2?", "4", "f.jsonl")
    assert problem_key(a) == problem_key(
        Problem("other:9", "What is 2+2?", "4", "g.parquet", {"x": 1}, row=9)
    )
    assert problem_key(a) != problem_key(Problem("f.jsonl:1", "What is 2+2?", "5", "f.jsonl"))
    assert problem_key(a) != problem_key(Problem("f.jsonl:1", "What is 2+3?", "4", "f.jsonl"))
    assert len(problem_key(a)) == 16 and int(problem_key(a), 16) >= 0


def test_find_duplicates_ids_problems_and_conflicting_golds(tmp_path):
    rows = [
        {"id": "a", "problem": "p1", "answer": "1"},
        {"id": "a", "problem": "p2", "answer": "2"},  # id clash with row 1
        {"id": "c", "problem": "p1", "answer": "1"},  # same problem as row 1
        {"id": "d", "problem": "p3", "answer": "3"},
        {"id": "e", "problem": "p3", "answer": "4"},  # same text as row 4, other gold
    ]
    probs = load_problems(str(write(tmp_path / "d.jsonl", rows)))
    found = [(d.kind, d.rows) for d in find_duplicates(probs)]
    assert found == [("id", (1, 2)), ("problem", (1, 3)), ("text", (4, 5))]
    clean = load_problems(str(write(tmp_path / "c.jsonl", rows[:1] + rows[3:4])))
    assert find_duplicates(clean) == []


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
    with pytest.raises(DataError, match="broken.jsonl:2: not valid JSON"):
        load_problems(str(path))


@pytest.mark.parametrize(
    ("suffix", "text", "says"),
    [
        (
            ".jsonl",
            '{"problem": "a", "answer": "x}\n',
            "broken.jsonl:1: not valid JSON (Unterminated string starting at column 28)",
        ),
        (
            ".jsonl",
            '{"problem": "a",}\n',
            "broken.jsonl:1: not valid JSON (Expecting property name enclosed in double quotes at column 17)",
        ),
        (
            ".json",
            '[{"problem": "a",\n "answer": "x}]',
            "broken.json: not valid JSON (Unterminated string starting at line 2, column 12)",
        ),
    ],
)
def test_a_json_error_names_its_place_once(tmp_path, monkeypatch, suffix, text, says):
    """Newcomer walk 3, finding 14: json's "Unterminated string starting at" was followed by " at column 13"."""
    monkeypatch.chdir(tmp_path)
    Path(f"broken{suffix}").write_text(text)
    with pytest.raises(DataError) as e:
        load_problems(f"broken{suffix}")
    assert str(e.value) == says


@pytest.mark.skipif(not GSM8K_REAL.exists(), reason="shared GSM8K test file not present")
def test_real_gsm8k_file():
    probs = load_problems(str(GSM8K_REAL))
    assert len(probs) == 1319 and probs.schema == "gsm8k" and probs.skipped == []
    assert probs[0].answer == "18"
    assert all(p.answer.lstrip("-").replace(".", "", 1).isdigit() for p in probs)


def test_cli_data_check(tmp_path, capsys):
    bad = write(tmp_path / "bad.jsonl", BAD_ROWS)
    good = write(tmp_path / "good.jsonl", BAD_ROWS[:1])
    assert cli_main(["data", "check", str(bad), "--schema", "deepscaler"]) == 1
    out = capsys.readouterr().out
    assert "row 2: problem empty" in out and "2 usable" in out
    assert cli_main(["data", "check", str(good)]) == 0
    assert cli_main(["data", "check", str(tmp_path / "missing.jsonl")]) == 2
    assert "missing.jsonl: no such file" in capsys.readouterr().err


def test_cli_data_check_math_verify_and_duplicates(tmp_path, capsys):
    """Unparseable golds are caught by `data check` (math-verify), duplicate ids exit 1 (issue 11 item 7)."""
    rows = [{"id": "q1", "problem": "a", "answer": "1"}, {"id": "q2", "problem": "b", "answer": "x^"}]
    path = write(tmp_path / "mv.jsonl", rows)
    assert cli_main(["data", "check", str(path)]) == 1
    assert "row 2: answer not parseable" in capsys.readouterr().out
    assert cli_main(["data", "check", str(path), "--no-math-verify"]) == 0
    dup = write(
        tmp_path / "dup.jsonl",
        [{"id": "q1", "problem": "a", "answer": "1"}, {"id": "q1", "problem": "b", "answer": "2"}],
    )
    assert cli_main(["data", "check", str(dup)]) == 1
    out = capsys.readouterr().out
    assert "2 usable, 0 unusable" in out and "1 duplicate ids" in out and "rows 1, 2 share id 'q1'" in out


def test_offline_hub_name_fails_fast(monkeypatch):
    monkeypatch.setenv("HF_ENDPOINT", "https://hub.invalid")  # unreachable whatever the sandbox
    t = time.monotonic()
    with pytest.raises(DataError, match="local file"):
        load_problems("openai/gsm8k")
    assert time.monotonic() - t < 5


def test_reasoning_gym_problems_grade_against_themselves():
    probs = load_problems("reasoning-gym:chain_sum?size=6&seed=0")
    again = load_problems("reasoning-gym:basic_arithmetic?size=4&seed=1")
    assert len(probs) == 6 and len(again) == 4
    assert probs[0].problem and probs[0].fields["metadata"]["source_dataset"] == "chain_sum"
    allp = list(probs) + list(again)
    assert (
        math_reward([f"\\boxed{{{p.answer}}}" for p in allp], answer=[p.answer for p in allp]) == [1.0] * 10
    )
    same = load_problems("reasoning-gym:chain_sum?size=6&seed=0")
    assert [p.answer for p in same] == [p.answer for p in probs]


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


# The Qwen3 chat template's shape for one user message (ChatML; the hybrid models' enable_thinking=False writes an
# empty think block). No Qwen tokenizer is available offline: this stands in for it, so the test checks trlvr's
# construction against the authors' string construction under one template, not against Qwen's own file.
QWEN_LIKE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% if enable_thinking is defined and "
    "enable_thinking is false %}<think>\n\n</think>\n\n{% endif %}{% endif %}"
)
# The authors' instruction as their code spells it (data/build_deepscaler.py BOXED_INSTR, commit 7ba85e0f6cee)
AUTHORS_BOXED_INSTR = (
    " Solve the following math problem step by step. Put your final answer "
    "inside \\boxed{}, like \\boxed{42} or \\boxed{\\frac{1}{2}}."
)


def test_the_authors_prompt_is_byte_identical_to_their_construction():
    """A DeepScaleR row (problem, answer) under prompt_template authors: their make_row content (problem +
    BOXED_INSTR) as one user message, rendered by eval/common.chat_prefix (enable_thinking=False)."""
    row = {
        "problem": "Let $a_n = n^2$. Find $\\sum_{n=1}^{10} a_n$ {mod 7}.",
        "answer": "0",
    }  # braces, $, backslashes
    tok = _tiny_tokenizer(QWEN_LIKE)
    theirs = tok.apply_chat_template(
        [{"role": "user", "content": row["problem"] + AUTHORS_BOXED_INSTR}],
        enable_thinking=False,
        tokenize=False,
        add_generation_prompt=True,
    )
    ours = prompt_for(
        Problem("deepscaler:1", row["problem"], row["answer"], "deepscaler"), tok, template="authors"
    )
    assert ours.encode("utf-8") == theirs.encode("utf-8")
    assert theirs.endswith(
        "<|im_start|>assistant\n<think>\n\n</think>\n\n"
    )  # the argument reached the template
    assert build_prompt(row["problem"], template="authors") == row["problem"] + AUTHORS_BOXED_INSTR
    # trlvr's own instruction is unchanged, and gets no template arguments
    assert prompt_for(Problem("deepscaler:1", row["problem"], "0", "deepscaler"), tok).endswith(
        "\\boxed{}.<|im_end|>\n<|im_start|>assistant\n"
    )

    # a tokenizer that rejects the argument (TypeError/ValueError): the plain rendering, as the authors' fallback
    class Strict:
        chat_template = "x"

        def apply_chat_template(self, messages, **kw):
            if "enable_thinking" in kw:
                raise TypeError("unexpected keyword argument 'enable_thinking'")
            return "[" + messages[0]["content"] + "]"

    assert build_prompt("Q", Strict(), template="authors") == "[Q" + AUTHORS_BOXED_INSTR + "]"
    with pytest.raises(ValueError, match="unknown prompt template 'paper': one of trlvr, authors"):
        build_prompt("Q", template="paper")


def test_training_and_eval_prompts_are_the_same_ids_with_a_bos_tokenizer():
    """Training (dataset prompt text -> rollout ids) and eval (problem -> ids) give identical prompt ids,
    with exactly one BOS, for a tokenizer that prepends BOS (the Llama case) and one that does not."""
    from helpers import tiny_tokenizer
    from tokenizers.processors import TemplateProcessing

    from trlvr.data import Problem
    from trlvr.eval.prepare import prompt_ids_for
    from trlvr.training.build import build_dataset
    from trlvr.training.rollout import TandemRollout

    plain = tiny_tokenizer()
    bos_tok = tiny_tokenizer()
    bos_tok.add_special_tokens({"bos_token": "<s>"})
    bos = bos_tok.bos_token_id
    bos_tok._tokenizer.post_processor = TemplateProcessing(single="<s> $A", special_tokens=[("<s>", bos)])
    problems = [
        Problem(id="a", problem="What is 12 plus 30?", answer="42", source="t", fields={}),
        Problem(id="b", problem="x", answer="1", source="t", fields={}, prompt="<s>Given: 1+0\n\n"),
    ]
    for tok, n_bos in ((plain, 0), (bos_tok, 1)):
        texts = build_dataset(problems, tok)["prompt"]
        train_ids = TandemRollout._tokenize(None, texts, tok)
        eval_ids = [prompt_ids_for(p, tok) for p in problems]
        assert train_ids == eval_ids
        if n_bos:
            assert all(ids[0] == bos and ids.count(bos) == 1 for ids in train_ids)  # never a doubled BOS


# ---- the paper's panels (`trlvr data build-evals`) ------------------------------------------------------

PANEL_FIXTURES = Path(__file__).parent / "data" / "paper-evals"


def fixture_loader(calls=None):
    """Stands in for the hub: OWNER/NAME -> tests/data/paper-evals/OWNER__NAME.jsonl (the split is recorded)."""

    def load(name, split):
        if calls is not None:
            calls.append((name, split))
        return read_jsonl(PANEL_FIXTURES / (name.replace("/", "__") + ".jsonl"))

    return load


def small_panels(**golds):
    """The registry with the fixtures' sizes and the checksums of the golds given (None: unrecorded)."""
    import dataclasses

    from trlvr.data import evalsets as E

    return {
        n: dataclasses.replace(
            p,
            rows=len(golds[n]) if n in golds else p.rows,
            gold_sha256=E.gold_sha256(golds[n]) if n in golds else None,
        )
        for n, p in E.PANELS.items()
    }


AMC_GOLDS = [
    "18",
    "\\frac{3}{4}",
    "201",
    "7",
    "\\sqrt{2}",
]  # the drop lists' D, (0, 1/2), 4{:}30 and k are out
AIME_GOLDS = ["204", "25", "70", "512"]  # 2024's from the solution's box, then 2025, 2026: one set


def test_build_evals_follows_the_authors_sources_drop_lists_and_order(tmp_path, monkeypatch):
    from trlvr.data import evalsets as E

    calls = []
    panels = small_panels(amc23_25=AMC_GOLDS, aime24_26=AIME_GOLDS, minerva=["4.5e33", "1e-8"])
    digests = E.build(
        tmp_path, ("amc23_25", "aime24_26", "minerva"), load=fixture_loader(calls), panels=panels
    )
    amc = read_jsonl(tmp_path / "amc23_25.jsonl")
    assert [r["answer"] for r in amc] == AMC_GOLDS
    assert [r["subset"] for r in amc] == ["amc23", "amc23", "amc24_12A", "amc24_12B", "amc25"]
    assert [r["answer"] for r in read_jsonl(tmp_path / "aime24_26.jsonl")] == AIME_GOLDS
    assert digests["minerva"] == panels["minerva"].gold_sha256
    # the splits the authors name; None = the dataset's first split (their first_split)
    assert ("math-ai/amc23", "test") in calls and ("rawsh/2024_AMC12", None) in calls
    assert ("MathArena/aime_2026", None) in calls and ("math-ai/minervamath", "test") in calls
    # the built sets read back as `paper:NAME` sources, checked again
    monkeypatch.setattr(E, "PANELS", panels)
    monkeypatch.setenv(E.ENV_DIR, str(tmp_path))
    probs = load_problems("paper:aime24_26")
    assert [p.answer for p in probs] == AIME_GOLDS and probs[0].problem == "AIME24 one?"
    (tmp_path / "minerva.jsonl").write_text(
        '{"problem": "Minerva one?", "answer": "4.5e34"}\n{"problem": "Minerva two?", "answer": "1e-8"}\n'
    )
    with pytest.raises(DataError, match="^minerva: gold checksum "):
        load_problems("paper:minerva")


@pytest.mark.parametrize(
    "change, message",
    [
        ("rows", "amc23_25: built 5 rows, expected 6 (the authors' count)"),
        ("gold", "amc23_25: gold checksum "),
    ],
)
def test_build_evals_refuses_a_changed_upstream_and_writes_nothing(tmp_path, change, message):
    from trlvr.data import evalsets as E
    from trlvr.data.schema import DataError

    golds = AMC_GOLDS + ["9"] if change == "rows" else ["18", "\\frac{3}{4}", "201", "7", "\\sqrt{3}"]
    with pytest.raises(DataError, match="^" + message.replace("(", r"\(").replace(")", r"\)")):
        E.build(
            tmp_path / "out",
            ("minerva", "amc23_25"),
            load=fixture_loader(),
            panels=small_panels(amc23_25=golds, minerva=["4.5e33", "1e-8"]),
        )
    assert not (tmp_path / "out").exists()  # minerva passed, but nothing is written unless every set does


def test_build_evals_olympiad_from_the_authors_parquet(tmp_path):
    from trlvr.data import evalsets as E
    from trlvr.data.schema import DataError

    with pytest.raises(DataError, match="^olympiad: its hub source is private; pass --olympiad-src"):
        E.build(tmp_path, ("olympiad",), load=fixture_loader())
    src = tmp_path / "olympiad.parquet"
    pq.write_table(
        pa.Table.from_pylist(
            [
                {"problem": "Show x?", "reward_model": {"ground_truth": "3", "style": "rule"}},
                {"problem": "Find y?", "reward_model": {"ground_truth": "\\pi", "style": "rule"}},
            ]
        ),
        src,
    )
    digests = E.build(
        tmp_path / "o",
        ("olympiad",),
        load=fixture_loader(),
        olympiad_src=src,
        panels=small_panels(olympiad=["3", "\\pi"]),
    )
    assert digests["olympiad"] == E.gold_sha256(["3", "\\pi"]) != E.gold_sha256(["\\pi", "3"])


def test_paper_panel_sources_name_the_build_command_when_not_built(tmp_path, monkeypatch, capsys):
    from trlvr.data import evalsets as E

    monkeypatch.setenv(E.ENV_DIR, str(tmp_path))
    assert cli_main(["data", "check", "paper:minerva"]) == 2
    err = capsys.readouterr().err.strip()
    assert (
        len(err.splitlines()) == 1
        and "paper:minerva: not built in" in err
        and "trlvr data build-evals" in err
    )
    assert cli_main(["data", "check", "paper:gsm8k"]) == 2
    assert "unknown panel 'gsm8k'; known: paper:amc23_25, paper:aime24_26" in capsys.readouterr().err
    # the registered sizes are the authors' (data/build_evals.py EXPECT_ROWS; AIME 24-26 pooled)
    assert {n: p.rows for n, p in E.PANELS.items()} == {
        "amc23_25": 121,
        "aime24_26": 90,
        "minerva": 272,
        "olympiad": 581,
    }


def test_cli_build_evals_offline_is_one_line(tmp_path, monkeypatch, capsys):
    from trlvr.data import sources

    monkeypatch.setattr(sources, "hub_reachable", lambda timeout=2.0: False)
    monkeypatch.delenv("HF_DATASETS_OFFLINE", raising=False)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    assert cli_main(["data", "build-evals", "--out", str(tmp_path / "e"), "--sets", "minerva"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "math-ai/minervamath" in err and "no network access" in err
    assert not (tmp_path / "e").exists()

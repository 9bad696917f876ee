"""Strict schedules (one spelling per setting from the run config to the schedule) and the
`boundary` schedule, which also hands off inside spaceless notation ("<<47+18=65>>", LaTeX)."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import pytest
import torch
from helpers import tiny_tokenizer

from trlvr.config import SCHEDULE_SETTINGS, SCHEDULES, TandemConfig, parse_run_args
from trlvr.engine.schedules import (
    SCHEDULES as REGISTERED,
)
from trlvr.engine.schedules import (
    BoundarySchedule,
    Schedule,
    WordSchedule,
    schedule_fields,
    settings_for,
    vocab_tables,
)
from trlvr.errors import UserError


@pytest.fixture(scope="module")
def toy_tokenizer():
    """The shipped toy world's tokenizer (digits split one by one, like Qwen3)."""
    from transformers import AutoTokenizer

    from trlvr.toy.world import ASSETS_DIR

    return AutoTokenizer.from_pretrained(ASSETS_DIR / "senior")


@pytest.fixture(scope="module", params=["toy", "test"])
def tok(request, toy_tokenizer):
    return toy_tokenizer if request.param == "toy" else tiny_tokenizer()


def marks(schedule, tokenizer, text: str) -> list[tuple[str, bool]]:
    ids = tokenizer.encode(text, add_special_tokens=False)
    b = schedule.boundaries(torch.tensor([ids]), vocab_tables(tokenizer))[0].tolist()
    return list(zip(tokenizer.convert_ids_to_tokens(ids), b, strict=True))


# ---------------------------------------------------------------- strict settings, one spelling


def test_from_config_rejects_an_unknown_setting_naming_it_and_the_valid_ones():
    with pytest.raises(ValueError) as e:
        Schedule.from_config("word", p=0.3, max_gaps=8)
    assert str(e.value) == "schedule 'word': unknown setting 'max_gaps'; valid settings: p, max_gap, handoff"
    with pytest.raises(ValueError) as e:  # the old spellings are gone
        Schedule.from_config("chunk", size=4, first="junior")
    assert str(e.value) == (
        "schedule 'chunk': unknown settings 'size', 'first'; valid settings: chunk_size, first_author"
    )
    with pytest.raises(ValueError, match="schedule 'token': unknown setting 'max_gap'"):
        Schedule.from_config("token", p=0.5, max_gap=32)  # no longer silently dropped


def test_every_schedule_setting_has_the_run_configs_name():
    for name, cls in REGISTERED.items():
        fields = {f.name for f in dataclasses.fields(cls)}
        if name == "solo":
            assert fields == {"author"}  # the grpo arm's; no run-config field
            continue
        assert fields <= set(SCHEDULE_SETTINGS), name
    assert set(SCHEDULE_SETTINGS) <= {f.name for f in dataclasses.fields(TandemConfig)}


@pytest.mark.parametrize("name", SCHEDULES)
def test_the_run_config_passes_only_what_the_chosen_schedule_takes(name):
    tandem = TandemConfig(
        senior="s",
        junior="j",
        schedule=name,
        p=0.25,
        max_gap=5,
        chunk_size=3,
        first_author="junior",
        max_rounds=7,
    )
    got_name, settings = tandem.schedule_kwargs()
    assert got_name == name and set(settings) == set(schedule_fields(name))
    schedule = Schedule.from_config(got_name, **settings)
    for key, value in settings.items():  # each value arrives under its own name
        assert getattr(schedule, key) == value == getattr(tandem, key)


def test_settings_for_filters_explicitly():
    shared = {"p": 0.5, "max_gap": 4, "chunk_size": 2, "first_author": "senior", "max_rounds": 3}
    assert settings_for("boundary", shared) == {"p": 0.5, "max_gap": 4}
    assert settings_for("step", shared) == {"first_author": "senior", "max_rounds": 3}
    with pytest.raises(ValueError, match="unknown schedule 'para'"):
        settings_for("para", shared)


def test_a_misspelt_schedule_key_in_a_run_config_is_an_error_naming_it(tmp_path):
    config = tmp_path / "run.yaml"
    config.write_text("senior: s\njunior: j\ndataset: d.jsonl\nschedule: boundary\nmax_gaps: 4\n")
    with pytest.raises(UserError) as e:
        parse_run_args(["--config", str(config)])
    assert "unknown key(s) max_gaps" in str(e.value) and str(config) in str(e.value)
    with pytest.raises(UserError, match="command line: unknown key.s. max_gaps"):  # and as a flag
        parse_run_args(["--senior", "s", "--junior", "j", "--use_cpu", "true", "--max_gaps", "4"])


def test_the_misspelt_key_through_trlvr_train(tmp_path, capsys):
    from trlvr.cli.main import main as cli

    config = tmp_path / "run.yaml"
    config.write_text("senior: s\njunior: j\ndataset: d.jsonl\nschedule: chunk\nsize: 4\n")
    assert cli(["train", "--config", str(config)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "unknown key(s) size" in err[0], err


# ---------------------------------------------------------------- the boundary schedule


def test_boundary_is_registered_and_the_word_default_is_the_papers():
    assert isinstance(Schedule.from_config("boundary", p=0.5, max_gap=32), BoundarySchedule)
    assert "boundary" in SCHEDULES
    assert Schedule.from_config("word") == WordSchedule(p=0.5, max_gap=32)
    assert TandemConfig(senior="s", junior="j").schedule == "word"


def test_boundary_fires_inside_a_spaceless_annotation_where_word_does_not(tok):
    text = "so <<47+18=65>> then"
    word = marks(WordSchedule(), tok, text)
    boundary = marks(BoundarySchedule(), tok, text)
    pieces = [p for p, _ in word]
    first = next(i for i, p in enumerate(pieces) if "<<" in p)
    last = next(i for i, p in enumerate(pieces) if ">>" in p)
    inside = range(first, last + 1)
    assert "".join(pieces[i] for i in inside).replace("Ġ", "") == "<<47+18=65>>", pieces
    # past the annotation's first piece, `word` has no boundary at all inside it
    assert not any(word[i][1] for i in inside[1:]), word
    fired = sum(boundary[i][1] for i in inside)
    # `boundary` redraws at every symbol piece and every digit run's start: 7 in "<<47+18=65>>"
    assert fired >= 6, boundary
    longest_gap, gap = 0, 0
    for i in inside:
        gap = 0 if boundary[i][1] else gap + 1
        longest_gap = max(longest_gap, gap)
    assert longest_gap <= 1, boundary  # never two pieces in a row without a redraw


def test_boundary_fires_inside_latex(tok):
    b = marks(BoundarySchedule(), tok, "is \\boxed{42}.")
    w = marks(WordSchedule(), tok, "is \\boxed{42}.")
    assert sum(x for _, x in b) > sum(x for _, x in w)


@pytest.mark.parametrize(
    "text", ["The cat sat on the mat", "Then the dog ran to the park", "So the answer is"]
)
def test_plain_words_redraw_exactly_as_under_word(tok, text):
    assert marks(BoundarySchedule(), tok, text) == marks(WordSchedule(), tok, text)


def test_digit_runs_redraw_at_their_first_digit_only(toy_tokenizer):
    tables = vocab_tables(toy_tokenizer)
    ids = toy_tokenizer.encode("<<123", add_special_tokens=False)
    pieces = toy_tokenizer.convert_ids_to_tokens(ids)
    assert pieces == ["<<", "1", "2", "3"], pieces  # the toy world splits digits like Qwen3
    assert BoundarySchedule().boundaries(torch.tensor([ids]), tables)[0].tolist() == [
        True,
        True,
        False,
        False,
    ]
    # in the engine's one-token-at-a-time path, the previous token is carried in the state
    after_digit = BoundarySchedule().boundaries(torch.tensor([ids[2:3]]), tables, torch.tensor([True]))
    assert after_digit.tolist() == [[False]]


def test_special_tokens_are_no_symbol_boundary(toy_tokenizer):
    tables = vocab_tables(toy_tokenizer)
    eos = toy_tokenizer.eos_token_id
    assert toy_tokenizer.eos_token.startswith("<") and not tables.symbol_start[eos]


def test_hand_built_tables_without_the_boundary_columns_are_one_clear_error(tok):
    t = vocab_tables(tok)
    bare = type(t)(t.word_start, t.step_end, t.ends_newline, t.only_newlines)
    assert WordSchedule().boundaries(torch.tensor([[3, 4]]), bare).shape == (1, 2)  # word needs none
    with pytest.raises(ValueError, match="the boundary schedule needs VocabTables with symbol_start"):
        BoundarySchedule().boundaries(torch.tensor([[3, 4]]), bare)


@pytest.mark.parametrize("arch", ["qwen3"], indirect=True)
@pytest.mark.parametrize("schedule", [WordSchedule(p=0.5, max_gap=3), BoundarySchedule(p=0.5, max_gap=5)])
def test_in_the_engine_authors_change_only_where_the_schedule_redraws(models, tokenizer, schedule):
    """Through TandemGenerator: an author change after token t needs a redraw there (a boundary, or
    the backstop), as `trlvr.engine.loophole.redraw_marks` replays it; and redraws do change authors."""
    from helpers import PROMPTS, encode

    from trlvr.engine import Sampling, TandemGenerator
    from trlvr.engine.loophole import redraw_marks

    gen = TandemGenerator(*models, tokenizer)
    out = gen.generate(encode(tokenizer, PROMPTS) * 4, schedule, Sampling(24, seed=0))
    natural, forced = redraw_marks(schedule, out.tokens, out.completion_mask, gen.tables)
    s, m = out.senior_authored, out.completion_mask
    changed = (s[:, 1:] != s[:, :-1]) & m[:, 1:]  # (B, T-1): author of t+1 differs from t
    redraw = (natural | forced)[:, :-1]
    assert not (changed & ~redraw).any()
    assert changed.sum() > 0.3 * redraw.sum()  # p = 0.5: about half of the redraws change the author


# ---------------------------------------------------------------- real tokenizers, where present

REAL = Path(
    os.environ.get("TRLVR_REAL_TOKENIZERS", Path(__file__).resolve().parents[1] / "models")
)  # make real-models


@pytest.mark.parametrize(
    "name",
    [
        "smollm2-135m-instruct",  # byte-level BPE ("Ġ"), like Qwen3 / Llama-3
        pytest.param("gemma-3-270m", marks=pytest.mark.slow),
    ],
)  # SentencePiece ("▁")
def test_real_tokenizers_boundary_reaches_inside_gsm8k_annotations(name):
    if not (REAL / name / "tokenizer.json").is_file():
        pytest.skip(f"no {name} tokenizer under {REAL}")
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(REAL / name)
    word = marks(WordSchedule(), tokenizer, "Natalia sold <<48/2=24>>24 clips")
    boundary = marks(BoundarySchedule(), tokenizer, "Natalia sold <<48/2=24>>24 clips")
    pieces = [p for p, _ in word]
    first = next(i for i, p in enumerate(pieces) if "<<" in p)
    last = next(i for i, p in enumerate(pieces) if ">>" in p)
    assert not any(b for _, b in word[first + 1 : last + 1]), word  # the paper's schedule: no redraw inside
    assert sum(b for _, b in boundary[first : last + 1]) >= 5, boundary
    assert all(boundary[i][1] or boundary[i + 1][1] for i in range(first, last)), (
        boundary
    )  # gaps of <= 1 piece
    plain = "The cat sat on the mat and the dog ran"
    assert marks(BoundarySchedule(), tokenizer, plain) == marks(WordSchedule(), tokenizer, plain)

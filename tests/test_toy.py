"""Fast tests of the toy world: task, dialects, tokenizer, a miniature prepare, shipped assets."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from trlvr.toy.dialects import (
    DIALECTS,
    STEP_SEP,
    extract_boxed_int,
    is_jargon,
    make_prompt,
    render_first_step,
    render_solution,
)
from trlvr.toy.task import MAX_VALUE, generate_problems, make_splits, split_of


def test_generator_deterministic():
    a = generate_problems(50, "train", seed=3)
    b = generate_problems(50, "train", seed=3)
    c = generate_problems(50, "train", seed=4)
    assert [p.text for p in a] == [p.text for p in b]
    assert [p.text for p in a] != [p.text for p in c]
    assert len({p.text for p in a}) == 50


def test_splits_disjoint_and_labelled():
    train, test = make_splits(3000, 500, seed=0)
    assert not {p.text for p in train} & {p.text for p in test}
    assert all(split_of(p.text) == "train" for p in train)
    assert all(split_of(p.text) == "test" for p in test)
    # other seeds draw other problems, still on the right side of the hash split
    _, test1 = make_splits(0, 200, seed=1)
    assert not {p.text for p in train} & {p.text for p in test1}


def test_problem_values_small_and_ops_count():
    for p in generate_problems(500, "train", seed=0):
        assert 2 <= len(p.ops) <= 4
        assert 0 <= p.start <= MAX_VALUE
        for left, op, right in p.steps():
            assert 0 <= left <= MAX_VALUE and 0 <= right <= MAX_VALUE and 0 <= op.n <= MAX_VALUE
        assert p.steps()[-1][2] == p.answer
        assert p.text.endswith("have now?")


def test_dialect_round_trip_and_is_jargon():
    for p in generate_problems(200, "test", seed=0):
        sols = {d: render_solution(p, d) for d in DIALECTS}
        for d, s in sols.items():
            assert extract_boxed_int(s) == p.answer
            assert s.count(STEP_SEP) == len(p.ops)  # one paragraph per step + the answer line
            assert s.startswith(render_first_step(p, d) + STEP_SEP)
        assert is_jargon(sols["jargon"]) and not is_jargon(sols["plain"])
        assert not is_jargon(make_prompt(p))
        assert make_prompt(p).startswith(p.text) and make_prompt(p).endswith("?\n\n")


def test_extract_boxed_int():
    assert extract_boxed_int("a \\boxed{3} b \\boxed{ 42 }.") == 42
    assert extract_boxed_int("no answer") is None
    assert extract_boxed_int("\\boxed{x}") is None


@pytest.fixture(scope="module")
def toy_tokenizer():
    from trlvr.toy.tokenizer import train_bpe_tokenizer

    probs = generate_problems(300, "train", seed=0)
    corpus = [make_prompt(p) + render_solution(p, d) for p in probs for d in DIALECTS]
    return train_bpe_tokenizer(corpus, 320, split_digits=True, byte_alphabet=False)


def test_tokenizer_word_starts_match_engine(toy_tokenizer):
    from trlvr.engine.schedules import vocab_tables

    tok = toy_tokenizer
    tables = vocab_tables(tok)
    ids = [
        i for i, piece in enumerate(tok.convert_ids_to_tokens(list(range(len(tok))))) if piece.startswith("Ġ")
    ]
    assert ids, "no word-start tokens"
    assert sorted(tables.word_start.nonzero().flatten().tolist()) == ids
    assert tok.eos_token_id == 0 and tok.pad_token_id == 1
    p = generate_problems(1, "test", seed=5)[0]
    for d in DIALECTS:
        text = make_prompt(p) + render_solution(p, d)
        enc = tok(text, add_special_tokens=False)["input_ids"]
        assert tok.decode(enc) == text
        pieces = tok.convert_ids_to_tokens(enc)
        # digits are single tokens; a number's first digit carries the word start
        assert all(len(x.lstrip("Ġ")) == 1 for x in pieces if x.lstrip("Ġ")[:1].isdigit())
    jargon_pieces = tok.convert_ids_to_tokens(tok(render_solution(p, "jargon"))["input_ids"])
    assert sum(x.startswith("Ġ") for x in jargon_pieces) >= 2 * len(p.ops)  # " +"/" -" and " =" per step


def test_prompt_and_completion_tokenize_apart(toy_tokenizer):
    tok = toy_tokenizer
    for p in generate_problems(20, "test", seed=1):
        for d in DIALECTS:
            a, b = make_prompt(p), render_solution(p, d)
            joint = tok(a + b, add_special_tokens=False)["input_ids"]
            apart = (
                tok(a, add_special_tokens=False)["input_ids"] + tok(b, add_special_tokens=False)["input_ids"]
            )
            assert joint == apart


CARD_FRACTIONS = [
    "senior_solo_acc",
    "junior_solo_acc",
    "senior_jargon_rate",
    "junior_acc_after_plain_step",
    "junior_acc_after_jargon_step",
    "tandem_acc",
]


def test_mini_world_from_scratch_and_reuse(tmp_path, capsys):
    from trlvr.data import read_jsonl
    from trlvr.toy.world import MINI_CONFIG, prepare_world

    out = tmp_path / "world"
    card = prepare_world(out, seed=0, from_scratch=True, progress=False, config=MINI_CONFIG)
    for sub in ("senior", "junior"):
        assert (out / sub / "config.json").exists()
        assert (out / sub / "model.safetensors").exists()
        assert (out / sub / "tokenizer.json").exists()
    train = read_jsonl(out / "data" / "train.jsonl")
    test = read_jsonl(out / "data" / "test.jsonl")
    assert len(train) == MINI_CONFIG.n_train and len(test) == MINI_CONFIG.n_test
    assert set(train[0]) >= {"problem", "answer", "prompt"}
    assert not {r["problem"] for r in train} & {r["problem"] for r in test}
    assert isinstance(test[0]["answer"], int)
    on_disk = json.loads((out / "card.json").read_text())
    assert on_disk == card
    for k in CARD_FRACTIONS:
        assert isinstance(card[k], float) and 0.0 <= card[k] <= 1.0, k
    for k in ("senior_params", "junior_params", "vocab_size", "n_eval"):
        assert isinstance(card[k], int) and card[k] > 0, k
    assert card["senior_params"] > card["junior_params"]
    assert card["prepare_seconds"] > 0 and card["from_scratch"] is True
    capsys.readouterr()
    again = prepare_world(out, seed=0, progress=False, config=MINI_CONFIG)
    assert again == card
    assert "reusing" in capsys.readouterr().out


def test_shipped_assets_load_and_fit():
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from trlvr.engine.schedules import vocab_tables
    from trlvr.toy.world import ASSETS_DIR

    total = sum(f.stat().st_size for f in Path(ASSETS_DIR).rglob("*") if f.is_file())
    assert total <= 20 * 1024 * 1024, f"assets are {total / 2**20:.1f} MB"
    tok = AutoTokenizer.from_pretrained(ASSETS_DIR / "senior")
    assert vocab_tables(tok).word_start.any()
    sizes = {}
    for name in ("senior", "junior"):
        model = AutoModelForCausalLM.from_pretrained(ASSETS_DIR / name)
        assert model.config.model_type == "qwen3"
        assert model.get_output_embeddings().weight.shape[0] == len(tok)
        sizes[name] = sum(p.numel() for p in model.parameters())
        assert AutoTokenizer.from_pretrained(ASSETS_DIR / name).get_vocab() == tok.get_vocab()
    assert sizes["senior"] > sizes["junior"]


def test_cli_parser():
    import argparse

    from trlvr.cli import toy_cmd

    parser = argparse.ArgumentParser()
    toy_cmd.make_parser(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["toy", "prepare", "--out", "x", "--seed", "2", "--from-scratch"])
    assert (args.toy_command, args.out, args.seed, args.from_scratch) == ("prepare", "x", 2, True)


def test_compact_jargon_has_no_word_start_inside_the_annotation():
    """The GSM8K-like spelling puts no word-start token inside <<...>>; the spaced one puts two per step."""
    from transformers import AutoTokenizer

    from trlvr.engine import vocab_tables
    from trlvr.toy.dialects import dialects_for, is_jargon, render_step
    from trlvr.toy.task import generate_problems
    from trlvr.toy.world import ASSETS_DIR

    tok = AutoTokenizer.from_pretrained(ASSETS_DIR / "senior")
    tables = vocab_tables(tok)
    assert dialects_for("compact") == ("plain", "jargon-compact")
    for p in generate_problems(30, "train", 0):
        for a, op, b in p.steps():
            compact, spaced = render_step(a, op, b, "jargon-compact"), render_step(a, op, b, "jargon")
            assert is_jargon(compact) and " " not in compact
            ids = tok(" " + compact, add_special_tokens=False)["input_ids"]  # as it follows "\n\n" or text
            assert not any(tables.word_start[i] for i in ids[1:]), compact  # none after the first piece
            ids = tok(" " + spaced, add_special_tokens=False)["input_ids"]
            assert sum(bool(tables.word_start[i]) for i in ids[1:]) == 2, spaced


def test_compact_jargon_needs_from_scratch(tmp_path, capsys):
    from trlvr.cli.main import main as cli

    assert cli(["toy", "prepare", "--out", str(tmp_path / "w"), "--jargon", "compact"]) == 2
    assert "no compact checkpoints are shipped; add --from-scratch" in capsys.readouterr().err


def test_wilson_interval():
    import math

    from trlvr.toy.measure import wilson_interval

    assert [round(x, 4) for x in wilson_interval(483, 500)] == [0.9462, 0.9787]
    lo, hi = wilson_interval(0, 20)
    assert lo == 0.0 and 0.1 < hi < 0.2  # never the degenerate [0, 0] of the normal interval
    lo, hi = wilson_interval(20, 20)
    assert hi == 1.0 and 0.8 < lo < 0.9
    for k, n in ((1, 7), (50, 100), (9, 10)):
        lo, hi = wilson_interval(k, n)
        assert lo < k / n < hi
        assert wilson_interval(4 * k, 4 * n)[1] - wilson_interval(4 * k, 4 * n)[0] < hi - lo  # narrows with n
    assert all(math.isnan(x) for x in wilson_interval(0, 0))
    with pytest.raises(ValueError, match="need 0 <= k <= n"):
        wilson_interval(5, 4)


def test_shipped_card_intervals_are_wilson_of_its_figures():
    """The ci95 in train_card.json are what card_intervals computes from its own figures and counts."""
    from trlvr.toy.world import ASSETS_DIR, card_intervals

    shipped = json.loads((ASSETS_DIR / "train_card.json").read_text())
    assert card_intervals(shipped) == shipped["ci95"]
    for key, (lo, hi) in shipped["ci95"].items():
        assert lo <= shipped[key] <= hi, key


def test_reusing_a_world_of_another_jargon_is_refused(tmp_path):
    from trlvr.errors import UserError
    from trlvr.toy.world import MINI_CONFIG, prepare_world

    out = tmp_path / "world"
    card = prepare_world(out, seed=0, from_scratch=True, progress=False, config=MINI_CONFIG)
    assert card["ci95"] and all(lo <= card[k] <= hi for k, (lo, hi) in card["ci95"].items())
    with pytest.raises(UserError, match=r"card.json: this toy world has jargon 'spaced', not 'compact'"):
        prepare_world(
            out,
            seed=0,
            from_scratch=True,
            progress=False,
            config=dataclasses.replace(MINI_CONFIG, jargon="compact"),
        )
    # another seed or another setting: another world (other problems, other models), never this one reused
    with pytest.raises(
        UserError, match=r"card.json: this toy world was made with other settings \(seed: 0 -> 1\)"
    ):
        prepare_world(out, seed=1, from_scratch=True, progress=False, config=MINI_CONFIG)
    with pytest.raises(UserError, match=r"other settings \(config.n_train: 400 -> 300\)"):
        prepare_world(
            out,
            seed=0,
            from_scratch=True,
            progress=False,
            config=dataclasses.replace(MINI_CONFIG, n_train=300),
        )
    assert (
        prepare_world(out, seed=0, from_scratch=True, progress=False, config=MINI_CONFIG) == card
    )  # the same: reused


def test_mini_world_compact_jargon(tmp_path):
    """A compact world writes compact jargon in its SFT data path and its tokenizer has no word start in it."""
    from transformers import AutoTokenizer

    from trlvr.engine import vocab_tables
    from trlvr.toy.dialects import render_solution
    from trlvr.toy.world import MINI_CONFIG, prepare_world

    out = tmp_path / "compact"
    card = prepare_world(
        out,
        seed=0,
        from_scratch=True,
        progress=False,
        config=dataclasses.replace(MINI_CONFIG, jargon="compact"),
    )
    assert card["config"]["jargon"] == "compact"
    tok = AutoTokenizer.from_pretrained(out / "senior")
    word_start = vocab_tables(tok).word_start
    for p in generate_problems(20, "test", seed=2):
        sol = render_solution(p, "jargon-compact")
        ids = tok(make_prompt(p) + sol, add_special_tokens=False)["input_ids"]
        n_prompt = len(tok(make_prompt(p), add_special_tokens=False)["input_ids"])
        assert not any(word_start[i] for i in ids[n_prompt:]), sol  # the whole compact solution
        assert is_jargon(sol)


def test_jargon_metric_counts_both_spellings():
    from trlvr.toy.jargon import jargon_by_problem

    p = generate_problems(1, "test", seed=3)[0]
    rows = [
        {"protocol": "solo", "problem_id": "s", "text": render_solution(p, "jargon")},
        {"protocol": "solo", "problem_id": "c", "text": render_solution(p, "jargon-compact")},
        {"protocol": "solo", "problem_id": "c", "text": render_solution(p, "plain")},
        {"protocol": "solo", "problem_id": "t", "text": "<<47+18="},  # cut off mid-annotation
    ]
    assert jargon_by_problem(rows) == {"s": 1.0, "c": 0.5, "t": 1.0}


def test_sft_autocasts_to_bf16_only_where_the_cpu_computes_it(monkeypatch):
    """bf16 autocast is emulated on AVX2-only CPUs (6x slower than fp32 there): by default sft uses it
    only when oneDNN reports native bf16, says which it used, and an explicit choice wins."""
    import torch

    from trlvr.toy import models

    seen = []
    real_autocast = torch.autocast

    def spy(device_type, dtype=None, enabled=True, **kw):
        seen.append(enabled)
        return real_autocast(device_type, dtype=dtype, enabled=enabled, **kw)

    monkeypatch.setattr(models.torch, "autocast", spy)
    from helpers import tiny_tokenizer

    tok = tiny_tokenizer()
    batch = lambda rng, n: [([5, 6, 7], [8, 9, 10, 11])] * n  # noqa: E731
    for native, asked, expect in ((False, None, False), (True, None, True), (True, False, False)):
        monkeypatch.setattr(models, "native_bf16", lambda v=native: v)
        model = models.build_model(tok, models.JUNIOR_SIZE, seed=0)
        stats = models.sft(model, batch, models.SFTSettings(1, batch_size=2, pad_id=0, bf16=asked))
        assert stats["bf16"] is expect and seen[-1] is expect


@pytest.mark.parametrize("complete", [True, False])
def test_toy_prepare_prints_its_card_once_and_one_line_when_it_reuses_a_world(
    tmp_path, monkeypatch, capsys, complete
):
    """Newcomer walk 3, finding 13: a rerun of `trlvr toy prepare` printed the 100-line card again after
    "reusing it". Now a reused world is that one line; a world made now prints its card (JSON)."""
    import trlvr.toy.world as world
    from trlvr.cli.main import main as cli

    out = tmp_path / "toy"

    def prepare(out_dir, **kw):  # the world's own line on reuse; a made world's card either way
        if complete:
            print(f"toy world at {out_dir} is complete; reusing it")
        return {"seed": 0, "senior_params": 10, "config": {"jargon": "spaced"}}

    monkeypatch.setattr(world, "is_complete", lambda path: complete)
    monkeypatch.setattr(world, "prepare_world", prepare)
    assert cli(["toy", "prepare", "--out", str(out), "--no-progress"]) == 0
    printed = capsys.readouterr().out
    if complete:
        assert printed == f"toy world at {out} is complete; reusing it\n"
    else:
        assert json.loads(printed) == {"seed": 0, "senior_params": 10}

"""A model's output never crashes a text-paired run (trlvr.engine.text_pair): text a partner's tokenizer
cannot spell ends its row with finish reason "unrepresentable" (counted by evaluation, a finished row
for training), and the bytes of an unfinished UTF-8 character are held back until it is complete."""

from __future__ import annotations

import json

import pytest
import torch
from helpers import CORPUS, PROMPTS, tiny_model, write_sum_problems

from trlvr.engine import ChunkSchedule, Sampling, SoloSchedule, StepSchedule, TokenSchedule, WordSchedule
from trlvr.engine.output import FINISH_REASONS
from trlvr.engine.text_pair import UNREPRESENTABLE, Codec, TextPairGenerator, invariant_failures
from trlvr.toy.tokenizer import train_bpe_tokenizer

SCHEDULES = [
    WordSchedule(p=0.5, max_gap=4),
    TokenSchedule(p=0.5),
    StepSchedule(first_author="junior", max_rounds=150),
    ChunkSchedule(chunk_size=3),
    SoloSchedule("junior"),
]


@pytest.fixture(scope="module")
def byte_and_plain():
    """The issue's pair: a small byte-level BPE (every byte: control bytes, partial UTF-8) and a
    tokenizer without byte fallback (only the corpus' characters; others vanish on encode)."""
    byte = train_bpe_tokenizer(CORPUS, vocab_size=300)
    plain = train_bpe_tokenizer(CORPUS, vocab_size=120, byte_alphabet=False)
    return byte, plain


def _pair(senior_tok, junior_tok, seeds=(0, 1)):
    senior = tiny_model("qwen3", len(senior_tok), seeds[0])
    junior = tiny_model("llama", len(junior_tok), seeds[1])
    prompts = {
        "senior": [senior_tok.encode(p) for p in PROMPTS] * 3,
        "junior": [junior_tok.encode(p) for p in PROMPTS] * 3,
    }
    return TextPairGenerator(senior, senior_tok, junior, junior_tok), prompts


def _spells(tok, text: str) -> bool:
    return tok.decode(tok.encode(text)) == text


def _check_rows(out, toks, prompts):
    """The text-pair invariant holds; every row's text is one the senior spells; an unrepresentable row
    is closed by an EOS that no model sampled (mask 0), so training sees a finished row."""
    assert invariant_failures(out, toks, prompts) == []
    for r, reason in enumerate(out.finish_reasons):
        assert reason in FINISH_REASONS
        assert _spells(toks["senior"], out.texts[r]), out.texts[r]
        if reason == UNREPRESENTABLE:
            assert out.senior_ids[r][-1] == toks["senior"].eos_token_id and out.senior_authored[r][-1] == 0
        assert len(out.char_authors[r]) == len(out.texts[r])
        assert len(out.senior_ids[r]) == len(out.senior_authored[r]) == len(out.senior_logprobs[r])


@pytest.mark.parametrize("schedule", SCHEDULES, ids=repr)
@pytest.mark.parametrize("writer", ["junior-bytes", "senior-bytes"])
def test_text_a_partner_cannot_spell_ends_the_row_not_the_run(schedule, writer, byte_and_plain):
    """The issue's case (junior-bytes: a byte-level junior writes control bytes and partial UTF-8 for a
    senior without byte fallback) and its mirror: before, `ValueError: text pairing: the senior
    tokenizer does not decode its encoding of ...` ended the batch; now such rows end
    "unrepresentable" at the longest prefix both spell and the other rows finish as usual."""
    byte, plain = byte_and_plain
    senior_tok, junior_tok = (plain, byte) if writer == "junior-bytes" else (byte, plain)
    gen, prompts = _pair(senior_tok, junior_tok)
    toks = {"senior": senior_tok, "junior": junior_tok}
    out = gen.generate(
        prompts["senior"], prompts["junior"], schedule, Sampling(24, seed=3), check=True, check_logits=False
    )
    _check_rows(out, toks, prompts)
    reasons = set(out.finish_reasons)
    if writer == "junior-bytes":  # the senior must spell every text (the output is its tokenization)
        assert UNREPRESENTABLE in reasons, out.finish_reasons
    elif not isinstance(schedule, SoloSchedule | StepSchedule):  # the junior reads the senior's bytes
        assert UNREPRESENTABLE in reasons, out.finish_reasons


def test_senior_solo_rows_never_end_for_the_junior(byte_and_plain):
    """A senior writing alone is not cut for text the junior (who never reads it) cannot spell: its
    rows end as they would without a junior; the junior's tokenization is a best-effort prefix."""
    byte, plain = byte_and_plain
    gen, prompts = _pair(byte, plain)
    out = gen.generate(
        prompts["senior"],
        prompts["junior"],
        SoloSchedule("senior"),
        Sampling(24, seed=3),
        check=True,
        check_logits=False,
    )
    assert UNREPRESENTABLE not in out.finish_reasons
    assert any(not _spells(plain, t) for t in out.texts)  # the junior could not have spelt these
    assert invariant_failures(out, {"senior": byte, "junior": plain}, prompts) == []


def test_a_character_missing_from_a_small_vocabulary(byte_and_plain):
    """`Y` is in the junior's vocabulary, not in the senior's (no byte fallback: it would vanish):
    rows where the junior writes it end unrepresentable before it; the text never holds a `Y`."""
    corpus = ["ab ba b a\n\n", "aa b ab\n\n"] * 10
    senior_tok = train_bpe_tokenizer(corpus, vocab_size=8, byte_alphabet=False)
    junior_tok = train_bpe_tokenizer(
        [c.replace("b", "Y", 1) + " Y" for c in corpus], vocab_size=8, byte_alphabet=False
    )
    assert "Y" in junior_tok.get_vocab() and not _spells(senior_tok, "aY")
    senior, junior = tiny_model("qwen3", len(senior_tok), 5), tiny_model("llama", len(junior_tok), 6)
    texts = ["ab ba", "b a", "aa b", "a"] * 4
    prompts = {
        "senior": [senior_tok.encode(t) for t in texts],
        "junior": [junior_tok.encode(t) for t in texts],
    }
    gen = TextPairGenerator(senior, senior_tok, junior, junior_tok)
    for schedule in (WordSchedule(p=0.5, max_gap=3), TokenSchedule(p=0.5), SoloSchedule("junior")):
        out = gen.generate(
            prompts["senior"],
            prompts["junior"],
            schedule,
            Sampling(20, seed=2),
            check=True,
            check_logits=False,
        )
        _check_rows(out, {"senior": senior_tok, "junior": junior_tok}, prompts)
        assert UNREPRESENTABLE in out.finish_reasons and not any("Y" in t for t in out.texts)


class _Scripted(torch.nn.Module):
    """A tiny causal LM whose next token is fixed by the last token fed (`table`, else `default`):
    the real model runs (its KV cache, positions, masks), a large bias picks the token."""

    def __init__(self, inner, table: dict[int, int], default: int):
        super().__init__()
        self.inner, self.table, self.default = inner, table, default

    @property
    def config(self):
        return self.inner.config

    def forward(self, input_ids, **kw):
        out = self.inner(input_ids=input_ids, **kw)
        bias = torch.zeros_like(out.logits[:, -1])
        for r, last in enumerate(input_ids[:, -1].tolist()):
            bias[r, self.table.get(last, self.default)] = 1e4
        out.logits = out.logits + bias[:, None, :]
        return out


def test_an_unfinished_character_is_held_back_and_a_withdrawn_word_start_takes_its_bytes(byte_and_plain):
    """A byte-level junior writes "x" then NBSP (U+00A0 = C2 A0, whitespace: a word start) as two
    tokens, over and over. The C2 is held back (no U+FFFD reaches the text, no handoff inside the
    character); when the word schedule withdraws the completed word start, its held-back C2 goes
    with it (before: it stayed behind, the junior skipped its catch-up of the senior's word and its
    stream no longer spelt the text)."""
    byte, _ = byte_and_plain
    c2, a0 = byte.encode("\u00a0")
    x = byte.encode("x")[0]
    junior = _Scripted(tiny_model("llama", len(byte), 1), {c2: a0, a0: x}, c2)  # ... x C2 A0 x C2 A0 ...
    senior = tiny_model("qwen3", len(byte), 0)
    never = [len(byte) + 5]  # no EOS: every row runs to its budget
    gen = TextPairGenerator(senior, byte, junior, byte, senior_eos_ids=never, junior_eos_ids=never)
    texts = [p for p in PROMPTS] * 4
    prompts = {"senior": [byte.encode(t) for t in texts], "junior": [byte.encode(t) for t in texts]}
    toks = {"senior": byte, "junior": byte}
    for schedule in (WordSchedule(p=0.5, max_gap=32), TokenSchedule(p=0.5), SoloSchedule("junior")):
        out = gen.generate(
            prompts["senior"],
            prompts["junior"],
            schedule,
            Sampling(30, seed=1),
            check=True,
            check_logits=False,
        )
        assert invariant_failures(out, toks, prompts) == []
        junior_chars = [
            c
            for t, a in zip(out.texts, out.char_authors, strict=True)
            for c, m in zip(t, a, strict=True)
            if not m
        ]
        assert (
            "\ufffd" not in junior_chars and "\u00a0" in junior_chars
        )  # (the random senior may write U+FFFD)
        if isinstance(schedule, WordSchedule):
            assert sum(out.withdrawn) > 0  # some NBSP word starts were withdrawn (with their C2)


def test_unrepresentable_rows_train_as_finished_rows(byte_and_plain):
    """What training gets (`as_tandem_output`): the row ends on EOS (TRL's completion mask stops there
    and `mask_truncated_completions` keeps it), the EOS is nobody's token (env_mask 0), the finish
    code round-trips, and no completion is empty."""
    from trlvr.algos import check_author_mask

    byte, plain = byte_and_plain
    gen, prompts = _pair(plain, byte)
    out = gen.generate(prompts["senior"], prompts["junior"], TokenSchedule(p=0.5), Sampling(24, seed=3))
    tandem = out.as_tandem_output(pad_id=plain.pad_token_id)
    assert tandem.finish_reasons == out.finish_reasons and UNREPRESENTABLE in tandem.finish_reasons
    ids, mask = tandem.completion_ids, tandem.authors
    check_author_mask(mask, ids)
    for r, reason in enumerate(tandem.finish_reasons):
        assert ids[r], r
        if reason == UNREPRESENTABLE:
            assert ids[r][-1] == plain.eos_token_id and mask[r][-1] == 0


def test_evaluation_counts_unrepresentable_rows():
    """`<protocol>/unrepresentable`: the share of a problem's samples that ended so, a rate (printed in
    percent), present for a protocol once any of its rows did, 0 for its other problems."""
    from trlvr.eval.aggregate import problem_table, summarize
    from trlvr.eval.format import is_percent

    def row(pid, proto, s, reason):
        return {
            "benchmark": "b",
            "protocol": proto,
            "problem_id": pid,
            "sample_idx": s,
            "reward": 0.0,
            "finish_reason": reason,
            "num_tokens": 3,
            "senior_share": 1.0,
        }

    rows = [
        row("p1", "handoff", 0, "unrepresentable"),
        row("p1", "handoff", 1, "eos"),
        row("p2", "handoff", 0, "eos"),
        row("p2", "handoff", 1, "length"),
        row("p1", "solo", 0, "eos"),
        row("p1", "solo", 1, "eos"),
    ]
    table = problem_table(rows, [1])["b"]
    assert table["handoff/unrepresentable"] == {"p1": 0.5, "p2": 0.0}
    assert "solo/unrepresentable" not in table  # no solo row ended so: no column for it
    assert table["handoff/truncated"] == {"p1": 0.0, "p2": 0.5}  # not counted as truncated
    summary = summarize({"b": table}, num_resamples=50)
    assert summary["macro"]["metrics"]["handoff/unrepresentable"]["value"] == pytest.approx(0.25)
    assert is_percent("handoff/unrepresentable")


def test_trlvr_eval_on_a_text_pair_that_writes_bytes_the_senior_cannot_spell(
    tmp_path, capsys, byte_and_plain
):
    """`trlvr eval` end to end on the issue's pair: exit 0, results.json reports the share of
    unrepresentable rows, and the samples record them (before: a ValueError traceback)."""
    from trlvr.cli.main import main

    byte, plain = byte_and_plain
    for name, tok, seed, arch in (("senior", plain, 0, "qwen3"), ("junior", byte, 1, "llama")):
        model = tiny_model(arch, len(tok), seed)
        model.generation_config.eos_token_id = tok.eos_token_id
        model.save_pretrained(tmp_path / name)
        tok.save_pretrained(tmp_path / name)
    data = write_sum_problems(tmp_path / "d.jsonl", 4)
    code = main(
        [
            "eval",
            "--senior",
            str(tmp_path / "senior"),
            "--junior",
            str(tmp_path / "junior"),
            "--data",
            f"toy={data}",
            "--n",
            "4",
            "--k",
            "1",
            "--suite",
            "solo,handoff,junior",
            "--max-new-tokens",
            "24",
            "--batch-size",
            "16",
            "--no-progress",
            "--out",
            str(tmp_path / "out"),
        ]
    )
    assert code == 0, capsys.readouterr().err
    res = json.loads((tmp_path / "out" / "results.json").read_text())
    assert res["config"]["pairing"] == "text"
    rows = [json.loads(line) for line in (tmp_path / "out" / "samples.jsonl").read_text().splitlines()]
    ended = [r for r in rows if r["finish_reason"] == UNREPRESENTABLE]
    assert ended and {r["protocol"] for r in ended} <= {"handoff", "junior"}
    metrics = res["macro"]["metrics"]
    for proto in {r["protocol"] for r in ended}:
        share = sum(r["protocol"] == proto for r in ended) / sum(r["protocol"] == proto for r in rows)
        assert metrics[f"{proto}/unrepresentable"]["value"] == pytest.approx(share)


def test_codec_still_refuses_a_tokenizer_that_cannot_round_trip_plain_text():
    """The pairing itself (not a model's output) stays a clear error at construction."""
    tok = train_bpe_tokenizer(["xyz xyz"], vocab_size=10, byte_alphabet=False)  # no "a" or "b"
    with pytest.raises(ValueError, match="does not round-trip text"):
        Codec(tok, "senior")


def test_trlvr_train_goes_on_when_the_junior_writes_bytes_the_senior_cannot_spell(
    tmp_path, capfd, monkeypatch
):
    """`trlvr train` with the shipped toy senior (no byte fallback) and a random byte-level junior that
    writes control bytes and partial UTF-8: before, the first rollout ended the run with a ValueError
    traceback; now both steps train and the final model is written."""
    import shutil

    from trlvr.cli.main import main
    from trlvr.toy.task import make_splits
    from trlvr.toy.world import ASSETS_DIR, _rows, _write_jsonl

    shutil.copytree(ASSETS_DIR / "senior", tmp_path / "senior")
    rows = _rows(make_splits(60, 4, seed=0)[0])
    junior_tok = train_bpe_tokenizer([r["prompt"] for r in rows] * 2, vocab_size=300)  # every byte
    junior = tiny_model("llama", len(junior_tok), seed=4, hidden=32)
    junior.generation_config.eos_token_id = junior_tok.eos_token_id
    junior.save_pretrained(tmp_path / "junior")
    junior_tok.save_pretrained(tmp_path / "junior")
    _write_jsonl(tmp_path / "train.jsonl", rows)
    reasons, generate = [], TextPairGenerator.generate

    def recording(self, *a, **kw):
        out = generate(self, *a, **kw)
        reasons.extend(out.finish_reasons)
        return out

    monkeypatch.setattr(TextPairGenerator, "generate", recording)
    code = main(
        [
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
            "--max_steps",
            "2",
            "--per_device_train_batch_size",
            "8",
            "--num_generations",
            "4",
            "--max_completion_length",
            "24",
            "--schedule",
            "token",
            "--use_cpu",
            "true",
            "--output_dir",
            str(tmp_path / "run"),
        ]
    )
    err = capfd.readouterr().err
    assert code == 0 and "Traceback" not in err, err
    steps = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in steps if "loss" in r] == [1, 2]
    assert (tmp_path / "run" / "final").is_dir()
    assert UNREPRESENTABLE in reasons  # the case was met, and trained through

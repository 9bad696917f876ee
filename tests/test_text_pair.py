"""Text-level pairing (trlvr.engine.text_pair): two models, two tokenizers, one shared text."""

from __future__ import annotations

import math
import os
from pathlib import Path

import pytest
import torch
from helpers import CORPUS, PROMPTS, tiny_model, tiny_tokenizer

from trlvr.engine import (
    ChunkSchedule,
    Sampling,
    SoloSchedule,
    StepSchedule,
    TandemGenerator,
    TokenSchedule,
    WordSchedule,
)
from trlvr.engine.text_pair import TextPairGenerator, invariant_failures, is_word_start, row_uniforms
from trlvr.toy.tokenizer import train_bpe_tokenizer

# Two tokenizers that cut the same text differently: byte-level BPE with 320 ids, and a
# digit-splitting one with 290 ids (other merges, other ids).
SCHEDULES = [
    WordSchedule(p=0.5, max_gap=4),
    TokenSchedule(p=0.5),
    StepSchedule(first_author="junior", max_rounds=150),
    ChunkSchedule(chunk_size=3),
    SoloSchedule("senior"),
    SoloSchedule("junior"),
]
# A small alphabet with many blank lines, so random models end steps often.
NL_CORPUS = ["ab ba\n\nb a\n\naa b\n\n", "b\n\nab\n\nba ab\n\n"] * 10


@pytest.fixture(scope="module")
def pair():
    ts = tiny_tokenizer(320)
    tj = train_bpe_tokenizer(CORPUS, vocab_size=290, split_digits=True)
    senior, junior = tiny_model("qwen3", len(ts), 0), tiny_model("llama", len(tj), 1)
    prompts = {"senior": [ts.encode(p) for p in PROMPTS], "junior": [tj.encode(p) for p in PROMPTS]}
    return TextPairGenerator(senior, ts, junior, tj), {"senior": ts, "junior": tj}, prompts


@pytest.fixture(scope="module")
def nl_pair():
    ts = train_bpe_tokenizer(NL_CORPUS, vocab_size=9, byte_alphabet=False)
    tj = train_bpe_tokenizer(NL_CORPUS, vocab_size=6, byte_alphabet=False)  # characters only
    assert ts.get_vocab() != tj.get_vocab()
    senior, junior = tiny_model("qwen3", len(ts), 2), tiny_model("llama", len(tj), 3)
    texts = ["ab ba\n\n", "b a", "aa b\n\nb", "a"]
    prompts = {"senior": [ts.encode(p) for p in texts], "junior": [tj.encode(p) for p in texts]}
    return TextPairGenerator(senior, ts, junior, tj), {"senior": ts, "junior": tj}, prompts


@pytest.mark.parametrize("schedule", SCHEDULES, ids=lambda s: repr(s))
@pytest.mark.parametrize("which", ["bytes", "blank-lines"])
def test_invariant_holds_for_every_schedule(schedule, which, pair, nl_pair):
    """After every catch-up each stream decodes to the shared text and what it fed for the partner's
    text is the tail of its tokenizer's encoding of the whole text; the cached logits equal a fresh
    forward (KV rollback, holes and positions are right); outputs decode to the text."""
    gen, toks, prompts = pair if which == "bytes" else nl_pair
    out = gen.generate(prompts["senior"], prompts["junior"], schedule, Sampling(28, seed=3), check=True)
    assert invariant_failures(out, toks, prompts) == []
    assert out.logit_error < 1e-4
    if isinstance(schedule, SoloSchedule):
        assert sum(out.handoffs) == 0 and sum(out.withdrawn) == 0
    elif not (
        isinstance(schedule, StepSchedule) and which == "bytes"
    ):  # random byte soup rarely writes "\n\n"
        assert sum(out.handoffs) > 0 and sum(sum(c) for c in out.catch_up_tokens.values()) > 0
    for r in range(len(out)):
        assert len(out.char_authors[r]) == len(out.texts[r])
        assert len(out.senior_ids[r]) == len(out.senior_authored[r]) == len(out.senior_logprobs[r])


def test_word_schedule_withdraws_and_hands_over_before_the_word(pair):
    gen, toks, prompts = pair
    out = gen.generate(
        prompts["senior"],
        prompts["junior"],
        WordSchedule(p=0.5, max_gap=32),
        Sampling(48, seed=5),
        check=True,
    )
    assert sum(out.withdrawn) > 0
    assert invariant_failures(out, toks, prompts) == []
    # every word-boundary catch-up starts its text at a word start: the partner wrote the whole word
    for r, snaps in enumerate(out.snapshots):
        for _name, kind, n, _b, _k, _ids in snaps:
            if kind == "word":
                assert not out.texts[r][n - 1].isspace()
    solo = gen.generate(prompts["senior"], prompts["junior"], WordSchedule(p=1.0), Sampling(24, seed=5))
    assert sum(solo.withdrawn) == 0 and all(m == 1 for row in solo.char_authors for m in row)


def test_senior_mask_is_exactly_the_senior_sampled_tokens(nl_pair):
    """With a characters-only senior tokenizer every token is one character: the mask must equal the
    per-character authorship (and the EOS is the senior's only when the senior wrote it)."""
    gen, toks, _ = nl_pair
    gen_c = TextPairGenerator(gen.models["junior"], toks["junior"], gen.models["senior"], toks["senior"])
    texts = ["ab ba\n\n", "b a", "aa b\n\nb", "a"] * 3
    prompts = {
        "senior": [toks["junior"].encode(t) for t in texts],
        "junior": [toks["senior"].encode(t) for t in texts],
    }
    for schedule in (WordSchedule(p=0.5, max_gap=3), StepSchedule(), TokenSchedule(p=0.3)):
        out = gen_c.generate(prompts["senior"], prompts["junior"], schedule, Sampling(30, seed=1))
        checked = 0
        for r in range(len(out)):
            if "<|" in out.texts[r]:  # a sampled special token is one id for many characters
                continue
            checked += 1
            mask = out.senior_authored[r][: len(out.texts[r])]
            assert mask == out.char_authors[r]
            assert all(
                (lp < 0) == bool(m)
                for lp, m in zip(out.senior_logprobs[r], out.senior_authored[r], strict=True)
            )
        assert checked >= 6


def test_mask_one_only_on_text_the_senior_wrote(pair):
    gen, toks, prompts = pair
    out = gen.generate(
        prompts["senior"], prompts["junior"], WordSchedule(p=0.5, max_gap=4), Sampling(40, seed=7)
    )
    codec = toks["senior"]
    n_own = 0
    for r in range(len(out)):
        # the characters of each senior-owned token (decoded prefix by prefix) are senior-written
        ids, text, ctx = out.senior_ids[r], out.texts[r], prompts["senior"][r]
        base, pos = len(codec.decode(ctx)), 0
        for j, m in enumerate(out.senior_authored[r][: len(ids) - (out.finish_reasons[r] == "eos")]):
            end = len(codec.decode(ctx + ids[: j + 1])) - base
            if m:
                n_own += 1
                assert all(out.char_authors[r][pos:end]), (r, j, text[pos:end])
            pos = end
    assert n_own > 0


def _team_stats(ids: list[list[int]], authors: list[list[int]], positions: int, vocab: int):
    """Per position < `positions`: share of rows whose token there is v (v = vocab: ended), and share
    of rows whose token there the senior wrote."""
    n = len(ids)
    tokens = [[0] * positions for _ in range(vocab + 1)]
    senior = [0] * positions
    for row, a in zip(ids, authors, strict=True):
        for i in range(positions):
            tokens[row[i] if i < len(row) else vocab][i] += 1
            senior[i] += a[i] if i < len(a) else 0
    return [[x / n for x in v] for v in tokens] + [[x / n for x in senior]]


def _max_z(a: list[list[float]], b: list[list[float]], n: int) -> float:
    """Largest two-proportion z statistic over every share (0 where both are 0 or 1)."""
    worst = 0.0
    for xs, ys in zip(a, b, strict=True):
        for x, y in zip(xs, ys, strict=True):
            p = (x + y) / 2
            if 0 < p < 1:
                worst = max(worst, abs(x - y) / math.sqrt(p * (1 - p) * 2 / n))
    return worst


def test_same_vocabulary_step_schedule_matches_lockstep_distribution():
    """The oracle: on a same-tokenizer pair whose tokenization is unique (characters only, so the text
    fixes the ids), text mode and lockstep give the same team distribution under the step schedule.

    Statistic: per-position token shares and senior-authorship shares over the first 24 tokens of
    N = 320 samples each (text mode: the senior's tokenization of the text and its mask); tolerance:
    every two-proportion z < 4.5 (about 220 comparisons: a false alarm about 2e-3 overall; fixed
    seeds make it deterministic). Power: the same statistic flags lockstep with the other first
    author (z > 4.5), which is what a text path that mixed up who writes after a handoff would give."""
    tok = train_bpe_tokenizer(NL_CORPUS, vocab_size=6, byte_alphabet=False)
    senior, junior = tiny_model("qwen3", len(tok), 11), tiny_model("llama", len(tok), 12)
    n, T, P = 320, 32, 24
    prompts = [tok.encode("ab ba\n\nb a")] * n
    schedule = StepSchedule(first_author="senior")
    never = [len(tok) + 7]  # no EOS: rows run to the length budget and meet more blank lines
    text_gen = TextPairGenerator(senior, tok, junior, tok, senior_eos_ids=never, junior_eos_ids=never)
    text_out = text_gen.generate(prompts, prompts, schedule, Sampling(T, seed=0))
    assert sum(text_out.handoffs) > n / 2  # the catch-up runs in most rows
    stats_t = _team_stats(text_out.senior_ids, text_out.senior_authored, P, len(tok))
    lock = TandemGenerator(senior, junior, tok, eos_token_ids=never)

    def lockstep(sched):
        out = lock.generate(prompts, sched, Sampling(T, seed=1))
        return _team_stats(out.completion_ids, out.authors, P, len(tok))

    z = _max_z(stats_t, lockstep(schedule), n)
    assert z < 4.5, z
    z_other = _max_z(stats_t, lockstep(StepSchedule(first_author="junior")), n)
    assert z_other > 4.5, z_other


def test_row_results_do_not_depend_on_the_batch(pair):
    """Randomness is per row (seeded by the row's index), caches are per row: the first rows of a batch
    come out the same alone, in a smaller batch and in the full one (other rows finishing, rolling
    back and compacting around them)."""
    gen, _, prompts = pair
    sched = WordSchedule(p=0.5, max_gap=4)
    full = gen.generate(prompts["senior"], prompts["junior"], sched, Sampling(24, seed=9))
    for n in (1, 2):
        part = gen.generate(prompts["senior"][:n], prompts["junior"][:n], sched, Sampling(24, seed=9))
        assert part.texts == full.texts[:n] and part.senior_ids == full.senior_ids[:n]
    assert row_uniforms(4, 3, 5)[1].tolist() == row_uniforms(4, 7, 5)[1].tolist()


def test_word_start_is_decided_from_text():
    assert is_word_start("x", " y") and is_word_start("x", "\ny")
    assert not is_word_start("x ", " y") and not is_word_start("", " y") and not is_word_start("x", "y")


def test_bad_inputs_are_one_clear_line(pair):
    gen, toks, prompts = pair
    from trlvr.engine.schedules import SCHEDULES as REGISTRY

    with pytest.raises(
        ValueError, match="text pairing cannot run the schedule 'boundary': it reads token ids"
    ):
        gen.generate(prompts["senior"], prompts["junior"], REGISTRY["boundary"](), Sampling(4))
    with pytest.raises(ValueError, match="junior_tokenizer"):
        TextPairGenerator(gen.models["senior"], toks["senior"], gen.models["junior"])
    with pytest.raises(ValueError, match="one prompt per row"):
        gen.generate(prompts["senior"], prompts["junior"][:1], WordSchedule(), Sampling(4))
    with pytest.raises(ValueError, match="needs a junior"):
        TextPairGenerator(gen.models["senior"], toks["senior"]).generate(
            prompts["senior"], None, WordSchedule(), Sampling(4)
        )
    assert torch.is_tensor(row_uniforms(0, 1, 1))


def _cross_tokenizer_toy(tmp_path):
    """The shipped toy senior and a random junior whose tokenizer has the senior's alphabet but other
    merges (no digit splitting, fewer ids), saved as run folders, plus toy training problems."""
    import shutil

    from transformers import AutoTokenizer

    from trlvr.toy.task import make_splits
    from trlvr.toy.world import ASSETS_DIR, _rows, _write_jsonl

    shutil.copytree(ASSETS_DIR / "senior", tmp_path / "senior")
    senior_tok = AutoTokenizer.from_pretrained(tmp_path / "senior")
    rows = _rows(make_splits(120, 4, seed=0)[0])
    pieces = [senior_tok.decode([i]) for i in range(len(senior_tok)) if i not in senior_tok.all_special_ids]
    corpus = pieces + [r["prompt"] for r in rows] * 3
    junior_tok = train_bpe_tokenizer(corpus, vocab_size=200, byte_alphabet=False)
    assert junior_tok.get_vocab() != senior_tok.get_vocab()
    junior = tiny_model("llama", len(junior_tok), seed=4, hidden=32)
    junior.generation_config.eos_token_id = junior_tok.eos_token_id
    junior.save_pretrained(tmp_path / "junior")
    junior_tok.save_pretrained(tmp_path / "junior")
    _write_jsonl(tmp_path / "train.jsonl", rows)
    return tmp_path


def test_trlvr_train_runs_two_steps_on_a_text_pair(tmp_path, monkeypatch, capfd):
    """`trlvr train` on a senior and a junior with different tokenizers: auto picks text pairing (one log
    line says so), TRL gets the senior's tokenization of the shared text, env_mask is 1 exactly on
    senior-sampled tokens and the junior wrote some of the text; `pairing: lockstep` is refused."""
    import json

    from trlvr.cli.main import main as cli
    from trlvr.training.rollout import TandemRollout

    toy = _cross_tokenizer_toy(tmp_path)
    seen = []
    original = TandemRollout.__call__

    def recording(self, prompts, trainer):
        out = original(self, prompts, trainer)
        seen.append((out, self.pair))
        return out

    monkeypatch.setattr(TandemRollout, "__call__", recording)
    common = [
        "--config",
        "toy",
        "--holdout",
        "0",
        "--senior",
        str(toy / "senior"),
        "--junior",
        str(toy / "junior"),
        "--dataset",
        str(toy / "train.jsonl"),
        "--max_steps",
        "2",
        "--per_device_train_batch_size",
        "8",
        "--num_generations",
        "4",
        "--max_completion_length",
        "16",
        "--use_cpu",
        "true",
    ]
    code = cli(["train", *common, "--output_dir", str(toy / "run")])
    assert code == 0
    assert "pairing: text (two tokenizers, one shared text)" in capfd.readouterr().err
    rows = [json.loads(line) for line in (toy / "run" / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in rows if "loss" in r]
    assert [r["step"] for r in steps] == [1, 2]
    assert all("tandem/text/withdrawn_per_seq" in r for r in steps)
    # the loophole detector is undefined for a text pair (as evaluation's results.json says): never logged
    assert not [k for r in rows for k in r if k.startswith("tandem/loophole/")]
    record = json.loads((toy / "run" / "trlvr_run.json").read_text())
    assert record["pairing"] == "text" and record["tandem"]["pairing"] == "auto"  # chosen, and asked
    assert len(seen) == 2
    assert seen[0][1] is seen[1][1] and seen[0][1].pairing == "text"  # one Pair for the run, text-paired
    junior_written = 0
    for out, _pair in seen:
        for ids, mask in zip(out["completion_ids"], out["env_mask"], strict=True):
            assert len(ids) == len(mask) and set(mask) <= {0, 1}
            junior_written += mask.count(0)
    assert junior_written > 0
    assert cli(["train", *common, "--pairing", "lockstep", "--output_dir", str(toy / "run2")]) == 2
    err = capfd.readouterr().err
    assert "tandem decoding needs one shared vocabulary" in err and "Traceback" not in err


def test_pairing_choice(pair):
    from trlvr.errors import UserError
    from trlvr.team import choose_pairing

    _, toks, _ = pair
    same, other = toks["senior"], toks["junior"]
    assert choose_pairing(same, same) == "lockstep" and choose_pairing(same, other) == "text"
    assert choose_pairing(same, same, "text") == "text"
    with pytest.raises(UserError, match="tandem decoding needs one shared vocabulary"):
        choose_pairing(same, other, "lockstep")
    with pytest.raises(UserError, match="pairing: must be one of auto, lockstep, text"):
        choose_pairing(same, other, "tokens")


def test_cache_compaction_keeps_every_logit(pair, monkeypatch):
    """Squeezing the holes out of the KV caches (forced here after every few columns) changes no
    cached logit and keeps the invariant; the outputs equal an uncompacted run's."""
    from trlvr.engine.text_pair import _Side

    gen, toks, prompts = pair
    sched = WordSchedule(p=0.5, max_gap=4)
    plain = gen.generate(prompts["senior"], prompts["junior"], sched, Sampling(28, seed=4))
    monkeypatch.setattr(_Side, "compact_slack", -(10**6))  # every forward compacts
    out = gen.generate(prompts["senior"], prompts["junior"], sched, Sampling(28, seed=4), check=True)
    assert out.seconds["senior_compactions"] > 5 and out.seconds["junior_compactions"] > 5
    assert out.logit_error < 1e-4
    assert invariant_failures(out, toks, prompts) == []
    assert out.texts == plain.texts and out.senior_ids == plain.senior_ids


def test_text_nll_is_per_byte_and_matches_teacher_forcing(pair):
    from helpers import teacher_forced_logprobs

    from trlvr.engine.text_pair import text_nll

    gen, toks, prompts = pair
    texts = [" 12 plus 30 is 42.", " The cat"]
    for name in ("senior", "junior"):
        got = text_nll(gen.models[name], toks[name], prompts[name][:2], texts)
        one_by_one = [
            text_nll(gen.models[name], toks[name], [p], [t], batch_size=1)[0]
            for p, t in zip(prompts[name][:2], texts, strict=True)
        ]
        for (nll, n_bytes, n_tok), alone, prompt, text in zip(
            got, one_by_one, prompts[name][:2], texts, strict=True
        ):
            ids = toks[name].encode(text)
            ref = -teacher_forced_logprobs(gen.models[name], prompt, ids).sum().item()
            assert n_bytes == len(text.encode()) and nll == pytest.approx(ref, rel=1e-5)
            assert n_tok == len(ids) and nll == pytest.approx(
                alone[0], rel=1e-5
            )  # right padding changes nothing


def test_text_pair_runs_eval_protocols(nl_pair):
    """A text `Pair` answers the pairing interface: eval's run_protocol (with per-row budgets, cut by
    cut_to_budgets) gets the senior's tokens of the shared text and a senior mask.
    (ASCII-only tokenizers: random byte soup would make a solo writer re-encode U+FFFD.)"""
    from trlvr.engine import make_pair
    from trlvr.eval.protocols import run_protocol

    gen, toks, prompts = nl_pair
    facade = make_pair(
        gen.models["senior"], gen.models["junior"], toks["senior"], junior_tokenizer=toks["junior"]
    )
    assert facade.pairing == "text"
    decoding = {"temperature": 1.0, "top_p": 1.0, "top_k": 0}
    for protocol in ("solo", "handoff", "junior"):
        out = run_protocol(
            facade,
            protocol,
            prompts["senior"],
            max_new_tokens=[12, 20, 20, 16],
            decoding=decoding,
            seed=0,
            row_keys=[11, 12, 13, 14],
        )
        assert out.junior_logprob is None and len(out) == 4
        for r, (ids, authors) in enumerate(zip(out.completion_ids, out.authors, strict=True)):
            assert len(ids) == len(authors)
            body = ids[:-1] if out.finish_reasons[r] == "eos" else ids
            if protocol == "solo":
                assert set(authors) <= {1}
            if protocol == "junior":
                assert set(authors) <= {0}
            if len(body) == len(facade.last.senior_ids[r]) - (out.finish_reasons[r] == "eos"):  # not cut
                assert toks["senior"].decode(body) == facade.last.texts[r]


REAL_PAIR = Path(
    os.environ.get("TRLVR_REAL_PAIR", Path(__file__).resolve().parents[1] / "models")
)  # bench/real_pair_prepare.py


@pytest.mark.slow
@pytest.mark.skipif(
    not (REAL_PAIR / "gemma-3-270m" / "config.json").exists(),
    reason="the SmolLM2 + Gemma-3 checkpoints (bench/real_pair_prepare.py) are not here",
)
@pytest.mark.parametrize(
    "schedule", [WordSchedule(p=0.5, max_gap=4), StepSchedule(max_rounds=2), TokenSchedule()], ids=repr
)
def test_invariant_on_the_real_cross_family_pair(schedule):
    """SmolLM2-135M (byte-level BPE, "Ġ") + Gemma-3-270M (SentencePiece, "▁"): the invariant holds."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from trlvr.data import encode_prompt

    loaded = {}
    for name, folder in (("senior", "smollm2-135m-instruct"), ("junior", "gemma-3-270m")):
        loaded[name] = (
            AutoModelForCausalLM.from_pretrained(REAL_PAIR / folder).eval(),
            AutoTokenizer.from_pretrained(REAL_PAIR / folder),
        )
    texts = [
        "Question: What is 12 plus 30?\nAnswer: Let's think step by step.\n\n",
        "The cat sat on the mat. Then",
    ]
    prompts = {n: [encode_prompt(t, tok) for t in texts] for n, (_, tok) in loaded.items()}
    gen = TextPairGenerator(
        loaded["senior"][0], loaded["senior"][1], loaded["junior"][0], loaded["junior"][1]
    )
    out = gen.generate(
        prompts["senior"],
        prompts["junior"],
        schedule,
        Sampling(24, temperature=0.8, seed=1),
        check=True,
        check_logits=False,
    )
    assert invariant_failures(out, {n: tok for n, (_, tok) in loaded.items()}, prompts) == []


@pytest.mark.skipif(
    not (Path(__file__).resolve().parents[1] / "trlvr/toy/assets/junior-cross/config.json").exists(),
    reason="the cross-tokenizer toy junior is not shipped",
)
def test_shipped_cross_tokenizer_junior_pairs_with_the_toy_senior_as_text():
    """The shipped toy senior and the cross-tokenizer junior: different vocabularies (auto = text), each
    can spell the other's text, and a text-paired word-schedule team keeps the invariant."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from trlvr.data import encode_prompt
    from trlvr.team import choose_pairing
    from trlvr.toy.cross import CROSS_DIR
    from trlvr.toy.dialects import make_prompt
    from trlvr.toy.task import make_splits
    from trlvr.toy.world import ASSETS_DIR

    st, jt = AutoTokenizer.from_pretrained(ASSETS_DIR / "senior"), AutoTokenizer.from_pretrained(CROSS_DIR)
    assert choose_pairing(st, jt) == "text" and len(st) != len(jt)
    senior = AutoModelForCausalLM.from_pretrained(ASSETS_DIR / "senior").eval()
    junior = AutoModelForCausalLM.from_pretrained(CROSS_DIR).eval()
    texts = [make_prompt(p) for p in make_splits(20, 8, seed=3)[1]]
    prompts = {
        "senior": [encode_prompt(t, st) for t in texts],
        "junior": [encode_prompt(t, jt) for t in texts],
    }
    out = TextPairGenerator(senior, st, junior, jt).generate(
        prompts["senior"], prompts["junior"], WordSchedule(p=0.5), Sampling(64, seed=0), check=True
    )
    assert invariant_failures(out, {"senior": st, "junior": jt}, prompts) == []
    assert sum(out.handoffs) > 0 and 0 < sum(out.senior_char_share) / len(out) < 1


def test_trlvr_eval_runs_every_protocol_on_a_text_pair(tmp_path, capsys):
    """`trlvr eval` on a pair with two tokenizers: auto picks text pairing (results.json and the
    fingerprint say so), every protocol runs, legibility is the junior's own-token surprisal and its
    bits per byte (recomputed here by teacher forcing in the junior's tokenization), drift is not
    defined (no number); `--pairing lockstep` is one line; a rerun resumes (nothing regenerated)."""
    import json

    from helpers import teacher_forced_logprobs
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from trlvr.cli.main import main as cli
    from trlvr.data import encode_prompt, load_problems, prompt_for, read_jsonl
    from trlvr.toy.task import make_splits
    from trlvr.toy.world import _rows, _write_jsonl

    toy = _cross_tokenizer_toy(tmp_path)
    data = tmp_path / "test.jsonl"
    _write_jsonl(data, _rows(make_splits(60, 5, seed=1)[1]))
    argv = [
        "eval",
        "--senior",
        str(toy / "senior"),
        "--junior",
        str(toy / "junior"),
        "--data",
        f"toy={data}",
        "--suite",
        "solo,handoff,dose,legibility,drift,junior",
        "--n",
        "2",
        "--k",
        "1,2",
        "--max-new-tokens",
        "24",
        "--no-progress",
        "--dtype",
        "float32",
    ]
    assert cli([*argv, "--out", str(tmp_path / "e")]) == 0
    printed = capsys.readouterr().out
    assert "pairing: text" in printed and "drift/kl: not defined" in printed
    res = json.loads((tmp_path / "e" / "results.json").read_text())
    assert res["config"]["pairing"] == "text" and res["fingerprint"]["models"]["pairing"] == "text"
    assert res["fingerprint"]["models"]["junior_tokenizer"] != res["fingerprint"]["models"]["tokenizer"]
    macro = res["macro"]["metrics"]
    assert {
        "solo/pass@1",
        "handoff/pass@1",
        "junior/pass@1",
        "dose-0.5/pass@1",
        "legibility/junior_ce",
        "legibility/junior_bpb",
    } <= set(macro)
    assert not any(m.startswith("drift/") for m in macro) and res["undefined"]["drift/kl"].startswith(
        "not defined"
    )
    rows = list(read_jsonl(tmp_path / "e" / "samples.jsonl"))
    assert {r["protocol"] for r in rows} == {
        "solo",
        "handoff",
        "dose-0.25",
        "dose-0.5",
        "dose-0.75",
        "junior",
    }
    by = {p: [r for r in rows if r["protocol"] == p] for p in ("solo", "handoff", "junior")}
    assert all(set(r["authors"]) <= {"1"} for r in by["solo"]) and all(
        set(r["authors"]) <= {"0"} for r in by["junior"]
    )
    assert any("0" in r["authors"] and "1" in r["authors"] for r in by["handoff"])  # both wrote a team text
    st, jt = AutoTokenizer.from_pretrained(toy / "senior"), AutoTokenizer.from_pretrained(toy / "junior")
    junior = AutoModelForCausalLM.from_pretrained(toy / "junior").eval()
    problems = {str(p.id): p for p in load_problems(str(data))}
    checked = 0
    for r in by["solo"]:
        assert r["drift"] is None and "junior_logprobs" not in r
        if not r["text"]:
            continue
        prompt = encode_prompt(prompt_for(problems[r["source_id"]], st), jt)  # as training's junior prompts
        ids = jt.encode(r["text"], add_special_tokens=False)
        nll = -teacher_forced_logprobs(junior, prompt, ids).sum().item()
        assert r["legibility_bpb"] == pytest.approx(nll / math.log(2) / len(r["text"].encode()), rel=1e-4)
        assert r["legibility"] == pytest.approx(nll / len(ids), rel=1e-4)
        checked += 1
    assert checked >= 5
    before = (tmp_path / "e" / "samples.jsonl").read_text()
    assert cli([*argv, "--out", str(tmp_path / "e")]) == 0  # resumes: same fingerprint, no new rows
    assert (tmp_path / "e" / "samples.jsonl").read_text() == before
    capsys.readouterr()
    assert cli([*argv, "--pairing", "lockstep", "--out", str(tmp_path / "lock")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "tandem decoding needs one shared vocabulary" in err[0]

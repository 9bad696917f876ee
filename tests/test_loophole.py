"""The loophole detector (`trlvr.engine.loophole`): pure statistics of rollouts, checked against
one-token-at-a-time references, on toy-world texts (spaceless jargon against plain), and in the
metrics.jsonl of a tiny tandem training run through `trlvr train`."""

from __future__ import annotations

import math
import random

import pytest
import torch
from helpers import copy_toy_pair, toy_train_argv

from trlvr.engine.loophole import (
    METRICS,
    SPACELESS_SPAN,
    longest_runs,
    loophole_alarm,
    loophole_counts,
    loophole_stats,
    redraw_marks,
    spaceless_mask,
)
from trlvr.engine.schedules import (
    BoundarySchedule,
    Schedule,
    StepSchedule,
    TokenSchedule,
    WordSchedule,
    vocab_tables,
)


@pytest.fixture(scope="module")
def toy_tokenizer():
    from transformers import AutoTokenizer

    from trlvr.toy.world import ASSETS_DIR

    return AutoTokenizer.from_pretrained(ASSETS_DIR / "senior")


def batch(tokenizer, texts: list[str]):
    """(tokens, mask) right-padded: the shape TandemOutput has."""
    ids = [tokenizer.encode(t, add_special_tokens=False) for t in texts]
    T = max(map(len, ids))
    tokens = torch.full((len(ids), T), tokenizer.pad_token_id, dtype=torch.long)
    mask = torch.zeros(len(ids), T, dtype=torch.bool)
    for i, row in enumerate(ids):
        tokens[i, : len(row)] = torch.tensor(row)
        mask[i, : len(row)] = True
    return tokens, mask


def solutions(dialect: str, n: int = 12) -> list[str]:
    from trlvr.toy.dialects import render_solution
    from trlvr.toy.task import generate_problems

    return [render_solution(p, dialect) for p in generate_problems(n, "train", seed=0)]


# ---------------------------------------------------------------- against sequential references


def reference_redraws(natural: list[bool], n: int, K: int | None) -> tuple[list[bool], list[bool]]:
    """The backstop as WordSchedule.advance runs it, one token at a time."""
    nat, forced, since = [False] * n, [False] * n, 0
    for t in range(n):
        since += 1
        if t + 1 >= n:  # the redraw after the last token decides nothing
            break
        if natural[t]:
            nat[t], since = True, 0
        elif K is not None and since >= K:
            forced[t], since = True, 0
    return nat, forced


@pytest.mark.parametrize("K", [1, 3, 5])
def test_redraw_marks_equal_the_schedules_own_backstop(toy_tokenizer, K):
    rng = random.Random(K)
    tables = vocab_tables(toy_tokenizer)
    V = len(toy_tokenizer)
    lengths = [rng.randint(0, 40) for _ in range(6)]
    tokens = torch.tensor([[rng.randrange(2, V) for _ in range(40)] for _ in lengths])
    mask = torch.tensor([[t < n for t in range(40)] for n in lengths])
    for schedule in (WordSchedule(max_gap=K), BoundarySchedule(max_gap=K)):
        natural_all = schedule.boundaries(tokens, tables)
        nat, forced = redraw_marks(schedule, tokens, mask, tables)
        for i, n in enumerate(lengths):
            ref_nat, ref_forced = reference_redraws(natural_all[i, :n].tolist(), n, K)
            assert nat[i, :n].tolist() == ref_nat and forced[i, :n].tolist() == ref_forced
            assert not (nat[i, n:].any() or forced[i, n:].any())


def test_token_schedule_redraws_before_every_token_and_never_by_force(toy_tokenizer):
    tokens, mask = batch(toy_tokenizer, solutions("jargon-compact", 3))
    stats = loophole_stats(TokenSchedule(), tokens, torch.ones_like(mask), mask, vocab_tables(toy_tokenizer))
    n = mask.sum().item()
    assert stats["backstop_share"] == 0.0
    assert stats["redraws_per_100"] == pytest.approx(100 * (n - mask.shape[0]) / n)


def test_longest_runs_and_spaceless_spans_equal_references(toy_tokenizer):
    rng = random.Random(0)
    tables = vocab_tables(toy_tokenizer)
    B, T = 7, 50
    senior = torch.tensor([[rng.random() < 0.8 for _ in range(T)] for _ in range(B)])
    lengths = [0, 1, 50, 23, 9, 31, 2]
    mask = torch.tensor([[t < n for t in range(T)] for n in lengths])
    word = tables.word_start
    ids = (
        [i for i in range(len(toy_tokenizer)) if not word[i]],
        [i for i in range(len(toy_tokenizer)) if word[i]],
    )
    tokens = torch.tensor([[rng.choice(ids[rng.random() < 0.1]) for _ in range(T)] for _ in range(B)])
    runs, spaceless = longest_runs(senior, mask), spaceless_mask(tokens, mask, tables)
    for i, n in enumerate(lengths):
        s = senior[i, :n].tolist()
        best = cur = 0
        for t in range(n):
            cur = cur + 1 if t and s[t] == s[t - 1] else 1
            best = max(best, cur)
        assert runs[i].item() == best
        inside = [not word[x] for x in tokens[i, :n].tolist()]
        expect, t = [False] * T, 0
        while t < n:
            u = t
            while u < n and inside[u]:
                u += 1
            if u - t >= SPACELESS_SPAN:
                expect[t:u] = [True] * (u - t)
            t = u + 1
        assert spaceless[i].tolist() == expect


# ---------------------------------------------------------------- spaceless notation against plain text


def test_spaceless_notation_raises_the_backstop_share_plain_text_does_not(toy_tokenizer):
    """The acceptance test of issue 19: under the paper's word schedule (K = 32) the compact jargon
    "<<47+18=65>>" is handed off only by the backstop: its backstop share is above 0.5; plain
    solutions stay below 0.05, and so does the compact jargon under the boundary schedule."""
    tables = vocab_tables(toy_tokenizer)
    word, boundary = Schedule.from_config("word", p=0.5, max_gap=32), Schedule.from_config("boundary")

    def stats(schedule, dialect):
        # three solutions per rollout, so rollouts (~100 tokens) are longer than the backstop
        texts = ["\n\n".join(solutions(dialect, 36)[i : i + 3]) for i in range(0, 36, 3)]
        tokens, mask = batch(toy_tokenizer, texts)
        return loophole_stats(schedule, tokens, torch.ones_like(mask), mask, tables)

    compact, plain = stats(word, "jargon-compact"), stats(word, "plain")
    assert compact["backstop_share"] > 0.5, compact
    assert plain["backstop_share"] < 0.05, plain
    assert stats(boundary, "jargon-compact")["backstop_share"] < 0.05
    assert compact["redraws_per_100"] < 5 < plain["redraws_per_100"]
    assert compact["spaceless_per_100"] > 50 and plain["spaceless_per_100"] == 0.0
    assert math.isnan(plain["senior_share_spaceless"])  # no spaceless span: undefined, not 0


def test_senior_share_spaceless_sees_who_writes_the_notation(toy_tokenizer):
    tables = vocab_tables(toy_tokenizer)
    tokens, mask = batch(
        toy_tokenizer,
        [a + "\n\n" + b for a, b in zip(solutions("jargon-compact", 6), solutions("plain", 6), strict=True)],
    )
    spaceless = spaceless_mask(tokens, mask, tables)
    senior_owns = loophole_stats(WordSchedule(), tokens, spaceless, mask, tables)
    junior_owns = loophole_stats(WordSchedule(), tokens, mask & ~spaceless, mask, tables)
    assert senior_owns["senior_share_spaceless"] == 1.0 and junior_owns["senior_share_spaceless"] == 0.0
    assert senior_owns["longest_run_p50"] >= SPACELESS_SPAN


def test_schedules_that_never_redraw_get_nan_redraw_statistics(toy_tokenizer):
    tokens, mask = batch(toy_tokenizer, solutions("plain", 2))
    counts, runs = loophole_counts(StepSchedule(), tokens, mask, mask, vocab_tables(toy_tokenizer))
    assert math.isnan(counts["redraws"]) and runs.tolist() == mask.sum(1).tolist()
    stats = loophole_stats(StepSchedule(), tokens, mask, mask, vocab_tables(toy_tokenizer))
    assert set(stats) == set(METRICS) and math.isnan(stats["backstop_share"])


def test_the_alarm_rule():
    first = {"backstop_share": 0.1, "longest_run_p95": 10.0}
    assert loophole_alarm(first, {"backstop_share": 0.29, "longest_run_p95": 20.0}) is None  # +0.19, +10 = 2x
    line = loophole_alarm(first, {"backstop_share": 0.31, "longest_run_p95": 12.0})
    assert line.startswith("loophole? backstop_share climbed from 0.1 at the start to 0.31")
    assert loophole_alarm(first, {"backstop_share": 0.1, "longest_run_p95": 21.0}).startswith(
        "loophole? longest_run_p95 climbed from 10"
    )
    low = {"backstop_share": 0.0, "longest_run_p95": 1.0}
    assert loophole_alarm(low, {"backstop_share": 0.15, "longest_run_p95": 8.9}) is None  # 2x but not +margin
    assert loophole_alarm(first, {"backstop_share": float("nan")}) is None

    # a loophole present from the start (numbers of the toy granularity study, issue 19)
    compact_word32 = {"senior_share_spaceless": 1.0, "spaceless_per_100": 28.4}
    assert loophole_alarm(compact_word32, compact_word32).startswith(
        "loophole? the senior wrote 100% of the tokens in spans with no boundary (28.4 per 100 tokens)"
    )
    assert (
        loophole_alarm({}, {"senior_share_spaceless": 1.0, "spaceless_per_100": 1.66}) is None
    )  # spaced, step 0
    assert (
        loophole_alarm({}, {"senior_share_spaceless": 0.91, "spaceless_per_100": 7.4}) is None
    )  # shared spans
    assert (
        loophole_alarm({}, {"senior_share_spaceless": float("nan"), "spaceless_per_100": 0.0}) is None
    )  # token


# ---------------------------------------------------------------- in a real tandem run's metrics.jsonl

TEAM_KEYS = [
    f"tandem/{who}/{stat}" for who in ("team_length", "senior_tokens") for stat in ("mean", "min", "max")
]
LOOPHOLE_KEYS = [f"tandem/loophole/{k}" for k in METRICS]


@pytest.fixture
def toy(tmp_path):

    return copy_toy_pair(tmp_path, 120)


def test_a_tandem_run_logs_team_lengths_and_the_loophole_statistics(toy, monkeypatch):
    """metrics.jsonl of `trlvr train` holds the team length (both authors: the true rollout length,
    recorded here from what the rollout function returned) beside TRL's senior-only
    completions/*_length, and the loophole statistics, at every logged step."""
    import json

    from trlvr.cli.main import main as cli
    from trlvr.training.rollout import TandemRollout

    lengths = []  # one list of completion lengths per rollout call
    original = TandemRollout.__call__

    def recording(self, prompts, trainer):
        out = original(self, prompts, trainer)
        lengths.append([len(c) for c in out["completion_ids"]])
        return out

    monkeypatch.setattr(TandemRollout, "__call__", recording)
    code = cli(
        toy_train_argv(
            toy,
            "--max_steps",
            "2",
            "--per_device_train_batch_size",
            "16",
            "--num_generations",
            "4",
            "--max_completion_length",
            "24",
            "--schedule",
            "boundary",
            "--use_cpu",
            "true",
        )
    )
    assert code == 0
    rows = [json.loads(line) for line in (toy / "run" / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in rows if "loss" in r]
    assert [r["step"] for r in steps] == [1, 2] and len(lengths) == 2  # one rollout call per step here
    for row, true in zip(steps, lengths, strict=True):
        for key in TEAM_KEYS + ["tandem/junior_tokens/mean"] + LOOPHOLE_KEYS:
            assert key in row, key
        assert row["tandem/team_length/mean"] == pytest.approx(sum(true) / len(true))
        assert row["tandem/team_length/min"] == min(true) and row["tandem/team_length/max"] == max(true)
        for stat in ("mean", "min", "max"):  # TRL's lengths count the senior's tokens only
            assert row["tandem/team_length/" + stat] >= row["tandem/senior_tokens/" + stat]
            assert row[f"completions/{stat}_length"] == pytest.approx(row["tandem/senior_tokens/" + stat])
        assert row["tandem/team_length/mean"] > row["tandem/senior_tokens/mean"]  # the junior wrote tokens
        assert row["tandem/senior_tokens/mean"] + row["tandem/junior_tokens/mean"] == pytest.approx(
            row["tandem/team_length/mean"]
        )
        assert 0.0 <= row["tandem/loophole/backstop_share"] <= 1.0
        assert 1 <= row["tandem/loophole/longest_run_p50"] <= row["tandem/loophole/longest_run_p95"] <= 24
        assert 0 < row["tandem/loophole/redraws_per_100"] <= 100


def test_the_progress_bar_warns_once_when_the_backstop_share_climbs(capsys):
    from types import SimpleNamespace

    from trlvr.training.console import ProgressBar

    bar = ProgressBar()
    bar.bar = SimpleNamespace(set_postfix=lambda *a, **k: None)  # the tqdm bar's one method used here
    rows = [
        {"tandem/loophole/backstop_share": 0.05, "tandem/loophole/longest_run_p95": 12.0},
        {"tandem/loophole/backstop_share": 0.2, "tandem/loophole/longest_run_p95": 14.0},
        {"tandem/loophole/backstop_share": 0.6, "tandem/loophole/longest_run_p95": 13.0},
        {"tandem/loophole/backstop_share": 0.9, "tandem/loophole/longest_run_p95": 40.0},
    ]
    history = []
    for step, row in enumerate(rows, start=1):
        history.append(row)
        bar.on_log(None, SimpleNamespace(log_history=history, global_step=step), None, logs=row)
    lines = [x for x in capsys.readouterr().err.splitlines() if x.strip()]
    assert len(lines) == 1, lines  # once, at step 3 (0.6 > 2 x 0.05 and > 0.05 + 0.2), not again at 4
    assert lines[0].startswith("[trlvr]")
    assert (
        "step 3: loophole? backstop_share climbed from 0.05 at the start to 0.6 (> 2x and > +0.2)" in lines[0]
    )


def test_the_progress_bar_warns_at_once_on_a_loophole_present_from_step_0(capsys):
    from types import SimpleNamespace

    from trlvr.training.console import ProgressBar

    bar = ProgressBar()
    bar.bar = SimpleNamespace(set_postfix=lambda *a, **k: None)
    row = {
        "tandem/loophole/backstop_share": 0.01,
        "tandem/loophole/longest_run_p95": 31.0,
        "tandem/loophole/senior_share_spaceless": 1.0,
        "tandem/loophole/spaceless_per_100": 28.4,
    }
    for step in (1, 2):
        bar.on_log(None, SimpleNamespace(log_history=[row] * step, global_step=step), None, logs=row)
    lines = [x for x in capsys.readouterr().err.splitlines() if x.strip()]
    assert (
        len(lines) == 1
        and "step 1: loophole? the senior wrote 100% of the tokens in spans with no boundary" in lines[0]
    )


# ---------------------------------------------------------------- in trlvr eval's results.json


def test_loophole_report_of_dose_rows(toy_tokenizer):
    from trlvr.eval.protocols import loophole_report

    def rows(protocol, dialect):
        out = []
        for text in ["\n\n".join(solutions(dialect, 12)[i : i + 3]) for i in range(0, 12, 3)]:
            ids = toy_tokenizer.encode(text, add_special_tokens=False)
            out.append({"protocol": protocol, "token_ids": ids, "authors": "1" * len(ids)})
        return out

    report = loophole_report(
        rows("dose-0.5", "jargon-compact") + rows("dose-0.25", "plain") + rows("solo", "jargon-compact"),
        toy_tokenizer,
        chunk=3,
    )
    assert sorted(report) == ["dose-0.25", "dose-0.5"]  # word-schedule protocols only
    assert (
        set(report["dose-0.5"]) == set(METRICS) | {"num_samples"} and report["dose-0.5"]["num_samples"] == 4
    )
    assert report["dose-0.5"]["backstop_share"] > 0.5 and report["dose-0.25"]["backstop_share"] < 0.05
    assert report["dose-0.25"]["senior_share_spaceless"] is None  # undefined is null in JSON, not NaN
    assert report["dose-0.5"]["senior_share_spaceless"] == 1.0


@pytest.mark.parametrize("arch", ["qwen3"], indirect=True)
def test_trlvr_eval_reports_the_loophole_statistics_of_dose_protocols(models, tokenizer, tmp_path):
    from helpers import evaluate_models, last_word, parity_reward, toy_problems

    from trlvr.data import read_jsonl
    from trlvr.eval.protocols import schedule_for

    senior, junior = models
    res = evaluate_models(
        senior,
        junior,
        tokenizer,
        {"alpha": toy_problems(3, "a")},
        tmp_path / "run",
        suite=["solo", "dose"],
        n=2,
        ks=[1],
        seed=3,
        max_new_tokens=12,
        batch_size=6,
        progress=False,
        score_fn=parity_reward,
        extract_fn=last_word,
        num_resamples=50,
    )
    assert sorted(res["loophole"]) == ["dose-0.25", "dose-0.5", "dose-0.75"]
    samples = [r for r in read_jsonl(tmp_path / "run" / "samples.jsonl") if r["protocol"] == "dose-0.5"]
    T = max(len(r["token_ids"]) for r in samples)
    tokens = torch.zeros(len(samples), T, dtype=torch.long)
    senior_authored, mask = (
        torch.zeros(len(samples), T, dtype=torch.bool),
        torch.zeros(len(samples), T, dtype=torch.bool),
    )
    for i, r in enumerate(samples):
        n = len(r["token_ids"])
        tokens[i, :n] = torch.tensor(r["token_ids"])
        senior_authored[i, :n] = torch.tensor([a == "1" for a in r["authors"]])
        mask[i, :n] = True
    expect = loophole_stats(schedule_for("dose-0.5"), tokens, senior_authored, mask, vocab_tables(tokenizer))
    got = res["loophole"]["dose-0.5"]
    assert got["num_samples"] == 6
    for key, value in expect.items():
        assert (got[key] is None) if math.isnan(value) else got[key] == pytest.approx(value), key

"""The word schedule's strict-toggle handoff (`handoff: toggle`), the authors' rule before 2026-05-05.

Reference: CSSLab/Tandem-RLVR, vllm_source/vllm/v1/sample/tandem_sampler.py, `_word_select` (lines 84-108
of the version at commit 64dfae7, whose line 86 says the per-boundary Bernoulli(p) draw replaced a strict
toggle). `authors_loop` below is that loop for one request, with the redraw at a boundary (line 104)
replaced by the toggle, and the first author given instead of drawn (line 96). The vectors were written
by stepping through that loop by hand."""

from __future__ import annotations

import random

import pytest
import torch

from trlvr.config import TandemConfig
from trlvr.engine.schedules import Schedule, VocabTables, WordSchedule
from trlvr.errors import UserError

V = 10
BOUNDARY = {1, 2}  # word-start ids


def _tables() -> VocabTables:
    word_start = torch.zeros(V, dtype=torch.bool)
    word_start[list(BOUNDARY)] = True
    off = torch.zeros(V, dtype=torch.bool)
    return VocabTables(word_start, off, off.clone(), off.clone(), off.clone(), off.clone(), off.clone())


def authors_loop(token_ids: list[int], boundary_ids: set[int], max_gap: int, is_senior: bool) -> list[bool]:
    """The authors' `_word_select` loop (lines 101-105) with the toggle: the author of each token."""
    out, since_last_switch = [], 0
    for tid in token_ids:
        out.append(is_senior)  # use_primary for this position, from the tokens before it
        since_last_switch += 1
        if tid in boundary_ids or since_last_switch >= max_gap:
            is_senior = not is_senior  # line 104, before 2026-05-05
            since_last_switch = 0
    return out


def engine_authors(schedule: Schedule, tokens: list[list[int]]) -> list[list[bool]]:
    tables, gen = _tables(), torch.Generator().manual_seed(0)
    batch = torch.tensor(tokens)
    state = schedule.start(batch.shape[0], tables, gen)
    out = []
    for t in range(batch.shape[1]):
        out.append(state.author.tolist())
        state = schedule.advance(state, batch[:, t], tables, gen)
    return [list(row) for row in zip(*out, strict=True)]


# (tokens, max_gap, first author senior?, authors) - from the loop above, by hand
VECTORS = [
    ([5, 1, 5, 5, 2, 5], 32, True, [1, 1, 0, 0, 0, 1]),  # a handoff right after each word start
    ([5, 1, 5, 5, 2, 5], 32, False, [0, 0, 1, 1, 1, 0]),
    ([5, 5, 5, 5, 5, 5, 5, 5], 3, True, [1, 1, 1, 0, 0, 0, 1, 1]),  # backstop: every 3 tokens without one
    ([5, 5, 1, 5, 5, 5, 5, 5], 3, True, [1, 1, 1, 0, 0, 0, 1, 1]),  # a word start resets the gap
    ([1, 1, 1, 2, 5], 32, True, [1, 0, 1, 0, 1]),  # consecutive word starts: strict alternation
    ([5, 5, 1, 5], 1, True, [1, 0, 1, 0]),  # max_gap 1: a handoff after every token
]


@pytest.mark.parametrize(("tokens", "max_gap", "senior_first", "want"), VECTORS)
def test_toggle_matches_the_authors_vectors(tokens, max_gap, senior_first, want):
    assert authors_loop(tokens, BOUNDARY, max_gap, senior_first) == [bool(a) for a in want]
    schedule = WordSchedule(p=1.0 if senior_first else 0.0, max_gap=max_gap, handoff="toggle")
    assert engine_authors(schedule, [tokens]) == [[bool(a) for a in want]]


def test_toggle_matches_the_loop_on_random_batches():
    rng = random.Random(3)
    for max_gap in (1, 2, 5, 32):
        tokens = [
            [rng.choice([1, 2, 3, 5, 7]) if rng.random() < 0.3 else 5 for _ in range(40)] for _ in range(6)
        ]
        for senior_first in (True, False):
            got = engine_authors(
                WordSchedule(p=float(senior_first), max_gap=max_gap, handoff="toggle"), tokens
            )
            assert got == [authors_loop(row, BOUNDARY, max_gap, senior_first) for row in tokens]


def test_bernoulli_can_keep_the_author_toggle_never_does():
    # at p = 0.5 a redraw keeps the author about half the time; the toggle never keeps it
    tokens = [[1] * 30 for _ in range(64)]
    for handoff, kept_share in (("bernoulli", 0.5), ("toggle", 0.0)):
        a = torch.tensor(engine_authors(WordSchedule(p=0.5, handoff=handoff), tokens))
        kept = (a[:, 1:] == a[:, :-1]).float().mean().item()
        assert kept == pytest.approx(kept_share, abs=0.08), handoff


def test_toggle_writers_and_repr():
    assert WordSchedule(p=1.0, handoff="toggle").writers == {"senior", "junior"}
    assert WordSchedule(p=1.0).writers == {"senior"}
    assert repr(WordSchedule()) == "WordSchedule(p=0.5, max_gap=32)"  # the paper's rule prints as before
    assert repr(WordSchedule(handoff="toggle")) == "WordSchedule(p=0.5, max_gap=32, handoff='toggle')"
    with pytest.raises(ValueError, match=r"handoff must be one of \('bernoulli', 'toggle'\)"):
        WordSchedule(handoff="flip")


def test_config_handoff_reaches_the_schedule():
    name, kwargs = TandemConfig(handoff="toggle").schedule_kwargs()
    assert Schedule.from_config(name, **kwargs) == WordSchedule(p=0.5, max_gap=32, handoff="toggle")
    assert TandemConfig(schedule="token", handoff="toggle").schedule_kwargs() == ("token", {"p": 0.5})
    with pytest.raises(
        UserError, match=r"^handoff: must be one of \('bernoulli', 'toggle'\) \(got 'flip'\)$"
    ):
        TandemConfig(handoff="flip")

"""trlvr.vllm.core (no vLLM): the author fold equals the HF engine's authors, and the per-slot state
the logits processor keeps equals the pure fold under any sequence of engine slot events."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from trlvr.engine import (
    SCHEDULES,
    BoundarySchedule,
    ChunkSchedule,
    LockstepPair,
    Sampling,
    SoloSchedule,
    StepSchedule,
    TokenSchedule,
    WordSchedule,
)
from trlvr.engine.sampling import RowStreams
from trlvr.toy.world import ASSETS_DIR, load_world
from trlvr.vllm.core import (
    DRAW_WINDOW,
    TandemRows,
    authors_from_tokens,
    engine_keys,
    fold,
    pad_rows,
    parse_tandem_args,
    tandem_args,
)

# every registered schedule, with settings that make it switch, stop and back-stop within a few tokens
EVERY_SCHEDULE = [
    WordSchedule(p=0.5, max_gap=4),
    BoundarySchedule(p=0.4, max_gap=6),
    TokenSchedule(p=0.3),
    StepSchedule(first_author="junior", max_rounds=1),
    ChunkSchedule(chunk_size=3, first_author="senior"),
    SoloSchedule("senior"),
    SoloSchedule("junior"),
]


def test_every_registered_schedule_is_covered():
    assert {s.name for s in EVERY_SCHEDULE} == set(SCHEDULES)


@pytest.fixture(scope="module")
def toy():
    senior, junior, tokenizer = load_world(ASSETS_DIR)
    return LockstepPair(senior, junior, tokenizer)


def _prompts(tokenizer):
    texts = ["Q: 3 + 4 = ?\n\n", "Q: 12 - 5 = ?\n\n", "Q: 7 * 2 = ?\n\n", "Q: 9 + 9 = ?\n\n"]
    return [tokenizer.encode(t) for t in texts] * 3


@pytest.mark.parametrize("schedule", EVERY_SCHEDULE, ids=repr)
def test_fold_equals_the_hf_engines_authors_on_the_toy_pair(toy, schedule):
    prompts = _prompts(toy.tokenizer)
    keys = [101 + 7 * i for i in range(len(prompts))]
    out = toy.generate(prompts, schedule, Sampling(40, temperature=1.0, seed=3), row_keys=keys)
    folded = authors_from_tokens(out.completion_ids, keys, schedule, toy.tables, seed=3)
    for i, ids in enumerate(out.completion_ids):
        assert folded.authors[i, : len(ids)].long().tolist() == out.authors[i]
        stopped = out.finish_reasons[i] == "rounds"
        assert (int(folded.stop_at[i]) == len(ids)) == stopped
    if isinstance(schedule, StepSchedule):
        assert "rounds" in out.finish_reasons  # the round cap was exercised
    if schedule.writers == {"senior", "junior"}:
        assert 0 < out.senior_authored[out.completion_mask].float().mean() < 1


def test_fold_ignores_padding_and_states_are_each_rows_own():
    tables = _tables()
    sched = WordSchedule(p=0.5, max_gap=3)
    rows = [[5, 6, 7, 8, 9], [5, 6], []]
    keys = torch.tensor(engine_keys([1, 2, 3], seed=0))
    tokens, lengths = pad_rows(rows, pad=99)
    a = fold(sched, tables, keys, tokens, lengths)
    for i, r in enumerate(rows):  # each row alone, unpadded, gives the same authors and final state
        t, n = pad_rows([r])
        b = fold(sched, tables, keys[i : i + 1], t, n)
        assert a.authors[i, : len(r)].tolist() == b.authors[0, : len(r)].tolist()
        assert all(torch.equal(x[i], y[0]) for x, y in zip(a.state, b.state, strict=True))


def _tables():
    from transformers import AutoTokenizer

    from trlvr.engine import vocab_tables

    return vocab_tables(AutoTokenizer.from_pretrained(ASSETS_DIR / "senior"))


def test_tandem_args_round_trip_and_errors():
    sched = BoundarySchedule(p=0.25, max_gap=7)
    args = tandem_args(2**62 + 5, sched, force_id=0)
    assert parse_tandem_args(args) == (2**62 + 5, sched, 0)
    with pytest.raises(ValueError, match=r"needs extra_args\['tandem'\]"):
        parse_tandem_args(None)
    with pytest.raises(ValueError, match="lacks settings, eos"):
        parse_tandem_args({"tandem": {"key": 1, "schedule": "word"}})
    with pytest.raises(ValueError, match="key must be an int"):
        parse_tandem_args({"tandem": {"key": -1, "schedule": "word", "settings": {}, "eos": 0}})
    with pytest.raises(ValueError, match="unknown setting 'gap'"):
        parse_tandem_args({"tandem": {"key": 1, "schedule": "word", "settings": {"gap": 2}, "eos": 0}})
    with pytest.raises(ValueError, match="unknown schedule 'words'"):
        parse_tandem_args({"tandem": {"key": 1, "schedule": "words", "settings": {}, "eos": 0}})


# The slot state under engine events. A simulated engine: requests with fixed token streams enter and
# leave slots; every step each running request gains one token; V1 moves/swaps slots and re-adds a
# pre-empted request with a new list; Model Runner V2 shows rows that gained no token (prefill chunks).

SCHEDS = [WordSchedule(p=0.5, max_gap=3), StepSchedule(max_rounds=2), TokenSchedule(p=0.6), ChunkSchedule(2)]
CAP = 6


def _expected(sched, key, tokens):
    t, n = pad_rows([tokens])
    return fold(sched, _TABLES, torch.tensor([key]), t, n).state


_TABLES = None


def _check(rows: TandemRows, live: dict):
    for slot, (sched, key, stream, n) in live.items():
        want = _expected(sched, key, stream[:n])
        assert bool(rows.authors([slot])[0]) == bool(want.author[0]), (slot, n)
        assert bool(rows.stops([slot])[0]) == bool(want.stop[0])
        assert int(rows.consumed[slot]) == n


events = st.lists(
    st.tuples(
        st.sampled_from(["add", "remove", "move", "swap", "preempt", "step", "step"]),
        st.integers(0, CAP - 1),
        st.integers(0, CAP - 1),
        st.integers(0, 10**6),
    ),
    min_size=1,
    max_size=40,
)


@pytest.mark.parametrize("window", [None, 3, DRAW_WINDOW], ids=["hashed-draws", "window-3", "window-default"])
@pytest.mark.parametrize("runner", ["v1", "mrv2"])
@settings(max_examples=40, deadline=None)
@given(evs=events)
def test_slot_state_equals_the_pure_fold_under_engine_events(runner, window, evs):
    global _TABLES
    _TABLES = _TABLES or _tables()
    rows = TandemRows(CAP, _TABLES, window=window)
    live: dict[int, list] = {}  # slot -> [schedule, key, token stream, tokens emitted]
    rng = np.random.default_rng(len(evs))
    for kind, a, b, x in evs:
        if kind == "add" and a not in live:
            sched, stream = SCHEDS[x % len(SCHEDS)], rng.integers(0, 215, 30).tolist()
            live[a] = [sched, x + 1, stream, 0]
            rows.add([a], [x + 1], [sched], [0])
        elif kind == "remove" and a in live:
            del live[a]
            rows.clear([a])
        elif kind == "move" and a in live and b not in live and runner == "v1":
            live[b] = live.pop(a)
            rows.move(a, b)
        elif kind == "swap" and a != b and runner == "v1":
            live[a], live[b] = live.get(b), live.get(a)
            live = {k: v for k, v in live.items() if v is not None}
            rows.swap(a, b)
        elif kind == "preempt" and a in live:  # re-added with all its tokens so far
            sched, key, stream, n = live[a]
            rows.add([a], [key], [sched], [0])
            rows.replay(a, list(stream[:n]))
        elif kind == "step" and live:
            slots = np.array(sorted(live))
            n = np.array([live[s][3] for s in slots])
            new = torch.tensor([live[s][2][live[s][3]] for s in slots])
            if runner == "v1":
                rows.advance(slots, new)
                fresh = np.ones(len(slots), dtype=bool)
            else:  # some rows read no new output token this step (a prefill chunk): masked out
                fresh = (x >> np.arange(len(slots))) % 3 != 0
                rows.advance(slots, new, torch.from_numpy(fresh))
            for s, f in zip(slots, fresh, strict=True):
                live[s][3] += int(f)
            assert all(live[s][3] == m + int(f) for s, m, f in zip(slots, n, fresh, strict=True))
            live = {k: v for k, v in live.items() if v[3] < 29}
            for s in set(slots.tolist()) - set(live):
                rows.clear([s])
        _check(rows, live)
    if runner == "v1":
        for slot, (_, _, _, n) in live.items():
            assert rows.seen[slot] == n


def test_the_draw_window_gives_the_hash_bits_at_every_position():
    """Each row's first author draw at each position is the hash's (`RowStreams.schedule_draws`), bit for
    bit, across refills of a short window, rows that advance or not (Model Runner V2's mask), a replay
    and a move; and the state is sized by the window, not by how far a row goes."""
    rows = TandemRows(5, _tables(), window=4)
    keys = torch.tensor(engine_keys([11, 12, 13, 14], seed=3) + [0])
    rows.add([0, 1, 2, 3], keys[:4].tolist(), [WordSchedule()] * 4, [0] * 4)
    rng = np.random.default_rng(0)
    seen_refill = 0
    for step in range(60):
        slots = np.sort(rng.choice(4, size=int(rng.integers(1, 5)), replace=False))
        if step == 20:
            rows.replay(2, rng.integers(0, 215, 7).tolist())  # consumed jumps to 7
        if step == 30:
            rows.move(3, 4)
            keys[4] = keys[3]
        slots = np.where(slots == 3, 4, slots) if step >= 30 else slots
        idx = torch.from_numpy(slots)
        pos = rows.consumed[idx] + 1
        base = rows.base.clone()
        got = rows._draws(slots, idx, pos).uniform(len(slots))
        want = RowStreams(keys[idx]).schedule_draws(pos).uniform(len(slots))
        assert torch.equal(got, want), step
        seen_refill += int((rows.base != base).any())
        moved = torch.from_numpy(rng.random(len(slots)) < 0.8)
        rows.consumed[idx] += moved.long()
    assert int(rows.consumed.max()) > 4 * rows.window and seen_refill > 5  # many windows were used
    assert rows.draws.shape == (5, 4)


def test_host_arrays_go_to_the_device_through_pinned_memory(monkeypatch):
    """With `pin` (the default on CUDA), slot indices and tokens are staged in pinned memory (PyTorch's
    caching host allocator keeps each block until its copy is done), then copied without blocking;
    on a CPU device nothing is copied. ("meta" stands in for a GPU here.)"""
    pinned = []

    def pin_memory(self):
        pinned.append(tuple(self.shape))
        return self

    monkeypatch.setattr(torch.Tensor, "pin_memory", pin_memory)
    rows = TandemRows(4, _tables(), device="meta", pin=True)
    out = rows.h2d(np.arange(3))
    assert out.device.type == "meta" and pinned == [(3,)]
    assert not TandemRows(4, _tables(), device="meta").pin  # pinned by default only on CUDA
    host = np.arange(3)
    assert TandemRows(4, _tables(), pin=True).h2d(host).data_ptr() == host.ctypes.data and pinned == [(3,)]

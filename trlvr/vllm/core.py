"""The author fold of the vLLM backend, in plain torch: no vLLM import, so it runs in the main suite.

An author is a pure function of (key, schedule, token history), the fold the HF engine runs
(`trlvr.engine.generator`): `schedule.start` with every row's draws at position 0, then after output
token t `schedule.advance` with the draws at position t + 1, where a row's draws are
`RowStreams(keys).schedule_draws(position)` and its key is `row_key(seed, row key)`. So pre-emption,
slot reuse and batch-mates cannot change an author, and whoever holds the tokens can recompute them.

Two faces of that one fold:
- `fold` / `authors_from_tokens`: over whole completions, all rows at the same position (the pair's
  authors, and the replay of a request vLLM re-adds after pre-empting it);
- `TandemRows`: the fold kept per engine slot as tensors, one token at a time, every row at its own
  position, with slot events (add, clear, move, swap) and one batched `advance` per schedule in the
  batch (the logits processor's state).
"""

from __future__ import annotations

import dataclasses
import hashlib
from dataclasses import dataclass

import numpy as np
import torch

from trlvr.engine.sampling import AUTHOR_STREAM, RowStreams, ScheduleDraws, hash_uniform, row_key
from trlvr.engine.schedules import Schedule, ScheduleState, StepSchedule, VocabTables

PASSTHROUGH = -1  # a slot's schedule index when the slot is empty or not a tandem request
ARG = "tandem"  # the key of a request's tandem arguments in vLLM's SamplingParams.extra_args


def tandem_args(key: int, schedule: Schedule, force_id: int) -> dict:
    """A request's `extra_args`: its 63-bit key, its schedule (name and settings) and the EOS id written
    when the schedule ends the row (the step schedule's round cap). Plain JSON values."""
    return {ARG: {"key": int(key), "schedule": schedule.name, "settings": dataclasses.asdict(schedule),
                  "eos": int(force_id)}}  # fmt: skip


def parse_tandem_args(extra_args) -> tuple[int, Schedule, int]:
    """(key, schedule, force id) from a request's extra_args; a ValueError naming what is wrong."""
    args = (extra_args or {}).get(ARG) if isinstance(extra_args, dict | type(None)) else None
    if not isinstance(args, dict):
        raise ValueError(f"a tandem request needs extra_args[{ARG!r}] = {{'key', 'schedule', 'settings', 'eos'}} "
                         f"(trlvr.vllm.core.tandem_args), got extra_args={extra_args!r}")  # fmt: skip
    missing = [k for k in ("key", "schedule", "settings", "eos") if k not in args]
    if missing:
        raise ValueError(f"extra_args[{ARG!r}] lacks {', '.join(missing)}")
    key, eos = args["key"], args["eos"]
    if not (isinstance(key, int) and 0 <= key < 1 << 63) or not (isinstance(eos, int) and eos >= 0):
        raise ValueError(f"extra_args[{ARG!r}]: key must be an int in [0, 2^63) and eos an id >= 0, "
                         f"got key={key!r}, eos={eos!r}")  # fmt: skip
    if not isinstance(args["settings"], dict):
        raise ValueError(f"extra_args[{ARG!r}]['settings'] must be a dict, got {args['settings']!r}")
    return key, Schedule.from_config(args["schedule"], **args["settings"]), eos


def engine_keys(row_keys: list[int], seed: int) -> list[int]:
    """The 63-bit key of each row, as the HF engine derives it from (seed, row key)."""
    return [row_key(int(seed), int(k)) for k in row_keys]


def tables_digest(tables: VocabTables) -> str:
    """A short fingerprint of VocabTables: the pair and the engine's processor must fold with the same."""
    h = hashlib.sha256()
    for t in tables:
        h.update(b"-" if t is None else t.to("cpu", torch.uint8).numpy().tobytes())
    return h.hexdigest()[:16]


def blank_state(n: int, device=None) -> ScheduleState:
    """n rows of all-zero schedule state (author False: overwritten by `start` before use)."""
    zeros = torch.zeros(n, dtype=torch.long, device=device)
    false = torch.zeros(n, dtype=torch.bool, device=device)
    return ScheduleState(false, zeros, zeros.clone(), false.clone(), false.clone(), false.clone())


def _select(mask: torch.Tensor, new: ScheduleState, old: ScheduleState) -> ScheduleState:
    return ScheduleState(*(torch.where(mask, a, b) for a, b in zip(new, old, strict=True)))


class TableDraws(ScheduleDraws):
    """`ScheduleDraws` for rows each at its own position whose first draw there is read from a table of
    that row's AUTHOR_STREAM uniforms by position (`TandemRows`' per-slot table: one gather per token
    instead of a hash); later draws at the same position hash as usual. The same bits either way."""

    def __init__(self, streams: RowStreams, position: torch.Tensor, first: torch.Tensor):
        super().__init__(streams, position)
        self.first = first  # (b,) the rows' uniforms at `position` for the first call

    def uniform(self, n: int) -> torch.Tensor:
        if self.calls == 0:
            if n != self.first.shape[0]:
                raise ValueError(f"a schedule drew {n} uniforms for {self.first.shape[0]} rows")
            self.calls += 1
            return self.first
        return super().uniform(n)


@dataclass
class Folded:
    """What `fold` returns for B rows of T tokens (tensors on the tokens' device)."""

    authors: torch.Tensor  # (B, T) bool: True = the senior wrote token t
    stop_at: torch.Tensor  # (B,) long: tokens after which the schedule ended the row (-1: never)
    state: ScheduleState  # each row's state after its own `lengths[i]` tokens (the next author included)


def fold(schedule: Schedule, tables: VocabTables, keys: torch.Tensor, tokens: torch.Tensor,
         lengths: torch.Tensor) -> Folded:  # fmt: skip
    """The fold over right-padded completions: tokens (B, T) long, lengths (B,), keys (B,) 63-bit keys.

    One batched `advance` per position, as the HF engine; padding past a row's length is never read
    into its stop or final state.
    """
    B, T = tokens.shape
    streams = RowStreams(keys.to(tokens.device))
    state = schedule.start(B, tables, streams.schedule_draws(0))
    authors = torch.zeros(B, T, dtype=torch.bool, device=tokens.device)
    stop_at = torch.full((B,), -1, dtype=torch.long, device=tokens.device)
    final = state
    for t in range(T):
        authors[:, t] = state.author
        state = schedule.advance(state, tokens[:, t], tables, streams.schedule_draws(t + 1))
        live = lengths > t
        stop_at = torch.where(state.stop & live & (stop_at < 0), t + 1, stop_at)
        final = _select(lengths == t + 1, state, final)
    return Folded(authors, stop_at, final)


def pad_rows(rows: list[list[int]], pad: int = 0, device=None) -> tuple[torch.Tensor, torch.Tensor]:
    """(B, T) long right-padded with `pad`, and the (B,) lengths (T >= 1 so a fold always has a column)."""
    T = max([len(r) for r in rows] + [1])
    out = torch.full((len(rows), T), pad, dtype=torch.long)
    for i, r in enumerate(rows):
        out[i, : len(r)] = torch.tensor(r, dtype=torch.long)
    lengths = torch.tensor([len(r) for r in rows], dtype=torch.long)
    return out.to(device), lengths.to(device)


def authors_from_tokens(completions: list[list[int]], keys: list[int], schedule: Schedule,
                        tables: VocabTables, seed: int) -> Folded:  # fmt: skip
    """The authors of whole completions under `schedule`: what the HF engine, and the vLLM processor,
    chose while writing them. keys: each row's key as given to `generate` (combined with `seed` as
    the engine does). `Folded.authors[i, :len(completions[i])]` are row i's authors."""
    if len(keys) != len(completions):
        raise ValueError(f"{len(keys)} keys for {len(completions)} completions")
    tokens, lengths = pad_rows(completions)
    keys_t = torch.tensor(engine_keys(keys, seed), dtype=torch.long)
    return fold(schedule, tables.to("cpu"), keys_t, tokens, lengths)


class TandemRows:
    """Per-slot tandem state of an engine batch: key, schedule, output tokens folded in, schedule state.

    Slots are the engine's batch indices (V1) or request slots (Model Runner V2). Slot events are host
    calls, once per request event; `advance` is the per-token call: one batched `schedule.advance`
    per distinct schedule among the rows (usually one), each row at its own position. Tensors live on
    `device`; `group` (the schedule index of each slot) is on the host.
    """

    def __init__(self, capacity: int, tables: VocabTables, device=None, horizon: int | None = None):
        """horizon: positions a request can reach (the engine's max_model_len): each slot then keeps a
        (horizon,) table of its first draw per position, computed once when the request is added."""
        self.device = torch.device(device or "cpu")
        self.tables = tables.to(self.device)
        self.capacity = capacity
        self.keys = torch.zeros(capacity, dtype=torch.long, device=self.device)
        self.consumed = torch.zeros(capacity, dtype=torch.long, device=self.device)  # output tokens folded in
        self.force = torch.zeros(capacity, dtype=torch.long, device=self.device)  # EOS id forced when stopped
        self.state = blank_state(capacity, self.device)
        self.horizon = horizon
        self.draws = None if horizon is None else torch.zeros(capacity, horizon, device=self.device)
        self.group = np.full(capacity, PASSTHROUGH, dtype=np.int64)
        self.seen = np.zeros(capacity, dtype=np.int64)  # host copy of `consumed` where `advance` gets no mask
        self.schedules: list[Schedule] = []
        self._index: dict[Schedule, int] = {}

    def _schedule_id(self, schedule: Schedule) -> int:
        if schedule not in self._index:
            self._index[schedule] = len(self.schedules)
            self.schedules.append(schedule)
        return self._index[schedule]

    def _idx(self, slots) -> torch.Tensor:
        return torch.as_tensor(np.asarray(slots, dtype=np.int64)).to(self.device, non_blocking=True)

    def _write(self, idx: torch.Tensor, state: ScheduleState) -> None:
        for field, value in zip(self.state, state, strict=True):
            field[idx] = value

    def _read(self, idx: torch.Tensor) -> ScheduleState:
        return ScheduleState(*(f[idx] for f in self.state))

    def add(self, slots: list[int], keys: list[int], schedules: list[Schedule], force_ids: list[int]) -> None:
        """Start requests in `slots` (their first author drawn at position 0); a slot's old state is gone."""
        gids = np.array([self._schedule_id(s) for s in schedules], dtype=np.int64)
        slots_np = np.asarray(slots, dtype=np.int64)
        self.group[slots_np] = gids
        idx = self._idx(slots_np)
        self.keys[idx] = torch.tensor(keys, dtype=torch.long, device=self.device)
        self.force[idx] = torch.tensor(force_ids, dtype=torch.long, device=self.device)
        self.consumed[idx] = 0
        self.seen[slots_np] = 0
        if self.draws is not None:  # every position's first author draw of these rows, in one hash call
            streams = RowStreams(self.keys[idx])
            pos = torch.arange(self.horizon, device=self.device)
            lo, hi = (x[:, None].expand(-1, self.horizon).reshape(-1) for x in (streams.lo, streams.hi))
            u = hash_uniform(lo, hi, pos.repeat(idx.numel()), AUTHOR_STREAM)
            self.draws[idx] = u.view(idx.numel(), self.horizon)
        for gid in np.unique(gids):
            sub = self._idx(slots_np[gids == gid])
            draws = RowStreams(self.keys[sub]).schedule_draws(0)
            self._write(sub, self.schedules[gid].start(sub.numel(), self.tables, draws))

    def clear(self, slots) -> None:
        self.group[np.asarray(slots, dtype=np.int64)] = PASSTHROUGH

    def move(self, src: int, dst: int) -> None:
        """The request in `src` now lives in `dst` (V1's one-way move); `src` becomes empty."""
        for t in (self.keys, self.consumed, self.force, *self.state, *self._tables()):
            t[dst] = t[src]
        self.group[dst], self.group[src] = self.group[src], PASSTHROUGH
        self.seen[dst] = self.seen[src]

    def swap(self, a: int, b: int) -> None:
        ab, ba = self._idx([a, b]), self._idx([b, a])
        for t in (self.keys, self.consumed, self.force, *self.state, *self._tables()):
            t[ab] = t[ba].clone()
        self.group[[a, b]] = self.group[[b, a]]
        self.seen[[a, b]] = self.seen[[b, a]]

    def _tables(self) -> tuple:
        return () if self.draws is None else (self.draws,)

    def _draws(self, idx: torch.Tensor, pos: torch.Tensor) -> ScheduleDraws:
        streams = RowStreams(self.keys[idx])
        if self.draws is None:
            return streams.schedule_draws(pos)
        return TableDraws(streams, pos, self.draws[idx, pos])

    def may_stop(self, slots: np.ndarray) -> bool:
        """Whether a schedule that can end a row (the step schedule's round cap) runs in any of `slots`."""
        return any(isinstance(self.schedules[gid], StepSchedule) for gid, _ in self.groups(slots))

    def groups(self, slots: np.ndarray):
        """(schedule index, row positions in `slots` or None for all) for each tandem schedule present."""
        g = self.group[slots]
        if g.size and (g == g[0]).all():
            if g[0] != PASSTHROUGH:
                yield int(g[0]), None
            return
        for gid in np.unique(g):
            if gid != PASSTHROUGH:
                yield int(gid), np.nonzero(g == gid)[0]

    def advance(self, slots: np.ndarray, tokens: torch.Tensor, mask: torch.Tensor | None = None) -> None:
        """Fold one more output token into each of `slots` (tokens (b,) on the device), at each row's own
        position `consumed + 1`; rows where `mask` (b,) is False are left as they are (the host copy
        `seen` is then not kept: Model Runner V2 decides on the device)."""
        for gid, rows in self.groups(slots):
            here = slots if rows is None else slots[rows]
            idx = self._idx(here)
            tok = tokens if rows is None else tokens[self._idx(rows)]
            old, pos = self._read(idx), self.consumed[idx] + 1
            new = self.schedules[gid].advance(old, tok, self.tables, self._draws(idx, pos))
            if mask is not None:
                m = mask if rows is None else mask[self._idx(rows)]
                new, pos = _select(m, new, old), torch.where(m, pos, pos - 1)
            else:
                self.seen[here] += 1
            self._write(idx, new)
            self.consumed[idx] = pos

    def replay(self, slot: int, tokens: list[int]) -> None:
        """Restart `slot` and fold all of `tokens` (a request re-added after pre-emption): the rare path."""
        gid = int(self.group[slot])
        if gid == PASSTHROUGH:
            return
        t, n = pad_rows([tokens], device=self.device)
        done = fold(self.schedules[gid], self.tables, self.keys[slot : slot + 1], t, n)
        self._write(self._idx([slot]), done.state)
        self.consumed[slot] = len(tokens)
        self.seen[slot] = len(tokens)

    def authors(self, slots) -> torch.Tensor:
        """(b,) bool: True where the senior writes the next token (passthrough slots: the senior)."""
        idx = self._idx(slots)
        tandem = torch.as_tensor(self.group[np.asarray(slots)] != PASSTHROUGH).to(self.device, non_blocking=True)
        return self.state.author[idx] | ~tandem

    def stops(self, slots) -> torch.Tensor:
        """(b,) bool: the schedule has ended these rows (the step schedule's round cap)."""
        idx = self._idx(slots)
        tandem = torch.as_tensor(self.group[np.asarray(slots)] != PASSTHROUGH).to(self.device, non_blocking=True)
        return self.state.stop[idx] & tandem

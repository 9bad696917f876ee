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

`TandemRows` lives beside vLLM, outside the memory vLLM profiled for itself, so its memory does not
grow with the context length: per slot a few scalars and a window of DRAW_WINDOW draws.
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
DRAW_WINDOW = 64  # positions of first author draws a slot keeps at a time (`TandemRows`)


def is_tandem(extra_args) -> bool:
    """Whether a request is a tandem one (its extra_args carry ARG): the others (vLLM's warm-up and
    dummy requests, a plain request) pass through the processor untouched."""
    return isinstance(extra_args, dict) and ARG in extra_args


def tandem_args(key: int, schedule: Schedule, force_id: int) -> dict:
    """A request's `extra_args`: its 63-bit key, its schedule (name and settings) and the EOS id written
    when the schedule ends the row (the step schedule's round cap). Plain JSON values."""
    return {
        ARG: {
            "key": int(key),
            "schedule": schedule.name,
            "settings": dataclasses.asdict(schedule),
            "eos": int(force_id),
        }
    }


def parse_tandem_args(extra_args) -> tuple[int, Schedule, int]:
    """(key, schedule, force id) from a request's extra_args; a ValueError naming what is wrong."""
    args = (extra_args or {}).get(ARG) if isinstance(extra_args, dict | type(None)) else None
    if not isinstance(args, dict):
        raise ValueError(
            f"a tandem request needs extra_args[{ARG!r}] = {{'key', 'schedule', 'settings', 'eos'}} "
            f"(trlvr.vllm.core.tandem_args), got extra_args={extra_args!r}"
        )
    missing = [k for k in ("key", "schedule", "settings", "eos") if k not in args]
    if missing:
        raise ValueError(f"extra_args[{ARG!r}] lacks {', '.join(missing)}")
    key, eos = args["key"], args["eos"]
    if not (isinstance(key, int) and 0 <= key < 1 << 63) or not (isinstance(eos, int) and eos >= 0):
        raise ValueError(
            f"extra_args[{ARG!r}]: key must be an int in [0, 2^63) and eos an id >= 0, "
            f"got key={key!r}, eos={eos!r}"
        )
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
    """`ScheduleDraws` for rows each at its own position whose first draw there is read from a table
    (`TandemRows`' per-slot window of AUTHOR_STREAM uniforms: one gather per token instead of a hash);
    later draws at the same position hash as usual (the rows' streams are made only then). The same
    bits either way."""

    def __init__(self, keys: torch.Tensor, position, first: torch.Tensor):
        self.keys, self.position, self.calls = keys, position, 0
        self.first = first  # (b,) the rows' uniforms at `position` for the first call
        self._streams: RowStreams | None = None

    @property
    def streams(self) -> RowStreams:
        if self._streams is None:
            self._streams = RowStreams(self.keys)
        return self._streams

    @property
    def device(self) -> torch.device:
        return self.first.device

    def uniform(self, n: int) -> torch.Tensor:
        if self.calls == 0:
            if n != self.first.shape[0]:
                raise ValueError(f"a schedule drew {n} uniforms for {self.first.shape[0]} rows")
            self.calls += 1
            return self.first
        return super().uniform(n)


def first_draws(keys: torch.Tensor, start: torch.Tensor, n: int) -> torch.Tensor:
    """(b, n) float32: each row's first AUTHOR_STREAM uniform at positions start .. start + n - 1, the
    bits `RowStreams(keys).schedule_draws(p)` gives its first call, in one broadcast hash."""
    streams = RowStreams(keys)
    pos = start[:, None] + torch.arange(n, device=keys.device)
    return hash_uniform(streams.lo[:, None], streams.hi[:, None], pos, AUTHOR_STREAM)


@dataclass
class Folded:
    """What `fold` returns for B rows of T tokens (tensors on the tokens' device)."""

    authors: torch.Tensor  # (B, T) bool: True = the senior wrote token t
    stop_at: torch.Tensor  # (B,) long: tokens after which the schedule ended the row (-1: never)
    state: ScheduleState  # each row's state after its own `lengths[i]` tokens (the next author included)


def fold(
    schedule: Schedule, tables: VocabTables, keys: torch.Tensor, tokens: torch.Tensor, lengths: torch.Tensor
) -> Folded:
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


def authors_from_tokens(
    completions: list[list[int]], keys: list[int], schedule: Schedule, tables: VocabTables, seed: int
) -> Folded:
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
    `device`; `group` (the schedule index of each slot) is on the host, `tandem` is its device mirror
    (a slot holds a tandem request), so a step needs no host-to-device copy of it.

    Draws: each slot keeps its first AUTHOR_STREAM draw for a window of `window` positions (`draws`,
    from position `base`), filled when the request is added and refilled, in one hash call for all
    the rows of a step whose window runs low, so a token costs a gather, not a hash. `left` (host)
    counts the advances a slot's window still covers; it is decremented for every row an `advance`
    call may move, so it stays a lower bound where the device decides (Model Runner V2's mask).
    Memory: capacity x window floats, whatever the context length. window None: hash every token.

    Host-to-device copies (slot indices, tokens) are staged through pinned memory when `pin` (default:
    on CUDA), by PyTorch's caching host allocator, which keeps a block until its copy is done; every
    per-step call takes the slots' device indices (`idx`) where the caller has them.
    """

    def __init__(
        self,
        capacity: int,
        tables: VocabTables,
        device=None,
        window: int | None = DRAW_WINDOW,
        pin: bool | None = None,
    ):
        self.device = torch.device(device or "cpu")
        self.pin = self.device.type == "cuda" if pin is None else bool(pin)
        self.tables = tables.to(self.device)
        self.capacity = capacity
        self.keys = torch.zeros(capacity, dtype=torch.long, device=self.device)
        self.consumed = torch.zeros(capacity, dtype=torch.long, device=self.device)  # output tokens folded in
        self.force = torch.zeros(capacity, dtype=torch.long, device=self.device)  # EOS id forced when stopped
        self.tandem = torch.zeros(
            capacity, dtype=torch.bool, device=self.device
        )  # device mirror: group != PASSTHROUGH
        self.state = blank_state(capacity, self.device)
        if window is not None and window < 1:
            raise ValueError(f"window must be >= 1 (or None), got {window}")
        self.window = window
        self.draws = None if window is None else torch.zeros(capacity, window, device=self.device)
        self.base = torch.zeros(capacity, dtype=torch.long, device=self.device)  # the position of draws[:, 0]
        self.left = np.zeros(capacity, dtype=np.int64)  # advances each slot's window still covers
        self.group = np.full(capacity, PASSTHROUGH, dtype=np.int64)
        self.seen = np.zeros(capacity, dtype=np.int64)  # host copy of `consumed` where `advance` gets no mask
        self.schedules: list[Schedule] = []
        self._index: dict[Schedule, int] = {}

    def _schedule_id(self, schedule: Schedule) -> int:
        if schedule not in self._index:
            self._index[schedule] = len(self.schedules)
            self.schedules.append(schedule)
        return self._index[schedule]

    def h2d(self, array) -> torch.Tensor:
        """A host array (int64) on the device: through pinned memory when `pin`, without blocking."""
        t = torch.from_numpy(np.ascontiguousarray(array, dtype=np.int64))
        if self.device.type == "cpu":
            return t
        return (t.pin_memory() if self.pin else t).to(self.device, non_blocking=True)

    def _idx(self, slots) -> torch.Tensor:
        return self.h2d(np.asarray(slots, dtype=np.int64))

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
        n = slots_np.size
        # one copy: slots, keys, force ids
        packed = self.h2d(
            np.stack([slots_np, np.asarray(keys, dtype=np.int64), np.asarray(force_ids, dtype=np.int64)])
        )
        idx = packed[0]
        self.keys[idx], self.force[idx] = packed[1], packed[2]
        self.consumed[idx] = 0
        self.tandem[idx] = True
        self.seen[slots_np] = 0
        if self.draws is not None:  # positions 0 .. window-1: `start` and the first window-1 tokens
            self.base[idx] = 0
            self.draws[idx] = first_draws(
                packed[1], torch.zeros(n, dtype=torch.long, device=self.device), self.window
            )
            self.left[slots_np] = self.window - 1
        single = np.unique(gids).size == 1
        for gid in np.unique(gids):
            rows = None if single else np.nonzero(gids == gid)[0]
            sub = idx if rows is None else idx[self.h2d(rows)]
            draws = (
                RowStreams(self.keys[sub]).schedule_draws(0)
                if self.draws is None
                else TableDraws(self.keys[sub], 0, self.draws[sub, 0])
            )
            self._write(sub, self.schedules[gid].start(sub.numel(), self.tables, draws))

    def clear(self, slots) -> None:
        slots = np.asarray(slots, dtype=np.int64)
        if slots.size == 0:
            return
        self.group[slots] = PASSTHROUGH
        self.tandem[self._idx(slots)] = False

    def _per_slot(self) -> tuple:
        return (
            self.keys,
            self.consumed,
            self.force,
            self.tandem,
            *self.state,
            *(() if self.draws is None else (self.draws, self.base)),
        )

    def move(self, src: int, dst: int) -> None:
        """The request in `src` now lives in `dst` (V1's one-way move); `src` becomes empty."""
        for t in self._per_slot():
            t[dst] = t[src]
        self.tandem[src] = False
        self.group[dst], self.group[src] = self.group[src], PASSTHROUGH
        self.seen[dst] = self.seen[src]
        self.left[dst] = self.left[src]

    def swap(self, a: int, b: int) -> None:
        ab, ba = self._idx([a, b]), self._idx([b, a])
        for t in self._per_slot():
            t[ab] = t[ba].clone()
        for h in (self.group, self.seen, self.left):
            h[[a, b]] = h[[b, a]]

    def _draws(self, here: np.ndarray, idx: torch.Tensor, pos: torch.Tensor) -> ScheduleDraws:
        """The draws of rows `here` (device indices `idx`) at positions `pos`, refilling the windows
        that run out now, with every row of the call that has used half of its window."""
        if self.draws is None:
            return RowStreams(self.keys[idx]).schedule_draws(pos)
        left = self.left[here]
        if (left <= 0).any():
            low = np.nonzero(left < max(1, self.window // 2))[0]
            sub = idx if low.size == here.size else idx[self.h2d(low)]
            start = self.consumed[sub] + 1
            self.base[sub] = start
            self.draws[sub] = first_draws(self.keys[sub], start, self.window)
            self.left[here[low]] = self.window
        self.left[here] -= 1
        return TableDraws(self.keys[idx], pos, self.draws[idx, pos - self.base[idx]])

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

    def advance(
        self,
        slots: np.ndarray,
        tokens: torch.Tensor,
        mask: torch.Tensor | None = None,
        idx: torch.Tensor | None = None,
    ) -> None:
        """Fold one more output token into each of `slots` (tokens (b,) on the device), at each row's own
        position `consumed + 1`; rows where `mask` (b,) is False are left as they are (the host copy
        `seen` is then not kept: Model Runner V2 decides on the device). idx: `slots` on the device,
        where the caller has them (else copied)."""
        slots = np.asarray(slots, dtype=np.int64)
        for gid, rows in self.groups(slots):
            if rows is None:
                here, tok, m = slots, tokens, mask
                sub = idx if idx is not None else self._idx(slots)
            else:
                here = slots[rows]
                if idx is None:
                    both = self.h2d(np.stack([rows, here]))
                    r, sub = both[0], both[1]
                else:
                    r = self.h2d(rows)
                    sub = idx[r]
                tok, m = tokens[r], None if mask is None else mask[r]
            old, pos = self._read(sub), self.consumed[sub] + 1
            new = self.schedules[gid].advance(old, tok, self.tables, self._draws(here, sub, pos))
            if m is not None:
                new, pos = _select(m, new, old), torch.where(m, pos, pos - 1)
            else:
                self.seen[here] += 1
            self._write(sub, new)
            self.consumed[sub] = pos

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
        self.left[slot] = 0  # its window is refilled from the next position on its next advance

    def authors(self, slots, idx: torch.Tensor | None = None) -> torch.Tensor:
        """(b,) bool: True where the senior writes the next token (passthrough slots: the senior)."""
        idx = self._idx(slots) if idx is None else idx
        return self.state.author[idx] | ~self.tandem[idx]

    def stops(self, slots, idx: torch.Tensor | None = None) -> torch.Tensor:
        """(b,) bool: the schedule has ended these rows (the step schedule's round cap)."""
        idx = self._idx(slots) if idx is None else idx
        return self.state.stop[idx] & self.tandem[idx]

"""Authorship schedules: who writes the next token of each sequence.

A schedule is a frozen dataclass, registered by name (`@register_schedule("word")`, verl's
`register_policy_loss` pattern), with two pure, batched methods:

    state = schedule.start(batch_size, tables, rng)        # first author of every sequence
    state = schedule.advance(state, tokens, tables, rng)   # after each emitted token

`state.author` is a (B,) bool tensor, True = senior writes the next token. Everything is a
tensor op over the batch: no per-sequence Python in the decoding hot path. Schedules know
token *ids* only; which ids start a word or end a step comes from `VocabTables`, built once
from a tokenizer's vocabulary by `vocab_tables` (or given explicitly).

Schedules (method-notes, "Tandem rollout"):
- WordSchedule(p, max_gap): first author ~ Bernoulli(p); redraw right after every emitted
  word-start token, and after `max_gap` tokens without a redraw. A redraw may keep the author.
- TokenSchedule(p): redraw before every token.
- StepSchedule(first, max_rounds): strict alternation, switching after a token that ends a step
  ("\\n\\n"); a round is a pair of steps (one per author, as in the authors' code), and after
  `max_rounds` rounds (2 x max_rounds steps) the sequence ends.
- ChunkSchedule(size, first): strict alternation every `size` tokens.
- SoloSchedule(author): one author throughout.

Build one by name with `Schedule.from_config("word", p=0.5, max_gap=32)` (training and eval both
do); settings a schedule does not take are ignored, so one settings dict serves every schedule.
`schedule.writers` says which models can write a token, so the engine runs only those.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import ClassVar, NamedTuple

import torch

SENIOR, JUNIOR = "senior", "junior"
WORD_START_MARKERS = ("Ġ", "▁")  # byte-level BPE (GPT-2, Qwen, Llama-3) and SentencePiece


class VocabTables(NamedTuple):
    """Per-token-id boolean lookup tables, each (V,) on the decoding device."""

    word_start: torch.Tensor  # True: the token's surface form begins a new word
    step_end: torch.Tensor  # True: the token's text ends with a blank line "\n\n"
    ends_newline: torch.Tensor  # True: text ends with "\n" (a step can end across two tokens)
    only_newlines: torch.Tensor  # True: text is one or more "\n" and nothing else

    def to(self, device: torch.device | str) -> VocabTables:
        return VocabTables(*(t.to(device) for t in self))


def vocab_tables(
    tokenizer,
    vocab_size: int | None = None,
    word_start_ids: list[int] | None = None,
    step_end_ids: list[int] | None = None,
) -> VocabTables:
    """Build the tables from a tokenizer's vocabulary; explicit id lists override detection.

    `vocab_size` is the model's logit dimension, which may exceed len(tokenizer) (Qwen pads its
    embedding matrix); ids past the tokenizer are never word starts or step ends.
    """
    n_tok = len(tokenizer)
    vocab_size = vocab_size or n_tok
    if n_tok > vocab_size:
        raise ValueError(f"tokenizer has {n_tok} tokens but the model vocabulary has only {vocab_size}")
    pieces = tokenizer.convert_ids_to_tokens(list(range(n_tok)))
    texts = tokenizer.batch_decode([[i] for i in range(n_tok)], skip_special_tokens=False)
    special = set(getattr(tokenizer, "all_special_ids", []) or [])

    def table(flags) -> torch.Tensor:
        t = torch.zeros(vocab_size, dtype=torch.bool)
        t[:n_tok] = torch.tensor(list(flags), dtype=torch.bool)
        return t

    if word_start_ids is None:
        word_start = table(
            i not in special and p is not None and p.startswith(WORD_START_MARKERS) for i, p in enumerate(pieces)
        )
    else:
        word_start = _from_ids(word_start_ids, vocab_size)
    if step_end_ids is None:
        step_end = table(t.endswith("\n\n") for t in texts)
    else:
        step_end = _from_ids(step_end_ids, vocab_size)
    ends_newline = table(t.endswith("\n") for t in texts)
    only_newlines = table(len(t) > 0 and set(t) == {"\n"} for t in texts)
    return VocabTables(word_start, step_end, ends_newline, only_newlines)


def _from_ids(ids: list[int], vocab_size: int) -> torch.Tensor:
    t = torch.zeros(vocab_size, dtype=torch.bool)
    if ids:
        t[torch.tensor(list(ids), dtype=torch.long)] = True
    return t


class ScheduleState(NamedTuple):
    """Batched schedule state; every field is (B,)."""

    author: torch.Tensor  # bool, True = senior writes the next token
    since_redraw: torch.Tensor  # long, tokens emitted since the last redraw (word schedule)
    steps: torch.Tensor  # long, completed steps (step schedule)
    prev_ends_newline: torch.Tensor  # bool, last token ended with "\n" (step across two tokens)
    stop: torch.Tensor  # bool, the schedule ends this sequence (step round cap)


def _initial(author: torch.Tensor) -> ScheduleState:
    zeros = torch.zeros_like(author, dtype=torch.long)
    false = torch.zeros_like(author)
    return ScheduleState(author, zeros, zeros.clone(), false, false.clone())


def _bernoulli(p: float, batch_size: int, rng: torch.Generator, device) -> torch.Tensor:
    return torch.rand(batch_size, generator=rng, device=device) < p


def _check_p(p: float) -> None:
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"schedule probability p must be in [0, 1], got {p}")


def _check_author(author: str, field: str) -> None:
    if author not in (SENIOR, JUNIOR):
        raise ValueError(f"{field} must be 'senior' or 'junior', got {author!r}")

SCHEDULES: dict[str, type[Schedule]] = {}


def register_schedule(name: str):
    """Class decorator: make a schedule buildable by name (`Schedule.from_config(name, ...)`)."""

    def wrap(cls):
        if name in SCHEDULES:
            raise ValueError(f"schedule {name!r} is already registered by {SCHEDULES[name].__name__}")
        cls.name = name
        SCHEDULES[name] = cls
        return cls

    return wrap


class Schedule:
    """Base of all schedules: a registry name, the models that can write, and `from_config`."""

    name: ClassVar[str] = ""

    @property
    def writers(self) -> frozenset[str]:
        """The authors that can write a token under this schedule (the engine runs only their models)."""
        return frozenset((SENIOR, JUNIOR))

    @classmethod
    def from_config(cls, name: str, **settings) -> Schedule:
        """Build the schedule registered as `name`; settings it has no field for are ignored.

        >>> Schedule.from_config("word", p=0.3, max_gap=32, max_rounds=150)
        WordSchedule(p=0.3, max_gap=32)
        """
        if name not in SCHEDULES:
            raise ValueError(f"unknown schedule {name!r}; choose one of {sorted(SCHEDULES)}")
        target = SCHEDULES[name]
        fields = {f.name for f in dataclasses.fields(target)}
        return target(**{k: v for k, v in settings.items() if k in fields})

    def start(self, batch_size: int, tables: VocabTables, rng: torch.Generator) -> ScheduleState:
        raise NotImplementedError

    def advance(self, state: ScheduleState, tokens: torch.Tensor, tables: VocabTables, rng) -> ScheduleState:
        raise NotImplementedError


def _writers_for_p(p: float) -> frozenset[str]:
    return frozenset({SENIOR} if p == 1.0 else {JUNIOR} if p == 0.0 else {SENIOR, JUNIOR})


@register_schedule("word")
@dataclass(frozen=True)
class WordSchedule(Schedule):
    """Redraw the author (senior with probability p) after each word-start token."""

    p: float = 0.5
    max_gap: int = 32

    def __post_init__(self):
        _check_p(self.p)
        if self.max_gap < 1:
            raise ValueError(f"max_gap must be >= 1, got {self.max_gap}")

    @property
    def writers(self) -> frozenset[str]:
        return _writers_for_p(self.p)

    def start(self, batch_size: int, tables: VocabTables, rng: torch.Generator) -> ScheduleState:
        return _initial(_bernoulli(self.p, batch_size, rng, rng.device))

    def advance(self, state: ScheduleState, tokens: torch.Tensor, tables: VocabTables, rng) -> ScheduleState:
        since = state.since_redraw + 1
        redraw = tables.word_start[tokens] | (since >= self.max_gap)
        # Draw for every row so the random stream does not depend on which rows redraw.
        draw = _bernoulli(self.p, tokens.shape[0], rng, tokens.device)
        author = torch.where(redraw, draw, state.author)
        since = torch.where(redraw, torch.zeros_like(since), since)
        return state._replace(author=author, since_redraw=since)


@register_schedule("token")
@dataclass(frozen=True)
class TokenSchedule(Schedule):
    """Redraw the author (senior with probability p) before every token."""

    p: float = 0.5

    def __post_init__(self):
        _check_p(self.p)

    @property
    def writers(self) -> frozenset[str]:
        return _writers_for_p(self.p)

    def start(self, batch_size: int, tables: VocabTables, rng: torch.Generator) -> ScheduleState:
        return _initial(_bernoulli(self.p, batch_size, rng, rng.device))

    def advance(self, state: ScheduleState, tokens: torch.Tensor, tables: VocabTables, rng) -> ScheduleState:
        return state._replace(author=_bernoulli(self.p, tokens.shape[0], rng, tokens.device))


@register_schedule("step")
@dataclass(frozen=True)
class StepSchedule(Schedule):
    """Strict alternation one reasoning step each; a step ends with a blank line ("\\n\\n").

    A round is a pair of steps, one by each author (the authors' definition: a senior turn plus a
    junior turn); the sequence ends once `max_rounds` rounds, i.e. 2 x max_rounds steps, are complete.
    """

    first: str = SENIOR
    max_rounds: int = 150

    def __post_init__(self):
        _check_author(self.first, "StepSchedule.first")
        if self.max_rounds < 1:
            raise ValueError(f"max_rounds must be >= 1, got {self.max_rounds}")

    def start(self, batch_size: int, tables: VocabTables, rng: torch.Generator) -> ScheduleState:
        author = torch.full((batch_size,), self.first == SENIOR, dtype=torch.bool, device=rng.device)
        return _initial(author)

    def advance(self, state: ScheduleState, tokens: torch.Tensor, tables: VocabTables, rng) -> ScheduleState:
        # "\n\n" in one token, or "...\n" followed by a newline-only token.
        ended = tables.step_end[tokens] | (state.prev_ends_newline & tables.only_newlines[tokens])
        steps = state.steps + ended.long()
        # A newline that already closed a step must not pair with the next one.
        prev_nl = tables.ends_newline[tokens] & ~ended
        return state._replace(
            author=state.author ^ ended,
            steps=steps,
            prev_ends_newline=prev_nl,
            stop=steps >= 2 * self.max_rounds,
        )


@register_schedule("chunk")
@dataclass(frozen=True)
class ChunkSchedule(Schedule):
    """Strict alternation every `size` tokens (an ablation schedule)."""

    size: int = 16
    first: str = SENIOR

    def __post_init__(self):
        _check_author(self.first, "ChunkSchedule.first")
        if self.size < 1:
            raise ValueError(f"chunk size must be >= 1, got {self.size}")

    def start(self, batch_size: int, tables: VocabTables, rng: torch.Generator) -> ScheduleState:
        author = torch.full((batch_size,), self.first == SENIOR, dtype=torch.bool, device=rng.device)
        return _initial(author)

    def advance(self, state: ScheduleState, tokens: torch.Tensor, tables: VocabTables, rng) -> ScheduleState:
        since = state.since_redraw + 1
        flip = since >= self.size
        return state._replace(author=state.author ^ flip, since_redraw=torch.where(flip, 0, since))


@register_schedule("solo")
@dataclass(frozen=True)
class SoloSchedule(Schedule):
    """One author writes everything. The engine then runs only that model (unless asked to score both)."""

    author: str = SENIOR

    def __post_init__(self):
        _check_author(self.author, "SoloSchedule.author")

    @property
    def writers(self) -> frozenset[str]:
        return frozenset({self.author})

    def start(self, batch_size: int, tables: VocabTables, rng: torch.Generator) -> ScheduleState:
        author = torch.full((batch_size,), self.author == SENIOR, dtype=torch.bool, device=rng.device)
        return _initial(author)

    def advance(self, state: ScheduleState, tokens: torch.Tensor, tables: VocabTables, rng) -> ScheduleState:
        return state


"""Authorship schedules: who writes the next token of each sequence.

A schedule is a frozen dataclass, registered by name (`@register_schedule("word")`, verl's
`register_policy_loss` pattern), with two pure, batched methods:

    state = schedule.start(batch_size, tables, rng)        # first author of every sequence
    state = schedule.advance(state, tokens, tables, rng)   # after each emitted token

`rng` is where random redraws come from: the engine passes each row's counter-based draws at the
current position (`trlvr.engine.sampling.ScheduleDraws`, with `.device` and `.uniform(n)`), so a
row's authors do not depend on its batch-mates; a torch.Generator also works.

`state.author` is a (B,) bool tensor, True = senior writes the next token. Everything is a
tensor op over the batch: no per-sequence Python in the decoding hot path. Schedules know
token *ids* only; which ids start a word or end a step comes from `VocabTables`, built once
from a tokenizer's vocabulary by `vocab_tables` (or given explicitly).

Schedules (method-notes, "Tandem rollout"):
- WordSchedule(p, max_gap, handoff): first author ~ Bernoulli(p); redraw right after every emitted
  word-start token, and after `max_gap` tokens without a redraw (the backstop). A redraw may keep
  the author. This is the paper's schedule and stays its default (`word`, max_gap 32). With
  handoff="toggle" the other author takes over at each of those points instead: the authors'
  sampler before 2026-05-05 (WORD_HANDOFFS, below).
- BoundarySchedule(p, max_gap) (`boundary`): the word schedule with a wider boundary set that
  also reaches inside spaceless notation (below).
- TokenSchedule(p): redraw before every token.
- StepSchedule(first_author, max_rounds): strict alternation, switching after a token that ends a
  step ("\\n\\n"); a round is a pair of steps (one per author, as in the authors' code), and after
  `max_rounds` rounds (2 x max_rounds steps) the sequence ends.
- ChunkSchedule(chunk_size, first_author): strict alternation every `chunk_size` tokens.
- SoloSchedule(author): one author throughout.

Why `boundary`, from real tokenizers' pieces. A word start is a piece marked "Ġ" (byte-level BPE:
GPT-2, Qwen2/Qwen3, Llama-3) or "▁" (SentencePiece: Llama-2, Mistral, Gemma). Spaceless notation
holds none after its first piece: their pre-tokenizers cut GSM8K's calculator annotation
" <<47+18=65>>" into " <<" | 4 | 7 | + | 1 | 8 | = | 6 | 5 | >> (digits split one by one: Qwen3,
SmolLM2, Gemma-3; Llama-3 keeps digit groups: " <<" | 47 | + | 18 | = | 65 | >>) and LaTeX
"\\frac{1}{2}" into "\\frac" (SmolLM2, Gemma-3: " \\" | frac) | { | 1 | }{ | 2 | }; BPE may cut a
piece further, never join two (the SmolLM2 and Gemma-3 pieces are tested where their tokenizers
are present, tests/test_schedules_boundary.py; Qwen3's and Llama-3's follow from their
pre-tokenizer patterns, not run here). Under `word` a
senior that draws the piece after " <<" writes the whole annotation, the 32-token backstop aside.
Every piece inside starts with a symbol (not a letter, digit or space) or a digit, so `boundary`
redraws after a word-start piece (as `word`), after a piece whose text starts with a symbol, and
after the first piece of a digit run (a piece starting with a digit whose previous piece did not
end with one): inside a notation the author is redrawn every one or two pieces, as in prose.
Prose of words redraws exactly as under `word`; each punctuation piece ("." "," "'s") adds one
redraw. The backstop is the same `max_gap`. A small backstop on the word schedule
(`word`, max_gap 4) is the other way in: it reaches everywhere but also cuts long words.

Build one by name with `Schedule.from_config("word", p=0.5, max_gap=32)` (training and eval both
do). Its settings have the run config's names (`trlvr.config.TandemConfig`: p, max_gap, chunk_size,
first_author, max_rounds); a setting the schedule has no field for is a ValueError naming it and
the valid ones. A caller holding one settings dict for every schedule passes only the chosen
schedule's: `settings_for(name, settings)`. `schedule.writers` says which models can write a
token, so the engine runs only those. `schedule.boundaries(tokens, tables)` and `schedule.backstop`
say where a schedule redraws, for the loophole statistics (`trlvr.engine.loophole`).
"""

from __future__ import annotations

import dataclasses
import importlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar, NamedTuple

if TYPE_CHECKING:
    import torch
else:

    class _Torch:
        """torch, imported on its first use: `trlvr.config` checks a schedule's settings (its fields and
        `__post_init__`) without loading torch, so `trlvr train --dry-run` stays light. Nothing at import
        time here touches a tensor; the first tensor method imports it, and each name is then a plain
        attribute (no cost per token)."""

        def __getattr__(self, name: str):
            value = getattr(importlib.import_module("torch"), name)
            setattr(self, name, value)
            return value

    torch = _Torch()

SENIOR, JUNIOR = "senior", "junior"
WORD_START_MARKERS = ("Ġ", "▁")  # byte-level BPE (GPT-2, Qwen, Llama-3) and SentencePiece


class VocabTables(NamedTuple):
    """Per-token-id boolean lookup tables, each (V,) on the decoding device."""

    word_start: torch.Tensor  # True: the token's surface form begins a new word
    step_end: torch.Tensor  # True: the token's text ends with a blank line "\n\n"
    ends_newline: torch.Tensor  # True: text ends with "\n" (a step can end across two tokens)
    only_newlines: torch.Tensor  # True: text is one or more "\n" and nothing else
    # for the boundary schedule (None in hand-built tables that do not need it)
    symbol_start: torch.Tensor | None = None  # True: text (after leading spaces) starts with a symbol
    digit_start: torch.Tensor | None = None  # True: text (after leading spaces) starts with a digit
    ends_digit: torch.Tensor | None = None  # True: text ends with a digit

    def to(self, device: torch.device | str) -> VocabTables:
        return VocabTables(*(None if t is None else t.to(device) for t in self))


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
            i not in special and p is not None and p.startswith(WORD_START_MARKERS)
            for i, p in enumerate(pieces)
        )
    else:
        word_start = _from_ids(word_start_ids, vocab_size)
    if step_end_ids is None:
        step_end = table(t.endswith("\n\n") for t in texts)
    else:
        step_end = _from_ids(step_end_ids, vocab_size)
    ends_newline = table(t.endswith("\n") for t in texts)
    only_newlines = table(len(t) > 0 and set(t) == {"\n"} for t in texts)
    firsts = [t.lstrip()[:1] for t in texts]
    symbol_start = table(i not in special and f != "" and not f.isalnum() for i, f in enumerate(firsts))
    digit_start = table(i not in special and f.isdigit() for i, f in enumerate(firsts))
    ends_digit = table(i not in special and t[-1:].isdigit() for i, t in enumerate(texts))
    return VocabTables(
        word_start, step_end, ends_newline, only_newlines, symbol_start, digit_start, ends_digit
    )


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
    prev_ends_digit: torch.Tensor  # bool, last token ended with a digit (boundary schedule)


def _initial(author: torch.Tensor) -> ScheduleState:
    zeros = torch.zeros_like(author, dtype=torch.long)
    false = torch.zeros_like(author)
    return ScheduleState(author, zeros, zeros.clone(), false, false.clone(), false.clone())


def _bernoulli(p: float, batch_size: int, rng, device) -> torch.Tensor:
    """(batch_size,) bool draws, True with probability p.

    `rng` is the rows' random source: from the engine a `trlvr.engine.sampling.ScheduleDraws`
    (each row's uniform a pure function of (seed, row key, position): batch-invariant), or a
    torch.Generator (one stream for the batch) for direct callers.
    """
    if hasattr(rng, "uniform"):
        return rng.uniform(batch_size).to(device) < p
    return torch.rand(batch_size, generator=rng, device=device) < p


def _check_p(p: float) -> None:
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"schedule probability p must be in [0, 1], got {p}")


def _check_author(author: str, field: str) -> None:
    if author not in (SENIOR, JUNIOR):
        raise ValueError(f"{field} must be 'senior' or 'junior', got {author!r}")


@dataclass(frozen=True)
class TextRule:
    """How a schedule runs over text, for text pairing (two tokenizers, one shared text;
    `trlvr.engine.text_pair`): the text engine asks the schedule for this instead of re-implementing
    it. A "piece" is the text of one sampled token; counts are of pieces.

    p: the probability a redraw picks the senior (None: the schedule never redraws); first: the first
    author when the schedule fixes it (None: drawn with p); redraw_before_word: redraw before a piece
    that starts a word (the drawn author writes that word); redraw_every_piece: redraw after every
    piece; backstop: a forced redraw after this many pieces without one; alternate_every: hand over
    after this many pieces; alternate_at_step_end: hand over after a piece that ends a step ("\n\n",
    or a newline-only piece after a "\n"); max_steps: end the row after this many steps.
    """

    p: float | None = None
    first: str | None = None
    redraw_before_word: bool = False
    redraw_every_piece: bool = False
    backstop: int | None = None
    alternate_every: int | None = None
    alternate_at_step_end: bool = False
    max_steps: int | None = None

    def draw(self, u: float) -> str:
        """The author a redraw with uniform `u` picks."""
        return SENIOR if u < self.p else JUNIOR

    def first_author(self, u: float) -> str:
        return self.first if self.first is not None else self.draw(u)


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
        """Build the schedule registered as `name`; a setting it has no field for is a ValueError.

        >>> Schedule.from_config("word", p=0.3, max_gap=32)
        WordSchedule(p=0.3, max_gap=32)
        >>> Schedule.from_config("word", p=0.3, max_gaps=8)
        Traceback (most recent call last):
        ValueError: schedule 'word': unknown setting 'max_gaps'; valid settings: p, max_gap, handoff
        """
        fields = schedule_fields(name)
        unknown = [k for k in settings if k not in fields]
        if unknown:
            plural = "s" if len(unknown) > 1 else ""
            raise ValueError(
                f"schedule {name!r}: unknown setting{plural} {', '.join(map(repr, unknown))}; "
                f"valid settings: {', '.join(fields) or '(none)'}"
            )
        return SCHEDULES[name](**settings)

    @property
    def backstop(self) -> int | None:
        """Tokens without a redraw after which one is forced (None: the schedule has no backstop)."""
        return None

    def text_rule(self) -> TextRule | None:
        """The schedule over text (text pairing), or None when it reads token ids only."""
        return None

    def boundaries(
        self, tokens: torch.Tensor, tables: VocabTables, prev_ends_digit=None
    ) -> torch.Tensor | None:
        """(B, T) bool: True after token t when the schedule redraws because of the token itself
        (the backstop aside); None for schedules that never redraw (step, chunk, solo alternate or
        keep their author by rule). `prev_ends_digit` (B,): the token before column 0 ended with a
        digit (default: no)."""
        return None

    def start(self, batch_size: int, tables: VocabTables, rng: torch.Generator) -> ScheduleState:
        raise NotImplementedError

    def advance(self, state: ScheduleState, tokens: torch.Tensor, tables: VocabTables, rng) -> ScheduleState:
        raise NotImplementedError


def schedule_fields(name: str) -> tuple[str, ...]:
    """The settings the schedule registered as `name` takes, in field order."""
    if name not in SCHEDULES:
        raise ValueError(f"unknown schedule {name!r}; choose one of {sorted(SCHEDULES)}")
    return tuple(f.name for f in dataclasses.fields(SCHEDULES[name]))


def settings_for(name: str, settings: dict) -> dict:
    """The entries of a settings dict shared by every schedule that the schedule `name` takes.

    >>> settings_for("word", {"p": 0.5, "max_gap": 32, "chunk_size": 16, "first_author": "senior"})
    {'p': 0.5, 'max_gap': 32}
    """
    fields = schedule_fields(name)
    return {k: v for k, v in settings.items() if k in fields}


def _writers_for_p(p: float) -> frozenset[str]:
    return frozenset({SENIOR} if p == 1.0 else {JUNIOR} if p == 0.0 else {SENIOR, JUNIOR})


# How a word schedule hands off at a boundary (a word start, or the backstop):
#   bernoulli  redraw: senior with probability p, else junior; the author may stay (the paper's rule, and the
#              authors' sampler since 2026-05-05)
#   toggle     the other author takes over: a strict toggle, the authors' rule before 2026-05-05. Their
#              research fork's sampler says so at its `_word_select` (CSSLab/Tandem-RLVR,
#              vllm_source/vllm/v1/sample/tandem_sampler.py, line 86 of the version at commit 64dfae7:
#              "[MODIFIED 2026-05-05 per-boundary Bernoulli(p) handoffs (was strict toggle)]"). The toggle
#              version itself is not among the versions of that file we could read (64dfae7 has the Bernoulli
#              loop, 9c93814 has no word strategy yet), so the toggle here is that loop (lines 84-108) with
#              the redraw at a boundary (line 104, `is_senior = self._draw_active(...)`) replaced by the other
#              author, as the comment and issue 53 describe it. Kept from the loop: the boundary is the token
#              just emitted (lines 101-103), the gap counts tokens since the last handoff, the boundary token
#              included, and forces one at max_gap (lines 102-105), and the first author is drawn with p (line
#              96). Not known: which rule the paper's runs used.
WORD_HANDOFFS = ("bernoulli", "toggle")


@register_schedule("word")
@dataclass(frozen=True, repr=False)
class WordSchedule(Schedule):
    """Hand the author over after each word-start token: a redraw (senior with probability p), or with
    handoff="toggle" the other author (the authors' earlier rule; see WORD_HANDOFFS above)."""

    p: float = 0.5
    max_gap: int = 32
    handoff: str = "bernoulli"

    def __post_init__(self):
        _check_p(self.p)
        if self.max_gap < 1:
            raise ValueError(f"max_gap must be >= 1, got {self.max_gap}")
        if self.handoff not in WORD_HANDOFFS:
            raise ValueError(f"handoff must be one of {WORD_HANDOFFS}, got {self.handoff!r}")

    def __repr__(self) -> str:  # the paper's rule prints as before: WordSchedule(p=0.5, max_gap=32)
        shown = [f"p={self.p!r}", f"max_gap={self.max_gap!r}"]
        if self.handoff != "bernoulli":
            shown.append(f"handoff={self.handoff!r}")
        return f"{type(self).__name__}({', '.join(shown)})"

    @property
    def writers(self) -> frozenset[str]:
        # a toggle hands over whatever p is (p only draws the first author)
        return frozenset((SENIOR, JUNIOR)) if self.handoff == "toggle" else _writers_for_p(self.p)

    @property
    def backstop(self) -> int:
        return self.max_gap

    def text_rule(self) -> TextRule | None:
        if self.handoff == "toggle":
            return None  # the text engine redraws; a toggle there is not built (token-id pairing only)
        return TextRule(p=self.p, redraw_before_word=True, backstop=self.max_gap)

    def boundaries(self, tokens: torch.Tensor, tables: VocabTables, prev_ends_digit=None) -> torch.Tensor:
        return tables.word_start[tokens]

    def start(self, batch_size: int, tables: VocabTables, rng: torch.Generator) -> ScheduleState:
        return _initial(_bernoulli(self.p, batch_size, rng, rng.device))

    def advance(self, state: ScheduleState, tokens: torch.Tensor, tables: VocabTables, rng) -> ScheduleState:
        since = state.since_redraw + 1
        redraw = self.boundaries(tokens[:, None], tables, state.prev_ends_digit)[:, 0] | (
            since >= self.max_gap
        )
        if self.handoff == "toggle":
            author = state.author ^ redraw
        else:  # draw for every row so the random stream does not depend on which rows redraw
            draw = _bernoulli(self.p, tokens.shape[0], rng, tokens.device)
            author = torch.where(redraw, draw, state.author)
        since = torch.where(redraw, torch.zeros_like(since), since)
        ends_digit = tables.ends_digit[tokens] if tables.ends_digit is not None else state.prev_ends_digit
        return state._replace(author=author, since_redraw=since, prev_ends_digit=ends_digit)


@register_schedule("boundary")
@dataclass(frozen=True, repr=False)
class BoundarySchedule(WordSchedule):
    """The word schedule whose boundary set also holds symbol pieces and digit-run starts
    (module docstring): it hands off inside "<<47+18=65>>" and LaTeX as it does in prose."""

    def text_rule(self) -> TextRule | None:
        return None  # its boundary set is a set of token ids (symbol pieces, digit-run starts)

    def boundaries(self, tokens: torch.Tensor, tables: VocabTables, prev_ends_digit=None) -> torch.Tensor:
        if tables.symbol_start is None or tables.digit_start is None or tables.ends_digit is None:
            raise ValueError(
                "the boundary schedule needs VocabTables with symbol_start, digit_start and "
                "ends_digit (built by vocab_tables)"
            )
        before = (
            torch.zeros_like(tokens[:, 0], dtype=torch.bool) if prev_ends_digit is None else prev_ends_digit
        )
        prev = torch.cat([before[:, None], tables.ends_digit[tokens[:, :-1]]], dim=1)  # (B, T)
        digit_run = tables.digit_start[tokens] & ~prev
        return tables.word_start[tokens] | tables.symbol_start[tokens] | digit_run


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

    def text_rule(self) -> TextRule | None:
        return TextRule(p=self.p, redraw_every_piece=True)

    def boundaries(self, tokens: torch.Tensor, tables: VocabTables, prev_ends_digit=None) -> torch.Tensor:
        return torch.ones_like(tokens, dtype=torch.bool)

    def start(self, batch_size: int, tables: VocabTables, rng: torch.Generator) -> ScheduleState:
        return _initial(_bernoulli(self.p, batch_size, rng, rng.device))

    def advance(self, state: ScheduleState, tokens: torch.Tensor, tables: VocabTables, rng) -> ScheduleState:
        return state._replace(author=_bernoulli(self.p, tokens.shape[0], rng, tokens.device))


@register_schedule("step")
@dataclass(frozen=True)
class StepSchedule(Schedule):
    """Strict alternation one reasoning step each; a step ends with a blank line ("\\n\\n").

    A round is a pair of steps, one by each author (the authors' definition: a senior turn plus a
    junior turn); the sequence ends once `max_rounds` rounds, i.e. 2 x max_rounds steps, are complete
    (None: no cap, as the paper-era handoff evaluation; only EOS or the token budget end it).
    """

    first_author: str = SENIOR
    max_rounds: int | None = 150

    def __post_init__(self):
        _check_author(self.first_author, "StepSchedule.first_author")
        if self.max_rounds is not None and self.max_rounds < 1:
            raise ValueError(f"max_rounds must be >= 1 (or None: no cap), got {self.max_rounds}")

    def text_rule(self) -> TextRule | None:
        cap = None if self.max_rounds is None else 2 * self.max_rounds
        return TextRule(first=self.first_author, alternate_at_step_end=True, max_steps=cap)

    def start(self, batch_size: int, tables: VocabTables, rng: torch.Generator) -> ScheduleState:
        author = torch.full((batch_size,), self.first_author == SENIOR, dtype=torch.bool, device=rng.device)
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
            stop=steps >= 2 * self.max_rounds if self.max_rounds is not None else torch.zeros_like(ended),
        )


@register_schedule("chunk")
@dataclass(frozen=True)
class ChunkSchedule(Schedule):
    """Strict alternation every `chunk_size` tokens (an ablation schedule)."""

    chunk_size: int = 16
    first_author: str = SENIOR

    def __post_init__(self):
        _check_author(self.first_author, "ChunkSchedule.first_author")
        if self.chunk_size < 1:
            raise ValueError(f"chunk_size must be >= 1, got {self.chunk_size}")

    def text_rule(self) -> TextRule | None:
        return TextRule(first=self.first_author, alternate_every=self.chunk_size)

    def start(self, batch_size: int, tables: VocabTables, rng: torch.Generator) -> ScheduleState:
        author = torch.full((batch_size,), self.first_author == SENIOR, dtype=torch.bool, device=rng.device)
        return _initial(author)

    def advance(self, state: ScheduleState, tokens: torch.Tensor, tables: VocabTables, rng) -> ScheduleState:
        since = state.since_redraw + 1
        flip = since >= self.chunk_size
        return state._replace(author=state.author ^ flip, since_redraw=torch.where(flip, 0, since))


@register_schedule("solo")
@dataclass(frozen=True)
class SoloSchedule(Schedule):
    """One author writes everything. The engine then runs only that model (unless asked to score both)."""

    author: str = SENIOR

    def __post_init__(self):
        _check_author(self.author, "SoloSchedule.author")

    def text_rule(self) -> TextRule | None:
        return TextRule(first=self.author)

    @property
    def writers(self) -> frozenset[str]:
        return frozenset({self.author})

    def start(self, batch_size: int, tables: VocabTables, rng: torch.Generator) -> ScheduleState:
        author = torch.full((batch_size,), self.author == SENIOR, dtype=torch.bool, device=rng.device)
        return _initial(author)

    def advance(self, state: ScheduleState, tokens: torch.Tensor, tables: VocabTables, rng) -> ScheduleState:
        return state

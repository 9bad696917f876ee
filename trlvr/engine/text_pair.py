"""Text-level pairing: tandem decoding of two causal LMs that do NOT share a tokenizer.

The shared state of every row is the completion *text*. Each model keeps its own token stream of
that text (its own tokenization) and its own KV cache; only the active author runs and writes.
When the author changes, the incoming model first **catches up** on the partner's new text in one
chunked forward of its own tokenization of it, then writes.

Catch-up encodes in context, never a chunk alone. Every tokenizer splits at a word start
(whitespace after non-whitespace: checked on byte-level BPE "Ġ", SentencePiece "▁", the toy's
digit splitting), so the encoding of text[w:] from the last word start w is the tail of the
encoding of the whole text. The window starts at the stream's last token boundary b that this
encoding also has (b = the end of the stream when it ends cleanly; otherwise one token back at a
time, e.g. when the stream ends inside a word that the partner continued); the stream's tokens past
b that agree with the encoding are kept, the rest dropped, the KV cache rolled back (the row's
columns masked out: holes, squeezed out by `_Side.compact` once they dominate) and the new ids fed.
A one-token catch-up rides in the step forward of the other rows; longer ones (a word, a
reasoning step) run as their own forward over only the rows that need them (`short_catch_up`).

Schedules over text: each schedule says how it runs over text (`Schedule.text_rule()`, a `TextRule`;
None for `boundary`, whose boundaries are token ids), and this engine only folds that rule per row:
- word (p, max_gap): when the author emits a token whose decoded text starts with whitespace right
  after a non-whitespace character (a word start, whatever the tokenizer's marker: "Ġ", "▁" or
  none), the author is redrawn BEFORE that word: if the redraw picks the partner, the token is
  withdrawn (sampled, counted, thrown away) and the partner writes the word from its start (the
  paper redraws after the word-start token; a text pair cannot, the token's text belongs to one
  tokenizer). The partner's first token of a turn is never redrawn again (one redraw per word
  start). After `max_gap` kept tokens with no redraw the backstop redraws after the token, which
  may fall inside a word.
- step (first_author, max_rounds): strict alternation after a token that ends a blank line "\\n\\n" (or a
  "\\n"-only token after a "\\n", as in lockstep); 2 x max_rounds steps end the row ("rounds").
- token (p): redraw after every token; chunk (chunk_size, first_author): alternate every
  `chunk_size` kept tokens;
  solo (author): one model writes (the other is never run).

Invariant (tested for every schedule, `check=True` records a snapshot per catch-up): after every
catch-up, each model's stream decodes (in the context of its prompt) to exactly the shared text,
and the ids it fed for the partner's text are its tokenizer's encoding of that text in context.
Documented exception: a model's OWN sampled tokens are kept as sampled (they are what it sampled,
and for the senior what the loss trains on), so a stream equals its tokenizer's encoding of the
text only where the model sampled canonically; they are rewritten only when the window must start
before them (a word the partner continued after a mid-word handoff: backstop, token or chunk
schedules), and then count as the partner's (senior_authored 0). Bytes that are no UTF-8 text become
U+FFFD in the text and the writer's own stream is re-encoded from it.

A model's output never stops the batch. Tokens inside an unfinished UTF-8 character are held back
(not in the text, no handoff) until the character is complete (or `_MAX_PENDING` tokens show it
never will; a withdrawn word start takes its held-back bytes with it). A row whose text a partner
cannot spell when it must read it (a character missing from a small vocabulary without byte
fallback, control bytes, U+FFFD), or that the senior cannot spell at the end (the output is the
senior's tokenization), ends with finish reason "unrepresentable": its text is cut back to the
longest prefix every stream spells, both streams are cut to it, and an EOS no model sampled
(mask 0) closes it, so training sees a finished row and evaluation counts it. The junior's own
tokenization of text it never had to read is best effort (a prefix when it cannot spell it).

The length budget `max_new_tokens` counts kept tokens, each in its author's own tokenizer.
Randomness is per row (uniforms drawn from a generator seeded by (seed, row key); the key is the
row's index unless `row_keys` are given), so a row's result does not depend on the batch it runs
in, up to floating-point summation order (tested).

Nothing here knows training or prompts as text: callers pass each model's prompt ids.
"""

from __future__ import annotations

import bisect
import inspect
import time
from dataclasses import dataclass, field

import torch

from trlvr.engine.options import Sampling
from trlvr.engine.output import FINISH_REASONS, TandemOutput
from trlvr.engine.runners import no_router_logits
from trlvr.engine.sampling import sample_with_uniforms
from trlvr.engine.schedules import JUNIOR, SCHEDULES, SENIOR, Schedule, TextRule
from trlvr.errors import UserError
from trlvr.models import config_positions

UNREPRESENTABLE = "unrepresentable"  # the finish reason of a row a partner's tokenizer cannot spell
_CONTEXT = 8  # tokens of left context a piece is decoded in (SentencePiece strips a leading space alone)
_MAX_PENDING = 4  # tokens a model may emit inside one unfinished UTF-8 character


def is_word_start(text: str, piece: str) -> bool:
    """A token starts a word: its text begins with whitespace right after a non-whitespace character.

    >>> is_word_start("12 plus", " 30"), is_word_start("12 ", " 30"), is_word_start("12", "30")
    (True, False, False)
    """
    return bool(piece) and piece[0].isspace() and bool(text) and not text[-1].isspace()


class Unspellable(ValueError):
    """A tokenizer cannot spell a text: decode(encode(text)) in context is not the text."""


def row_uniforms(seed: int, rows: int | list[int], n: int) -> torch.Tensor:
    """(rows, n) float32 uniforms in [0, 1); row r depends only on (seed, its key, n), never on the batch.

    rows: a count (row r's key is r) or each row's key (e.g. the rollout's row keys)."""
    keys = list(range(rows)) if isinstance(rows, int) else list(rows)
    out = torch.empty(len(keys), n)
    for r, key in enumerate(keys):
        g = torch.Generator().manual_seed((seed * 1_000_003 + key * 7_919 + 1) % (2**63 - 1))
        out[r] = torch.rand(n, generator=g)
    return out


class Codec:
    """One model's tokenizer as text pairing uses it: encode without special tokens, decode in context."""

    def __init__(self, tokenizer, name: str):
        self.tokenizer, self.name = tokenizer, name
        self._backend = getattr(tokenizer, "_tokenizer", None)
        self.anchor = self.encode("x")
        probe = "a b  a\n\nb a"  # letters, runs of spaces, a blank line (the toy alphabets have a and b)
        for text in (probe, " " + probe):
            ids = self.encode(text)
            back = self.tokenizer.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False)
            if back != text:
                raise ValueError(
                    f"the {name} tokenizer does not round-trip text ({text!r} -> {back!r}); text pairing "
                    "needs decode(encode(text)) == text"
                )

    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"]) if text else []

    def decode(self, ids: list[int]) -> str:
        if (
            self._backend is not None
        ):  # the Rust tokenizer directly: the same text, without the wrapper's cost
            return self._backend.decode(ids, skip_special_tokens=False)
        return self.tokenizer.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False)

    def piece(self, context: list[int], new: list[int]) -> str | None:
        """The text `new` adds after `context` (decoded together); None when decoding is not prefix-stable."""
        ctx = context[-_CONTEXT:]
        base, full = self.decode(ctx), self.decode(ctx + new)
        return full[len(base) :] if full.startswith(base) else None

    def ends(self, new: list[int]) -> list[int]:
        """Character length of the text each prefix new[:j+1] decodes to (after a fixed anchor token, so a
        decoder that strips a leading space at the start of its input does not)."""
        base = self.decode(self.anchor)
        return [len(self.decode(self.anchor + new[: j + 1])) - len(base) for j in range(len(new))]


@dataclass
class _Stream:
    """One model's token stream of one row's completion text."""

    prompt: list[int]
    ids: list[int] = field(default_factory=list)
    ends: list[int] = field(default_factory=list)  # char offset where each token's text ends
    own: list[bool] = field(
        default_factory=list
    )  # sampled by this model (not encoded from the partner's text)
    logprob: list[float] = field(
        default_factory=list
    )  # this model's log-prob of its own tokens (0 elsewhere)
    cols: list[int] = field(default_factory=list)  # KV-cache column of each fed token (a prefix of ids)
    pending: int = 0  # trailing own tokens inside an unfinished UTF-8 character (not yet in the text)
    stale: bool = False  # the last logits are not those after the last fed token (rolled back)

    @property
    def synced(self) -> int:
        return self.ends[-1] if self.ids else 0

    def truncate(self, n: int, side: _Side, row: int) -> None:
        del self.ids[n:], self.ends[n:], self.own[n:], self.logprob[n:]
        if len(self.cols) > n:
            side.mask[row, self.cols[n:]] = 0
            del self.cols[n:]
            self.stale = True


class _Side:
    """One model's batched KV cache (an HF DynamicCache grown by columns; rolled back by masking)."""

    def __init__(self, name: str, model, codec: Codec, pad_id: int):
        self.name, self.model, self.codec, self.pad_id = name, model, codec, pad_id
        self.device = next(model.parameters()).device
        target = model.get_base_model() if hasattr(model, "get_base_model") else model
        self.arg = "cache" if "cache" in inspect.signature(target.forward).parameters else "past_key_values"
        cfg = getattr(model.config, "get_text_config", lambda: model.config)()
        sliding = set(getattr(cfg, "layer_types", None) or []) - {"full_attention"}
        self.window = getattr(cfg, "sliding_window", None) if sliding else None
        self.n_ids = len(codec.tokenizer)  # logits are cut to it: rows past the tokenizer are padding
        self.positions = config_positions(model.config)  # a row never reads past them (GPT-2: an IndexError)
        self.cache = None
        self.seconds = {"prefill": 0.0, "catch_up": 0.0, "step": 0.0, "step_wide": 0.0}
        self.forwards = {"catch_up": 0, "step": 0, "step_wide": 0}
        self.compactions = 0

    def _run(self, input_ids, attention_mask, position_ids):
        out = self.model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            use_cache=True,
            logits_to_keep=1,
            **{self.arg: self.cache},
        )
        self.cache = out.cache if self.arg == "cache" else out.past_key_values
        return out.logits[:, -1, : self.n_ids]  # rows past the tokenizer are padding: never sampled

    def prefill(self, prompts: list[list[int]]) -> None:
        t0 = time.perf_counter()
        B, L = len(prompts), max(len(p) for p in prompts)
        ids = torch.full((B, L), self.pad_id, dtype=torch.long)
        self.mask = torch.zeros(B, 2 * L + 64, dtype=torch.long)
        for i, p in enumerate(prompts):
            ids[i, L - len(p) :] = torch.tensor(p)
            self.mask[i, L - len(p) : L] = 1
        pos = (self.mask[:, :L].cumsum(-1) - 1).clamp(min=0)
        _check_positions(self.name, self.positions, L)
        self.C = L
        self.logits = self._run(ids.to(self.device), self.mask[:, :L].to(self.device), pos.to(self.device))
        self.prompt_logits = self.logits.clone()
        self.streams = [_Stream(prompt=list(p)) for p in prompts]
        self.seconds["prefill"] += time.perf_counter() - t0

    def forward(self, chunks: dict[int, list[int]], kind: str) -> None:
        """Feed each row's chunk, right-aligned in one (rows, w) forward; every other row gets w masked
        columns. When only some rows feed (a catch-up), only they run: their KV rows are taken out,
        run, and their w new columns written back (the others' stay zero and masked), so one long
        catch-up does not make the whole batch compute w positions."""
        if not chunks:
            return
        t0 = time.perf_counter()
        self.compact()
        b, C = len(self.streams), self.C
        w = max(len(c) for c in chunks.values())
        if self.window is not None and C + w >= self.window:
            raise ValueError(
                f"text pairing: the {self.name} model's KV cache needs {C + w} columns, past its sliding "
                f"window of {self.window}; shorten prompt + max_new_tokens"
            )
        if C + w > self.mask.shape[1]:
            grow = torch.zeros(b, max(C + w, 2 * self.mask.shape[1]) - self.mask.shape[1], dtype=torch.long)
            self.mask = torch.cat([self.mask, grow], dim=1)
        self.mask[:, C : C + w] = 0
        order = sorted(chunks)
        subset = len(order) < b and kind == "catch_up"
        run = order if subset else list(range(b))
        ids = torch.full((len(run), w), self.pad_id, dtype=torch.long)
        pos = torch.tensor([len(self.streams[i].prompt) + len(self.streams[i].cols) for i in run])[
            :, None
        ].repeat(1, w)
        for j, i in enumerate(run):
            chunk = chunks.get(i)
            if not chunk:
                continue
            n, st = len(chunk), self.streams[i]
            start = len(st.prompt) + len(st.cols)
            ids[j, w - n :] = torch.tensor(chunk)
            pos[j, w - n :] = torch.arange(start, start + n)
            self.mask[i, C + w - n : C + w] = 1
            st.cols.extend(range(C + w - n, C + w))
            st.stale = False
        _check_positions(self.name, self.positions, int(pos.max()) + 1)  # on the CPU, before the forward
        rows = torch.tensor(order, device=self.device)
        if subset:
            layers = self.cache.layers
            full = [(layer.keys, layer.values) for layer in layers]
            for layer, (k, v) in zip(layers, full, strict=True):
                layer.keys, layer.values = k[rows], v[rows]
            sub_mask = self.mask[torch.tensor(order), : C + w]
            logits = self._run(ids.to(self.device), sub_mask.to(self.device), pos.to(self.device))
            for layer, (k, v) in zip(layers, full, strict=True):
                new_k, new_v = layer.keys[:, :, C:], layer.values[:, :, C:]
                layer.keys = torch.cat([k, k.new_zeros(k.shape[0], k.shape[1], w, k.shape[3])], dim=2)
                layer.values = torch.cat([v, v.new_zeros(v.shape[0], v.shape[1], w, v.shape[3])], dim=2)
                layer.keys[rows, :, C:] = new_k
                layer.values[rows, :, C:] = new_v
            self.logits[rows] = logits
        else:
            logits = self._run(
                ids.to(self.device), self.mask[:, : C + w].to(self.device), pos.to(self.device)
            )
            self.logits[rows] = logits[rows]
        self.C = C + w
        kind = "step_wide" if kind == "step" and w > 1 else kind  # a step forward carrying short catch-ups
        self.seconds[kind] += time.perf_counter() - t0
        self.forwards[kind] += 1

    compact_slack = 32  # defragment once the cache has this many columns more than twice the longest row

    def compact(self) -> bool:
        """Squeeze out the holes (rolled-back and other rows' padding columns): every row's live columns
        move, in order, to the right end of a cache as wide as the longest row. Keys keep the rotary
        positions they were written with, so attention is unchanged. Returns whether it ran."""
        b, C = len(self.streams), self.C
        valid = self.mask[:, :C].bool()
        n = valid.sum(1)
        width = int(n.max())
        if 2 * width + self.compact_slack > C:
            return False
        newcol = (width - n)[:, None] + valid.long().cumsum(1) - 1  # (b, C) target of each live column
        rows, cols = valid.nonzero(as_tuple=True)
        source = torch.zeros(b, width, dtype=torch.long)
        source[rows, newcol[rows, cols]] = cols
        mask = torch.zeros(b, self.mask.shape[1], dtype=torch.long)
        mask[rows, newcol[rows, cols]] = 1
        index = source.to(self.device)[:, None, :, None]
        for layer in self.cache.layers:
            shape = (-1, layer.keys.shape[1], -1, layer.keys.shape[3])
            layer.keys = layer.keys.gather(2, index.expand(*shape))
            layer.values = layer.values.gather(2, index.expand(*shape))
            if hasattr(layer, "cumulative_length"):
                layer.cumulative_length = width
        for r, st in enumerate(self.streams):
            st.cols = newcol[r, st.cols].tolist() if st.cols else []
        self.mask, self.C = mask, width
        self.compactions += 1
        return True

    def select(self, keep: list[int]) -> None:
        idx = torch.tensor(keep, device=self.device)
        self.cache.batch_select_indices(idx)
        self.mask = self.mask[torch.tensor(keep)]
        self.logits, self.prompt_logits = self.logits[idx], self.prompt_logits[idx]
        self.streams = [self.streams[i] for i in keep]


def _check_positions(name: str, positions: int | None, needed: int) -> None:
    """One line, not an IndexError deep in the model, when a row needs more positions than the model reads: a
    text pair's partner reads the same text in its own tokens, which may be more than the senior's budget."""
    if positions is not None and needed > positions:
        raise UserError(
            f"text pairing: the {name} model reads at most {positions} positions, and a row needs {needed} "
            "of its own tokens (its prompt and the text so far, in its tokenizer); lower --max-new-tokens "
            "(or --context-length) or use a partner with a longer context"
        )


def word_start_before(text: str, pos: int) -> int:
    """The last position <= pos where a word starts (whitespace after non-whitespace), or 0.

    >>> word_start_before("ab cd", 4), word_start_before("ab cd", 2), word_start_before("ab", 1)
    (2, 2, 0)
    """
    for w in range(pos, 0, -1):
        if w < len(text) and text[w].isspace() and not text[w - 1].isspace():
            return w
    return 0


def sync_stream(
    st: _Stream, codec: Codec, text: str, side: _Side | None = None, row: int = 0
) -> tuple[int, int, int]:
    """Bring `st` up to `text` (the shared text; `st` covers a prefix of it). Returns (window start b,
    stream index k of b, new tokens).

    Every tokenizer splits at a word start (whitespace after non-whitespace), so the encoding of
    text[w:] from the last word start w is the tail of the encoding of the whole text. The window
    starts at the stream's last token boundary b that this encoding also has (going back a token
    at a time, e.g. when the stream ends inside a word the partner continued); the stream's tokens
    past b that agree with it are kept, the rest dropped (the cache rolled back) and replaced.
    """
    k = len(st.ids) - st.pending
    while True:
        if 0 < k < len(st.ids) and st.ends[k - 1] == st.ends[k]:  # inside one multi-token character
            k -= 1
            continue
        b = st.ends[k - 1] if k else 0
        w = word_start_before(text, b)
        enc = codec.encode(text[w:])
        ends = codec.ends(enc)
        if b == w:
            j = 0
            break
        if b - w in ends:  # the last token ending there (earlier ones may hold part of one character)
            j = len(ends) - ends[::-1].index(b - w)
            break
        k -= 1
    new, new_ends = enc[j:], [w + e for e in ends[j:]]
    got = codec.piece(st.prompt + st.ids[:k], new)
    if got != text[b:]:  # nothing changed yet: a caller may end the row (`Unspellable`) and go on
        raise Unspellable(
            f"text pairing: the {codec.name} tokenizer does not decode its encoding of {text[b:]!r} back in "
            f"context (got {got!r})"
        )
    c = 0
    old = st.ids[k:]
    while c < min(len(old), len(new)) and old[c] == new[c] and st.ends[k + c] == new_ends[c]:
        c += 1
    if side is not None:
        st.truncate(k + c, side, row)
    else:
        del st.ids[k + c :], st.ends[k + c :], st.own[k + c :], st.logprob[k + c :]
    st.pending = 0
    st.ids += new[c:]
    st.ends += new_ends[c:]
    st.own += [False] * (len(new) - c)
    st.logprob += [0.0] * (len(new) - c)
    return b, k, len(new) - c


def _truncate(st: _Stream, n: int, side: _Side | None, row: int) -> None:
    """Keep the first `n` tokens of `st` (rolling its KV cache back when its side is given)."""
    if n >= len(st.ids):
        return
    if side is not None:
        st.truncate(n, side, row)
    else:
        del st.ids[n:], st.ends[n:], st.own[n:], st.logprob[n:]


def _drop_pending(st: _Stream, side: _Side | None = None, row: int = 0) -> None:
    """Drop the held-back tokens of an unfinished character (they are not in the text)."""
    if st.pending:
        _truncate(st, len(st.ids) - st.pending, side, row)
        st.pending = 0


def _spells(st: _Stream, codec: Codec, text: str) -> bool:
    """Whether `st` could be brought up to `text` (tried on a copy; `st` is not changed)."""
    trial = _Stream(
        prompt=st.prompt, ids=list(st.ids), ends=list(st.ends), own=list(st.own), logprob=list(st.logprob)
    )
    try:
        sync_stream(trial, codec, text)
    except Unspellable:
        return False
    return True


def _spell_toward(st: _Stream, codec: Codec, text: str, side: _Side | None, row: int) -> None:
    """Bring `st` (a prefix of `text`) up to the longest prefix of `text` its tokenizer spells: all of
    it, else the longest found by bisection over the characters past the stream's end."""
    lo, hi = st.synced, len(text)
    if not _spells(st, codec, text):
        hi -= 1
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if _spells(st, codec, text[:mid]):
                lo = mid
            else:
                hi = mid - 1
        text = text[:lo]
    if st.synced < len(text):
        sync_stream(st, codec, text, side, row)


@dataclass
class _Row:
    author: str
    text: str = ""
    owner: bytearray = field(default_factory=bytearray)  # 1 = the senior wrote this character
    since: int = 0
    steps: int = 0
    prev_nl: bool = False
    exempt: bool = True  # the next token is the first of a turn that a redraw already chose
    kept: int = 0
    tdraw: int = 0
    adraw: int = 0
    withdrawn: int = 0
    handoffs: int = 0
    kind: str = "start"  # what caused the last handoff
    finish: str | None = None
    eos_by: str | None = None
    eos_lp: float = 0.0
    catch_up: dict = field(default_factory=lambda: {SENIOR: 0, JUNIOR: 0})
    snapshots: list = field(default_factory=list)


@dataclass
class TextPairOutput:
    """Result of `TextPairGenerator.generate` for B rows (lists, one entry per row).

    senior_ids / junior_ids: each model's tokenization of the final text (+ its EOS when the row
    ended on EOS); senior_authored / junior_authored: 1 exactly on tokens that model sampled and kept.
    char_authors: 1 per character the senior wrote. snapshots (check=True): per catch-up,
    (model, handoff kind, text length N, window start b, its stream index k, stream ids).
    """

    texts: list[str]
    char_authors: list[list[int]]
    senior_ids: list[list[int]]
    senior_authored: list[list[int]]
    senior_logprobs: list[list[float]]
    junior_ids: list[list[int]]
    junior_authored: list[list[int]]
    finish_reasons: list[str]
    withdrawn: list[int]
    handoffs: list[int]
    catch_up_tokens: dict[str, list[int]]
    seconds: dict[str, float]
    snapshots: list[list[tuple]]
    logit_error: float = 0.0  # check=True: largest |cached - cache-free| author logit before a sample

    def __len__(self) -> int:
        return len(self.texts)

    def as_tandem_output(self, pad_id: int) -> TandemOutput:
        """The senior's side as a lockstep `TandemOutput`: its tokenization of the text, senior_authored =
        senior_authored (what training and the rollout metrics read); junior log-probs are not defined."""
        B, T = len(self), max([len(ids) for ids in self.senior_ids] + [1])
        tokens = torch.full((B, T), pad_id, dtype=torch.long)
        authored = torch.zeros(B, T, dtype=torch.bool)
        in_completion = torch.zeros(B, T, dtype=torch.bool)
        logprob = torch.zeros(B, T)
        rows = zip(self.senior_ids, self.senior_authored, self.senior_logprobs, strict=True)
        for r, (ids, mask, lps) in enumerate(rows):
            n = len(ids)
            tokens[r, :n] = torch.tensor(ids, dtype=torch.long)
            authored[r, :n] = torch.tensor(mask, dtype=torch.bool)
            in_completion[r, :n] = True
            logprob[r, :n] = torch.tensor(lps)
        codes = torch.tensor([FINISH_REASONS.index(f) for f in self.finish_reasons], dtype=torch.long)
        return TandemOutput(
            tokens=tokens,
            senior_authored=authored,
            completion_mask=in_completion,
            senior_logprob=logprob,
            junior_logprob=None,
            finish_codes=codes,
        )

    @property
    def senior_char_share(self) -> list[float]:
        return [sum(a) / len(a) if a else 0.0 for a in self.char_authors]


class TextPairGenerator:
    """Co-generate with a senior and a junior that each keep their own tokenizer.

    >>> gen = TextPairGenerator(senior, senior_tok, junior, junior_tok)  # doctest: +SKIP
    >>> out = gen.generate(  # doctest: +SKIP
    ...     senior_prompts, junior_prompts, WordSchedule(p=0.5), Sampling(64))
    >>> out.texts, out.senior_ids, out.senior_authored  # doctest: +SKIP
    """

    # Catch-ups of at most this many tokens join the one-token step forward; longer ones run as a
    # forward of their rows only. 1 measured faster than 4 (bench/RESULTS.md, "Text pairing"): a
    # wider step makes every row pay for the widest pending catch-up.
    short_catch_up = 1

    def __init__(
        self,
        senior,
        senior_tokenizer,
        junior=None,
        junior_tokenizer=None,
        *,
        senior_eos_ids: list[int] | None = None,
        junior_eos_ids: list[int] | None = None,
    ):
        self.models = {SENIOR: senior, JUNIOR: junior}
        self.codecs = {SENIOR: Codec(senior_tokenizer, SENIOR)}
        self.eos = {SENIOR: _eos_ids(senior, senior_tokenizer, senior_eos_ids)}
        if junior is not None:
            if junior_tokenizer is None:
                raise ValueError("a junior model needs its own tokenizer (junior_tokenizer)")
            self.codecs[JUNIOR] = Codec(junior_tokenizer, JUNIOR)
            self.eos[JUNIOR] = _eos_ids(junior, junior_tokenizer, junior_eos_ids)

    @torch.no_grad()
    def generate(
        self,
        senior_prompt_ids: list[list[int]],
        junior_prompt_ids: list[list[int]] | None,
        schedule: Schedule,
        sampling: Sampling,
        row_keys: list[int] | None = None,
        *,
        check: bool = False,
        check_logits: bool | None = None,
    ) -> TextPairOutput:
        """One completion per row. Each model gets its own prompt ids (junior_prompt_ids: None without
        a junior). sampling: token budget, temperature / top_p / top_k and seed (`Sampling`).
        row_keys: one int per row that seeds its randomness with `sampling.seed` (default: the
        row's index). check: record a snapshot per catch-up for `invariant_failures`; check_logits
        (default: check) compares every cached logit with a fresh cache-free forward (slow)."""
        rule = schedule.text_rule()
        if rule is None:
            raise ValueError(
                f"text pairing cannot run the schedule {schedule.name!r}: it reads token ids "
                f"(text schedules: {', '.join(text_schedules())})"
            )
        if not senior_prompt_ids or any(len(p) == 0 for p in senior_prompt_ids):
            raise ValueError("every prompt needs at least one token")
        writers = set(schedule.writers)
        if JUNIOR in writers and self.models[JUNIOR] is None:
            raise ValueError(f"{type(schedule).__name__} needs a junior model, but the generator has none")
        B = len(senior_prompt_ids)
        prompts = {SENIOR: senior_prompt_ids, JUNIOR: junior_prompt_ids}
        if JUNIOR in self.codecs and (junior_prompt_ids is None or len(junior_prompt_ids) != B):
            raise ValueError("junior_prompt_ids must give one prompt per row, in the junior's tokenizer")
        t_start = time.perf_counter()
        self.logit_error = 0.0  # check=True: largest |cached - fresh| logit seen before a sample
        sides: dict[str, _Side] = {}
        was_training = {}
        for name in sorted(writers):
            model = self.models[name]
            was_training[name] = model.training
            model.eval()
            tok = self.codecs[name].tokenizer
            pad = tok.pad_token_id if tok.pad_token_id is not None else self.eos[name][0]
            sides[name] = _Side(name, model, self.codecs[name], pad)
        try:
            with no_router_logits([self.models[name] for name in sides]):
                for name, side in sides.items():
                    side.prefill(prompts[name])
                if row_keys is not None and len(row_keys) != B:
                    raise ValueError(f"row_keys has {len(row_keys)} keys for {B} rows")
                self._check_logits = check if check_logits is None else check_logits
                keys = B if row_keys is None else row_keys
                out = self._decode(sides, prompts, keys, rule, sampling, check)
        finally:
            for name, training in was_training.items():
                self.models[name].train(training)
        out.seconds["total"] = time.perf_counter() - t_start
        out.logit_error = self.logit_error
        for name, side in sides.items():
            for k, v in side.seconds.items():
                out.seconds[f"{name}_{k}"] = v
            for k, v in side.forwards.items():
                out.seconds[f"{name}_{k}_forwards"] = float(v)
            out.seconds[f"{name}_compactions"] = float(side.compactions)
        return out

    def _decode(self, sides, prompts, keys, rule, sampling: Sampling, check) -> TextPairOutput:
        N, seed = sampling.max_new_tokens, sampling.seed
        n_draws = 2 * N + 2
        u_tok = row_uniforms(seed, keys, n_draws)
        u_author = row_uniforms(seed + 0x5EED, keys, n_draws)
        B = u_tok.shape[0]
        rows = [_Row(author=rule.first_author(u_author[r, 0].item())) for r in range(B)]
        for r in rows:
            r.adraw = 1
        live = list(range(B))  # original row index of each live position in the sides' batches
        results: dict[int, tuple] = {}

        for _ in range(3 * N + 8):
            # (1) make every live row's author ready to sample: catch up, then one chunk forward per group
            chunks = {name: {"catch_up": {}, "step": {}} for name in sides}
            for pos, r in enumerate(live):
                row = rows[r]
                if row.finish is not None:
                    continue
                side = sides[row.author]
                st = side.streams[pos]
                caught = False
                if st.synced < len(row.text) and st.pending == 0:
                    try:
                        b, k, n_new = sync_stream(st, side.codec, row.text, side, pos)
                    except Unspellable:  # the partner wrote what this model cannot read: the row ends
                        self._end_unrepresentable(
                            row, {n: (s.streams[pos], s) for n, s in sides.items()}, pos, check
                        )
                        continue
                    row.catch_up[row.author] += n_new
                    caught = True
                    if check:
                        row.snapshots.append((row.author, row.kind, len(row.text), b, k, list(st.ids)))
                chunk = st.ids[len(st.cols) :]
                if not chunk and st.stale:
                    if st.cols:  # rolled back to a fed token: feed it again for its logits
                        side.mask[pos, st.cols.pop()] = 0
                        chunk = st.ids[len(st.cols) :]
                    else:
                        side.logits[pos] = side.prompt_logits[pos]
                        st.stale = False
                if chunk:  # a short catch-up rides in the step forward; a long one gets its own (rows subset)
                    long = caught and len(chunk) > self.short_catch_up
                    chunks[row.author]["catch_up" if long else "step"][pos] = chunk
            for name, side in sides.items():
                side.forward(chunks[name]["catch_up"], "catch_up")
                side.forward(chunks[name]["step"], "step")

            # (2) sample each row's token from its author's logits, with the row's next uniform
            sampled: dict[int, tuple[int, float]] = {}
            for name, side in sides.items():
                pos_list = [
                    p for p, r in enumerate(live) if rows[r].author == name and rows[r].finish is None
                ]
                if not pos_list:
                    continue
                idx = torch.tensor(pos_list, device=side.device)
                logits = side.logits[idx]
                if (
                    self._check_logits
                ):  # the cached logits against one fresh, cache-free forward of the stream
                    for j, p in enumerate(pos_list):
                        st = side.streams[p]
                        ids = torch.tensor([st.prompt + st.ids], device=side.device)
                        ref = side.model(input_ids=ids).logits[0, -1, : side.n_ids].float()
                        self.logit_error = max(self.logit_error, (ref - logits[j].float()).abs().max().item())
                u = torch.stack([u_tok[live[p], rows[live[p]].tdraw] for p in pos_list])[:, None]
                tok = sample_with_uniforms(logits, u, sampling.temperature, sampling.top_k, sampling.top_p)
                lp = logits.float().gather(1, tok[:, None]).squeeze(1) - torch.logsumexp(
                    logits.float(), dim=-1
                )
                for p, t, x in zip(pos_list, tok.tolist(), lp.tolist(), strict=True):
                    sampled[p] = (t, x)
                    rows[live[p]].tdraw += 1

            # (3) per row: the text, the schedule, handoffs, finish
            for pos, r in enumerate(live):
                if pos in sampled:
                    self._advance(rows[r], sides[rows[r].author], pos, *sampled[pos], rule, u_author[r], N)

            # (4) finished rows: their outputs, then drop them from every batch once a quarter are done
            done = [p for p, r in enumerate(live) if rows[r].finish is not None]
            if done and (4 * len(done) >= len(live) or len(done) == len(live)):
                for p in done:
                    results[live[p]] = self._result(
                        rows[live[p]], {n: s.streams[p] for n, s in sides.items()}, prompts, live[p], check
                    )
                keep = [p for p in range(len(live)) if rows[live[p]].finish is None]
                live = [live[p] for p in keep]
                if not live:
                    break
                for side in sides.values():
                    side.select(keep)
        else:  # pragma: no cover - the budget of iterations is never reached (each one keeps or withdraws)
            raise RuntimeError("text pairing did not finish within its iteration budget")

        order = [results[r] for r in range(B)]
        return TextPairOutput(
            texts=[o[0] for o in order],
            char_authors=[o[1] for o in order],
            senior_ids=[o[2] for o in order],
            senior_authored=[o[3] for o in order],
            senior_logprobs=[o[4] for o in order],
            junior_ids=[o[5] for o in order],
            junior_authored=[o[6] for o in order],
            finish_reasons=[rows[r].finish for r in range(B)],
            withdrawn=[rows[r].withdrawn for r in range(B)],
            handoffs=[rows[r].handoffs for r in range(B)],
            catch_up_tokens={n: [rows[r].catch_up[n] for r in range(B)] for n in (SENIOR, JUNIOR)},
            seconds={},
            snapshots=[rows[r].snapshots for r in range(B)],
        )

    def _advance(
        self, row: _Row, side: _Side, pos: int, tok: int, lp: float, rule: TextRule, u_author, N: int
    ) -> None:
        """Apply one sampled token of row's author (its side's batch position `pos`) to the text and the
        schedule's text rule."""
        author = row.author
        st = side.streams[pos]

        def redraw() -> str:
            u = u_author[row.adraw].item()
            row.adraw += 1
            return rule.draw(u)

        def hand_to(new: str, kind: str) -> None:
            if new != author:
                row.author, row.kind = new, kind
                row.handoffs += 1

        if tok in self.eos[author]:
            row.finish, row.eos_by, row.eos_lp = "eos", author, lp
            return
        k0 = len(st.ids) - st.pending
        piece = self.codecs[author].piece(st.prompt + st.ids[:k0], st.ids[k0:] + [tok])
        if piece is None:  # the author's decoding is not prefix-stable at this id: no text to add
            row.finish = UNREPRESENTABLE
            return
        if (
            piece.endswith("\ufffd") and st.pending < _MAX_PENDING
        ):  # inside a UTF-8 character: wait for the rest
            st.ids.append(tok), st.ends.append(len(row.text)), st.own.append(True), st.logprob.append(lp)
            st.pending += 1
            row.kept += 1
            if row.kept >= N:
                row.finish = "length"
            return
        if rule.redraw_before_word and not row.exempt and is_word_start(row.text, piece):
            new = redraw()
            row.since = 0
            if new != author:  # redraw before the word start: withdraw the token, the partner writes the word
                if st.pending:  # with the held-back bytes of its character (they were never text)
                    st.truncate(k0, side, pos)
                    st.pending = 0
                row.withdrawn += 1
                row.exempt = True
                hand_to(new, "word")
                return
        row.exempt = False
        end = len(row.text) + len(piece)
        if "\ufffd" in piece:
            # Bytes that are no UTF-8 text: the text keeps U+FFFD, and the author's own stream is rolled
            # back and re-encoded from the text at its next turn, like a partner's (so every stream
            # stays an encoding of the shared text; these tokens are not counted as its own).
            st.truncate(k0, side, pos)
            st.pending = 0
        else:
            for j in range(k0, len(st.ids)):
                st.ends[j] = end
            st.pending = 0
            st.ids.append(tok), st.ends.append(end), st.own.append(True), st.logprob.append(lp)
        row.text += piece
        row.owner += bytes([author == SENIOR]) * len(piece)
        row.kept += 1
        row.since += 1
        other = JUNIOR if author == SENIOR else SENIOR
        if rule.backstop is not None and row.since >= rule.backstop:
            row.since = 0
            hand_to(redraw(), "backstop")
        if rule.redraw_every_piece:
            hand_to(redraw(), "token")
        if rule.alternate_every is not None and row.since >= rule.alternate_every:
            row.since = 0
            hand_to(other, "chunk")
        if rule.alternate_at_step_end:
            ended = piece.endswith("\n\n") or (row.prev_nl and bool(piece) and set(piece) == {"\n"})
            row.prev_nl = piece.endswith("\n") and not ended
            if ended:
                row.steps += 1
                if rule.max_steps is not None and row.steps >= rule.max_steps:
                    row.finish = "rounds"
                    return
                hand_to(other, "step")
        if row.kept >= N and row.finish is None:
            row.finish = "length"

    def _result(self, row: _Row, streams: dict, prompts, r: int, check: bool) -> tuple:
        """(text, char authors, senior ids, mask, log-probs, junior ids, mask) of a finished row.

        streams: the writers' streams of this row. The senior must spell the final text (the output
        is its tokenization; if it cannot, the row ends "unrepresentable"); the junior's tokenization
        is best effort."""
        sts = {}
        for name in self.codecs:
            sts[name] = streams.get(name) or _Stream(prompt=list(prompts[name][r]))
            _drop_pending(
                sts[name]
            )  # an unfinished character at the end: not in the text, so not in the output
        try:
            self._final_sync(row, SENIOR, sts[SENIOR], check)
        except Unspellable:
            kept = {n: (st, None) for n, st in sts.items() if n in streams or n == SENIOR}
            self._end_unrepresentable(row, kept, 0, check)
        if JUNIOR in sts:
            try:
                self._final_sync(row, JUNIOR, sts[JUNIOR], check)
            except Unspellable:  # text the junior never had to read: its tokenization stops before it
                pass
        out = []
        for name in (SENIOR, JUNIOR):
            if name not in self.codecs:
                out.append(([], [], []))
                continue
            st = sts[name]
            ids, mask, lps = list(st.ids), [int(o) for o in st.own], list(st.logprob)
            if row.finish in ("eos", UNREPRESENTABLE):  # unrepresentable: an EOS no model sampled ends it
                ids.append(self.eos[name][0])
                mask.append(int(row.eos_by == name))
                lps.append(row.eos_lp if row.eos_by == name else 0.0)
            out.append((ids, mask, lps))
        (s_ids, s_mask, s_lp), (j_ids, j_mask, _) = out
        return row.text, list(row.owner), s_ids, s_mask, s_lp, j_ids, j_mask

    def _final_sync(self, row: _Row, name: str, st: _Stream, check: bool) -> None:
        if st.synced != len(row.text):
            b, k, _ = sync_stream(st, self.codecs[name], row.text)
            if check:
                row.snapshots.append((name, "final", len(row.text), b, k, list(st.ids)))

    def _end_unrepresentable(self, row: _Row, streams: dict, pos: int, check: bool) -> None:
        """End `row` as "unrepresentable": cut its text back to the longest prefix that every stream in
        `streams` ({name: (stream, its side or None)}) spells, and each stream to exactly that prefix.

        Each round cuts every stream back to its last token boundary at or before the cut and brings
        a stream that falls short as far toward the cut as its tokenizer spells; the cut is then the
        shortest stream. Cuts only shrink, so this ends (at worst at the empty text)."""
        cut = len(row.text)
        while True:
            for name, (st, side) in streams.items():
                _drop_pending(st, side, pos)
                _truncate(st, bisect.bisect_right(st.ends, cut), side, pos)
                if st.synced < cut:
                    _spell_toward(st, self.codecs[name], row.text[:cut], side, pos)
            shortest = min(st.synced for st, _ in streams.values())
            if shortest == cut:
                break
            cut = shortest
        row.text, row.owner = row.text[:cut], row.owner[:cut]
        row.finish, row.eos_by = UNREPRESENTABLE, None
        if check:  # snapshots of text that is no longer there cannot be checked against the final text
            row.snapshots = [snap for snap in row.snapshots if snap[2] <= cut]
            for name, (st, _) in streams.items():
                row.snapshots.append((name, UNREPRESENTABLE, cut, cut, len(st.ids), list(st.ids)))


def invariant_failures(out: TextPairOutput, tokenizers: dict, prompts: dict) -> list[str]:
    """Check the text-pairing invariant on a `check=True` output; [] when it holds.

    tokenizers / prompts: {"senior": ..., "junior": ...} (prompt ids per row, each model's own). For
    every snapshot (one per catch-up, and the final tokenization of each row):
    (1) the stream decodes, in the context of its prompt, to exactly the shared text at that time;
    (2) the ids past the window start are the tail of the tokenizer's encoding of that whole text
        (which has a token boundary at the window start): encoding in context, never alone.
    Also (3) each output's ids (less a final EOS) decode to the row's final text.
    """
    codecs = {name: Codec(tok, name) for name, tok in tokenizers.items()}
    bad = []
    for r, snaps in enumerate(out.snapshots):
        text = out.texts[r]
        for name, kind, n, b, k, ids in snaps:
            codec, prompt = codecs[name], prompts[name][r]
            got = codec.piece(prompt, ids)
            if got != text[:n]:
                bad.append(f"row {r} {name} {kind}@{n}: stream decodes to {got!r}, text is {text[:n]!r}")
                continue
            canon = codec.encode(text[:n])
            ends = codec.ends(canon)
            if b and b not in ends:
                bad.append(f"row {r} {name} {kind}@{n}: the encoding of the text has no boundary at {b}")
                continue
            tail = canon[len(ends) - ends[::-1].index(b) :] if b else canon
            if tail != ids[k:]:
                bad.append(
                    f"row {r} {name} {kind}@{n}: fed {ids[k:]} but the text encodes to {tail} past {b}"
                )
        for name, ids, reason in (
            ("senior", out.senior_ids[r], out.finish_reasons[r]),
            ("junior", out.junior_ids[r], out.finish_reasons[r]),
        ):
            if name not in codecs or not prompts.get(name):
                continue
            body = ids[:-1] if reason in ("eos", UNREPRESENTABLE) else ids
            got = codecs[name].piece(prompts[name][r], body)
            if got != text and not (
                name == "junior"
                and text.startswith(got or "")
                and not _spells(_Stream(prompt=list(prompts[name][r])), codecs[name], text)
            ):
                # (the junior's tokenization of text it cannot spell is a prefix: best effort)
                bad.append(f"row {r} {name} output decodes to {got!r}, text is {text!r}")
    return bad


@torch.no_grad()
def text_nll(
    model, tokenizer, prompt_ids: list[list[int]], texts: list[str], batch_size: int = 16
) -> list[tuple[float, int, int]]:
    """(negative log-likelihood in nats, UTF-8 bytes, tokens) of each text as a continuation of its
    prompt, teacher-forced in the model's own tokenization (the text encoded alone, which `Codec`
    checks decodes back to it after the prompt). Bits per byte = nll / ln 2 / bytes: comparable across
    vocabularies, unlike a per-token mean (a 49k-id and a 262k-id model cut a text into different
    numbers of tokens). Rows run `batch_size` at a time, right-padded (the padding is masked out)."""
    codec = Codec(tokenizer, "scored")
    n_ids = len(tokenizer)  # rows past the tokenizer are padding: not in the normaliser
    device = next(model.parameters()).device
    out: list[tuple[float, int, int] | None] = [None] * len(texts)
    todo = []
    for i, (prompt, text) in enumerate(zip(prompt_ids, texts, strict=True)):
        ids = codec.encode(text)
        if ids:
            todo.append((i, list(prompt), ids, len(text.encode("utf-8"))))
        else:
            out[i] = (0.0, len(text.encode("utf-8")), 0)
    positions = config_positions(model.config)
    for start in range(0, len(todo), batch_size):
        part = todo[start : start + batch_size]
        L = max(len(p) + len(ids) for _, p, ids, _ in part)
        _check_positions("scoring", positions, L)
        x = torch.zeros(len(part), L, dtype=torch.long)
        mask = torch.zeros(len(part), L, dtype=torch.long)
        for r, (_, p, ids, _) in enumerate(part):
            x[r, : len(p) + len(ids)] = torch.tensor(p + ids)
            mask[r, : len(p) + len(ids)] = 1
        logits = model(input_ids=x.to(device), attention_mask=mask.to(device)).logits
        for r, (i, p, ids, n_bytes) in enumerate(part):
            logp = torch.log_softmax(logits[r, len(p) - 1 : len(p) + len(ids) - 1, :n_ids].float(), dim=-1)
            nll = -logp.gather(1, torch.tensor(ids, device=device)[:, None]).sum().item()
            out[i] = (nll, n_bytes, len(ids))
    return out  # type: ignore[return-value]


def text_schedules() -> list[str]:
    """The registered schedules that run over text (`Schedule.text_rule`)."""
    return [name for name, cls in SCHEDULES.items() if cls().text_rule() is not None]


def _eos_ids(model, tokenizer, given: list[int] | None) -> list[int]:
    if given:
        return list(given)
    ids = set()
    if tokenizer.eos_token_id is not None:
        ids.add(tokenizer.eos_token_id)
    gen_eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    ids.update([gen_eos] if isinstance(gen_eos, int) else (gen_eos or []))
    if not ids:
        raise ValueError("no EOS token id: pass eos ids or a tokenizer with eos_token_id")
    return sorted(ids)

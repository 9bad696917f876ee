"""Token sampling from a batch of logits: temperature, top-k, top-p, greedy; and batch-invariant randomness.

Pure functions over tensors; `logits` is (B, V). Nothing here knows about authors or models.

Randomness (`RowStreams`): every uniform the engine draws is a pure function of
(row key, position, stream), a counter-based integer hash computed with int64 tensor ops whose
intermediate values never exceed 2^49 (no overflow, so CPU and CUDA give identical bits). A row's
sample therefore does not depend on its batch-mates, its sub-batch, prompt sharing, the device
or the number of processes. `row_key(*parts)` derives a 63-bit key from any tuple of ints and
strings (training: (seed, global step, prompt index, generation index); eval: (seed, benchmark,
problem key, sample index, protocol)).
"""

from __future__ import annotations

import hashlib

import torch

from trlvr.engine.options import check_decoding

TOKEN_STREAM, AUTHOR_STREAM = 0, 1  # what a uniform is for: the token draw, the schedule's redraw
_M32 = 0xFFFFFFFF


def row_key(*parts) -> int:
    """A 63-bit key from a tuple of ints / strings, the same in every process and Python run.

    >>> row_key(0, 3, 1, 2) == row_key(0, 3, 1, 2) != row_key(0, 3, 2, 1)
    True
    """
    for p in parts:
        if not isinstance(p, int | str) or isinstance(p, bool):
            raise TypeError(f"row_key parts must be ints or strings, got {p!r}")
    text = "\x1f".join(f"{type(p).__name__[0]}{p}" for p in parts).encode()
    return int.from_bytes(hashlib.blake2b(text, digest_size=8).digest(), "little") >> 1


def _mul32(x: torch.Tensor, c: int) -> torch.Tensor:
    """(x * c) mod 2^32 for int64 x in [0, 2^32) and a 32-bit constant c, never overflowing int64."""
    hi, lo = x >> 16, x & 0xFFFF
    return ((((hi * c) & 0xFFFF) << 16) + lo * c) & _M32


def mix32(x: torch.Tensor) -> torch.Tensor:
    """A bijective 32-bit integer hash (Wellons' lowbias32) on int64 tensors holding values in [0, 2^32)."""
    x = x ^ (x >> 16)
    x = _mul32(x, 0x7FEB352D)
    x = x ^ (x >> 15)
    x = _mul32(x, 0x846CA68B)
    return x ^ (x >> 16)


def hash_uniform(lo: torch.Tensor, hi: torch.Tensor, position, stream: int) -> torch.Tensor:
    """Uniforms in [0, 1), float32, one per key: a pure function of (key, position, stream).

    lo, hi: (b,) int64, the key's low and high 32 bits; position: int or (b,) int64.
    Each key lane is mixed with a position word by a bijection, so two different keys never share
    a whole stream; the 24 top bits of the final hash give the float (float32's mantissa).
    """
    pos = torch.as_tensor(position, dtype=torch.long, device=lo.device) & _M32
    word = mix32(mix32(pos) ^ ((stream * 0x9E3779B9 + 0x632BE5AB) & _M32))
    a = mix32(lo ^ word)
    b = mix32(hi ^ mix32(word ^ 0x5BD1E995))
    h = mix32((a + b) & _M32)
    return (h >> 8).to(torch.float32) * (1.0 / (1 << 24))


class RowStreams:
    """The random streams of the rows of one generation: uniforms by (row key, position, stream).

    keys: (B,) int64 63-bit row keys. `select` keeps rows (compaction), `to` moves to another device
    (the split sampler computes the same uniforms on each device, no shared RNG). Schedules draw
    through `schedule_draws(position)`, which looks like a random source to them (`.device`,
    `.uniform(n)`).
    """

    def __init__(self, keys: torch.Tensor):
        keys = keys.to(torch.long)
        self.lo, self.hi = keys & _M32, (keys >> 32) & _M32

    @classmethod
    def _of(cls, lo, hi) -> RowStreams:
        s = cls.__new__(cls)
        s.lo, s.hi = lo, hi
        return s

    @property
    def device(self) -> torch.device:
        return self.lo.device

    def __len__(self) -> int:
        return self.lo.shape[0]

    def select(self, keep: torch.Tensor) -> RowStreams:
        keep = keep.to(self.device)
        return self._of(self.lo[keep], self.hi[keep])

    def to(self, device) -> RowStreams:
        return self._of(self.lo.to(device), self.hi.to(device))

    def uniform(self, position, stream: int = TOKEN_STREAM) -> torch.Tensor:
        """(b,) float32 uniforms of every row at `position` for `stream`."""
        return hash_uniform(self.lo, self.hi, position, stream)

    def schedule_draws(self, position) -> ScheduleDraws:
        return ScheduleDraws(self, position)


class ScheduleDraws:
    """What a schedule draws from at one position: `uniform(n)` gives the n rows' AUTHOR_STREAM uniforms.

    A second draw at the same position uses the next stream, so two draws never coincide.
    """

    def __init__(self, streams: RowStreams, position):
        self.streams, self.position, self.calls = streams, position, 0

    @property
    def device(self) -> torch.device:
        return self.streams.device

    def uniform(self, n: int) -> torch.Tensor:
        if n != len(self.streams):
            raise ValueError(f"a schedule drew {n} uniforms for {len(self.streams)} rows")
        u = self.streams.uniform(self.position, AUTHOR_STREAM + 2 * self.calls)
        self.calls += 1
        return u


def token_logprob(logits: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """log p(token) under the raw (temperature 1) distribution. (B, V), (B,) -> (B,) float32.

    logit - logsumexp: one reduction, no full (B, V) log-softmax written.
    """
    return logits.gather(1, tokens[:, None]).squeeze(1).float() - torch.logsumexp(logits.float(), dim=-1)


def filter_logits(
    logits: torch.Tensor, temperature: float, top_k: int = 0, top_p: float = 1.0
) -> torch.Tensor:
    """Return scaled logits with excluded tokens set to -inf. (B, V) -> (B, V), float32."""
    if temperature <= 0:
        raise ValueError("filter_logits needs temperature > 0; use greedy decoding for temperature 0")
    logits = logits.float() / temperature
    vocab = logits.shape[-1]
    if 0 < top_k < vocab:
        kth = torch.topk(logits, top_k, dim=-1).values[:, -1:]  # (B, 1) smallest kept logit
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p < 1.0:
        sorted_logits, order = torch.sort(logits, dim=-1, descending=True)
        probs = torch.softmax(sorted_logits, dim=-1)
        # Drop a token when the mass *before* it already reaches top_p: the top token always stays.
        drop_sorted = (probs.cumsum(dim=-1) - probs) >= top_p
        drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
        logits = logits.masked_fill(drop, float("-inf"))
    return logits


def draw_uniforms(batch: int, generator: torch.Generator | None = None, device=None) -> torch.Tensor:
    """The per-row uniforms `sample_tokens` draws: (batch, 1) float32 in [0, 1), from `generator`.

    Drawn once per step on one device and copied, they let two devices sample the same row alike.
    """
    return torch.rand(batch, 1, generator=generator, device=device)


def sample_with_uniforms(
    logits: torch.Tensor, u: torch.Tensor | None, temperature: float = 1.0, top_k: int = 0, top_p: float = 1.0
) -> torch.Tensor:
    """Inverse-CDF sample with given uniforms. (B, V), (B, 1) -> (B,) long; `u` is unused (may be None) at
    temperature 0.

    Row-wise: row i depends only on logits[i] and u[i], so a row sampled alone, in another batch or on
    another device (with the same uniform) gets the same token. Knows nothing of random generators.
    """
    if temperature == 0:
        return logits.argmax(dim=-1)
    probs = torch.softmax(filter_logits(logits, temperature, top_k, top_p), dim=-1)
    # Inverse-CDF sampling: one uniform per row and a binary search, instead of the B x V random
    # numbers torch.multinomial (or an exponential race) draws: the sampler's cost stays O(B log V).
    cdf = probs.cumsum(dim=-1)  # (B, V)
    u = (1.0 - u.to(cdf.device)) * cdf[:, -1:]  # (B, 1) in (0, total]
    return torch.searchsorted(cdf, u).squeeze(-1).clamp(max=cdf.shape[-1] - 1)


def sample_tokens(
    logits: torch.Tensor,
    temperature: float = 1.0,
    top_k: int = 0,
    top_p: float = 1.0,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """Sample one token per row. (B, V) -> (B,) long. temperature 0 means greedy (argmax, no draw)."""
    check_decoding(temperature, top_p, top_k)
    u = None if temperature == 0 else draw_uniforms(logits.shape[0], generator, logits.device)
    return sample_with_uniforms(logits, u, temperature, top_k, top_p)

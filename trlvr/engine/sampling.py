"""Token sampling from a batch of logits: temperature, top-k, top-p, greedy.

Pure functions over tensors; `logits` is (B, V). Nothing here knows about authors or models.
"""

from __future__ import annotations

import math

import torch


def check_decoding(temperature: float, top_p: float = 1.0, top_k: int = 0) -> None:
    """Raise ValueError for decoding settings that cannot sample (temperature 0 = greedy is allowed).

    >>> check_decoding(0.7, top_p=0.0)
    Traceback (most recent call last):
    ...
    ValueError: top_p must be in (0, 1], got 0.0
    """
    if not (isinstance(temperature, int | float) and math.isfinite(temperature) and temperature >= 0):
        raise ValueError(f"temperature must be a finite number >= 0 (0 = greedy), got {temperature!r}")
    if not (isinstance(top_p, int | float) and 0.0 < top_p <= 1.0):
        raise ValueError(f"top_p must be in (0, 1], got {top_p!r}")
    if not (isinstance(top_k, int) and not isinstance(top_k, bool) and top_k >= 0):
        raise ValueError(f"top_k must be an integer >= 0 (0 = no top-k), got {top_k!r}")


def token_logprob(logits: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """log p(token) under the raw (temperature 1) distribution. (B, V), (B,) -> (B,) float32.

    logit - logsumexp: one reduction, no full (B, V) log-softmax written.
    """
    return logits.gather(1, tokens[:, None]).squeeze(1).float() - torch.logsumexp(logits.float(), dim=-1)


def filter_logits(logits: torch.Tensor, temperature: float, top_k: int = 0, top_p: float = 1.0) -> torch.Tensor:
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
    """Inverse-CDF sample with given uniforms. (B, V), (B, 1) -> (B,) long; `u` is unused (may be None) at temperature 0.

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

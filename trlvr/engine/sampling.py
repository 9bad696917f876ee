"""Token sampling from a batch of logits: temperature, top-k, top-p, greedy.

Pure functions over tensors; `logits` is (B, V). Nothing here knows about authors or models.
"""

from __future__ import annotations

import torch


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


def sample_tokens(
    logits: torch.Tensor,
    temperature: float = 1.0,
    top_k: int = 0,
    top_p: float = 1.0,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """Sample one token per row. (B, V) -> (B,) long. temperature 0 means greedy (argmax)."""
    if temperature == 0:
        return logits.argmax(dim=-1)
    probs = torch.softmax(filter_logits(logits, temperature, top_k, top_p), dim=-1)
    # Inverse-CDF sampling: one uniform per row and a binary search, instead of the B x V random
    # numbers torch.multinomial (or an exponential race) draws: the sampler's cost stays O(B log V).
    cdf = probs.cumsum(dim=-1)  # (B, V)
    u = (1.0 - torch.rand(cdf.shape[0], 1, generator=generator, device=cdf.device)) * cdf[:, -1:]  # (0, total]
    return torch.searchsorted(cdf, u).squeeze(-1).clamp(max=cdf.shape[-1] - 1)

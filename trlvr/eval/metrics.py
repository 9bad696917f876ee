"""Per-token legibility and drift measures from logits: thin, shape-keeping wrappers of torch's own.

Shapes: N = token positions (any leading shape works), V = vocabulary. Logits at a position
are the model's prediction *for* the target token at that position (already shifted).
All maths in float32 whatever the input dtype.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def token_cross_entropy(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """-log p(target) in nats. logits (..., V), targets (...) long -> (...) float32.

    With the junior's logits over the senior's tokens this is the junior's surprisal, the
    per-token legibility cost (lower = the junior predicts the senior better).
    """
    flat = F.cross_entropy(
        logits.float().reshape(-1, logits.shape[-1]), targets.long().reshape(-1), reduction="none"
    )
    return flat.view(targets.shape)  # (...)


def token_kl(logits_p: torch.Tensor, logits_q: torch.Tensor) -> torch.Tensor:
    """KL(p || q) = sum_v p_v (log p_v - log q_v) in nats, over full distributions.

    logits_p, logits_q (..., V) -> (...) float32. With p = senior and q = junior this is the
    per-token drift of the senior away from the junior. Tokens where p_v = 0 contribute 0.
    """
    logp = torch.log_softmax(logits_p.float(), dim=-1)  # (..., V)
    logq = torch.log_softmax(logits_q.float(), dim=-1)  # (..., V)
    # kl_div(input=log q, target=log p, log_target) is p * (log p - log q), elementwise
    return F.kl_div(logq, logp, reduction="none", log_target=True).sum(-1).clamp(min=0.0)  # (...)

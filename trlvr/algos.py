"""The maths trlvr owns, as pure functions over tensors (no config objects, no trainer).

The GRPO loss itself is TRL's (`loss_type="dapo"`, see trlvr/training/trainer.py); what trlvr adds
is the author mask that restricts it to senior tokens, the checks that the mask is present and
meaningful, and per-token / per-sequence statistics.

Shapes: B = sequences, T = completion positions (right padded). Masks:
- `completion_mask` (B, T): True / 1 = a real completion token (EOS included), False = padding.
- `senior_mask` (B, T): True / 1 = the senior wrote this token (the loss applies), False = the
  junior wrote it or padding (no gradient, excluded from the token-mean normaliser).
"""

from __future__ import annotations

import torch


class AuthorMaskError(RuntimeError):
    """A tandem batch whose author mask is missing or cannot be right. Training must stop."""


def check_author_mask(
    senior_mask: list[list[int]] | None,
    completion_ids: list[list[int]],
) -> None:
    """Check a rollout's per-token author mask against its completions (raises AuthorMaskError).

    >>> check_author_mask([[1, 0, 1], [0]], [[5, 6, 7], [8]])
    >>> check_author_mask(None, [[5]])
    Traceback (most recent call last):
    ...
    trlvr.algos.AuthorMaskError: tandem rollout has no author mask (env_mask); refusing to train it as plain GRPO
    """
    if senior_mask is None:
        raise AuthorMaskError(
            "tandem rollout has no author mask (env_mask); refusing to train it as plain GRPO"
        )
    if len(senior_mask) != len(completion_ids):
        raise AuthorMaskError(
            f"author mask has {len(senior_mask)} rows but there are {len(completion_ids)} completions"
        )
    for i, (m, c) in enumerate(zip(senior_mask, completion_ids, strict=True)):
        if len(m) != len(c):
            raise AuthorMaskError(f"completion {i}: author mask has {len(m)} entries for {len(c)} tokens")
        if any(v not in (0, 1) for v in m):
            raise AuthorMaskError(f"completion {i}: author mask entries must be 0 (junior) or 1 (senior)")


def check_has_junior_tokens(junior_tokens: int, total_tokens: int, p: float) -> None:
    """Raise if a whole step's batch, under a stochastic schedule with 0 < p < 1, has no junior token.

    At p = 0.5 a batch of n tokens is all-senior with probability about 0.5**n: in practice this
    means the mask was lost or overwritten, and training would silently be plain GRPO.
    """
    if total_tokens > 0 and junior_tokens == 0 and 0.0 < p < 1.0:
        raise AuthorMaskError(
            f"tandem step with p={p} produced {total_tokens} completion tokens and none by the junior; the author "
            "mask is wrong or the junior never ran. Refusing to continue as plain GRPO"
        )


def author_stats(senior_mask: torch.Tensor, completion_mask: torch.Tensor) -> dict[str, torch.Tensor]:
    """Per-sequence authorship statistics, each (B,) float.

    senior_mask, completion_mask: (B, T) bool/int. Returns
      length (tokens in the completion), senior_tokens, junior_tokens,
      senior_share (senior_tokens / length, 0 for an empty completion),
      switches (author changes inside the completion).
    """
    c = completion_mask.bool()
    s = senior_mask.bool() & c
    length = c.sum(1).float()
    senior = s.sum(1).float()
    switches = ((s[:, 1:] != s[:, :-1]) & c[:, 1:]).sum(1).float()
    return {
        "length": length,
        "senior_tokens": senior,
        "junior_tokens": length - senior,
        "senior_share": senior / length.clamp(min=1.0),
        "switches": switches,
    }


def split_by_share(values: torch.Tensor, junior_share: torch.Tensor) -> tuple[float, float]:
    """Mean (NaN ignored) of `values` (B,) over the half of the batch with the lower / higher junior share (B,).

    The split is at the median rank (ties broken by position); with B = 1 both halves are that one value.
    >>> split_by_share(torch.tensor([1.0, 0.0, 1.0, 0.0]), torch.tensor([0.1, 0.9, 0.2, 0.8]))
    (1.0, 0.0)
    """
    order = torch.argsort(junior_share, stable=True)
    half = max(1, len(order) // 2)
    low, high = order[:half], order[-half:]
    return values[low].float().nanmean().item(), values[high].float().nanmean().item()

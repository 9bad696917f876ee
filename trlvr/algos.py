"""The maths trlvr owns, as pure functions over tensors (no config objects, no trainer).

The GRPO loss itself is TRL's (`loss_type="dapo"`, see trlvr/training/trainer.py); what trlvr adds
is the author mask that restricts it to senior tokens, the checks that the mask is present and
meaningful, and per-token / per-sequence statistics.

Shapes: B = sequences, T = completion positions (right padded). Masks:
- `completion_mask` (B, T): True / 1 = a real completion token (EOS included), False = padding.
- `senior_authored` (B, T): True / 1 = the senior wrote this token (the loss applies), False = the
  junior wrote it or padding (no gradient, excluded from the token-mean normaliser).
"""

from __future__ import annotations

import torch


class AuthorMaskError(RuntimeError):
    """A tandem batch whose author mask is missing or cannot be right. Training must stop."""


def check_author_mask(
    senior_authored: list[list[int]] | None,
    completion_ids: list[list[int]],
) -> None:
    """Check a rollout's per-token author mask against its completions (raises AuthorMaskError).

    >>> check_author_mask([[1, 0, 1], [0]], [[5, 6, 7], [8]])
    >>> check_author_mask(None, [[5]])  # doctest: +NORMALIZE_WHITESPACE
    Traceback (most recent call last):
    ...
    trlvr.algos.AuthorMaskError: tandem rollout has no author mask (env_mask); refusing to train it as plain
    GRPO
    """
    if senior_authored is None:
        raise AuthorMaskError(
            "tandem rollout has no author mask (env_mask); refusing to train it as plain GRPO"
        )
    if len(senior_authored) != len(completion_ids):
        raise AuthorMaskError(
            f"author mask has {len(senior_authored)} rows but there are {len(completion_ids)} completions"
        )
    for i, (m, c) in enumerate(zip(senior_authored, completion_ids, strict=True)):
        if len(m) != len(c):
            raise AuthorMaskError(f"completion {i}: author mask has {len(m)} entries for {len(c)} tokens")
        if any(v not in (0, 1) for v in m):
            raise AuthorMaskError(f"completion {i}: author mask entries must be 0 (junior) or 1 (senior)")


def junior_tokens_in_loss(senior_authored: list[list[int]], loss_mask: torch.Tensor | None) -> int:
    """How many junior-written tokens the loss would train: the rollout's author mask against the mask
    TRL multiplies into the loss (`completion_mask * tool_mask`, (B, T), rows in rollout order).

    `loss_mask` None means TRL got no mask at all (every completion token is trained). A tandem step
    must count 0; anything else trains the junior's text as the senior's.

    >>> junior_tokens_in_loss([[1, 0, 1], [0]], torch.tensor([[1, 0, 1], [0, 0, 0]]))
    0
    >>> # TRL's all-ones tool mask:
    >>> junior_tokens_in_loss([[1, 0, 1], [0]], torch.tensor([[1, 1, 1], [1, 0, 0]]))
    2
    >>> junior_tokens_in_loss([[1, 0, 1], [0]], None)
    2
    """
    junior = 0
    for i, authors in enumerate(senior_authored):
        who = torch.tensor(authors, dtype=torch.bool)
        trained = (
            torch.ones(len(authors), dtype=torch.bool)
            if loss_mask is None
            else loss_mask[i, : len(authors)].detach().cpu().bool()
        )
        junior += int((~who & trained).sum())
    return junior


def check_has_junior_tokens(junior_tokens: int, total_tokens: int, p: float, writers=None) -> None:
    """Raise AuthorMaskError when a tandem step's author counts are impossible, never when merely unlikely.

    `p`: the run's senior probability; `writers`: who the schedule that ran can give tokens to
    (`Schedule.writers`; None = unknown). Impossible: counts outside [0, total_tokens]; junior tokens
    at p >= 1 or from a schedule without the junior; and, at 0 < p < 1, a schedule that cannot hand
    the junior any token (the junior never ran: the run would silently be plain GRPO). A batch with no
    junior token from a schedule that can give it some is possible at every p < 1 (at p = 0.99 and a
    few dozen redraws, likely), so it passes: the mask itself is checked by `check_author_mask`.

    >>> check_has_junior_tokens(0, 500, 0.99, writers={"senior", "junior"})   # all senior: possible
    >>> check_has_junior_tokens(0, 500, 0.5, writers={"senior"})  # doctest: +NORMALIZE_WHITESPACE
    Traceback (most recent call last):
    ...
    trlvr.algos.AuthorMaskError: tandem step with p=0.5 ran a schedule that cannot give the junior a token
    (writers: senior); the junior never ran. Refusing to continue as plain GRPO
    """
    if not 0 <= junior_tokens <= total_tokens:
        raise AuthorMaskError(
            f"tandem step counts {junior_tokens} junior tokens of {total_tokens}; the author mask is wrong"
        )
    junior_writes = writers is None or "junior" in writers
    if junior_tokens > 0 and (p >= 1.0 or not junior_writes):
        raise AuthorMaskError(
            f"tandem step with p={p} and writers {sorted(writers or ['senior'])} has {junior_tokens} "
            "junior tokens; the author mask is wrong"
        )
    if total_tokens > 0 and 0.0 < p < 1.0 and not junior_writes:
        raise AuthorMaskError(
            f"tandem step with p={p} ran a schedule that cannot give the junior a token (writers: "
            f"{', '.join(sorted(writers))}); the junior never ran. Refusing to continue as plain GRPO"
        )


def author_stats(senior_authored: torch.Tensor, completion_mask: torch.Tensor) -> dict[str, torch.Tensor]:
    """Per-sequence authorship statistics, each (B,) float.

    senior_authored, completion_mask: (B, T) bool/int. Returns
      length (tokens in the completion), senior_tokens, junior_tokens,
      senior_share (senior_tokens / length, 0 for an empty completion),
      switches (author changes inside the completion).
    """
    c = completion_mask.bool()
    s = senior_authored.bool() & c
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
    """Mean (NaN ignored) of `values` (B,) over the half of the batch with the lower / higher junior share
    (B,).

    The split is at the median rank (ties broken by position); with B = 1 both halves are that one value.
    >>> split_by_share(torch.tensor([1.0, 0.0, 1.0, 0.0]), torch.tensor([0.1, 0.9, 0.2, 0.8]))
    (1.0, 0.0)
    """
    order = torch.argsort(junior_share, stable=True)
    half = max(1, len(order) // 2)
    low, high = order[:half], order[-half:]
    return values[low].float().nanmean().item(), values[high].float().nanmean().item()

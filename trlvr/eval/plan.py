"""What an evaluation generates: per-problem budgets, the prompt cap, and the fixed batches.

Batches: the (problem, sample) items of one (benchmark, protocol) in problem-major order, cut
into runs of `batch_size`. Batch b carries a signature (`batch_seed(seed, benchmark, protocol, b)`
and its items' problem keys); a stored row counts for a batch only when its signature matches.
A sample's random numbers are its own (`trlvr.eval.protocols.eval_row_key`), but its arithmetic
follows its batch-mates (padding, kernel shapes, compaction as rows finish: on a GPU, in bf16
above all, a token can flip), so a batch whose membership changed (the last, partial batch under
a larger `--limit`, every batch under another `--n`) is generated again, said in one line
(`trlvr.eval.runner`), and a resumed or extended run equals a fresh one. Under a larger `--limit`
that is at most one batch per (benchmark, protocol): with `--limit` below one batch, every sample.

What this file does not know: models, files, rows.
"""

from __future__ import annotations

import hashlib
from typing import NamedTuple

from trlvr.eval.defaults import BUDGET_MARGIN


class Batch(NamedTuple):
    benchmark: str
    protocol: str
    index: int  # b, within (benchmark, protocol)
    items: list[tuple[int, int]]  # (problem index, sample index)
    seed: int
    signature: str  # 16 hex digits: seed + the items' problem keys and sample indices


def batch_seed(seed: int, benchmark: str, protocol: str, batch_index: int) -> int:
    """Generation seed of one batch: a hash of (seed, benchmark, protocol, batch index).

    Independent of which other batches ran, so a resumed evaluation regenerates a batch exactly.
    """
    digest = hashlib.sha256(f"{seed}|{benchmark}|{protocol}|{batch_index}".encode()).digest()
    return int.from_bytes(digest[:4], "little") & 0x7FFFFFFF


def plan_batches(
    benchmark: str, protocol: str, keys: list[str], n: int, batch_size: int, seed: int
) -> list[Batch]:
    """The fixed batches of one (benchmark, protocol) over problems with content keys `keys`."""
    items = [(i, s) for i in range(len(keys)) for s in range(n)]
    out = []
    for b, start in enumerate(range(0, len(items), batch_size)):
        chunk = items[start : start + batch_size]
        seed_b = batch_seed(seed, benchmark, protocol, b)
        sig = f"{seed_b}|" + ",".join(f"{keys[i]}:{s}" for i, s in chunk)
        out.append(
            Batch(benchmark, protocol, b, chunk, seed_b, hashlib.sha256(sig.encode()).hexdigest()[:16])
        )
    return out


def completion_budget(prompt_len: int, max_new_tokens: int, context_length: int | None) -> int:
    """Tokens a completion may use: the authors' min(cap, context - prompt - 8), or the flat cap.

    >>> (completion_budget(100, 3000, 4096), completion_budget(1500, 3000, 4096),
    ...     completion_budget(1500, 3000, None))
    (3000, 2588, 3000)
    """
    if context_length is None:
        return max_new_tokens
    return min(max_new_tokens, context_length - prompt_len - BUDGET_MARGIN)


def default_max_prompt_tokens(context_length: int | None) -> int | None:
    """The longest prompt that leaves at least one completion token under the budget rule."""
    return None if context_length is None else context_length - BUDGET_MARGIN - 1


def split_by_prompt_length(
    prompt_lens: list[int], max_prompt_tokens: int | None, max_new_tokens: int, context_length: int | None
) -> tuple[list[int], list[int]]:
    """(kept indices, dropped indices): a prompt is dropped when it is over `max_prompt_tokens` or
    leaves no room to generate."""
    kept, dropped = [], []
    for i, n in enumerate(prompt_lens):
        too_long = max_prompt_tokens is not None and n > max_prompt_tokens
        no_room = completion_budget(n, max_new_tokens, context_length) < 1
        (dropped if too_long or no_room else kept).append(i)
    return kept, dropped

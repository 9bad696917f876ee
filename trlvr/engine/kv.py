"""Preallocated KV caches for decoding: one (R, kv_heads, T_max, head_dim) buffer pair per layer.

`StaticKV` owns the buffers of one model, reused across `generate` calls (grown only when a call
needs more rows or positions); the transformers `Cache` it hands the model (`StaticKV.cache`) is
made of `BlockLayer`s that write each new position in place and give attention only the first K
positions (the current length rounded up to a block) of the first R rows (the current batch
bucket). Compaction moves the live rows to the front of the same buffers by index copy, so
addresses never change (what CUDA graphs need).

What this file does not know: masks beyond validity, positions, sampling. The caller sets the
rows, length and write slot before each forward (`StaticKV.set_step`).
"""

from __future__ import annotations

import torch
from transformers.cache_utils import Cache, CacheLayerMixin


def round_up(n: int, block: int) -> int:
    """Smallest multiple of `block` that is >= n.

    >>> round_up(5, 4)
    8
    """
    return -(-n // block) * block


def batch_bucket(n: int, full: int) -> int:
    """Rows a batch of `n` live rows runs as: the next power of two, capped at the allocated `full`.

    >>> [batch_bucket(n, 12) for n in (1, 3, 5, 9, 12)]
    [1, 4, 8, 12, 12]
    """
    if not 0 < n <= full:
        raise ValueError(f"live rows must be in [1, {full}], got {n}")
    return min(1 << (n - 1).bit_length(), full)


def attended_length(slot: int, block: int, capacity: int) -> int:
    """Positions attention reads when writing `slot`: slot + 1 rounded up to `block`, at most `capacity`."""
    return min(round_up(slot + 1, block), capacity)


class BlockLayer(CacheLayerMixin):
    """One layer's preallocated keys/values (rows, H, T_max, D); `update` writes at `slot` in place.

    Returns views [:R, :, :K] with R = the rows of the incoming states and K = the last dimension
    of `owner.span` (the step's attended-length mask, set by the caller): both are tensor shapes,
    so a compiled step sees them as dynamic sizes, not as Python constants to specialise on.
    Positions between the current length and K hold zeros or stale values: the caller's attention
    mask must exclude them.
    """

    is_compileable = True
    is_sliding = False
    is_croppable = False

    def __init__(self, keys: torch.Tensor, values: torch.Tensor, owner: StaticKV):
        super().__init__()
        self.keys, self.values = keys, values  # each (rows, H, T_max, D)
        self.owner = owner  # holds `slot` (1,) long and `span` (R, K): shared by all layers
        self.device = keys.device
        self.is_initialized = True

    def lazy_initialization(self, key_states, value_states) -> None:  # buffers come preallocated
        return None

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        # key_states: (R, H, 1, D)
        R, K = key_states.shape[0], self.owner.span.shape[-1]
        k, v = self.keys[:R], self.values[:R]
        k.index_copy_(2, self.owner.slot, key_states)
        v.index_copy_(2, self.owner.slot, value_states)
        return k[:, :, :K], v[:, :, :K]

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        return self.owner.span.shape[-1], 0

    def get_seq_length(self) -> int:
        return self.owner.span.shape[-1]

    def get_max_length(self) -> int:
        return self.keys.shape[2]

    def reset(self) -> None:
        self.keys.zero_()
        self.values.zero_()


class StaticKV:
    """The preallocated KV buffers of one model: (rows, kv_heads, capacity, head_dim) per layer, plus the
    attention-validity mask (rows, capacity), reused by every call that fits (`fits`).

    Owned by the generator and grown only when a call needs more rows or positions, so the buffers
    (and a compiled step's static addresses) stay the same across calls.
    """

    def __init__(self, model, rows: int, capacity: int, device):
        cfg = model.config
        kv_heads = getattr(cfg, "num_key_value_heads", None) or cfg.num_attention_heads
        head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
        dtype = next(model.parameters()).dtype
        self.rows, self.capacity = rows, capacity
        # One spare position past `capacity`, never attended: the attended length K is then always
        # shorter than the buffers, so `keys[:, :, :K]` is a strict slice for every K and a compiled
        # step never specialises K to the capacity (inductor guards on the slice's contiguity when
        # K == the buffer length, which breaks the dynamic-K graph: found at 10M on CPU).
        physical = capacity + 1
        self.slot = torch.zeros(
            1, dtype=torch.long, device=device
        )  # (1,) the position the next token is written at
        self.valid = torch.zeros(rows, physical, dtype=torch.bool, device=device)  # False: prompt padding
        self.span = self.valid[:1, :1]  # (R, K) this step's attended mask; its shape tells the layers R and K
        layers = []
        for _ in range(cfg.num_hidden_layers):
            keys = torch.zeros(rows, kv_heads, physical, head_dim, dtype=dtype, device=device)
            values = torch.zeros_like(keys)
            if not torch.compiler.is_compiling():
                torch._dynamo.mark_static_address(keys)
                torch._dynamo.mark_static_address(values)
            layers.append(BlockLayer(keys, values, self))
        if not torch.compiler.is_compiling():
            torch._dynamo.mark_static_address(self.slot)
        self.cache = Cache(layers=layers)

    def bytes(self) -> int:
        return sum(
            t.numel() * t.element_size() for layer in self.cache.layers for t in (layer.keys, layer.values)
        )

    def fits(self, rows: int, capacity: int) -> bool:
        return rows <= self.rows and capacity <= self.capacity

    def fill(self, dynamic_cache, valid: torch.Tensor) -> None:
        """Move a prefill's (B, H, L, D) keys/values into rows [:B] and positions [:L]; valid (B, L + N) bool.

        Consumes `dynamic_cache`: each of its layers is emptied once copied, so the peak is the
        buffers plus one prefill layer, not both caches whole.
        """
        B, T = valid.shape
        self.valid[:B, :T] = valid
        for src, dst in zip(dynamic_cache.layers, self.cache.layers, strict=True):
            L = src.keys.shape[2]
            dst.keys[:B, :, :L] = src.keys
            dst.values[:B, :, :L] = src.values
            src.keys = src.values = None

    def set_step(self, rows: int, slot: int, kv_len: int) -> torch.Tensor:
        """Before a forward: run `rows` rows, write position `slot`, read `kv_len`; the (R, K) mask view."""
        self.slot.fill_(slot)
        self.span = self.valid[:rows, :kv_len]
        return self.span

    def select(self, keep: torch.Tensor, filled: int) -> None:
        """Move rows `keep` (n,) to the front of every buffer (positions < `filled` only)."""
        n = keep.numel()
        self.valid[:n] = self.valid[keep]
        for layer in self.cache.layers:
            for buf in (layer.keys, layer.values):
                buf[:n, :, :filled] = buf[
                    keep, :, :filled
                ]  # advanced indexing copies first: no overlap hazard

"""Preallocated KV caches for decoding: one (R, kv_heads, T_max, head_dim) buffer pair per layer.

`StaticKV` owns the buffers of one model for one `generate` call; the transformers `Cache` it
hands the model (`StaticKV.cache`) is made of `BlockLayer`s that write each new position in place
and give attention only the first `kv_len` positions (the current length rounded up to a block),
and only the first `rows` rows (the current batch bucket). Compaction moves the live rows to the
front of the same buffers by index copy, so addresses never change (what CUDA graphs need).

What this file does not know: models, masks, positions, sampling. The caller sets `rows`, `kv_len`
and the write slot before each forward (`StaticKV.set_step`).
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
    """One layer's preallocated keys/values (R, H, T_max, D); `update` writes at `slot` in place.

    Returns views [:rows, :, :kv_len]: rows past the live batch and positions past the block are
    never read. Positions between the current length and kv_len hold zeros or stale values: the
    caller's attention mask must exclude them.
    """

    is_compileable = True
    is_sliding = False
    is_croppable = False

    def __init__(self, keys: torch.Tensor, values: torch.Tensor, slot: torch.Tensor):
        super().__init__()
        self.keys, self.values = keys, values  # each (R, H, T_max, D)
        self.slot = slot  # (1,) long, shared by all layers: the position the next token is written at
        self.rows, self.kv_len = keys.shape[0], keys.shape[2]
        self.device = keys.device
        self.is_initialized = True

    def lazy_initialization(self, key_states, value_states) -> None:  # buffers come preallocated
        return None

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        # key_states: (rows, H, 1, D)
        k, v = self.keys[: self.rows], self.values[: self.rows]
        k.index_copy_(2, self.slot, key_states)
        v.index_copy_(2, self.slot, value_states)
        return k[:, :, : self.kv_len], v[:, :, : self.kv_len]

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        return self.kv_len, 0

    def get_seq_length(self) -> int:
        return self.kv_len

    def get_max_length(self) -> int:
        return self.keys.shape[2]

    def reset(self) -> None:
        self.keys.zero_()
        self.values.zero_()


class StaticKV:
    """The preallocated KV buffers of one model for one call, filled from a prefill's DynamicCache."""

    def __init__(self, dynamic_cache, capacity: int):
        """Allocate (B, H, capacity, D) per layer and move the prefilled (B, H, L, D) keys/values in.

        Consumes `dynamic_cache`: each of its layers is emptied once copied, so the peak is the new
        buffers plus one prefill layer, not both caches whole.
        """
        first = dynamic_cache.layers[0].keys
        self.slot = torch.zeros(1, dtype=torch.long, device=first.device)  # (1,)
        layers = []
        for layer in dynamic_cache.layers:
            k, v = layer.keys, layer.values  # (B, H, L, D)
            B, H, L, _ = k.shape
            keys = k.new_zeros(B, H, capacity, k.shape[-1])
            values = v.new_zeros(B, v.shape[1], capacity, v.shape[-1])
            keys[:, :, :L] = k
            values[:, :, :L] = v
            layer.keys = layer.values = None
            del k, v
            if not torch.compiler.is_compiling():
                torch._dynamo.mark_static_address(keys)
                torch._dynamo.mark_static_address(values)
            layers.append(BlockLayer(keys, values, self.slot))
        if not torch.compiler.is_compiling():
            torch._dynamo.mark_static_address(self.slot)
        self.full = layers[0].keys.shape[0]
        self.capacity = capacity
        self.rows = self.full
        self.cache = Cache(layers=layers)

    def set_step(self, rows: int, slot: int, kv_len: int) -> None:
        """Before a forward: run `rows` rows, write position `slot`, read `kv_len` positions."""
        self.rows = rows
        self.slot.fill_(slot)
        for layer in self.cache.layers:
            layer.rows, layer.kv_len = rows, kv_len

    def select(self, keep: torch.Tensor, filled: int) -> None:
        """Move rows `keep` (n,) to the front of every buffer (positions < `filled` only)."""
        n = keep.numel()
        for layer in self.cache.layers:
            for buf in (layer.keys, layer.values):
                buf[:n, :, :filled] = buf[keep, :, :filled]  # advanced indexing copies first: no overlap hazard

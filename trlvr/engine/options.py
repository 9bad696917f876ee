"""What a generation call is asked, checked without torch: what it draws (`Sampling`) and how the
lockstep engine runs it (`DecodeOptions`). `trlvr.config` and the CLI validate these settings from
here, so a config check (`trlvr train --dry-run`) loads no torch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

DECODE_MODES = ("auto", "eager", "static")


def check_decode(decode: str, compile) -> None:
    """ValueError unless `decode` is one of DECODE_MODES and `compile` is True, False or "auto"."""
    if decode not in DECODE_MODES:
        raise ValueError(f"decode must be one of {DECODE_MODES}, got {decode!r}")
    if compile not in (True, False, "auto"):
        raise ValueError(f"compile must be True, False or 'auto', got {compile!r}")


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


@dataclass(frozen=True)
class Sampling:
    """How one generation call draws: a token budget, temperature (0 = greedy), top_p (1 = off), top_k
    (0 = off) and the seed that, with each row's key, fixes every random draw. Validated on creation.

    >>> Sampling(0)
    Traceback (most recent call last):
    ...
    ValueError: max_new_tokens must be >= 1, got 0
    """

    max_new_tokens: int
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    seed: int = 0

    def __post_init__(self):
        if self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {self.max_new_tokens}")
        check_decoding(self.temperature, self.top_p, self.top_k)

    @property
    def greedy(self) -> bool:
        return self.temperature == 0


@dataclass(frozen=True)
class DecodeOptions:
    """How the lockstep engine runs a generation (never what it samples: the same rows come out).

    decode: "eager" grows a DynamicCache every step; "static" allocates each model's KV cache once for
    prompt + max_new_tokens, writes it in place, attends only the current length rounded up to
    `TandemGenerator.static_block` positions and moves finished rows out into power-of-two batch
    buckets; "auto" is static on CUDA and eager elsewhere (`resolve_decode`). Both give the same
    tokens and authors and log-probs equal up to float summation order.
    compile: wrap the static path's per-token forward in torch.compile (mode "reduce-overhead", i.e.
    CUDA graphs, on CUDA; the default mode elsewhere); one graph per batch bucket and length block.
    "auto": off until measured on a GPU.
    share_prompts: prefill each distinct prompt once and copy its KV rows to its repeats (TRL hands
    every prompt `num_generations` times); the output equals the unshared one up to floating-point
    summation order in the prefill.
    memory_budget_bytes: bytes the KV caches of the running models may take ("auto": 90% of the free
    memory of a CUDA device, no limit on CPU; None: no limit). When the batch needs more, it runs as
    equal sub-batches in turn (`out.plan["sub_batches"]`; the rows are what one batch gives); when
    one row alone needs more, a ValueError names batch, length and bytes.

    Validated on creation:

    >>> DecodeOptions(decode="fast")
    Traceback (most recent call last):
    ...
    ValueError: decode must be one of ('auto', 'eager', 'static'), got 'fast'
    """

    decode: str = "auto"
    compile: bool | str = "auto"
    share_prompts: bool = True
    memory_budget_bytes: int | None | str = "auto"

    def __post_init__(self):
        check_decode(self.decode, self.compile)

"""Evaluation protocols: which schedule writes each completion (method-notes, "Evaluation protocols").

- "solo":      the senior alone (SoloSchedule("senior")); its completions are also the ones the
               legibility and drift scores read.
- "handoff":   strict alternation one reasoning step each at "\\n\\n", senior first, one shared
               token budget (= max_new_tokens), a cap on rounds (default 150; a round is a
               senior step plus a junior step, as in the authors' code).
- "dose-J":    WordSchedule with junior share J, i.e. senior probability p = 1 - J.
- "junior":    the junior alone, the floor.

What this file does not know: prompts, rewards, files. It maps a protocol name to a schedule and
runs one batch through the engine.
"""

from __future__ import annotations

import hashlib

from trlvr.engine import Schedule, TandemGenerator, TandemOutput

SUITE_NAMES = ("solo", "handoff", "dose", "legibility", "drift", "junior")
DEFAULT_DOSE_SHARES = (0.25, 0.5, 0.75)  # junior shares; senior p = 0.75, 0.5, 0.25
DEFAULT_DECODING = {"temperature": 0.7, "top_p": 0.8, "top_k": 20}  # method-notes decoding
HANDOFF_MAX_ROUNDS = 150


def dose_protocol(junior_share: float) -> str:
    return f"dose-{junior_share:g}"


def protocols_for(suite: list[str] | tuple[str, ...], dose_shares=DEFAULT_DOSE_SHARES) -> list[str]:
    """Generation protocols a suite needs, in run order. Legibility and drift need solo samples."""
    unknown = sorted(set(suite) - set(SUITE_NAMES))
    if unknown:
        raise ValueError(f"unknown suite entries {unknown}; choose from {list(SUITE_NAMES)}")
    out = []
    if {"solo", "legibility", "drift"} & set(suite):
        out.append("solo")
    if "handoff" in suite:
        out.append("handoff")
    if "dose" in suite:
        out += [dose_protocol(s) for s in dose_shares]
    if "junior" in suite:
        out.append("junior")
    return out


def schedule_for(protocol: str, handoff_max_rounds: int = HANDOFF_MAX_ROUNDS):
    """The schedule of an evaluation protocol (a round of the handoff cap = one senior + one junior step)."""
    if protocol in ("solo", "junior"):
        return Schedule.from_config("solo", author="senior" if protocol == "solo" else "junior")
    if protocol == "handoff":
        return Schedule.from_config("step", first="senior", max_rounds=handoff_max_rounds)
    if protocol.startswith("dose-"):
        share = float(protocol.removeprefix("dose-"))
        return Schedule.from_config("word", p=1.0 - share)
    raise ValueError(f"unknown protocol {protocol!r}")


def batch_seed(seed: int, benchmark: str, protocol: str, batch_index: int) -> int:
    """Generation seed of one batch: a hash of (seed, benchmark, protocol, batch index).

    Independent of which other batches ran, so a resumed evaluation regenerates a batch exactly.
    """
    digest = hashlib.sha256(f"{seed}|{benchmark}|{protocol}|{batch_index}".encode()).digest()
    return int.from_bytes(digest[:4], "little") & 0x7FFFFFFF


def run_protocol(
    generator: TandemGenerator,
    protocol: str,
    prompt_ids: list[list[int]],
    *,
    max_new_tokens: int,
    decoding: dict,
    seed: int,
    handoff_max_rounds: int = HANDOFF_MAX_ROUNDS,
) -> TandemOutput:
    """Generate one completion per prompt under `protocol`."""
    return generator.generate(
        prompt_ids,
        schedule_for(protocol, handoff_max_rounds),
        max_new_tokens=max_new_tokens,
        temperature=decoding["temperature"],
        top_p=decoding["top_p"],
        top_k=decoding["top_k"],
        seed=seed,
    )

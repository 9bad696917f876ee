"""The evaluation suite's protocols, by name, with no torch import (reports and selection read them).

`parse_protocol` is the one place a protocol name is read: "dose-0.25" -> the word schedule with
junior share 0.25; "prefix-50" -> the junior alone, continuing the first 50% of the senior's solo
trace of the same (problem, sample) (`trlvr.eval.prefix`). `protocols_for` expands a suite into its protocols,
`dose_points` finds the dose curve's points among metric names. Running a protocol is `trlvr.eval.protocols`.
"""

from __future__ import annotations

from dataclasses import dataclass

from trlvr.engine.schedules import Schedule
from trlvr.eval.defaults import (
    DEFAULT_DOSE_SHARES,
    DEFAULT_PREFIX_KS,
    HANDOFF_MAX_ROUNDS,
    PAPER_HANDOFF,
    SUITE_NAMES,
)

__all__ = [
    "DOSE_PREFIX",
    "PREFIX_PREFIX",
    "Protocol",
    "prefix_protocol",
    "dose_points",
    "dose_protocol",
    "parse_protocol",
    "protocol_of_metric",
    "protocols_for",
]


@dataclass(frozen=True)
class Protocol:
    """One generation protocol: its name (in samples and metric names), the suite entry that asks for
    it, whether it needs the junior, and (dose) the junior's share. `parse_protocol` is the one place
    a protocol name is read."""

    name: str  # solo, handoff, handoff-paper, dose-0.25, junior, prefix-50
    entry: str  # the suite entry: solo, handoff, handoff-paper, dose, junior, prefix
    junior_share: float | None = None  # dose-J: J
    prefix_percent: int | None = None  # prefix-K: K, the share (%) of the senior's solo trace kept

    @property
    def needs_junior(self) -> bool:
        return self.entry != "solo"

    def decoding(self, run_decoding: dict) -> dict:
        """The decoding this protocol samples with: its own (handoff-paper: the paper era's), or the run's."""
        return dict(PAPER_HANDOFF["decoding"]) if self.entry == "handoff-paper" else run_decoding

    def samples(self, run_n: int) -> int:
        """Samples per problem: its own (handoff-paper: 4), else the run's n."""
        return PAPER_HANDOFF["n"] if self.entry == "handoff-paper" else run_n

    def schedule(self, handoff_max_rounds: int = HANDOFF_MAX_ROUNDS):
        """Who writes each token, a `trlvr.engine.Schedule` (a round of the handoff cap = one senior + one
        junior step)."""
        if self.entry in (
            "solo",
            "junior",
            "prefix",
        ):  # prefix-K: the junior alone, after the senior's prefix
            return Schedule.from_config("solo", author="senior" if self.entry == "solo" else "junior")
        if self.entry == "handoff":
            return Schedule.from_config("step", first_author="senior", max_rounds=handoff_max_rounds)
        if self.entry == "handoff-paper":  # the same schedule, no round cap
            return Schedule.from_config("step", first_author="senior", max_rounds=PAPER_HANDOFF["max_rounds"])
        return Schedule.from_config("word", p=1.0 - self.junior_share)


DOSE_PREFIX = "dose-"
PREFIX_PREFIX = "prefix-"


def prefix_protocol(percent: int) -> str:
    return f"{PREFIX_PREFIX}{int(percent)}"


def dose_protocol(junior_share: float) -> str:
    return f"{DOSE_PREFIX}{junior_share:g}"


def parse_protocol(name: str) -> Protocol:
    """A protocol name as a `Protocol` ("dose-0.25" -> the word schedule with junior share 0.25);
    ValueError for a name that is none."""
    if name in ("solo", "handoff", "handoff-paper", "junior"):
        return Protocol(name, name)
    if name.startswith(DOSE_PREFIX):
        try:
            share = float(name.removeprefix(DOSE_PREFIX))
        except ValueError:
            share = -1.0
        if 0.0 <= share <= 1.0:
            return Protocol(name, "dose", share)
    if name.startswith(PREFIX_PREFIX):
        k = name.removeprefix(PREFIX_PREFIX)
        if k.isdigit() and 0 <= int(k) <= 100 and str(int(k)) == k:
            return Protocol(name, "prefix", prefix_percent=int(k))
    raise ValueError(
        f"unknown protocol {name!r}: expected solo, handoff, handoff-paper, junior, dose-J with J in [0, 1] "
        "or prefix-K with K an integer percent in [0, 100]"
    )


def protocol_of_metric(metric: str) -> Protocol | None:
    """The protocol a metric name belongs to ("dose-0.5/pass@1" -> dose-0.5, "prefix-50/pass@1|no-answer" ->
    prefix-50), None for the scores
    (legibility/..., drift/...)."""
    try:
        return parse_protocol(metric.split("/", 1)[0])
    except ValueError:
        return None


def protocols_for(
    suite: list[str] | tuple[str, ...], dose_shares=DEFAULT_DOSE_SHARES, prefix_ks=DEFAULT_PREFIX_KS
) -> list[str]:
    """Generation protocols a suite needs, in run order. Legibility, drift and prefix need solo samples
    (prefix-K runs after solo: it continues solo's traces)."""
    unknown = sorted(set(suite) - set(SUITE_NAMES))
    if unknown:
        raise ValueError(f"unknown suite entries {unknown}; choose from {list(SUITE_NAMES)}")
    out = []
    if {"solo", "legibility", "drift", "prefix"} & set(suite):
        out.append("solo")
    if "handoff" in suite:
        out.append("handoff")
    if "handoff-paper" in suite:
        out.append("handoff-paper")
    if "dose" in suite:
        out += [dose_protocol(s) for s in dose_shares]
    if "junior" in suite:
        out.append("junior")
    if "prefix" in suite:
        out += [prefix_protocol(k) for k in sorted(set(prefix_ks))]
    return out


def dose_points(metric_names) -> list[tuple[float, str]]:
    """(junior share, name) of every dose protocol's pass@1 among `metric_names`, by share."""
    return sorted(
        (p.junior_share, n)
        for n in metric_names
        if n.endswith("/pass@1") and (p := protocol_of_metric(n)) is not None and p.entry == "dose"
    )

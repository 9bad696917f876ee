"""The jargon rate on real text: the share of a problem's senior-solo samples that a study's pattern matches.

The toy world's `jargon_rate` knows its own notation ("<<...>>", `trlvr.toy.jargon`). A real model's
private notation is whatever its study says it is, so this metric takes its pattern from the study
file (`evaluation.jargon_regex`, a Python regular expression searched in each solo sample's text):

    evaluation: {data: ..., suite: [solo, handoff, dose], jargon_regex: "<<[^<>]*>>"}

It is registered as the per-sample metric `regex_jargon_rate` (`trlvr.eval.sample_metrics`, with the
setting `jargon_regex`), so a report computes it from an evaluation's samples and resamples it
(CIs over problems, two-level seed CIs, paired differences) like every other metric. Where no pattern
is given the metric is left out (it has no meaning without one).

What this file does not know: files (callers pass sample rows), statistics.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable

from trlvr.errors import UserError
from trlvr.eval.sample_metrics import SampleMetric, register

SETTING = "jargon_regex"


def compile_pattern(pattern: str, where: str = SETTING) -> re.Pattern:
    """`pattern` compiled; a UserError naming `where` when it is not a regular expression or is empty."""
    if not isinstance(pattern, str) or not pattern:
        raise UserError(f"{where}: expected a non-empty regular expression, got {pattern!r}")
    try:
        return re.compile(pattern)
    except re.error as e:
        raise UserError(f"{where}: {pattern!r} is not a regular expression ({e})") from None


def jargon_by_problem(
    rows: Iterable[dict], pattern: str | re.Pattern, protocol: str = "solo"
) -> dict[str, float]:
    """problem id -> share of its `protocol` samples whose text `pattern` matches (re.search).

    >>> jargon_by_problem([{"protocol": "solo", "problem_id": "a", "text": "<<4 +3 =7>>"},
    ...                    {"protocol": "solo", "problem_id": "a", "text": "4 + 3 = 7."},
    ...                    {"protocol": "handoff", "problem_id": "a", "text": "<<4+3=7>>"}], r"<<[^<>]*>>")
    {'a': 0.5}
    """
    regex = pattern if isinstance(pattern, re.Pattern) else compile_pattern(pattern)
    per: dict[str, list[bool]] = defaultdict(list)
    for row in rows:
        if row["protocol"] == protocol:
            per[str(row["problem_id"])].append(regex.search(str(row["text"])) is not None)
    return {pid: sum(v) / len(v) for pid, v in per.items()}


REGEX_JARGON_RATE = register(
    SampleMetric(
        "regex_jargon_rate", "jargon rate, study regex (%)", jargon_by_problem, rate=True, setting=SETTING
    )
)

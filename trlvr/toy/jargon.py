"""The toy world's own metric: how often the senior writes in jargon, per problem.

A sample is in jargon when its text holds a calculator annotation "<<...>>" (`is_jargon`). The
rate of a problem is the share of its senior-solo samples in jargon. It is registered as the
per-sample metric `jargon_rate` (`trlvr.eval.sample_metrics`), so every report computes it from an
evaluation's samples and resamples it (CIs, paired differences) like every other metric.

What this file does not know: files (callers pass sample rows), statistics.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

from trlvr.eval.sample_metrics import SampleMetric, register
from trlvr.toy.dialects import is_jargon


def jargon_by_problem(rows: Iterable[dict], protocol: str = "solo") -> dict[str, float]:
    """problem id -> share of the `protocol` samples written in jargon.

    >>> jargon_by_problem([{"protocol": "solo", "problem_id": "a", "text": "<<1+1=2>>"},
    ...                    {"protocol": "solo", "problem_id": "a", "text": "1 plus 1 is 2"}])
    {'a': 0.5}
    """
    per: dict[str, list[bool]] = defaultdict(list)
    for row in rows:
        if row["protocol"] == protocol:
            per[str(row["problem_id"])].append(is_jargon(str(row["text"])))
    return {pid: sum(v) / len(v) for pid, v in per.items()}


JARGON_RATE = register(SampleMetric("jargon_rate", "jargon rate (%)", jargon_by_problem, rate=True))

"""Evaluation of a senior and its junior: solo, handoff, dose, junior-solo pass@k; legibility and
drift teacher-forced; bootstrap CIs over problems; paired comparisons; an offline HTML report.

Heavy modules (torch, the engine) load lazily, so `from trlvr.eval import stats` stays light.
"""

from __future__ import annotations

__all__ = ["evaluate"]


def evaluate(*args, **kwargs):
    """See `trlvr.eval.runner.evaluate`."""
    from trlvr.eval.runner import evaluate as _evaluate

    return _evaluate(*args, **kwargs)

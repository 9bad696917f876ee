"""The verifiable reward: 1.0 when the final boxed answer equals the gold answer, else 0.0.

Flow per sample: take the completion's text; extract the last ``\\boxed{...}`` (or the tail
of the text when there is none); decide cheap cases in-process (exact match after trivial
normalisation, integer vs integer); refuse answers that are known to stall sympy; send the
rest, all at once, to the worker pool, where math-verify parses and compares under a hard
wall-clock timeout. A timed-out or failed sample scores 0.0 and is counted in the stats, so
a wave of timeouts shows up in the training logs instead of as silent zero rewards.

Model output is never executed or evaluated; only math-verify's parser reads it.
"""

from __future__ import annotations

import threading
from collections import Counter, OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from trlvr.rewards.boxed import extract_boxed, fast_grade, gold_answer, screen, tail
from trlvr.rewards.pool import shared_pool

DEFAULT_TIMEOUT_S = 2.0
CACHE_SIZE = 16_384  # (answer, gold) -> score; the 8 rollouts of a prompt often share an answer


class _ScoreCache:
    """Thread-safe LRU of math-verify verdicts; timeouts and errors are never cached."""

    def __init__(self, size: int = CACHE_SIZE) -> None:
        self.size, self._d, self._lock = size, OrderedDict(), threading.Lock()

    def get(self, key: tuple[str, str]) -> float | None:
        with self._lock:
            if key in self._d:
                self._d.move_to_end(key)
                return self._d[key]
        return None

    def put(self, key: tuple[str, str], score: float) -> None:
        with self._lock:
            self._d[key] = score
            if len(self._d) > self.size:
                self._d.popitem(last=False)


_CACHE = _ScoreCache()


@dataclass(frozen=True)
class GradeResult:
    """One graded sample.

    score: 1.0 or 0.0. parsed: the answer string that was graded (boxed content, or what
    math-verify extracted), or None when nothing was found. timed_out: grading hit the
    timeout. how: "fast", "cached", "screened:<reason>", "verify", "timeout", "error:<msg>", "no_answer".
    """

    score: float
    parsed: str | None
    timed_out: bool
    how: str = "verify"


def completion_text(completion: Any) -> str:
    """Text of a TRL completion: a string, or a list of chat messages (last one's content).

    >>> completion_text([{"role": "assistant", "content": "x = \\\\boxed{2}"}])
    'x = \\\\boxed{2}'
    """
    if isinstance(completion, str):
        return completion
    if isinstance(completion, dict):
        completion = [completion]
    if not completion:
        return ""
    content = completion[-1].get("content", "")
    if isinstance(content, list):  # content parts: [{"type": "text", "text": ...}, ...]
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return str(content or "")


class MathReward:
    """TRL reward callable: ``MathReward()(completions, answer=[...]) -> list[float]``.

    Args:
        timeout: hard wall-clock seconds per sample inside the pool.
        workers: pool size (default min(4, cpu_count)); pools are shared per size.
        screen: refuse power towers, nested factorials etc. before math-verify (see
            :func:`trlvr.rewards.boxed.screen`); the timeout bounds them anyway.
        max_answer_chars: longest boxed answer that is graded.

    ``last_stats`` / ``total_stats`` count "graded", "timeouts", "errors", and how samples were
    decided: "fast" (in-process exact/integer), "screened" (refused), "cached" (seen before).
    """

    __name__ = "math_reward"

    def __init__(
        self,
        timeout: float = DEFAULT_TIMEOUT_S,
        workers: int | None = None,
        screen: bool = True,
        max_answer_chars: int = 1000,
    ) -> None:
        self.timeout = timeout
        self.workers = workers
        self.screen = screen
        self.max_answer_chars = max_answer_chars
        self.last_stats: dict[str, int] = {}
        self.total_stats: Counter = Counter()
        self._lock = threading.Lock()

    def grade_many(self, preds: Sequence[str], golds: Sequence[str]) -> list[GradeResult]:
        """Grade ``preds[i]`` (full completion text) against ``golds[i]``; one result each."""
        if len(preds) != len(golds):
            raise ValueError(f"{len(preds)} completions but {len(golds)} gold answers")
        out: list[GradeResult | None] = [None] * len(preds)
        jobs: list[tuple[str, str, str]] = []
        where: list[tuple[int, str]] = []
        stats = Counter(graded=len(preds), timeouts=0, errors=0, fast=0, screened=0, cached=0)
        for i, (text, gold) in enumerate(zip(preds, golds, strict=True)):
            gold = gold_answer(gold)
            boxed = extract_boxed(text)
            if boxed is not None:
                quick = fast_grade(boxed, gold)
                if quick is not None:
                    out[i] = GradeResult(quick, boxed, False, "fast")
                    stats["fast"] += 1
                    continue
                candidate, shown, limit = f"\\boxed{{{boxed}}}", boxed, self.max_answer_chars
            else:
                candidate, shown, limit = tail(text), None, len(tail(text))
                if not candidate.strip():
                    out[i] = GradeResult(0.0, None, False, "no_answer")
                    continue
            reason = (
                screen(shown if shown is not None else candidate, max_chars=limit) if self.screen else None
            )
            if reason is None and shown is not None and len(shown) > self.max_answer_chars:
                reason = "too_long"  # the length cap holds even with the screen off
            if reason is not None:
                out[i] = GradeResult(0.0, shown[:200] if shown else None, False, f"screened:{reason}")
                stats["screened"] += 1
                continue
            cached = _CACHE.get((candidate, gold))
            if cached is not None:
                out[i] = GradeResult(cached, shown, False, "cached")
                stats["cached"] += 1
                continue
            jobs.append(("grade", candidate, gold))
            where.append((i, shown))
        # identical (answer, gold) pairs in one batch are graded once
        unique = list(dict.fromkeys(jobs))
        results = dict(zip(unique, shared_pool(self.workers).run(unique, self.timeout), strict=True))
        for job, (i, shown) in zip(jobs, where, strict=True):
            res = results[job]
            if res.status == "ok":
                _CACHE.put(job[1:], res.score)
                out[i] = GradeResult(res.score, shown if shown is not None else (res.info or None), False)
            elif res.status == "timeout":
                out[i] = GradeResult(0.0, shown, True, "timeout")
                stats["timeouts"] += 1
            else:
                out[i] = GradeResult(0.0, shown, False, f"error:{res.info}")
                stats["errors"] += 1
        with self._lock:
            self.last_stats = dict(stats)
            self.total_stats.update(stats)
        return out  # type: ignore[return-value]

    def __call__(self, completions: Sequence[Any], answer: Sequence[str] | str, **kwargs: Any) -> list[float]:
        texts = [completion_text(c) for c in completions]
        golds = [answer] * len(texts) if isinstance(answer, str) else list(answer)
        return [r.score for r in self.grade_many(texts, golds)]


_DEFAULT = MathReward()


def math_reward(completions: Sequence[Any], answer: Sequence[str] | str, **kwargs: Any) -> list[float]:
    """TRL reward function: 1.0 when a completion's final boxed answer equals its gold answer.

    ``completions`` are strings or chat-message lists; ``answer`` holds one gold string per
    completion (TRL passes the dataset's ``answer`` column). Extra kwargs are ignored.
    Uses the shared default :class:`MathReward`; see :func:`reward_stats` for its counters.

    >>> math_reward(["so \\\\boxed{\\\\dfrac{1}{2}}", "\\\\boxed{3}"], answer=["\\\\frac{1}{2}", "4"])
    [1.0, 0.0]
    """
    return _DEFAULT(completions, answer, **kwargs)


def reward_stats() -> dict[str, dict[str, int]]:
    """Counters of the default reward: {"last": last call's, "total": since start}."""
    return {"last": dict(_DEFAULT.last_stats), "total": dict(_DEFAULT.total_stats)}


def grade(pred_text: str, gold: str, timeout: float = DEFAULT_TIMEOUT_S) -> GradeResult:
    """Grade one completion text against one gold answer (see :class:`MathReward`).

    >>> grade("The answer is \\\\boxed{0.5}.", "\\\\frac{1}{2}").score
    1.0
    """
    rew = _DEFAULT if timeout == _DEFAULT.timeout else MathReward(timeout=timeout)
    return rew.grade_many([pred_text], [gold])[0]


def check_golds(golds: Sequence[str], timeout: float = DEFAULT_TIMEOUT_S) -> list[str | None]:
    """For each gold string, None if math-verify can parse it, else the reason it cannot.

    Integers and plain decimals are accepted without the pool (GSM8K is all integers).
    """
    out: list[str | None] = [None] * len(golds)
    jobs, where = [], []
    for i, g in enumerate(golds):
        g = gold_answer(g)
        if not g:
            out[i] = "empty"
        elif fast_grade(g, g.lstrip("+")) == 1.0 and g.replace(".", "", 1).lstrip("-").isdigit():
            continue
        else:
            jobs.append(("check_gold", g, ""))
            where.append(i)
    for i, res in zip(where, shared_pool().run(jobs, timeout), strict=True):
        if res.status != "ok" or res.score != 1.0:
            out[i] = "unparseable" if res.status == "ok" else f"gold {res.status}: {res.info}"
    return out

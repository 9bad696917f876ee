"""The verifiable reward: 1.0 when the final boxed answer equals the gold answer, else 0.0.

Flow per sample: take the completion's text; extract the last ``\\boxed{...}``; read it, and the
gold, through :func:`trlvr.rewards.mathtext.normalize_math` (Unicode minus signs, fraction slashes,
spaces in numbers, middle dots, superscripts...: one reading everywhere); a completion
without one scores 0.0 and is counted as ``no_box``, as in the paper and the authors' grader
(the lenient mode, ``MathReward(require_box=False)``, grades the tail of the text instead);
decide by the one equality of answers (:mod:`trlvr.rewards.equivalence`: equal forms, or two numbers -
integers, decimals, scientific notation, p/q, \\frac{p}{q}, percentages - compared exactly, never through a
float) in-process where it can;
refuse answers that are known to stall sympy; send the rest, all at once, to the worker pool,
where math-verify parses and compares under a hard wall-clock timeout. A timed-out or failed
sample scores 0.0 and is counted in the stats, so a wave of timeouts shows up in the training
logs instead of as silent zero rewards. :func:`grading_mode` names the mode for results files.

Model output is never executed or evaluated; only math-verify's parser reads it.
"""

from __future__ import annotations

import threading
from collections import Counter, OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from trlvr.errors import UserError
from trlvr.rewards.boxed import extract_boxed, tail
from trlvr.rewards.equivalence import exact_verdict, number_of
from trlvr.rewards.graders import AUTHORS, AUTHORS_PAPER, DEFAULT_GRADER, TRLVR, check_grader, require_grader
from trlvr.rewards.mathtext import normalize_math
from trlvr.rewards.pool import shared_pool
from trlvr.rewards.screen import screen

DEFAULT_TIMEOUT_S = 2.0
BOXED, BOXED_OR_TAIL = "boxed", "boxed_or_tail"  # the two grading modes, as results files name them
CACHE_SIZE = 16_384  # (answer, gold) -> score; the 8 rollouts of a prompt often share an answer


class _ScoreCache:
    """Thread-safe LRU of math-verify verdicts; timeouts and errors are never cached."""

    def __init__(self, size: int = CACHE_SIZE) -> None:
        self.size, self._d, self._lock = size, OrderedDict(), threading.Lock()

    def get(self, key: tuple[str, str, str]) -> float | None:
        with self._lock:
            if key in self._d:
                self._d.move_to_end(key)
                return self._d[key]
        return None

    def put(self, key: tuple[str, str, str], score: float) -> None:
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
    timeout. how: "fast", "cached", "screened:<reason>", "verify", "timeout", "error:<msg>",
    "no_box" (strict mode, no box) or "no_answer" (lenient mode, empty text).
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
            `trlvr.rewards.screen.screen`); the timeout bounds them anyway.
        max_answer_chars: longest boxed answer that is graded.
        require_box: True (default, mode "boxed"): a completion without ``\\boxed{}`` scores 0.
            False (mode "boxed_or_tail"): its last 2,000 characters go to math-verify, which
            finds a final answer in them if it can ("The answer is 42." then scores 1 for 42).
            Only the ``trlvr`` grader has this mode (the authors' graders read the last box only).
        grader: "trlvr" (the default: `trlvr.rewards.equivalence`), "authors" (the Tandem RLVR release's
            grader, `trlvr.rewards.authors`) or "authors-paper" (the paper era's, as its published scores
            show it: MATH normaliser or sympy, `trlvr.rewards.authors_paper`); see `trlvr.rewards.graders`.
            A grader whose dependencies are missing is refused in one line. The authors' graders run
            in the grading pool, under ``timeout``, as trlvr's math-verify step does.

    ``last_stats`` / ``total_stats`` count "graded", "timeouts", "errors", "no_box" (completions
    without a box, in either mode), and how samples were decided: "fast" (in-process
    exact/integer), "screened" (refused), "cached" (seen before).

    >>> (MathReward()(["The answer is 42."], ["42"]),
    ...     MathReward(require_box=False)(["The answer is 42."], ["42"]))
    ([0.0], [1.0])
    """

    __name__ = "math_reward"

    def __init__(
        self,
        timeout: float = DEFAULT_TIMEOUT_S,
        workers: int | None = None,
        screen: bool = True,
        max_answer_chars: int = 1000,
        require_box: bool = True,
        grader: str = DEFAULT_GRADER,
    ) -> None:
        if check_grader(grader) != TRLVR and not require_box:
            raise UserError(
                f"grader {grader!r} reads the last \\boxed{{}} only (the authors' extraction): "
                "the boxed_or_tail grading mode is the trlvr grader's"
            )
        self.grader = require_grader(grader)
        self.timeout = timeout
        self.require_box = require_box
        self.workers = workers
        self.screen = screen
        self.max_answer_chars = max_answer_chars
        self.last_stats: dict[str, int] = {}
        self.total_stats: Counter = Counter()
        self._lock = threading.Lock()

    @property
    def grading_mode(self) -> str:
        """ "boxed" (no box scores 0) or "boxed_or_tail" (box-less text graded by its tail)."""
        return BOXED if self.require_box else BOXED_OR_TAIL

    def grade_many(self, preds: Sequence[str], golds: Sequence[str]) -> list[GradeResult]:
        """Grade ``preds[i]`` (full completion text) against ``golds[i]``; one result each."""
        if len(preds) != len(golds):
            raise ValueError(f"{len(preds)} completions but {len(golds)} gold answers")
        out: list[GradeResult | None] = [None] * len(preds)
        jobs: list[tuple[str, str, str]] = []
        where: list[tuple[int, str]] = []
        stats = Counter(graded=len(preds), timeouts=0, errors=0, no_box=0, fast=0, screened=0, cached=0)
        for i, (text, gold) in enumerate(zip(preds, golds, strict=True)):
            if self.grader in (
                AUTHORS,
                AUTHORS_PAPER,
            ):  # sympy (and math-verify): in the pool, under the timeout
                job = (self.grader, str(text), str(gold))
                cached = _CACHE.get(job)
                if cached is not None:
                    out[i] = GradeResult(cached, None, False, "cached")
                    stats["cached"] += 1
                else:
                    jobs.append(job)
                    where.append((i, None))
                continue
            gold = normalize_math(str(gold).strip())  # parsed by trlvr.data (GSM8K's "####" removed)
            boxed = extract_boxed(text)
            if boxed is not None:
                boxed = normalize_math(boxed)
                quick = exact_verdict(
                    boxed, gold
                )  # the one rule's in-process part (trlvr.rewards.equivalence)
                if quick is not None:
                    out[i] = GradeResult(float(quick), boxed, False, "fast")
                    stats["fast"] += 1
                    continue
                op, candidate, shown, limit = "grade", boxed, boxed, self.max_answer_chars
            else:
                stats["no_box"] += 1
                if self.require_box:
                    out[i] = GradeResult(0.0, None, False, "no_box")
                    continue
                op, candidate = "tail", normalize_math(tail(text))  # the worker extracts, then the one rule
                shown, limit = None, len(candidate)
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
            cached = _CACHE.get((op, candidate, gold))
            if cached is not None:
                out[i] = GradeResult(cached, shown, False, "cached")
                stats["cached"] += 1
                continue
            jobs.append((op, candidate, gold))
            where.append((i, shown))
        # identical (answer, gold) pairs in one batch are graded once
        unique = list(dict.fromkeys(jobs))
        results = dict(zip(unique, shared_pool(self.workers).run(unique, self.timeout), strict=True))
        for job, (i, shown) in zip(jobs, where, strict=True):
            res = results[job]
            if res.status == "ok" and job[0] in (AUTHORS, AUTHORS_PAPER) and res.info == "no_box":
                _CACHE.put(job, res.score)
                out[i] = GradeResult(0.0, None, False, "no_box")
                stats["no_box"] += 1
            elif res.status == "ok":
                _CACHE.put(job, res.score)
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
    Uses the shared default `MathReward`; see `trlvr.rewards.reward_stats` for its counters.

    >>> math_reward(["so \\\\boxed{\\\\dfrac{1}{2}}", "\\\\boxed{3}"], answer=["\\\\frac{1}{2}", "4"])
    [1.0, 0.0]
    """
    return _DEFAULT(completions, answer, **kwargs)


def default_reward() -> MathReward:
    """The shared :class:`MathReward` behind :func:`math_reward`."""
    return _DEFAULT


def reward_stats() -> dict[str, dict[str, int]]:
    """Counters of the default reward: {"last": last call's, "total": since start}."""
    return {"last": dict(_DEFAULT.last_stats), "total": dict(_DEFAULT.total_stats)}


def grading_mode(reward: Any = None) -> str | None:
    """The grading mode of ``reward`` ("boxed" or "boxed_or_tail"), for results files.

    ``reward`` is :func:`math_reward` (the default) or a :class:`MathReward`; any other
    callable is not ours to describe: None.

    >>> grading_mode(), grading_mode(MathReward(require_box=False)), grading_mode(len)
    ('boxed', 'boxed_or_tail', None)
    """
    if reward is None or reward is math_reward:
        reward = _DEFAULT
    return reward.grading_mode if isinstance(reward, MathReward) else None


def grade(
    pred_text: str, gold: str, timeout: float = DEFAULT_TIMEOUT_S, grader: str = DEFAULT_GRADER
) -> GradeResult:
    """Grade one completion text against one gold answer with the strict reward of ``grader``.

    >>> grade("The answer is \\\\boxed{0.5}.", "\\\\frac{1}{2}").score
    1.0
    """
    if grader == DEFAULT_GRADER and timeout == _DEFAULT.timeout:
        rew = _DEFAULT
    else:
        rew = MathReward(timeout=timeout, grader=grader)
    return rew.grade_many([pred_text], [gold])[0]


def grader_of(reward: Any = None) -> str | None:
    """The grader of ``reward`` (:func:`math_reward`, the default, or a :class:`MathReward`), for results
    files; None for any other callable.

    >>> grader_of(), grader_of(MathReward(timeout=5.0)), grader_of(len)
    ('trlvr', 'trlvr', None)
    """
    if reward is None or reward is math_reward:
        reward = _DEFAULT
    return reward.grader if isinstance(reward, MathReward) else None


def equivalent(
    answer: str, gold: str, timeout: float = DEFAULT_TIMEOUT_S, grader: str = DEFAULT_GRADER
) -> bool:
    """Whether ``answer`` equals ``gold`` under ``grader``: for ``trlvr`` the one rule
    (`trlvr.rewards.equivalence`: exactly where both are numbers, else math-verify in the grading pool), for
    the authors' graders their verdict on the answer written as ``\\boxed{answer}``. The reward grades a
    boxed answer by it.

    >>> (equivalent("1.0e3", "1000"), equivalent("0.333", "\\\\frac{1}{3}"),
    ...     equivalent("\\\\frac{x}{2}", "0.5x"))
    (True, False, True)
    """
    if check_grader(grader) != TRLVR:
        return grade(f"\\boxed{{{answer}}}", gold, timeout, grader).score == 1.0
    quick = exact_verdict(answer, gold)
    if quick is not None:
        return quick
    res = shared_pool().run(
        [("grade", normalize_math(str(answer)), normalize_math(str(gold).strip()))], timeout
    )[0]
    return res.status == "ok" and res.score == 1.0


def check_golds(golds: Sequence[str], timeout: float = DEFAULT_TIMEOUT_S) -> list[str | None]:
    """For each gold string, None if math-verify can parse it, else the reason it cannot.

    For ``trlvr data check``: runs in the worker pool under ``timeout``, all golds in parallel.
    Integers and plain decimals are accepted without the pool (GSM8K is all integers).

    >>> check_golds(["18", "\\\\frac{1}{2}", "", "\\\\frac{"])
    [None, None, 'empty', 'unparseable']
    """
    out: list[str | None] = [None] * len(golds)
    jobs, where = [], []
    for i, g in enumerate(golds):
        g = normalize_math(str(g).strip())  # the reading the reward grades against
        if not g:
            out[i] = "empty"
        elif number_of(g) is not None:
            # a number: the one rule compares it exactly (trlvr.rewards.equivalence), math-verify or not
            continue
        else:
            jobs.append(("check_gold", g, ""))
            where.append(i)
    for i, res in zip(where, shared_pool().run(jobs, timeout), strict=True):
        if res.status != "ok" or res.score != 1.0:
            out[i] = "unparseable" if res.status == "ok" else f"gold {res.status}: {res.info}"
    return out


def gold_reading_changes(golds: Sequence[str], timeout: float = DEFAULT_TIMEOUT_S) -> list[str | None]:
    """For each gold, None when it reads the same raw and after :func:`normalize_math`, else a note:
    "reads differently once normalised (...)" with both readings. The grader reads the normalised
    text; ``trlvr data check`` shows the note so a gold such as ``2·5`` (2.5 with an old decimal
    point; normalised: 2 times 5) or ``1 234`` (math-verify alone: 234) is seen. A gold whose text
    normalisation leaves unchanged is never noted.

    >>> notes = gold_reading_changes(["18", "\\u22125", "1\\u2009234"])
    >>> notes[:2], print(notes[2])
    reads differently once normalised ('1\\u2009234' -> '1234'): reads 234 raw, 1234 normalised
    ([None, None], None)
    """
    out: list[str | None] = [None] * len(golds)
    jobs, where = [], []
    for i, g in enumerate(golds):
        raw = str(g).strip()
        norm = normalize_math(raw)
        if raw and norm != raw:
            jobs.append(("reading", raw, norm))
            where.append(i)
    for i, job, res in zip(where, jobs, shared_pool().run(jobs, timeout), strict=True):
        if res.status != "ok" or res.score != 1.0:
            why = res.info if res.status == "ok" else f"{res.status}: {res.info}"
            out[i] = f"reads differently once normalised ({job[1][:40]!r} -> {job[2][:40]!r}): {why}"
    return out


def gold_parses(answer: str, timeout: float = DEFAULT_TIMEOUT_S) -> bool:
    """True when math-verify can parse the gold ``answer`` (in the worker pool, under ``timeout``).

    >>> gold_parses("[1,2)"), gold_parses("\\\\frac{")
    (True, False)
    """
    return check_golds([answer], timeout)[0] is None

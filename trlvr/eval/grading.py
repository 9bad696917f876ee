"""Grading an evaluation's samples: the grading mode's name results.json records, each sample's reward and
outcome (ok / no_box / timeout / failure), the grader of a mode and grader name (`trlvr.rewards.GRADERS`),
and each further grader's rewards and metrics (results.json `by_grader`)."""

from __future__ import annotations

from trlvr.errors import UserError
from trlvr.eval.aggregate import problem_table, summarize
from trlvr.rewards import MathReward, grader_of, grading_mode, math_reward
from trlvr.rewards.math_reward import default_reward

GRADING_OUTCOMES = ("ok", "no_box", "timeout", "failure")
BY_GRADER = "by_grader"  # results.json: each grader after the first, its metrics (`by_grader`)


def grading_name(score_fn) -> str:
    """The grading mode for results.json: `trlvr.rewards.grading_mode` ("boxed", "boxed_or_tail"),
    or "custom:<name>" for a caller's own score function."""
    mode = grading_mode(score_fn)
    return mode if mode is not None else "custom:" + getattr(score_fn, "__name__", type(score_fn).__name__)


def grade(score_fn, texts: list[str], answers: list[str]) -> tuple[list[float], list[str | None]]:
    """(rewards, outcomes): each outcome one of GRADING_OUTCOMES for trlvr's math grader, None for a
    caller's own `score_fn` (whose verdicts trlvr cannot classify)."""
    grader = default_reward() if score_fn is math_reward else score_fn
    if not isinstance(grader, MathReward):
        rewards = score_fn(texts, answers)
        if len(rewards) != len(texts):
            raise ValueError(f"score_fn returned {len(rewards)} rewards for {len(texts)} completions")
        return [0.0 if r is None else float(r) for r in rewards], [None] * len(texts)
    results = grader.grade_many(texts, answers)
    return [r.score for r in results], [grading_outcome(r.how) for r in results]


def grading_outcome(how: str) -> str:
    """A `GradeResult.how` as a per-sample outcome: ok, no_box, timeout or failure."""
    if how in ("no_box", "no_answer"):
        return "no_box"
    if how == "timeout":
        return "timeout"
    if how.startswith("error"):
        return "failure"
    return "ok"


def grading_counts(rows: list[dict]) -> dict[str, int]:
    """How this run's samples were graded, counted from the rows themselves (exact per seed and
    after a resume); rows written before outcomes were recorded count as "unrecorded"."""
    counts = dict.fromkeys(("graded", *GRADING_OUTCOMES), 0)
    for r in rows:
        counts["graded"] += 1
        outcome = r.get("grading", "unrecorded") or "custom"
        counts[outcome] = counts.get(outcome, 0) + 1
    return counts


def grader_for(grading: str, grader: str = "trlvr"):
    """The math grader of a grading mode and grader (`trlvr.rewards.GRADERS`): "boxed" with trlvr's grader is
    the shared default MathReward (per-sample outcomes come from `grade`); "boxed_or_tail" grades the text's
    tail when nothing is boxed."""
    if grading != "boxed_or_tail" and grader == "trlvr":
        return math_reward
    return MathReward(require_box=grading != "boxed_or_tail", grader=grader)


def choose_grader(spec, score_fn=None):
    """(spec, score_fn) of an evaluation: `spec.grading` with trlvr's grader when no `score_fn` is given; a
    MathReward `score_fn` names the first grader (results.json records it); a caller's own grades alone."""
    if score_fn is None:
        return spec, grader_for(spec.grading, spec.grader)
    if (own := grader_of(score_fn)) is not None:
        if spec.graders != ("trlvr",) and own != spec.grader:
            raise UserError(f"score_fn grades with grader {own!r} but graders names {spec.grader!r} first")
        return spec.replace(graders=(own, *spec.graders[1:])), score_fn
    if spec.graders != ("trlvr",):
        raise UserError(
            f"graders {','.join(spec.graders)}: a caller's own score_fn grades alone; leave graders at trlvr"
        )
    return spec, score_fn


def grade_others(rows: list[dict], graders: tuple[str, ...], grading: str) -> bool:
    """Each row's `grader_rewards` {grader: reward} for every grader of `graders` it lacks, graded from its
    stored text and gold (a row of an earlier run of the folder gets the graders this run adds). True when
    any row changed (the samples file is then written again)."""
    changed = False
    for g in graders:
        todo = [r for r in rows if g not in (r.get("grader_rewards") or {})]
        if not todo:
            continue
        rewards, _ = grade(grader_for(grading, g), [r["text"] for r in todo], [r["answer"] for r in todo])
        for r, reward in zip(todo, rewards, strict=True):
            r["grader_rewards"] = {**(r.get("grader_rewards") or {}), g: float(reward)}
        changed = True
    return changed


def grader_tables(rows: list[dict], graders: tuple[str, ...] | list[str], ks: list[int]) -> dict[str, dict]:
    """{grader: per-problem table} for each of `graders` (those after the first): the metrics that follow from
    the reward (every pass@k, the prefix protocols' pass@1), from each row's `grader_rewards`."""
    out = {}
    for g in graders:
        table = problem_table([{**r, "reward": r["grader_rewards"][g]} for r in rows], ks)
        out[g] = {b: {m: v for m, v in t.items() if "pass@" in m} for b, t in table.items()}
    return out


def by_grader(
    rows: list[dict], graders: tuple[str, ...], ks: list[int], num_resamples: int, seed: int
) -> dict:
    """results.json's `by_grader`: for each grader after the first, the metrics that follow from the reward
    (every pass@k, the handoff ratios, the prefix protocols' pass@1), in the layout of the first grader's
    (`benchmarks`, `macro`), from each row's `grader_rewards` (`grader_tables`)."""
    return {
        g: summarize(t, num_resamples=num_resamples, seed=seed)
        for g, t in grader_tables(rows, graders, ks).items()
    }

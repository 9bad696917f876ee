"""The loophole detector: does the senior write where the schedule cannot hand off?

A schedule redraws the author at its boundaries (`schedule.boundaries`: word starts for `word`)
and, after `schedule.backstop` tokens without one, by force. A senior that learns a spaceless
notation ("<<47+18=65>>": no word start inside) escapes the junior under `word`: only the backstop
interrupts it. These statistics of a batch of tandem rollouts show it; they are pure functions of
the completion ids, the authors, the vocabulary tables and the schedule (no model, no randomness:
where a schedule redraws does not depend on what its draws picked).

Per batch (`loophole_stats`, keys of `METRICS`):
- backstop_share: of the redraws that decide a next token, the share forced by the backstop.
- longest_run_p50 / longest_run_p95: each rollout's longest run of consecutive tokens by one
  author, median and 95th percentile over the batch's rollouts.
- redraws_per_100: redraws per 100 completion tokens (team tokens: both authors).
- senior_share_spaceless: the senior's share of the tokens inside spaceless spans, i.e. runs of
  at least SPACELESS_SPAN consecutive tokens none of which starts a word (`tables.word_start`,
  whatever the schedule): the spans the paper's word schedule cannot redraw inside. About p when
  the junior writes its share there, near 1 when the senior owns the notation; NaN when the batch
  has no such span (TRL's logger skips NaN, metrics.jsonl then holds null).
- spaceless_per_100: tokens inside spaceless spans per 100 completion tokens.

Schedules that never redraw (step, chunk, solo: `boundaries` is None) get NaN redraw statistics.
The counts behind them (`loophole_counts`) add over processes and batches; `summarize` turns
counts and the rollouts' longest runs into the statistics.

`loophole_alarm(first, now)` is the warning rule training applies to the logged statistics.
"""

from __future__ import annotations

import math

import torch

from trlvr.engine.schedules import Schedule, VocabTables

SPACELESS_SPAN = 8  # tokens without a word start that make a span "spaceless"
# summed over rows (and processes): see loophole_counts
COUNT_KEYS = ("tokens", "redraws", "forced", "spaceless", "spaceless_senior")
METRICS = (
    "backstop_share",
    "longest_run_p50",
    "longest_run_p95",
    "redraws_per_100",
    "senior_share_spaceless",
    "spaceless_per_100",
)
# the warning rule: a statistic that climbs above both factor x and + margin over its first value
ALARM_RULES = {"backstop_share": (2.0, 0.2), "longest_run_p95": (2.0, 8.0)}
# A loophole present from step 0 does not climb: the senior writing (nearly) every token of spans the
# schedule cannot hand off inside, and such spans being common. Toy study (issue 19): the paper's word
# schedule on spaceless jargon sat at 1.00 and ~28 per 100 tokens for 100 steps; on spaced jargon it
# started at 1.00 and 1.7 per 100 and fell to 0; finer schedules stayed under 0.1 per 100.
LEVEL_RULE = {"senior_share_spaceless": 0.95, "spaceless_per_100": 5.0}


def redraw_marks(schedule: Schedule, tokens: torch.Tensor, mask: torch.Tensor, tables: VocabTables):
    """(natural, forced), each (B, T) bool: a redraw right after token t that decides token t + 1,
    because token t is one of the schedule's boundaries or because the backstop fired. None for a
    schedule that never redraws.

    The backstop counts tokens since the last redraw (as `WordSchedule.advance` does): with the
    last natural redraw after token s, it fires after tokens s + K, s + 2K, ... that are no boundary.
    """
    natural = schedule.boundaries(tokens, tables)
    if natural is None:
        return None
    mask = mask.bool()
    B, T = tokens.shape
    decides = torch.zeros_like(mask)
    decides[:, :-1] = mask[:, 1:]  # a redraw after the last token decides nothing
    natural = natural & decides
    K = schedule.backstop
    if K is None:
        return natural, torch.zeros_like(natural)
    t = torch.arange(T, device=tokens.device).expand(B, T)
    last = torch.where(natural, t, torch.full_like(t, -1)).cummax(dim=1).values  # last natural at or before t
    before = torch.cat([torch.full_like(last[:, :1], -1), last[:, :-1]], dim=1)  # strictly before t
    forced = ~natural & ((t - before) % K == 0) & decides
    return natural, forced


def longest_runs(senior: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """(B,) long: each row's longest run of consecutive completion tokens by one author (0 if empty)."""
    senior, mask = senior.bool(), mask.bool()
    B, T = senior.shape
    t = torch.arange(T, device=senior.device).expand(B, T)
    change = torch.ones_like(mask)
    change[:, 1:] = senior[:, 1:] != senior[:, :-1]
    start = torch.where(change, t, torch.zeros_like(t)).cummax(dim=1).values  # where the current run began
    run = torch.where(mask, t - start + 1, torch.zeros_like(t))
    return run.max(dim=1).values if T else torch.zeros(B, dtype=torch.long)


def spaceless_mask(
    tokens: torch.Tensor, mask: torch.Tensor, tables: VocabTables, span: int = SPACELESS_SPAN
) -> torch.Tensor:
    """(B, T) bool: completion tokens inside a run of >= `span` consecutive tokens with no word start."""
    inside = ~tables.word_start[tokens] & mask.bool()
    B, T = inside.shape
    run_id = (~inside).long().cumsum(dim=1)  # the tokens of one run share the id of the break before it
    lengths = torch.zeros(B, T + 1, dtype=torch.long, device=tokens.device)
    lengths.scatter_add_(1, run_id, inside.long())
    return inside & (lengths.gather(1, run_id) >= span)


def loophole_counts(
    schedule: Schedule, tokens: torch.Tensor, senior: torch.Tensor, mask: torch.Tensor, tables: VocabTables
) -> tuple[dict[str, float], torch.Tensor]:
    """({COUNT_KEYS: sums over the batch}, (B,) longest single-author runs). tokens, senior, mask: (B, T).

    redraws / forced are NaN for a schedule that never redraws."""
    tables = tables.to(tokens.device)
    mask = mask.bool()
    senior = senior.bool() & mask
    spaceless = spaceless_mask(tokens, mask, tables)
    counts = {
        "tokens": float(mask.sum()),
        "spaceless": float(spaceless.sum()),
        "spaceless_senior": float((spaceless & senior).sum()),
    }
    marks = redraw_marks(schedule, tokens, mask, tables)
    if marks is None:
        counts["redraws"] = counts["forced"] = math.nan
    else:
        natural, forced = marks
        counts["redraws"] = float((natural | forced).sum())
        counts["forced"] = float(forced.sum())
    return {k: counts[k] for k in COUNT_KEYS}, longest_runs(senior, mask)


def _ratio(a: float, b: float, scale: float = 1.0) -> float:
    return scale * a / b if b > 0 and not math.isnan(a) else math.nan


def summarize(counts: dict[str, float], longest: torch.Tensor) -> dict[str, float]:
    """The METRICS from summed counts and the longest runs of every rollout (NaN where undefined)."""
    runs = longest.double().flatten()
    p50, p95 = (
        torch.quantile(runs, torch.tensor([0.5, 0.95], dtype=torch.float64)).tolist()
        if runs.numel()
        else (math.nan, math.nan)
    )
    redraws = counts["redraws"]
    return {
        "backstop_share": _ratio(counts["forced"], redraws) if not math.isnan(redraws) else math.nan,
        "longest_run_p50": p50,
        "longest_run_p95": p95,
        "redraws_per_100": _ratio(redraws, counts["tokens"], 100.0),
        "senior_share_spaceless": _ratio(counts["spaceless_senior"], counts["spaceless"]),
        "spaceless_per_100": _ratio(counts["spaceless"], counts["tokens"], 100.0),
    }


def loophole_stats(
    schedule: Schedule, tokens: torch.Tensor, senior: torch.Tensor, mask: torch.Tensor, tables: VocabTables
) -> dict[str, float]:
    """The METRICS of one batch of rollouts (B, T): see the module docstring."""
    return summarize(*loophole_counts(schedule, tokens, senior, mask, tables))


def loophole_alarm(first: dict, now: dict) -> str | None:
    """The warning for statistics `now` against their first logged values (step 0), or None.

    Rules (ALARM_RULES): backstop_share above both 2 x and + 0.2 its first value; longest_run_p95
    above both 2 x and + 8 tokens its first value. LEVEL_RULE, whatever the start: the senior wrote
    at least 95% of the tokens inside spans with no boundary, and those are at least 5 per 100 tokens.
    """
    for key, (factor, margin) in ALARM_RULES.items():
        a, b = first.get(key), now.get(key)
        if a is None or b is None or math.isnan(a) or math.isnan(b):
            continue
        if b > factor * a and b > a + margin:
            return (
                f"loophole? {key} climbed from {a:.3g} at the start to {b:.3g} (> {factor:g}x and "
                f"> +{margin:g}): the senior may be writing where the schedule cannot hand off "
                "(e.g. spaceless notation); see tandem/loophole/* in metrics.jsonl"
            )
    share, density = now.get("senior_share_spaceless"), now.get("spaceless_per_100")
    if (
        share is not None
        and density is not None
        and not (math.isnan(share) or math.isnan(density))
        and share >= LEVEL_RULE["senior_share_spaceless"]
        and density >= LEVEL_RULE["spaceless_per_100"]
    ):
        return (
            f"loophole? the senior wrote {share:.0%} of the tokens in spans with no boundary "
            f"({density:.3g} per 100 tokens): the schedule never hands off inside them (e.g. spaceless "
            "notation); schedule: boundary, token, or word with a small max_gap reaches inside"
        )
    return None

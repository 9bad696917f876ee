"""Evaluation protocols: which schedule writes each completion (method-notes, "Evaluation protocols").

- "solo":      the senior alone (SoloSchedule("senior")); its completions are also the ones the
               legibility and drift scores read.
- "handoff":   strict alternation one reasoning step each at "\\n\\n", senior first, one shared
               token budget per completion, a cap on rounds (default 150; a round is a senior
               step plus a junior step, as in the authors' code, so at most 300 steps).
- "dose-J":    WordSchedule with junior share J, i.e. senior probability p = 1 - J.
- "junior":    the junior alone, the floor.

`loophole_report(rows, tokenizer)`: the loophole statistics training logs (`trlvr.engine.loophole`)
for each dose protocol (the word schedule), over its samples; results.json's "loophole".

What this file does not know: prompts, rewards, files. It maps a protocol name to a schedule and
runs one batch through a `Pair`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch

from trlvr.engine import FINISH_REASONS, Pair, Sampling, Schedule, TandemOutput
from trlvr.eval.defaults import DEFAULT_DOSE_SHARES, HANDOFF_MAX_ROUNDS, SUITE_NAMES
from trlvr.eval.plan import batch_seed

__all__ = ["Protocol", "batch_seed", "dose_protocol", "loophole_report", "parse_protocol", "protocol_of_metric",
           "protocols_for", "run_protocol", "schedule_for"]


@dataclass(frozen=True)
class Protocol:
    """One generation protocol: its name (in samples and metric names), the suite entry that asks for
    it, whether it needs the junior, and (dose) the junior's share. `parse_protocol` is the one place
    a protocol name is read."""

    name: str  # solo, handoff, dose-0.25, junior
    entry: str  # the suite entry: solo, handoff, dose, junior
    junior_share: float | None = None  # dose-J: J

    @property
    def needs_junior(self) -> bool:
        return self.entry != "solo"

    def schedule(self, handoff_max_rounds: int = HANDOFF_MAX_ROUNDS) -> Schedule:
        """Who writes each token (a round of the handoff cap = one senior + one junior step)."""
        if self.entry in ("solo", "junior"):
            return Schedule.from_config("solo", author="senior" if self.entry == "solo" else "junior")
        if self.entry == "handoff":
            return Schedule.from_config("step", first_author="senior", max_rounds=handoff_max_rounds)
        return Schedule.from_config("word", p=1.0 - self.junior_share)


DOSE_PREFIX = "dose-"


def dose_protocol(junior_share: float) -> str:
    return f"{DOSE_PREFIX}{junior_share:g}"


def parse_protocol(name: str) -> Protocol:
    """A protocol name as a `Protocol` ("dose-0.25" -> the word schedule with junior share 0.25);
    ValueError for a name that is none."""
    if name in ("solo", "handoff", "junior"):
        return Protocol(name, name)
    if name.startswith(DOSE_PREFIX):
        try:
            share = float(name.removeprefix(DOSE_PREFIX))
        except ValueError:
            share = -1.0
        if 0.0 <= share <= 1.0:
            return Protocol(name, "dose", share)
    raise ValueError(f"unknown protocol {name!r}: expected solo, handoff, junior or dose-J with J in [0, 1]")


def protocol_of_metric(metric: str) -> Protocol | None:
    """The protocol a metric name belongs to ("dose-0.5/pass@1" -> dose-0.5), None for the scores
    (legibility/..., drift/...)."""
    try:
        return parse_protocol(metric.split("/", 1)[0])
    except ValueError:
        return None


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
    """The schedule of an evaluation protocol, by name."""
    return parse_protocol(protocol).schedule(handoff_max_rounds)


def cut_to_budgets(out: TandemOutput, budgets: list[int], pad_token_id: int) -> TandemOutput:
    """Each row cut to its own budget: a row longer than its budget ends there with reason "length".

    The first b tokens of a completion drawn under a larger budget are what a budget of b draws
    (decoding never looks at the budget), so one generation call serves rows of unequal budgets.
    """
    budget = torch.tensor(budgets, device=out.tokens.device)[:, None]  # (B, 1)
    T = out.tokens.shape[1]
    within = torch.arange(T, device=out.tokens.device)[None, :] < budget  # (B, T)
    mask = out.completion_mask & within
    cut = out.completion_mask.sum(1) > mask.sum(1)  # (B,) rows that lost tokens
    length_code = FINISH_REASONS.index("length")

    def keep(t):
        return None if t is None else t * mask

    return dataclasses.replace(  # every other field (sub-batches, engine stats) carries over
        out,
        tokens=torch.where(mask, out.tokens, pad_token_id),
        senior_authored=out.senior_authored & mask,
        completion_mask=mask,
        senior_logprob=keep(out.senior_logprob),
        junior_logprob=keep(out.junior_logprob),
        finish_codes=torch.where(cut, length_code, out.finish_codes),
    )


def eval_row_key(benchmark: str, problem_key: str, sample_idx: int, protocol: str) -> int:
    """The randomness key of one evaluation sample: (benchmark, problem, sample index, protocol);
    the evaluation seed is the generator's seed. Training keys (`trlvr.training.rollout`) start with
    the global step, so train and eval streams do not coincide."""
    from trlvr.engine.sampling import row_key

    return row_key("eval", benchmark, str(problem_key), int(sample_idx), protocol)


def run_protocol(
    pair: Pair,
    protocol: str,
    prompt_ids: list[list[int]],
    *,
    max_new_tokens: int | list[int],
    decoding: dict,
    seed: int,
    handoff_max_rounds: int = HANDOFF_MAX_ROUNDS,
    row_keys: list[int] | None = None,
) -> TandemOutput:
    """Generate one completion per prompt under `protocol` through `pair` (`trlvr.engine.make_pair`);
    `max_new_tokens` may be one budget per prompt.

    row_keys: one key per prompt (`eval_row_key`), so each completion is a pure function of (seed,
    key, position): the same whatever batch, batch size or sub-batch it is drawn in.
    """
    budgets = [max_new_tokens] * len(prompt_ids) if isinstance(max_new_tokens, int) else list(max_new_tokens)
    sampling = Sampling(max(budgets), temperature=decoding["temperature"], top_p=decoding["top_p"],
                        top_k=decoding["top_k"], seed=seed)  # fmt: skip
    out = pair.generate(prompt_ids, schedule_for(protocol, handoff_max_rounds), sampling, row_keys)
    if min(budgets) == max(budgets):
        return out
    return cut_to_budgets(out, budgets, pair.pad_token_id)


def loophole_report(rows: list[dict], tokenizer, chunk: int = 1024) -> dict[str, dict]:
    """{dose protocol: the loophole statistics of its samples, every benchmark together}.

    The statistics are training's (`trlvr.engine.loophole.METRICS`: backstop_share, longest_run_p50 /
    _p95, redraws_per_100, senior_share_spaceless, spaceless_per_100), computed from each sample's
    token ids and authors under the protocol's word schedule; None where undefined; plus num_samples.
    """
    import math
    from collections import defaultdict

    from trlvr.engine.loophole import COUNT_KEYS, loophole_counts, summarize
    from trlvr.engine.schedules import vocab_tables

    by_protocol = defaultdict(list)
    for r in rows:
        if parse_protocol(str(r["protocol"])).entry == "dose":
            by_protocol[r["protocol"]].append(r)
    if not by_protocol:
        return {}
    top = max((max(r["token_ids"], default=0) for rs in by_protocol.values() for r in rs), default=0)
    tables = vocab_tables(tokenizer, max(len(tokenizer), top + 1))
    out = {}
    for protocol, rs in sorted(by_protocol.items()):
        schedule = schedule_for(protocol)
        counts, runs = dict.fromkeys(COUNT_KEYS, 0.0), []
        for start in range(0, len(rs), chunk):  # bounded memory for long completions
            part = rs[start : start + chunk]
            T = max(1, max(len(r["token_ids"]) for r in part))
            tokens = torch.zeros(len(part), T, dtype=torch.long)
            senior = torch.zeros(len(part), T, dtype=torch.bool)
            mask = torch.zeros(len(part), T, dtype=torch.bool)
            for i, r in enumerate(part):
                n = len(r["token_ids"])
                tokens[i, :n] = torch.tensor(r["token_ids"], dtype=torch.long)
                senior[i, :n] = torch.tensor([a == "1" for a in r["authors"]], dtype=torch.bool)
                mask[i, :n] = True
            c, longest = loophole_counts(schedule, tokens, senior, mask, tables)
            counts = {k: counts[k] + c[k] for k in COUNT_KEYS}
            runs.append(longest)
        stats = summarize(counts, torch.cat(runs))
        out[protocol] = {**{k: None if math.isnan(v) else v for k, v in stats.items()}, "num_samples": len(rs)}
    return out

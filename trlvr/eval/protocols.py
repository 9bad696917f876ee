"""Evaluation protocols: which schedule writes each completion (method-notes, "Evaluation protocols").

- "solo":      the senior alone (SoloSchedule("senior")); its completions are also the ones the
               legibility and drift scores read.
- "handoff":   strict alternation one reasoning step each at "\\n\\n", senior first, one shared
               token budget per completion, a cap on rounds (default 150; a round is a senior
               step plus a junior step, as in the authors' code, so at most 300 steps).
- "dose-J":    WordSchedule with junior share J, i.e. senior probability p = 1 - J.
- "junior":    the junior alone, the floor.
- "prefix-K":  the junior alone, continuing the first K% of the senior's solo trace of the same
               (problem, sample), with an answer-availability flag per row (`trlvr.eval.prefix`;
               run by `trlvr.eval.runner` after solo, whose rows it reads).

`loophole_report(rows, tokenizer)`: the loophole statistics training logs (`trlvr.engine.loophole`)
for each dose protocol (the word schedule), over its samples; results.json's "loophole".

What this file does not know: prompts, rewards, files. It maps a protocol name to a schedule and
runs one batch through a `Pair`.
"""

from __future__ import annotations

import dataclasses
import math
from collections import defaultdict

import torch

from trlvr.engine import FINISH_REASONS, Pair, Sampling, TandemOutput
from trlvr.engine.loophole import COUNT_KEYS, loophole_counts, summarize
from trlvr.engine.sampling import row_key
from trlvr.engine.schedules import vocab_tables
from trlvr.eval.defaults import HANDOFF_MAX_ROUNDS
from trlvr.eval.plan import batch_seed
from trlvr.eval.prefix import answer_in_text, cut, trace_body
from trlvr.eval.suite import (
    Protocol,
    dose_protocol,
    parse_protocol,
    prefix_protocol,
    protocol_of_metric,
    protocols_for,
)

__all__ = [
    "Protocol",
    "answer_in_text",
    "batch_seed",
    "cut",
    "dose_protocol",
    "loophole_report",
    "parse_protocol",
    "prefix_protocol",
    "protocol_of_metric",
    "protocols_for",
    "run_protocol",
    "schedule_for",
    "trace_body",
]


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
    sampling = Sampling(
        max(budgets),
        temperature=decoding["temperature"],
        top_p=decoding["top_p"],
        top_k=decoding["top_k"],
        seed=seed,
    )
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
        out[protocol] = {
            **{k: None if math.isnan(v) else v for k, v in stats.items()},
            "num_samples": len(rs),
        }
    return out

"""Benchmark preparation: each problem's prompt ids through the one prompt path of `trlvr.data`, the prompt cap
(over-long prompts dropped up front), the lossy-prompt check, and the models' context length. What
`trlvr.eval.api`'s checks and the run loop (`trlvr.eval.runner`) both need before a sample is generated."""

from __future__ import annotations

from typing import NamedTuple

from trlvr.data import encode_prompt, prompt_for
from trlvr.data.prompts import DEFAULT_PROMPT_TEMPLATE, lossy_prompts, lost_characters
from trlvr.data.schema import problem_key
from trlvr.errors import UserError
from trlvr.eval.plan import completion_budget, split_by_prompt_length


class Bench(NamedTuple):
    """One benchmark's problems after the prompt cap, with what generation needs per problem."""

    problems: list
    keys: list[str]  # content keys, the problem_id of every row
    prompts: list[list[int]]  # prompt token ids
    budgets: list[int]  # completion budget of each problem


def prompt_ids_for(problem, tokenizer, template: str = DEFAULT_PROMPT_TEMPLATE) -> list[int]:
    """A problem's prompt token ids, through the one shared prompt path of `trlvr.data` (`template`: a
    `trlvr.data.prompts.PROMPT_TEMPLATES` name)."""
    return encode_prompt(prompt_for(problem, tokenizer, template), tokenizer)


def model_context_length(*models) -> int | None:
    """The smallest `max_position_embeddings` of the models' configs, or None when none says."""
    found = [
        getattr(getattr(m, "config", None), "max_position_embeddings", None) for m in models if m is not None
    ]
    found = [int(c) for c in found if isinstance(c, int) and c > 0]
    return min(found) if found else None


def prepare_benchmarks(
    benchmarks,
    tokenizer,
    max_prompt_tokens,
    max_new_tokens,
    context_length,
    template: str = DEFAULT_PROMPT_TEMPLATE,
):
    """(name -> Bench, name -> dropped problems): prompts encoded once, over-long ones dropped up front."""
    if not benchmarks:
        raise UserError("no benchmarks to evaluate")
    out, dropped = {}, {}
    for name, problems in benchmarks.items():
        if not problems:
            raise UserError(f"benchmark {name!r} has no problems")
        keys = [problem_key(p) for p in problems]
        first: dict[str, object] = {}
        for p, k in zip(problems, keys, strict=True):
            if k in first:
                raise UserError(
                    f"benchmark {name!r}: problems {first[k]!r} and {p.id!r} have the same text and gold "
                    "answer; remove the duplicate (`trlvr data check` lists them)"
                )
            first[k] = p.id
        prompts = [prompt_ids_for(p, tokenizer, template) for p in problems]
        kept, cut = split_by_prompt_length(
            [len(x) for x in prompts], max_prompt_tokens, max_new_tokens, context_length
        )
        dropped[name] = [
            {"problem_id": keys[i], "source_id": str(problems[i].id), "prompt_tokens": len(prompts[i])}
            for i in cut
        ]
        if not kept:
            raise UserError(
                f"benchmark {name!r}: every prompt is longer than --max-prompt-tokens {max_prompt_tokens} "
                f"(or leaves no room in the context of {context_length} tokens)"
            )
        out[name] = Bench(
            [problems[i] for i in kept],
            [keys[i] for i in kept],
            [prompts[i] for i in kept],
            [completion_budget(len(prompts[i]), max_new_tokens, context_length) for i in kept],
        )
    return out, dropped


def lossy_problems(
    benchmarks: dict[str, list], tokenizer, template: str = DEFAULT_PROMPT_TEMPLATE
) -> dict[str, list[dict]]:
    """{benchmark: [{problem_id, source_id, lost, roundtrip}]} for problems whose prompt the tokenizer
    cannot spell (`trlvr.data.prompts.lossy_prompts`, once per problem); benchmarks with none are left out."""
    out = {}
    for name, problems in benchmarks.items():
        bad = lossy_prompts(tokenizer, [prompt_for(p, tokenizer, template) for p in problems])
        if bad:
            out[name] = [
                {
                    "problem_id": problem_key(problems[x.index]),
                    "source_id": str(problems[x.index].id),
                    "lost": lost_characters(x.original, x.roundtrip),
                    "roundtrip": x.roundtrip,
                }
                for x in bad
            ]
    return out

"""Benchmark preparation: each problem's prompt ids through the one prompt path of `trlvr.data`, the prompt
cap (over-long prompts dropped up front), the lossy-prompt check, and the models' context length. What
`trlvr.eval.api`'s checks and the run loop (`trlvr.eval.runner`) both need before a sample is generated.
`prepare` settles all of it for one evaluation, with the fingerprint.json and config.json it writes."""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

from trlvr.data import encode_prompt, prompt_for
from trlvr.data.prompts import DEFAULT_PROMPT_TEMPLATE, lossy_prompts, lost_characters
from trlvr.data.schema import problem_key
from trlvr.errors import UserError
from trlvr.eval import fingerprint as fpr
from trlvr.eval.grading import choose_grader, grading_name
from trlvr.eval.plan import completion_budget, default_max_prompt_tokens, split_by_prompt_length
from trlvr.eval.spec import EvalSpec
from trlvr.eval.suite import parse_protocol, protocols_for
from trlvr.provenance import machine


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


class Prepared(NamedTuple):
    """What an evaluation settles before its folder is touched: the spec with its graders resolved, the
    grading function, the protocols, the benchmarks as generation takes them, and the two records."""

    spec: EvalSpec
    score_fn: Callable
    protocols: list[str]
    decodings: dict[str, dict]  # each protocol's sampling (handoff-paper has its own)
    benches: dict[str, Bench]
    fingerprint: dict  # fingerprint.json: what determines the samples
    config: dict  # config.json: every setting, resolved


def prepare(
    partners,
    benchmarks: dict[str, list],
    spec: EvalSpec,
    *,
    score_fn: Callable | None = None,
    refuse_lossy: bool = False,
    skipped_rows: dict[str, list[dict]] | None = None,
) -> Prepared:
    """The preparation of `trlvr.eval.runner.evaluate` (its docstring says what each argument means): grader,
    budgets, prompts and the lossy-prompt refusal, then fingerprint.json and config.json as dicts."""
    protocols = protocols_for(spec.suite, spec.dose_shares, spec.prefix_ks)
    spec, score_fn = choose_grader(spec, score_fn)
    grading = grading_name(score_fn)
    tokenizer = partners.tokenizer
    context_length = partners.context_length if spec.context_length == "auto" else spec.context_length
    max_prompt_tokens = (
        default_max_prompt_tokens(context_length)
        if spec.max_prompt_tokens == "auto"
        else spec.max_prompt_tokens
    )
    benches, dropped = prepare_benchmarks(
        benchmarks, tokenizer, max_prompt_tokens, spec.max_new_tokens, context_length, spec.prompt_template
    )
    lossy = lossy_problems(benchmarks, tokenizer, spec.prompt_template)
    if lossy and refuse_lossy:
        bench, first = next((b, v[0]) for b, v in lossy.items())
        raise UserError(
            f"{sum(map(len, lossy.values()))} problem(s) do not survive the tokenizer "
            f"(decode(encode(prompt)) differs; first: {bench} row id {first['source_id']!r} loses "
            f"{first['lost']!r}); drop them, or use a tokenizer that spells them"
        )
    fingerprint = {
        "version": fpr.VERSION,
        "models": partners.fingerprint(),
        "data": partners.identities.get("data") or {},
        "problems": {b: x.keys for b, x in benches.items()},
        **spec.fingerprint_part(context_length, max_prompt_tokens, grading),
    }
    config = {
        **spec.config_part(context_length, max_prompt_tokens, grading),
        "protocols": protocols,
        "benchmarks": sorted(benches),
        "num_problems": {b: len(x.keys) for b, x in benches.items()},
        "models": partners.paths,
        "dropped_problems": dropped,
        "lossy_prompts": lossy,
        "machine": machine(),  # the versions and threads; the run adds its device and dtype
        "pairing": partners.pairing,
        "backend": partners.backend,
        **({"skipped_rows": skipped_rows} if skipped_rows else {}),
    }
    decodings = {p: parse_protocol(p).decoding(spec.decoding) for p in protocols}
    return Prepared(spec, score_fn, protocols, decodings, benches, fingerprint, config)

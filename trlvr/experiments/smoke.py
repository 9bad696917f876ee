"""`trlvr smoke`: the first command on a new machine. A few training steps of both arms on the run's
own models and lengths, then selection and evaluation on a handful of problems, on the configured
backend; every check on one screen and in DIR/smoke.json.

Each stage releases what it held before the next starts (a trainer and its engine, an evaluation's
engines: `trlvr.engine.release`): vLLM refuses to start an engine while the device's free memory is below
its share.

Checks (each `ok`, `failed` with the reason, or `not measured` with why):
- memory: the engine's memory plan (`trlvr.memory`), beside what the device reported (vLLM's KV
  tokens from the run's memory record; on CUDA the peak memory torch allocated);
- author mask: the tandem rollouts' senior share falls in the schedule's band, and TRL's completion
  length (counted through `env_mask`) equals the senior's tokens, not the team's: the mask reached the
  loss; the grpo arm's share is exactly 1;
- grader: math-verify imports, known equivalent and non-equivalent pairs grade right, and a
  pathological answer is cut at its timeout (a silently degraded grader cost the reproduction weeks);
- parity (backend vllm): greedy rollouts of a few training prompts on the tandem arm's engine three ways
  (`EngineOptions.parity_variants`): as the run builds it (compiled, CUDA graphs), compiled without graphs,
  and enforce_eager, sized so that mixed prefill + decode steps run as PIECEWISE graphs. Graphs vs no graphs,
  then no graphs vs eager (`parity`): each row is compared up to its first difference, its chosen
  tokens' log-probs within PARITY_TOLERANCE of each other; the difference passes when it is a near-tie in
  both engines (a top-1 minus top-2 gap under PARITY_MARGIN, and the engines' top two log-probs there
  within PARITY_TOLERANCE) and fails otherwise, naming the graphs or the compilation (a mode that corrupts the
  composite's activations shows here; `not measured` where the run's engine is eager already, as on a CPU);
- lengths: truncation rate and mean response length, in training and in the evaluation;
- pre-emptions: requests the engine pre-empted (backend vllm);
- speed: tandem / solo step time (and generation time) against the bound (S + J) / S, where S and J
  are the bytes one decode step of each model reads: its weights plus its KV at the measured context
  (the weights-only ratio beside it);
- self-pair (the null check of issue 57): the run's junior (a self-paired run: its starting senior) evaluated
  as its own partner, solo and handoff, on the held-out problems (SELF_PAIR_N samples each, the run's
  completion budget). With one model on both sides every token comes from one distribution, so handoff - solo
  pass@1 is 0 but for sampling noise: it must lie within SELF_PAIR_Z standard errors (`self_pair_check`). A
  protocol that cuts, shifts or budgets the text otherwise shows here. On the smoke's few problems the
  interval is wide (a gross fault, not a small bias; tests/test_self_pair_null.py runs 200 problems).
"""

from __future__ import annotations

import contextlib
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

import torch

from trlvr import rundir
from trlvr.config import load_run_config
from trlvr.data import encode_prompt, load_problems, prompt_for, read_jsonl
from trlvr.engine.backends import backend
from trlvr.engine.release import free_memory
from trlvr.engine.schedules import Schedule
from trlvr.errors import UserError
from trlvr.eval.api import EVAL_ENGINE_SHARE
from trlvr.eval.store import read_samples
from trlvr.gpu import cuda_line, driver_facts, free_memory_check
from trlvr.memory import MemoryPlan
from trlvr.models import is_adapter_dir, load_tokenizer
from trlvr.provenance import git_commit, machine
from trlvr.rewards.math_reward import MathReward
from trlvr.rewards.pool import shared_pool
from trlvr.team import SELF, Team

SHARE_BAND = 0.3  # a stochastic schedule's senior share within p +- this (and both authors writing)
LENGTH_TOL = 0.5  # tokens: TRL's mean completion length vs the senior's mean tokens
# (prediction, gold, expected score): what any working math grader gets right
GRADER_PAIRS = (
    (r"\boxed{\frac{1}{2}}", "0.5", 1.0),
    (r"\boxed{2}", "2.0", 1.0),
    (r"\boxed{0.5}", r"\frac{1}{2}", 1.0),
    (r"\boxed{3}", "2", 0.0),
    (r"\boxed{x+1}", "x + 1", 1.0),
    (r"\boxed{12}", "21", 0.0),
)
PARITY_PROMPTS = 24  # greedy rollouts compared between the engine variants (more than their PARITY_SEQS rows)
PARITY_TOKENS = 48  # new tokens per parity rollout (capped by the run's max_completion_length)
# nat: greedy decoding under different kernels (eager, inductor, CUDA graphs) parts where the top two
# log-probs nearly tie; vLLM's modes flip tokens at top-1 minus top-2 gaps under about 0.7 nat (reported
# upstream on A100). A first difference at a gap under this in either engine is a near-tie; above it, the
# forwards differ
PARITY_MARGIN = 0.5
PARITY_TOP = 2  # log-probs asked for per position: the top two, for the gap
# nat: how far two engines' log-probs of the same token in the same context may differ (the chosen token's
# over each row's shared prefix, and the top two at a near-tie flip). bf16 logits of magnitude ~30 are spaced
# 0.125 apart, so kernel rounding moves a log-prob by a few tenths at most; corrupted activations move it by
# nats (a first GPU run records `max_logprob_delta` per comparison: the figure to tighten this from)
PARITY_TOLERANCE = 0.4
SELF_PAIR_N = 4  # samples per problem and protocol in the self-pair check (cheap: the held-out problems only)
SELF_PAIR_Z = 3.29  # a two-sided 99.9% normal interval: a smoke that fails on chance once in 1,000 runs
STALL = r"\boxed{9^{9^{9^{9}}}}"  # unscreened: sympy sits in one huge integer operation
STALL_TIMEOUT_S = 2.0


@dataclass
class SmokeOptions:
    """config: a recipe or run config; out: the smoke directory; steps: optimizer steps per arm;
    problems: held out for selection and evaluated; overrides: run-config keys for both arms."""

    config: str
    out: str = "runs/smoke"
    steps: int = 2
    problems: int = 8
    gpu_memory: str | None = None
    overrides: dict = field(default_factory=dict)
    verbose: bool = False  # the stages' own console output (libraries' warnings, progress bars) on the screen


def _check(ok: bool | None, **found) -> dict:
    return {"status": "not measured" if ok is None else "ok" if ok else "failed", **found}


def _metrics(run_dir: Path) -> list[dict]:
    path = run_dir / rundir.METRICS_FILE
    return read_jsonl(path, tolerate_torn_tail=True) if path.is_file() else []


def _series(rows: list[dict], key: str) -> list[float]:
    return [float(r[key]) for r in rows if isinstance(r.get(key), int | float)]


def _median(xs: list[float], drop_first: bool = True) -> float | None:
    xs = xs[1:] if drop_first and len(xs) > 1 else xs
    return statistics.median(xs) if xs else None


def grader_check() -> dict:
    """math-verify present, known pairs graded right, the timeout enforced."""
    try:
        import math_verify  # noqa: F401
    except ImportError as e:
        return _check(False, reason=f"math-verify does not import: {e}")

    reward = MathReward()
    got = reward([p for p, _, _ in GRADER_PAIRS], [g for _, g, _ in GRADER_PAIRS])
    wrong = [f"{p} vs {g}: {s} (want {w})" for (p, g, w), s in zip(GRADER_PAIRS, got, strict=True) if s != w]
    t0 = time.perf_counter()
    stalled = shared_pool().run([("grade", STALL, "3")], timeout=STALL_TIMEOUT_S)[0]
    waited = time.perf_counter() - t0
    timed_out = stalled.status == "timeout" and waited < STALL_TIMEOUT_S + 10
    return _check(
        not wrong and timed_out,
        pairs=len(GRADER_PAIRS),
        wrong=wrong,
        timeout_status=stalled.status,
        timeout_s=round(waited, 2),
    )


def self_pair_model(team: Team) -> str:
    """The model the self-pair check pairs with itself: the run's junior, or when self-paired its senior."""
    return team.junior_weights or team.senior


def self_pair_check(rows: list[dict], z: float = SELF_PAIR_Z) -> dict:
    """An identical pair's handoff - solo pass@1 (`rows`: one evaluation's samples, both protocols) within its
    interval: the mean over problems of the per-problem difference, and its standard error given these
    problems (sampling noise only: each problem's pooled rate q, variance q(1 - q) / n per protocol). Ok when
    0 lies in diff +- z SE; a problem every sample of both protocols got right (or wrong) adds no variance and
    no difference.

    >>> rows = [{"protocol": p, "problem_id": i, "reward": float(j < 2)} for p in ("solo", "handoff")
    ...         for i in range(4) for j in range(4)]
    >>> c = self_pair_check(rows); c["status"], c["diff"], c["problems"]
    ('ok', 0.0, 4)
    """
    by: dict[tuple, list[bool]] = {}
    for r in rows:
        by.setdefault((r["protocol"], str(r["problem_id"])), []).append(float(r["reward"]) > 0.5)
    ids = sorted({p for proto, p in by if proto == "solo"} & {p for proto, p in by if proto == "handoff"})
    if not ids:
        return _check(None, reason="no problem has both solo and handoff samples")
    diff, var = 0.0, 0.0
    for i in ids:
        s, h = by[("solo", i)], by[("handoff", i)]
        diff += sum(h) / len(h) - sum(s) / len(s)
        q = (sum(s) + sum(h)) / (len(s) + len(h))
        var += q * (1 - q) * (1 / len(s) + 1 / len(h))
    diff, se = diff / len(ids), var**0.5 / len(ids)
    low, high = diff - z * se, diff + z * se
    return _check(
        low <= 0.0 <= high,
        diff=round(diff, 4),
        se=round(se, 4),
        interval=[round(low, 4), round(high, 4)],
        z=z,
        problems=len(ids),
        samples=len(by[("solo", ids[0])]),
        solo=round(statistics.mean(x for i in ids for x in by[("solo", i)]), 4),
        handoff=round(statistics.mean(x for i in ids for x in by[("handoff", i)]), 4),
    )


@dataclass
class Greedy:
    """One engine's greedy rollouts of the parity prompts: per row its tokens, their authors and, per
    position, the top log-probs in descending order (at least the top two)."""

    completion_ids: list[list[int]]
    authors: list[list[int]]
    top_logprobs: list[list[list[float]]]


def _gap(top: list[list[float]], k: int) -> float | None:
    """Top-1 minus top-2 log-prob at position k of one row (None: the row has no position k)."""
    return top[k][0] - top[k][1] if k < len(top) and len(top[k]) >= 2 else None


def _top_two(top: list[list[float]], k: int) -> list[float] | None:
    return sorted(top[k][:2], reverse=True) if k < len(top) and len(top[k]) >= 2 else None


def parity(a: Greedy, b: Greedy, margin: float = PARITY_MARGIN, tolerance: float = PARITY_TOLERANCE) -> dict:
    """Two engines' greedy rollouts of the same prompts, compared row by row up to each row's first
    difference (what follows it is another context: not compared), then by log-prob there:
    - over the shared prefix, the chosen token's log-prob may differ by at most `tolerance` (nat) between
      the engines (`max_logprob_delta`): a row whose tokens agree but whose log-probs do not fails
      ("logprob");
    - a first difference where the tokens differ passes as a near-tie only when it is one in both engines:
      either engine's top-1 minus top-2 gap under `margin` and the two engines' top two log-probs there (the
      same two tokens, swapped) within `tolerance` of each other; else it fails ("token"). A near tie in one
      engine where the other is sure of its token is a different forward, not rounding;
    - one where only the authors differ (a pure function of the tokens before), or one row ends where the
      other goes on with the same tokens, fails."""
    near, failed, delta = [], [], 0.0
    for i, (x, y, ax, ay) in enumerate(
        zip(a.completion_ids, b.completion_ids, a.authors, b.authors, strict=True)
    ):
        shared = min(len(x), len(y))
        k = next((j for j in range(shared) if x[j] != y[j] or ax[j] != ay[j]), None)
        if k is None and len(x) != len(y):
            k = shared
        row_delta, at = 0.0, None
        for j in range(shared if k is None else k):
            d = abs(a.top_logprobs[i][j][0] - b.top_logprobs[i][j][0])
            if d > row_delta:
                row_delta, at = d, j
        delta = max(delta, row_delta)
        if row_delta > tolerance:
            failed.append({"row": i, "token": at, "kind": "logprob", "delta": round(row_delta, 4)})
            continue
        if k is None:
            continue
        gaps = [_gap(a.top_logprobs[i], k), _gap(b.top_logprobs[i], k)]
        flip = k < shared and x[k] != y[k]
        entry = {
            "row": i,
            "token": k,
            "kind": "token" if flip else "author" if k < shared else "length",
            "gaps": [None if g is None else round(g, 4) for g in gaps],
        }
        tie = flip and any(g is not None and g < margin for g in gaps)
        tops = [_top_two(a.top_logprobs[i], k), _top_two(b.top_logprobs[i], k)]
        if tie and None not in tops and max(abs(u - v) for u, v in zip(*tops, strict=True)) > tolerance:
            tie = False
            entry["top_two"] = [[round(v, 4) for v in t] for t in tops]
        (near if tie else failed).append(entry)
    check = _check(
        not failed,
        rows=len(a.completion_ids),
        margin=margin,
        tolerance=tolerance,
        near_ties=near,
        failures=failed,
        max_logprob_delta=round(delta, 4),
    )
    if failed:
        f = failed[0]
        if f["kind"] == "token" and "top_two" in f:
            what = (
                f"tokens part where the engines' top two log-probs differ ({f['top_two'][0]} vs "
                f"{f['top_two'][1]} nat, tolerance {tolerance}): a near tie in one engine only"
            )
        elif f["kind"] == "logprob":
            what = f"the same tokens with log-probs {f['delta']} nat apart (tolerance {tolerance})"
        else:
            what = {
                "token": (
                    f"tokens part at a top-1/top-2 gap of {f['gaps'][0]} / {f['gaps'][1]} nat (margin "
                    f"{margin})"
                ),
                "author": "the authors differ where the tokens agree",
                "length": "one row ends where the other goes on",
            }[f["kind"]]
        check["reason"] = (
            f"{len(failed)} of {len(a.completion_ids)} rows differ; row {f['row']} from token {f['token']}: "
            f"{what}"
        )
    return check


# what a failed comparison blames: graphs vs no graphs, then no graphs vs eager
PARITY_PAIRS = {
    "graphs": ("graphs", "no_graphs", "its CUDA graphs change the forward"),
    "compile": ("no_graphs", "eager", "its compiled forward is not the model's"),
}


def parity_check(
    senior: str,
    junior: str | None,
    schedule,
    prompts: list[list[int]],
    engine,
    max_new_tokens: int,
    tokenizer=None,
    eos_token_ids=None,
    *,
    backend: str,
) -> dict:
    """backend vllm: greedy rollouts of `prompts` under `schedule` on the engine `engine` (the run's
    `EngineOptions`) three ways (`engine.parity_variants()`: compiled with CUDA graphs, compiled without,
    enforce_eager), one engine at a time (each closed before the next), with the top PARITY_TOP log-probs
    of every position; compared by `parity`, graphs vs no graphs ("graphs") and no graphs vs eager
    ("compile"). The variants hold fewer rows than `prompts` and few tokens a step, so requests are
    admitted and prefilled in chunks beside running decodes: mixed steps under the capture ceiling, which
    vLLM runs as PIECEWISE graphs. Not measured when `engine` is eager already (nothing to compare)."""
    from trlvr.engine import Sampling, make_pair

    if engine.enforce_eager:
        return _check(None, reason="the run's engine is enforce_eager on this machine: nothing to compare")
    variants = engine.parity_variants()
    sampling = Sampling(max_new_tokens, temperature=0.0)
    keys = list(range(len(prompts)))
    runs = {}
    for name, options in variants.items():
        pair = make_pair(
            senior, junior, tokenizer, backend=backend, engine=options, eos_token_ids=eos_token_ids
        )
        try:
            out = pair.generate(prompts, schedule, sampling, keys, top_logprobs=PARITY_TOP)
        finally:
            pair.close()
        runs[name] = Greedy(out.completion_ids, out.authors, out.plan["top_logprobs"])
    found = {key: parity(runs[a], runs[b]) for key, (a, b, _) in PARITY_PAIRS.items()}
    sized = variants["graphs"]
    check = _check(
        all(c["status"] == "ok" for c in found.values()),
        rows=len(prompts),
        margin=PARITY_MARGIN,
        tolerance=PARITY_TOLERANCE,
        max_num_seqs=sized.max_num_seqs,
        max_num_batched_tokens=sized.max_num_batched_tokens,
        **found,
    )
    bad = [key for key, c in found.items() if c["status"] == "failed"]
    if bad:
        key = bad[0]
        a, b, blame = PARITY_PAIRS[key]
        check["reason"] = f"greedy rollouts, {a} vs {b}: {found[key]['reason']}: {blame}"
    return check


def run_parity(tandem, grpo, gpu_memory) -> dict:
    """`parity_check` for a run config's tandem arm: its engine as training builds it (`run_plan` +
    `run_engine`; the context from these prompts when the run derives it from its data), its schedule,
    the first PARITY_PROMPTS problems of its dataset as training renders them."""
    from trlvr.training.memory_plan import run_dtype, run_plan
    from trlvr.training.rollout import run_engine

    tok = load_tokenizer(tandem.senior, "senior")
    problems = list(load_problems(tandem.dataset, split=tandem.dataset_split, limit=PARITY_PROMPTS))
    prompts = [encode_prompt(prompt_for(p, tok), tok) for p in problems]
    name, settings = tandem.schedule_kwargs()
    junior = Team.of(tandem).junior_weights
    plan = run_plan(tandem, grpo, gpu_memory=gpu_memory, longest_prompt=max(map(len, prompts)))
    engine = run_engine(backend(tandem.backend), plan, grpo, run_dtype(grpo) or "auto")
    return parity_check(
        tandem.senior,
        junior,
        Schedule.from_config(name, **settings),
        prompts,
        engine,
        min(PARITY_TOKENS, grpo.max_completion_length),
        tokenizer=tok,
        backend=tandem.backend,
    )


def self_paired(team: Team) -> bool:
    """The junior is the senior's own starting weights (`junior: self`, or the same model named twice)."""
    return team.is_self or team.junior_model == team.senior


def trained_parity(tandem, grpo, trained: str, gpu_memory) -> dict:
    """A self-paired run's parity again after its training steps, the trained senior beside the untrained
    junior (`run_parity`): at step 0 both units compute one function, so a junior that reads the senior's
    weights, KV cache or compiled artifact gives the same tokens there; once the senior trained, it does not.
    Not measured for a LoRA senior (its trained model is an adapter folder, which the engine does not
    load)."""
    if Team.of(tandem).is_self or is_adapter_dir(trained):
        return _check(
            None, reason="the trained senior is a LoRA adapter folder: the engine loads full model folders"
        )
    return run_parity(replace(tandem, senior=trained), grpo, gpu_memory)  # the junior: the starting weights


def mask_check(tandem_rows: list[dict], grpo_rows: list[dict], p: float | None) -> dict:
    """The senior share in the schedule's band, and TRL's counted length = the senior's tokens."""
    share = _series(tandem_rows, "tandem/senior_share")
    trl_len, senior_len = (
        _series(tandem_rows, "completions/mean_length"),
        _series(tandem_rows, "tandem/senior_tokens/mean"),
    )
    team_len = _series(tandem_rows, "tandem/team_length/mean")
    solo_share = _series(grpo_rows, "tandem/senior_share")
    if not share or not trl_len or not senior_len:
        return _check(None, reason="the tandem run logged no senior share or lengths")
    in_band = all(0.0 < s < 1.0 for s in share) and (
        p is None or all(abs(s - p) <= SHARE_BAND for s in share)
    )
    reached = all(abs(a - b) <= LENGTH_TOL for a, b in zip(trl_len, senior_len, strict=False))
    team_longer = all(t > s for t, s in zip(team_len, senior_len, strict=False))
    solo_ok = bool(solo_share) and all(s == 1.0 for s in solo_share)
    return _check(
        in_band and reached and team_longer and solo_ok,
        senior_share=share,
        band=None if p is None else [round(p - SHARE_BAND, 3), round(p + SHARE_BAND, 3)],
        trl_completion_length=trl_len,
        senior_tokens=senior_len,
        team_length=team_len,
        grpo_senior_share=solo_share,
    )


def step_bound(plan: MemoryPlan, prompt_len: float, completion_len: float, rows: int) -> dict:
    """(S + J) / S over bytes one decode step reads (weights + each model's KV at the mean context
    of the rollout: the prompt plus half the completion), and the weights-only ratio."""
    ctx = prompt_len + completion_len / 2
    read = [s.weight_bytes + s.kv_bytes_per_token * rows * ctx for s in plan.stacks]
    weights = [s.weight_bytes for s in plan.stacks]
    if len(read) < 2:
        return {}
    return {
        "bound": round(sum(read) / read[0], 3),
        "weights_only": round(sum(weights) / weights[0], 3),
        "context": round(ctx, 1),
        "rows": rows,
    }


def speed_check(arms: dict, plan: MemoryPlan, prompt_len: float) -> dict:
    t, g = arms["tandem"]["rows"], arms["grpo"]["rows"]
    step = (_median(_series(t, "timing/step_s")), _median(_series(g, "timing/step_s")))
    gen = (_median(_series(t, "timing/generation_s")), _median(_series(g, "timing/generation_s")))
    if None in step or None in gen:
        return _check(None, reason="no step times logged")
    team = statistics.mean(_series(t, "tandem/team_length/mean") or [0.0])
    bound = step_bound(plan, prompt_len, team, plan.rows or 1)
    ratio = {"step": round(step[0] / step[1], 3), "generation": round(gen[0] / gen[1], 3)}
    return _check(
        None,
        **ratio,
        step_s={"tandem": step[0], "grpo": step[1]},
        generation_s={"tandem": gen[0], "grpo": gen[1]},
        **bound,
        note="a ratio to compare, not a pass/fail: the bound holds for decode-bound steps on a GPU",
    )


def weights_moved_check(arms: dict) -> dict:
    """Each arm's first optimizer step with a non-zero gradient changed its trainable weights
    (`trlvr.training.learning.WeightsMoved`, which stops a run where none moved), and the share of loss
    tokens and rows TRL's importance-sampling correction zeroed or clipped (backend vllm)."""
    from trlvr.training.learning import WEIGHTS_MOVED
    from trlvr.training.metrics import IS_ROWS, IS_TOKENS

    moved = {a: (_series(v["rows"], WEIGHTS_MOVED) or [None])[0] for a, v in arms.items()}
    corrected = {
        a: {
            k.rsplit("/", 1)[1]: round(statistics.mean(xs), 4)
            for k in (IS_TOKENS, IS_ROWS)
            if (xs := _series(v["rows"], k))
        }
        for a, v in arms.items()
    }
    ok = None if None in moved.values() else all(x > 0 for x in moved.values())
    return _check(
        ok,
        fraction={a: None if x is None else round(x, 4) for a, x in moved.items()},
        is_corrected=corrected if any(corrected.values()) else None,
        note="fraction of sampled trainable elements the first step changed; None: every step's gradient "
        "was zero",
    )


def lengths(rows: list[dict]) -> dict:
    clipped, mean = _series(rows, "completions/clipped_ratio"), _series(rows, "tandem/team_length/mean")
    return {
        "truncated": round(statistics.mean(clipped), 4) if clipped else None,
        "response_length": round(statistics.mean(mean), 2) if mean else None,
    }


def _eval_lengths(eval_dir: Path) -> dict:
    path = eval_dir / rundir.SAMPLES
    rows = read_samples(path) if path.is_file() else []
    if not rows:
        return {}
    return {
        "samples": len(rows),
        "truncated": round(sum(r["finish_reason"] == "length" for r in rows) / len(rows), 4),
        "response_length": round(statistics.mean(r["num_tokens"] for r in rows), 2),
    }


def _prompt_len(run_dir: Path, tokenizer_path: str) -> float:

    tok = load_tokenizer(tokenizer_path, "senior")
    problems = list(load_problems(str(run_dir / rundir.HOLDOUT_FILE)))
    return statistics.mean(len(encode_prompt(prompt_for(p, tok), tok)) for p in problems) if problems else 0.0


def _device_peak() -> int | None:
    return int(torch.cuda.max_memory_allocated()) if torch.cuda.is_available() else None


# the run-config keys the smoke sets itself for each arm, and the option that sets it
OWN_KEYS = {
    "arm": "both arms are trained",
    "max_steps": "--steps",
    "save_steps": "--steps",
    "logging_steps": "1",
    "holdout": "--problems",
    "output_dir": "--out",
    "report_to": "none",
}


def arm_keys(out: str | Path, arm: str, steps: int, problems: int, overrides: dict) -> dict:
    """The run-config keys the smoke trains `arm` with: the --set overrides and its own (OWN_KEYS). An
    override of one of its own is refused in one line: the smoke would not use it, and smoke.json records
    only the values it used."""
    if taken := sorted(set(overrides) & set(OWN_KEYS)):
        key = taken[0]
        raise UserError(
            f"--set {key}={overrides[key]}: the smoke sets {key} itself ({OWN_KEYS[key]}) and would "
            "not use this value; drop it"
        )
    return {
        **overrides,
        "arm": arm,
        "max_steps": steps,
        "save_steps": steps,
        "logging_steps": 1,
        "holdout": problems,
        "output_dir": str(Path(out) / f"train-{arm}"),
        "report_to": "none",
    }


def check_arms(config: str | Path, out: str | Path, steps: int, problems: int, overrides: dict) -> None:
    """Every check of both arms' runs that needs no GPU and no model, with the keys the smoke trains them
    with, before any engine is built (the parity's three engines come first, and take minutes on a real pair):
    the config as `trlvr train --dry-run` checks it (`trlvr.training.preflight.check_config`: the dataset, the
    capabilities, the models' context lengths), the bf16 guard for this launch
    (`trlvr.training.learning.check_updates_land`), and the disk the arm's checkpoints need
    (`trlvr.training.memory_plan.check_disk`)."""
    from trlvr.training.build import launch_sharding
    from trlvr.training.learning import check_updates_land
    from trlvr.training.memory_plan import check_disk, launch_layout
    from trlvr.training.preflight import check_config

    for arm in ("tandem", "grpo"):  # the keys `run_smoke` gives each arm
        tandem, grpo = load_run_config(config, arm_keys(out, arm, steps, problems, overrides))
        check_config(tandem, grpo)
        try:
            check_updates_land(tandem, grpo, launch_sharding(grpo), where=f"smoke of {config}, arm {arm}")
        except UserError as e:
            raise UserError(
                f"{e}; for a one-GPU smoke of a recipe planned for ZeRO: --set use_peft=true"
            ) from None
        zero, processes = launch_layout()
        check_disk(tandem, grpo, zero_stage=zero, processes=processes)


LOG_FILE = "smoke.log"  # the stages' own console output, unless --verbose prints it


@contextlib.contextmanager
def console_to(log: Path | None):
    """Everything the stages print (trlvr's stage lines, the libraries' warnings and progress bars, from
    Python or from native code) appended to `log` instead of the screen; None: left on the screen."""
    if log is None:
        yield
        return
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    with open(log, "a") as f:
        saved = {fd: os.dup(fd) for fd in (1, 2)}
        try:
            for fd in saved:
                os.dup2(f.fileno(), fd)
            with contextlib.redirect_stdout(f), contextlib.redirect_stderr(f):
                yield
        finally:
            f.flush()
            for fd, copy in saved.items():
                os.dup2(copy, fd)
                os.close(copy)


def run_smoke(opts: SmokeOptions, command: Callable[[list[str]], int], say=print) -> dict:
    """Train both arms `opts.steps` steps, select and evaluate on `opts.problems` held-out problems; write
    and return DIR/smoke.json's dict. An earlier smoke in DIR is set aside first (nothing is deleted).
    command(argv) -> exit code: runs one `trlvr` command line (the CLI's own dispatcher: select and eval
    run as users run them)."""
    from trlvr.training.memory_plan import device_memory, run_plan
    from trlvr.training.run import train_and_save

    if opts.steps < 1 or opts.problems < 1:
        raise UserError(f"--steps and --problems must be >= 1 (got {opts.steps}, {opts.problems})")
    check_arms(opts.config, opts.out, opts.steps, opts.problems, opts.overrides)  # before any engine is built
    out = Path(opts.out)
    rundir.prepare_output(
        out,
        rundir.SMOKE,
        flag="--out",
        start_over=True,  # an earlier smoke: set aside
        keep=rundir.lock_files("trlvr smoke"),
    )  # (`trlvr smoke` holds its lock)
    out.mkdir(parents=True, exist_ok=True)
    quiet = None if opts.verbose else out / LOG_FILE
    report: dict = {
        "config": str(opts.config),
        "steps": opts.steps,
        "problems": opts.problems,
        "overrides": opts.overrides,
        "code": git_commit(),
        "machine": machine(),
        "checks": {},
    }
    if quiet is not None:
        report["log"] = str(quiet)
    checks = report["checks"]
    driver, driver_cuda = driver_facts()
    report["cuda"] = cuda_line(report["machine"]["cuda"], driver_cuda, driver)
    say(f"  cuda: {report['cuda']}")
    arms, plans = {}, {}
    tandem, grpo = load_run_config(opts.config, {**opts.overrides, "arm": "tandem"})
    team = Team.of(tandem, grpo.beta)  # who writes with the senior: the same in both arms' configs
    stages = _EngineStages(backend(tandem.backend).gpu_share)
    if backend(tandem.backend).engine_options:  # first: a wrong forward makes every later number meaningless
        stages.before("parity", grpo.vllm_gpu_memory_utilization)
        with console_to(quiet):
            checks["parity"] = run_parity(
                tandem, grpo, opts.gpu_memory if opts.gpu_memory else device_memory()
            )
        say(render_parity(checks["parity"]))
    for arm in ("tandem", "grpo"):
        keys = arm_keys(out, arm, opts.steps, opts.problems, opts.overrides)
        tandem, grpo = load_run_config(opts.config, keys)
        plan = run_plan(tandem, grpo, gpu_memory=opts.gpu_memory if opts.gpu_memory else device_memory())
        if (
            backend(tandem.backend).gpu_share and plan.context is not None
        ):  # else training derives it from the data, then checks
            plan.check(str(opts.config))
        plans[arm] = plan
        if arm == "tandem":
            say(plan.render())
        stages.before(f"train {arm}", grpo.vllm_gpu_memory_utilization)
        t0 = time.perf_counter()
        say(f"  training {arm}: {opts.steps} step(s)")
        with console_to(quiet):
            final = train_and_save(tandem, grpo, desc=f"smoke {arm}")
        arms[arm] = {
            "rows": _metrics(Path(grpo.output_dir)),
            "seconds": round(time.perf_counter() - t0, 1),
            "model": str(final),
            "tandem": tandem,
            "grpo": grpo,
            "dir": Path(grpo.output_dir),
        }
    if "parity" in checks and self_paired(team):  # at step 0 both units were one function
        stages.before("parity after training", grpo.vllm_gpu_memory_utilization)
        with console_to(quiet):
            checks["parity_trained"] = trained_parity(
                arms["tandem"]["tandem"],
                arms["tandem"]["grpo"],
                arms["tandem"]["model"],
                opts.gpu_memory or device_memory(),
            )
        say(render_parity(checks["parity_trained"], "parity after training"))
    tandem = arms["tandem"]["tandem"]
    record_path = arms["tandem"]["dir"] / rundir.MEMORY_FILE
    # backend vllm: the plan the run itself made (its context derived from the data) beside vLLM's own
    # KV report
    record = json.loads(record_path.read_text()) if record_path.is_file() else {}
    plan = plans["tandem"]
    engine_kv, planned = record.get("engine_kv_tokens"), record.get("plan") or plan.as_dict()
    checks["memory"] = _check(
        None if engine_kv is None or planned["context"] is None else engine_kv >= planned["context"],
        plan=planned,
        engine_kv_tokens=engine_kv,
        planned_kv_tokens=planned["kv_tokens"],
        device_peak_bytes=_device_peak(),
        note=(
            "vLLM's KV tokens must hold one full sequence; the plan's KV is an estimate (activations, "
            "outside torch)"
        ),
    )
    checks["author_mask"] = mask_check(
        arms["tandem"]["rows"], arms["grpo"]["rows"], tandem.p if tandem.expects_junior_tokens else None
    )
    checks["weights_moved"] = weights_moved_check(arms)
    checks["grader"] = grader_check()
    prompt_len = _prompt_len(arms["tandem"]["dir"], tandem.senior)
    checks["speed"] = speed_check(arms, plan, prompt_len)
    pre = _series(arms["tandem"]["rows"], "tandem/preemptions") + _series(
        arms["grpo"]["rows"], "tandem/preemptions"
    )
    checks["preemptions"] = _check(
        None,
        count=sum(pre) if pre else None,
        note="backend vllm only" if not pre else "requests vLLM pre-empted in training",
    )
    # selection and evaluation, through the commands users run
    run = arms["tandem"]["dir"]
    n = str(opts.problems)
    backend_args = ["--backend", tandem.backend]
    stages.before("select", EVAL_ENGINE_SHARE)
    say(f"  select + eval: {n} held-out problem(s)")
    with console_to(quiet):
        code = command(
            [
                "select",
                str(run),
                "--val",
                f"split:{n}",
                "--limit",
                n,
                "--n",
                "1",
                "--metric",
                "solo/pass@1",
                "--no-progress",
                *backend_args,
            ]
        )
    eval_dir = out / "eval-tandem"
    junior = tandem.junior or SELF
    if code == 0:
        stages.before("eval", EVAL_ENGINE_SHARE)
        with console_to(quiet):
            code = command(
                [
                    "eval",
                    "--senior",
                    f"{run}@selected",
                    "--junior",
                    junior,
                    "--data",
                    str(run / rundir.HOLDOUT_FILE),
                    "--limit",
                    n,
                    "--n",
                    "1",
                    "--k",
                    "1",
                    "--suite",
                    "solo,handoff",
                    "--out",
                    str(eval_dir),
                    "--no-progress",
                    *backend_args,
                ]
            )
    said = (
        [ln for ln in quiet.read_text(errors="replace").splitlines() if ": error: " in ln]
        if quiet and code
        else []
    )
    checks["select_eval"] = _check(
        code == 0, exit_code=code, eval_dir=str(eval_dir), **({"error": said[-1]} if said else {})
    )
    checks["self_pair"] = _self_pair(
        tandem, team, arms["tandem"]["grpo"], run, n, out, command, stages, quiet, backend_args
    )
    checks["lengths"] = _check(
        None, train={a: lengths(v["rows"]) for a, v in arms.items()}, eval=_eval_lengths(eval_dir)
    )
    report["arms"] = {
        a: {"seconds": v["seconds"], "model": v["model"], "steps": len(_series(v["rows"], "timing/step_s"))}
        for a, v in arms.items()
    }
    failed = [k for k, c in checks.items() if c["status"] == "failed"]
    report["passed"] = not failed
    rundir.write_file(out / rundir.SMOKE_FILE, json.dumps(report, indent=1, default=str))
    say(render(report))
    return report


def _self_pair(
    tandem, team, grpo, run: Path, n: str, out: Path, command, stages, quiet, backend_args
) -> dict:
    """`self_pair_check` of the run's junior (`self_pair_model`) as its own partner: `trlvr eval` solo and
    handoff on the held-out problems, SELF_PAIR_N samples each, within the run's completion budget."""
    model = self_pair_model(team)
    eval_dir = out / "self-pair"
    stages.before("self-pair eval", EVAL_ENGINE_SHARE)
    with console_to(quiet):
        code = command(
            [
                "eval",
                "--senior",
                model,
                "--junior",
                model,
                "--data",
                str(run / rundir.HOLDOUT_FILE),
                "--limit",
                n,
                "--n",
                str(SELF_PAIR_N),
                "--k",
                "1",
                "--suite",
                "solo,handoff",
                "--max-new-tokens",
                str(grpo.max_completion_length),
                "--prompt-template",
                tandem.prompt_template,
                "--out",
                str(eval_dir),
                "--no-progress",
                *backend_args,
            ]
        )
    if code != 0:
        return _check(
            False, reason=f"trlvr eval of {model} with itself exited {code}", eval_dir=str(eval_dir)
        )
    return {
        **self_pair_check(read_samples(eval_dir / rundir.SAMPLES)),
        "model": model,
        "eval_dir": str(eval_dir),
    }


class _EngineStages:
    """Before each stage that starts an engine (`gpu_share`: the backend's engine takes a share of the GPU):
    release what the stage before it held, then refuse in one line naming that stage when the GPU's free
    memory is below the share (`trlvr.gpu.free_memory_check`, vLLM's own start check, made before any
    work)."""

    def __init__(self, gpu_share: bool):
        self.gpu_share, self.previous = gpu_share, None

    def before(self, stage: str, share: float) -> None:
        if self.gpu_share:
            free_memory()
            free_memory_check(f"smoke: {stage}", self.previous, share)
        self.previous = stage


def render_parity(check: dict, label: str = "parity") -> str:
    if check["status"] == "failed":
        return f"  {label}: FAILED: {check['reason']}"
    if check["status"] == "ok":
        ties = sum(len(check[key]["near_ties"]) for key in PARITY_PAIRS)
        return (
            f"  {label}: ok: {check['rows']} greedy rollouts agree, CUDA graphs = compiled = enforce_eager "
            f"({ties} near-tie flips under {check['margin']} nat, log-probs within "
            f"{max(check[key]['max_logprob_delta'] for key in PARITY_PAIRS)} nat; {check['max_num_seqs']} "
            f"rows, {check['max_num_batched_tokens']} tokens a step)"
        )
    return f"  {label}: not measured ({check['reason']})"


def render_self_pair(check: dict) -> str:
    if "diff" not in check:
        return f"  self-pair: {check['status']} ({check.get('reason')})"
    return (
        f"  self-pair: {check['status']}: handoff - solo pass@1 {check['diff']:+.3f} "
        f"[{check['interval'][0]:+.3f}, {check['interval'][1]:+.3f}] ({check['z']} SE; {check['problems']} "
        f"problems x {check['samples']} samples, the junior as its own partner: 0 expected)"
    )


def _na(value) -> str:
    """A value for the screen: "n/a" where it was not measured (also inside a mapping or a list)."""
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {_na(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list | tuple):
        return "[" + ", ".join(map(_na, value)) + "]"
    return "n/a" if value is None else str(value)


def render(report: dict) -> str:
    c = report["checks"]
    lines = [f"smoke {report['config']}: {'passed' if report['passed'] else 'FAILED'}"]
    if "cuda" in report:
        lines.append(f"  cuda: {report['cuda']}")
    if "parity" in c:
        lines.append(render_parity(c["parity"]))
    if "parity_trained" in c:
        lines.append(render_parity(c["parity_trained"], "parity after training"))
    mem = c["memory"]
    lines.append(
        f"  memory: {mem['status']}: planned KV {_na(mem['planned_kv_tokens'])} tokens, engine KV "
        f"{_na(mem['engine_kv_tokens'])}, device peak {_na(mem['device_peak_bytes'])}"
    )
    m = c["author_mask"]
    lines.append(
        f"  author mask: {m['status']}"
        + (
            f": senior share {[round(x, 3) for x in m['senior_share']]} in "
            f"{m['band']}, TRL length {_na(m['trl_completion_length'])} = senior tokens "
            f"{_na(m['senior_tokens'])}"
            if "senior_share" in m
            else f": {m.get('reason')}"
        )
    )
    if "weights_moved" in c:
        w = c["weights_moved"]
        lines.append(
            (
                f"  weights moved: {w['status']}: first step changed {_na(w['fraction'])} of the trainable "
                "weights"
            )
            + (f"; IS zeroed/clipped {w['is_corrected']}" if w.get("is_corrected") else "")
        )
    g = c["grader"]
    wrong = f" (wrong: {'; '.join(g['wrong'])})" if g.get("wrong") else ""
    lines.append(
        f"  grader: {g['status']}"
        + (
            f": {g['pairs'] - len(g['wrong'])} of {g['pairs']} known pairs graded "
            f"right{wrong}; a stalled answer ended as {g['timeout_status']} after {g['timeout_s']} s"
            if "pairs" in g
            else f": {g.get('reason')}"
        )
    )
    s = c["speed"]
    if "step" in s:
        lines.append(
            f"  speed: tandem/solo step {_na(s['step'])}, generation {_na(s['generation'])}; bound (S+J)/S "
            f"{_na(s.get('bound'))} (weights only {_na(s.get('weights_only'))}) at context "
            f"{_na(s.get('context'))}"
        )
    if "self_pair" in c:
        lines.append(render_self_pair(c["self_pair"]))
    lines.append(f"  lengths: {_na(c['lengths']['train'])}, eval {_na(c['lengths']['eval'])}")
    lines.append(f"  pre-emptions: {_na(c['preemptions']['count'])} ({c['preemptions']['note']})")
    lines.append(
        f"  select + eval: {c['select_eval']['status']} "
        f"({c['select_eval'].get('error') or c['select_eval']['eval_dir']})"
    )
    if report.get("log"):
        lines.append(f"  log: {report['log']} (the stages' own output; --verbose prints it here)")
    return "\n".join(lines)

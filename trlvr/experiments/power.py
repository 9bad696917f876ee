"""A study's power and cost, stated before it runs (`trlvr study plan STUDY --power`).

Power: the two-level model the reported CIs use (trlvr.eval.hierarchical: seeds, then problems, one
problem draw shared by every seed). A paired difference B - A of a per-problem metric (pass@1, in
points) for seed s and problem i of benchmark g is

    d[s, g, i] = delta + u[s] + v[g, i] + w[s, g, i]

u: the seed's training variance (SD `seed_sd`), v: what a problem does to the difference whatever the
seed (shared by all seeds), w: what is left (the seed x problem part, sampling noise included). The
reported difference is the macro mean over G benchmarks of the seed-averaged problem means, so

    Var = seed_sd^2 / S + (1 / G^2) sum_g (shared x problem_sd^2 + (1 - shared) x problem_sd^2 / S) / P_g

with problem_sd^2 = Var(v) + Var(w) (what one seed shows over problems) and shared = Var(v) / problem_sd^2.
A study detects delta when its 95% interval excludes 0; at power 1 - beta the minimal detectable effect
is (z_{1-alpha/2} + z_{1-beta}) x SE (normal approximation: the bootstrap interval is percentile-based,
and at 3 seeds its coverage is below nominal, tests/test_hierarchical.py). tests/test_power.py draws
synthetic studies from known components and checks that they are detected at the predicted rate.

Cost: a step-time model per generation batch (the paper's "step") on one GPU: decoding is
memory-bandwidth bound (every decode step reads each decoding model's weights, and each row's K and V so
far: the roofline of /docs "GPUs and vLLM"), the update is compute bound (forward, backward, the
activation-checkpointing recompute and the log-prob pass: 10 x params FLOPs per token, at a stated
share of peak). Both models decode every token in tandem (trlvr's engine and the authors' alike).
The model is a lower bound; the measured anchors are printed beside it.

Pure functions; `components_from_study` reads a results folder, `power_section` formats the plan's.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from statistics import NormalDist

import numpy as np

from trlvr.eval.aggregate import metric_specs
from trlvr.eval.groups import _per_seed_groups, load_tables

# ---- power -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Components:
    """Variance components of a paired difference, in points (percentage points of the metric)."""

    seed_sd: float  # SD over training seeds of a seed's macro difference (u)
    problem_sd: float  # SD over problems of the difference at one seed (v and w together)
    shared: float  # share of problem_sd^2 common to every seed (v); the rest shrinks with seeds
    source: str

    def __post_init__(self):
        if self.seed_sd < 0 or self.problem_sd < 0 or not 0.0 <= self.shared <= 1.0:
            raise ValueError(f"bad variance components: {self}")


# The stated defaults for the paper-scale studies (points of pass@1), and where each comes from:
DEFAULT_COMPONENTS = Components(
    seed_sd=1.5,
    problem_sd=34.0,
    shared=0.5,
    source=(
        "problem_sd 34 points: the independent reproduction's paired tandem - grpo paragraph-handoff pass@8 "
        "CI [-3.34, +0.89] over 992 problems at one seed (SE 1.08 x sqrt(992)); seed_sd 1.5 points: an "
        "assumption (half the 3.0-point gap between the paper's +2.34 and the reproduction's -0.70 "
        "handoff difference); shared 0.5: an assumption (sampling noise at n = 8 alone is 17-25 points "
        "of the 34, and it does not repeat across seeds)"
    ),
)


# ---- the metric's own variance: pass@k ---------------------------------------------------------------------
# DEFAULT_COMPONENTS' problem_sd is the reproduction's pass@8 (n = 8). Another pass@k varies otherwise over
# problems: its per-problem SD is problem_sd x sqrt(V_k / V_8), V_k the variance over problems and samples of
# one problem's unbiased pass@k estimate from n samples, with problems' success rates Beta(a, b) fitted to a
# mean pass@1 of PASS1_LEVEL (an assumption) and a mean pass@4 of PASS4_LEVEL (Table 2's four macro pass@4
# values, 52.40-55.56, averaged). Within 31.4-32.8 points for pass@4 whatever the pass@1 level from 0.35
# to 0.45 (tests/test_power.py).
PASS1_LEVEL = 0.40
PASS4_LEVEL = 0.544
MEASURED_K, MEASURED_N = 8, 8  # what DEFAULT_COMPONENTS.problem_sd was measured on


def _lbeta(a: float, b: float) -> float:
    return math.lgamma(a) + math.lgamma(b) - math.lgamma(a + b)


def rate_distribution(pass1: float = PASS1_LEVEL, pass4: float = PASS4_LEVEL) -> tuple[float, float]:
    """(a, b) of the Beta distribution of per-problem success rates with mean `pass1` and mean pass@4 `pass4`
    (E[1 - (1 - p)^4] = 1 - B(a, b + 4) / B(a, b)); more dispersion (smaller a) lowers pass@4."""
    if not 0 < pass1 < pass4 < 1 - (1 - pass1) ** 4:
        raise ValueError(f"need 0 < pass@1 < pass@4 < 1 - (1 - pass@1)^4, got {pass1}, {pass4}")
    lo, hi = 1e-4, 1e4
    for _ in range(200):
        a = math.sqrt(lo * hi)
        b = a * (1 - pass1) / pass1
        lo, hi = (lo, a) if 1 - math.exp(_lbeta(a, b + 4) - _lbeta(a, b)) > pass4 else (a, hi)
    return a, b


def passk_variance(k: int, n: int, a: float, b: float) -> float:
    """Variance (fraction^2) over problems (rates ~ Beta(a, b)) and their n samples of the unbiased pass@k
    estimate 1 - C(n - c, k) / C(n, k), c ~ BetaBinomial(n, a, b): exact."""
    if not 1 <= k <= n:
        raise ValueError(f"pass@{k} needs 1 <= k <= n = {n}")
    e = e2 = 0.0
    for c in range(n + 1):
        prob = math.comb(n, c) * math.exp(_lbeta(c + a, n - c + b) - _lbeta(a, b))
        est = 1.0 - math.comb(n - c, k) / math.comb(n, k)
        e, e2 = e + prob * est, e2 + prob * est * est
    return e2 - e * e


def metric_k(metric: str) -> int | None:
    """k of a pass@k metric name ("handoff/pass@4" -> 4), None for any other metric."""
    tail = metric.rsplit("/", 1)[-1]
    return int(tail[len("pass@") :]) if tail.startswith("pass@") and tail[len("pass@") :].isdigit() else None


def components_for(metric: str, n: int, base: Components | None = None) -> Components:
    """The stated components scaled to `metric` (pass@k from n samples per problem; see PASS1_LEVEL)."""
    base = base or DEFAULT_COMPONENTS
    k = metric_k(metric)
    if k is None or k > n:
        raise ValueError(f"{metric}: the planner's components are for pass@k with k <= n = {n}")
    a, b = rate_distribution()
    scale = math.sqrt(passk_variance(k, n, a, b) / passk_variance(MEASURED_K, MEASURED_N, a, b))
    return Components(
        base.seed_sd,
        base.problem_sd * scale,
        base.shared,
        f"{base.source}; scaled to pass@{k} at n = {n} by the pass@k estimate's variance "
        f"(x{scale:.3f}: problems' rates Beta({a:.2f}, {b:.2f}), mean pass@1 {PASS1_LEVEL:g} assumed, "
        f"pass@4 {PASS4_LEVEL:g} from Table 2)",
    )


def floor(c: Components, problems: Sequence[int], alpha: float = 0.05, power: float = 0.8) -> float:
    """The MDE with infinitely many seeds: the problem variance every seed shares, alone (points)."""
    shared = sum(c.shared * c.problem_sd**2 / p for p in problems) / len(problems) ** 2
    return (z(1 - alpha / 2) + z(power)) * math.sqrt(shared)


def z(q: float) -> float:
    return NormalDist().inv_cdf(q)


def standard_error(c: Components, seeds: int, problems: Sequence[int]) -> float:
    """SE (points) of the macro paired difference over `seeds` seeds and benchmarks of `problems` sizes."""
    if seeds < 1 or not problems or min(problems) < 1:
        raise ValueError(
            f"need >= 1 seed and non-empty benchmarks, got {seeds} seeds, sizes {list(problems)}"
        )
    ps2 = c.problem_sd**2
    per_problem = (
        sum((c.shared * ps2 + (1.0 - c.shared) * ps2 / seeds) / p for p in problems) / len(problems) ** 2
    )
    return math.sqrt(c.seed_sd**2 / seeds + per_problem)


def mde(c: Components, seeds: int, problems: Sequence[int], alpha: float = 0.05, power: float = 0.8) -> float:
    """Minimal detectable effect (points): the true difference detected with probability `power`."""
    return (z(1 - alpha / 2) + z(power)) * standard_error(c, seeds, problems)


def detection_rate(effect: float, se: float, alpha: float = 0.05) -> float:
    """P(|estimate| / se > z_{1-alpha/2}) for a normal estimate centred on `effect`."""
    k = z(1 - alpha / 2)
    nd = NormalDist()
    return nd.cdf(effect / se - k) + nd.cdf(-effect / se - k)


def seeds_needed(
    c: Components,
    problems: Sequence[int],
    effect: float,
    alpha: float = 0.05,
    power: float = 0.8,
    max_seeds: int = 1000,
) -> int | None:
    """Fewest seeds (>= 2, the bootstrap's minimum) whose MDE is <= effect; None when more problems are needed
    (the shared problem variance alone exceeds it) or past max_seeds."""
    for s in range(2, max_seeds + 1):
        if mde(c, s, problems, alpha, power) <= effect:
            return s
    return None


def problems_scale_needed(
    c: Components, seeds: int, problems: Sequence[int], effect: float, alpha: float = 0.05, power: float = 0.8
) -> float | None:
    """The factor by which every benchmark must grow for `seeds` seeds to detect `effect`; None when the seed
    variance alone is too large (more seeds are needed, whatever the problems)."""
    room = (
        effect / (z(1 - alpha / 2) + z(power))
    ) ** 2 - c.seed_sd**2 / seeds  # variance the problems may take
    if room <= 0:
        return None
    ps2 = c.problem_sd**2
    need = sum((c.shared * ps2 + (1.0 - c.shared) * ps2 / seeds) / p for p in problems) / len(problems) ** 2
    return need / room


def components_from_matrices(diffs: Sequence[Sequence[Sequence[float]]], source: str) -> Components:
    """Method-of-moments components from paired differences d[s][g][i] (points; >= 2 seeds): the two-way
    ANOVA of each benchmark (seeds x problems, one value per cell), pooled over benchmarks."""
    S = len(diffs)
    if S < 2:
        raise ValueError(f"variance components need >= 2 seeds, got {S}")
    G = len(diffs[0])
    v_shared = v_resid = weight = 0.0
    resid_over_p = 0.0
    for g in range(G):
        d = np.array([diffs[s][g] for s in range(S)], dtype=float)  # (S, P)
        P = d.shape[1]
        if P < 2:
            continue
        rows, cols, grand = d.mean(axis=1, keepdims=True), d.mean(axis=0, keepdims=True), d.mean()
        ms_res = ((d - rows - cols + grand) ** 2).sum() / ((S - 1) * (P - 1))
        ms_prob = S * ((cols - grand) ** 2).sum() / (P - 1)
        sv = max(0.0, (ms_prob - ms_res) / S)
        v_shared += (P - 1) * sv
        v_resid += (P - 1) * ms_res
        weight += P - 1
        resid_over_p += ms_res / P
    macro = np.array([np.mean([np.mean(diffs[s][g]) for g in range(G)]) for s in range(S)])
    seed_var = max(0.0, float(macro.var(ddof=1)) - resid_over_p / G**2)
    total = (v_shared + v_resid) / weight if weight else 0.0
    return Components(
        seed_sd=math.sqrt(seed_var),
        problem_sd=math.sqrt(total),
        shared=(v_shared / weight / total) if total > 0 else 0.0,
        source=source,
    )


def components_from_study(out, baseline: str, variant: str, metric: str) -> Components:
    """Components of `metric` (e.g. handoff/pass@1) for variant - baseline from a `trlvr study run` folder
    (the seeds both finished, >= 2), in points."""
    out = Path(out)
    ta, tb = load_tables(out / "eval" / baseline), load_tables(out / "eval" / variant)
    seeds = sorted(set(ta) & set(tb))
    tables = [ta[s] for s in seeds] + [tb[s] for s in seeds]
    benches = sorted(set.intersection(*(set(t) for t in tables)))
    cols = metric_specs(tables[0]).get(metric)
    groups = _per_seed_groups(tables, cols, benches) if cols else None
    if groups is None or len(cols) != 1:
        raise ValueError(f"{out}: no per-problem {metric} shared by {baseline} and {variant}")
    n = len(seeds)
    diffs = [
        [100.0 * (groups[n + s][g][:, 0] - groups[s][g][:, 0]) for g in range(len(benches))] for s in range(n)
    ]
    return components_from_matrices(diffs, f"{out}: {variant} - {baseline}, {metric}, seeds {seeds}")


# ---- cost --------------------------------------------------------------------------------------------

# peak HBM bandwidth (bytes/s) and dense bf16 FLOP/s
GPUS = {"A100-80GB": (2.039e12, 312e12), "H100": (3.35e12, 989e12), "H200": (4.8e12, 989e12)}
GPU_ALIASES = {"A100": "A100-80GB", "H100-80GB": "H100"}
GPU_CHOICES = (*GPUS, *GPU_ALIASES)
# points: the paper's handoff gain (macro pass@4 handoff 54.74 vs 52.40, as the reproduction quotes it)
TARGET_EFFECT = 2.3
TARGET_METRIC = "pass@4"  # the metric that gain is in (Table 2)
BANDWIDTH_SHARE = 0.75  # real decode kernels reach ~70-85% of peak bandwidth (docs, "GPUs and vLLM")
COMPUTE_SHARE = 0.40  # an assumption: the update's share of peak FLOP/s (model FLOPs utilisation)
UPDATE_FLOPS_PER_PARAM_TOKEN = 10  # forward 2 + backward 4 + recompute 2 + the log-prob pass 2
PROMPT_TOKENS = 150  # an assumption: a DeepScaleR prompt in the chat template
# mean rollout length late in training, from the reproduction's audit (cap 3,000): grpo 1,563, tandem 1,797
MEAN_COMPLETION = {"grpo": 1563, "tandem": 1797}
# measured anchors, printed beside the model (seconds per generation batch, "step")
ANCHORS = [
    ("authors, Qwen3-0.6B self-pair, 2x A100", {"tandem": 33.5, "grpo": 18.6}),
    (
        "paper, Qwen3-4B self-pair, 2x A100 (9.4 h / 120 steps; 7.8 h / 200)",
        {"tandem": 9.4 * 3600 / 120, "grpo": 7.8 * 3600 / 200},
    ),
    ("independent reproduction, Qwen3-4B tandem", {"tandem": 540.0}),  # 8-10 min per step: the middle
]


def gpu_name(text: str | None) -> str:
    name = GPU_ALIASES.get(text or "A100-80GB", text or "A100-80GB")
    if name not in GPUS:
        raise ValueError(f"no bandwidth figure for GPU {text!r}: one of {', '.join(GPUS)}")
    return name


@dataclass(frozen=True)
class StepModel:
    """One GPU's share of a generation batch: `rows` rollouts of mean `completion` tokens, cap `cap`."""

    senior_params: int
    senior_kv: int  # bytes per token
    junior_params: int  # 0: no junior decodes (grpo)
    junior_kv: int
    rows: int
    completion: int
    cap: int
    prompt: int = PROMPT_TOKENS
    bytes_per_param: int = 2

    def generation_s(self, gpu: str) -> float:
        bw = GPUS[gpu][0] * BANDWIDTH_SHARE
        weights = (
            (self.senior_params + self.junior_params) * self.bytes_per_param * self.cap
        )  # read every step
        kv = (
            self.rows
            * self.completion
            * (self.prompt + self.completion / 2)
            * (self.senior_kv + self.junior_kv)
        )
        return (weights + kv) / bw

    def update_s(self, gpu: str) -> float:
        tokens = self.rows * (self.prompt + self.completion)
        return UPDATE_FLOPS_PER_PARAM_TOKEN * self.senior_params * tokens / (GPUS[gpu][1] * COMPUTE_SHARE)

    def step_s(self, gpu: str) -> float:
        return self.generation_s(gpu) + self.update_s(gpu)

    @property
    def kind(self) -> str:
        return "tandem" if self.junior_params else "grpo"


def paper_calibration(senior_params: int, senior_kv: int) -> dict[str, float]:
    """Measured / model step time of the paper's Qwen3-4B runs (2x A100, 64 rollouts per GPU, cap 3,000)."""
    measured = ANCHORS[1][1]
    out = {}
    for kind in ("tandem", "grpo"):
        jp, jkv = (senior_params, senior_kv) if kind == "tandem" else (0, 0)
        m = StepModel(senior_params, senior_kv, jp, jkv, rows=64, completion=MEAN_COMPLETION[kind], cap=3000)
        out[kind] = measured[kind] / m.step_s("A100-80GB")
    return out


def gpu_hours(step_s: float, steps: int, gpus: int, seeds: int) -> float:
    return step_s * steps * gpus * seeds / 3600.0


# ---- the plan's section ------------------------------------------------------------------------------


def _fmt_scale(x: float | None) -> str:
    return "more seeds needed whatever the problems" if x is None else f"x{x:.1f} the problems"


def verdict(c: Components, seeds: int, problems: Sequence[int], effect: float, metric: str) -> str:
    """One plain sentence: is the study powered for `effect` on `metric`, and if not, what would be."""
    m, lowest = mde(c, seeds, problems), floor(c, problems)
    if m <= effect:
        return (
            f"Verdict: powered: {seeds} seeds detect a {effect:g}-point {metric} difference with probability "
            f"{detection_rate(effect, standard_error(c, seeds, problems)):.2f} (>= 0.80)."
        )
    if lowest >= effect:
        return (
            f"Verdict: underpowered: {seeds} seeds detect a {effect:g}-point {metric} difference with "
            f"probability {detection_rate(effect, standard_error(c, seeds, problems)):.2f}, and no number "
            f"of seeds reaches 0.80 on these problems (their floor is {lowest:.2f} points): add problems."
        )
    need = seeds_needed(c, problems, effect)
    return (
        f"Verdict: underpowered: {seeds} seeds detect a {effect:g}-point {metric} difference with "
        f"probability {detection_rate(effect, standard_error(c, seeds, problems)):.2f}; {need} seeds would "
        "reach 0.80."
    )


def power_lines(
    c: Components, seeds: int, problems: Sequence[int], effect: float, metrics: Sequence[str]
) -> list[str]:
    """The power block: MDE at the registered seeds, the floor no number of seeds passes, what a target effect
    needs."""
    lines = [
        f"# power (two-level model: seeds, then problems; alpha 0.05 two-sided, power 0.80): {seeds} seeds x "
        f"{sum(problems)} problems in {len(problems)} benchmarks ({', '.join(map(str, problems))})",
        f"#   variance components: seed_sd {c.seed_sd:.2f}, problem_sd {c.problem_sd:.2f} points, shared "
        f"{c.shared:.2f}; source: {c.source}",
    ]
    for m in metrics:
        se = standard_error(c, seeds, problems)
        need = seeds_needed(c, problems, effect)
        lines.append(
            f"#   {m} (paired difference): SE {se:.2f} points, minimal detectable effect "
            f"{mde(c, seeds, problems):.2f} points at {seeds} seeds; a {effect:g}-point difference is "
            f"detected with probability {detection_rate(effect, se):.2f}; it needs "
            + (f"{need} seeds" if need else "more problems (the shared problem variance alone is too large)")
            + f" at these problems, or {_fmt_scale(problems_scale_needed(c, seeds, problems, effect))} at "
            f"{seeds} seeds"
        )
    lines.append(
        f"#   floor: {floor(c, problems):.2f} points, the minimal detectable effect with unlimited seeds "
        "(the problem variance every seed shares); below it only more problems help"
    )
    grid = []
    for seed_sd in (0.75, c.seed_sd, 2 * c.seed_sd):
        for shared in (0.0, c.shared, 1.0):
            alt = Components(seed_sd, c.problem_sd, shared, "sensitivity")
            need = seeds_needed(alt, problems, effect)
            grid.append(
                f"seed_sd {seed_sd:g}, shared {shared:g}: MDE {mde(alt, seeds, problems):.1f}, "
                f"{need or 'no number of'} seeds for {effect:g}"
            )
    lines.append("#   sensitivity (problem_sd fixed): " + "; ".join(grid))
    lines.append("# " + verdict(c, seeds, problems, effect, metrics[0]))
    return lines


def cost_lines(
    models: dict[str, StepModel],
    gpu: str,
    steps: int,
    gpus: int,
    seeds: int,
    calibration: dict[str, float] | None = None,
) -> list[str]:
    """GPU-hours per arm from the step-time model, with the measured anchors beside it. `calibration`:
    measured / model step time of the paper's own 4B runs per arm kind (tandem, grpo), applied as well."""
    lines = [
        f"# cost ({gpu}, {gpus} GPU(s) per run, {steps} generation batches per run, {seeds} seeds; "
        f"training only, the model is a lower bound: decode at {BANDWIDTH_SHARE:.0%} of peak bandwidth, "
        f"update at {COMPUTE_SHARE:.0%} of peak FLOP/s, {PROMPT_TOKENS}-token prompts):"
    ]
    # the ratio was measured on the paper's A100s: on another GPU it is an assumption, said so
    carried = "" if gpu == "A100-80GB" else f", measured on A100s and assumed to carry over to {gpu}"
    for name, m in models.items():
        s = m.step_s(gpu)
        lines.append(
            f"#   {name}: {m.rows} rollouts x {m.completion} tokens (cap {m.cap}) per GPU: generation "
            f"{m.generation_s(gpu):.0f} s + update {m.update_s(gpu):.0f} s = {s:.0f} s per step; "
            f"{gpu_hours(s, steps, gpus, seeds):.0f} GPU-hours per arm ({seeds} seeds)"
            + (
                f"; x{calibration[m.kind]:.2f} (the paper's measured / model{carried}) = "
                f"{gpu_hours(s * calibration[m.kind], steps, gpus, seeds):.0f} GPU-hours"
                if calibration
                else ""
            )
        )
    for label, secs in ANCHORS:
        lines.append(
            "#   measured: " + label + ": " + ", ".join(f"{k} {v:.1f} s per step" for k, v in secs.items())
        )
    return lines


def generation_hours(
    senior: tuple[int, int],
    junior: tuple[int, int] | None,
    rows: int,
    batch: int,
    completion: int,
    cap: int,
    gpu: str,
    senior_decodes: bool = True,
) -> float:
    """GPU-hours to generate `rows` completions in batches of `batch` on one GPU (the step model's decode
    part): (params, KV bytes per token) of each model that decodes; `senior_decodes` False: the junior
    alone."""
    sp, skv = senior if senior_decodes else (0, 0)
    jp, jkv = junior or (0, 0)
    m = StepModel(sp, skv, jp, jkv, rows=min(rows, batch), completion=completion, cap=cap)
    return math.ceil(rows / batch) * m.generation_s(gpu) / 3600.0


def stage_cost_lines(
    select_h: dict[str, float],
    eval_h: dict[str, float],
    train_h: dict[str, float],
    seeds: int,
    what: tuple[str, str],
) -> list[str]:
    """Selection and evaluation GPU-hours beside training's, per arm (all seeds), and the study's total."""
    lines = [
        "# selection and evaluation (the decode model above, a lower bound not scaled by the paper's "
        f"ratio; 1 GPU each; {what[0]}; {what[1]}):"
    ]
    for name in train_h:
        s, e = select_h.get(name, 0.0), eval_h.get(name, 0.0)
        lines.append(
            f"#   {name}: training {train_h[name]:.0f} + selection {s:.0f} + evaluation {e:.0f} = "
            f"{train_h[name] + s + e:.0f} GPU-hours ({seeds} seeds)"
        )
    total = sum(train_h.values()) + sum(select_h.values()) + sum(eval_h.values())
    lines.append(f"#   study total: {total:.0f} GPU-hours (training at the paper's measured / model ratio)")
    return lines

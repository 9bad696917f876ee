"""The study planner's power arithmetic (trlvr.experiments.power), checked by simulation: synthetic two-level
studies (seeds, then problems shared by every seed) drawn with known variance components are detected at
the rate the formula predicts, their estimates vary as much as its standard error says, and the
components are recovered from one study's cells. Tolerances: 4 binomial SDs of the simulated rate."""

from __future__ import annotations

import math

import numpy as np
import pytest

from trlvr.experiments import power as P

C = P.Components(seed_sd=1.5, problem_sd=30.0, shared=0.4, source="test")
PROBLEMS = [40, 25, 60]


def _studies(c: P.Components, seeds: int, problems, effect: float, n: int, rng) -> np.ndarray:
    """n simulated macro paired differences: d = effect + u[s] + v[g, i] + w[s, g, i]."""
    ps2 = c.problem_sd**2
    u = rng.normal(0, c.seed_sd, size=(n, seeds))
    macro = np.zeros(n)
    for p in problems:
        v = rng.normal(0, math.sqrt(c.shared * ps2), size=(n, 1, p))
        w = rng.normal(0, math.sqrt((1 - c.shared) * ps2), size=(n, seeds, p))
        macro += (effect + u[:, :, None] + v + w).mean(axis=(1, 2))
    return macro / len(problems)


@pytest.mark.parametrize("seeds", [3, 8])
def test_simulated_studies_are_detected_at_the_predicted_rate(seeds):
    rng = np.random.default_rng(seeds)
    n = 4000
    se = P.standard_error(C, seeds, PROBLEMS)
    effect = P.mde(C, seeds, PROBLEMS)
    est = _studies(C, seeds, PROBLEMS, effect, n, rng)
    assert est.std() == pytest.approx(se, rel=0.05)  # the formula's SE is the estimates' spread
    detected = (np.abs(est) / se > P.z(0.975)).mean()
    tol = 4 * math.sqrt(0.8 * 0.2 / n)
    assert detected == pytest.approx(0.80, abs=tol)
    # and at half the MDE, the rate the formula gives for it
    half = (np.abs(_studies(C, seeds, PROBLEMS, effect / 2, n, rng)) / se > P.z(0.975)).mean()
    predicted = P.detection_rate(effect / 2, se)
    assert half == pytest.approx(predicted, abs=4 * math.sqrt(predicted * (1 - predicted) / n))
    # no effect: the false-positive rate is alpha
    null = (np.abs(_studies(C, seeds, PROBLEMS, 0.0, n, rng)) / se > P.z(0.975)).mean()
    assert null == pytest.approx(0.05, abs=4 * math.sqrt(0.05 * 0.95 / n))


def test_seeds_and_problems_needed_invert_the_mde():
    s = P.seeds_needed(C, PROBLEMS, 6.0)
    assert s is not None and P.mde(C, s, PROBLEMS) <= 6.0 < P.mde(C, s - 1, PROBLEMS)
    f = P.problems_scale_needed(C, 5, PROBLEMS, 4.0)
    assert P.mde(C, 5, [p * f for p in PROBLEMS]) == pytest.approx(4.0, rel=1e-9)
    # the shared problem variance does not shrink with seeds: below its floor no number of seeds will do
    floor = (P.z(0.975) + P.z(0.8)) * math.sqrt(sum(C.shared * C.problem_sd**2 / p for p in PROBLEMS) / 9)
    assert P.seeds_needed(C, PROBLEMS, floor * 0.99) is None
    # and seed variance alone can rule out a design whatever its problems
    assert P.problems_scale_needed(P.Components(5.0, 30.0, 0.4, "t"), 3, PROBLEMS, 2.0) is None


def test_components_are_recovered_from_cells():
    rng = np.random.default_rng(7)
    truth = P.Components(seed_sd=4.0, problem_sd=20.0, shared=0.5, source="t")
    S, sizes = 12, [300, 300]
    u = rng.normal(0, truth.seed_sd, S)
    diffs = [[None] * len(sizes) for _ in range(S)]
    for g, p in enumerate(sizes):
        v = rng.normal(0, math.sqrt(truth.shared) * truth.problem_sd, p)
        for s in range(S):
            diffs[s][g] = 1.0 + u[s] + v + rng.normal(0, math.sqrt(1 - truth.shared) * truth.problem_sd, p)
    got = P.components_from_matrices(diffs, "sim")
    assert got.problem_sd == pytest.approx(truth.problem_sd, rel=0.05)
    assert got.shared == pytest.approx(truth.shared, abs=0.05)
    assert got.seed_sd == pytest.approx(truth.seed_sd, rel=0.45)  # 12 seeds: a rough estimate by nature
    with pytest.raises(ValueError, match=">= 2 seeds"):
        P.components_from_matrices(diffs[:1], "one")


def test_step_model_bandwidth_arithmetic():
    # one decode pass of 1e9 bf16 params over 10 steps and no KV: 2e10 bytes at 75% of 2.039 TB/s
    m = P.StepModel(10**9, 0, 0, 0, rows=0, completion=0, cap=10)
    assert m.generation_s("A100-80GB") == pytest.approx(2e10 / (2.039e12 * 0.75))
    assert m.update_s("A100-80GB") == 0.0
    both = P.StepModel(10**9, 1000, 10**9, 1000, rows=4, completion=100, cap=100, prompt=50)
    kv = 4 * 100 * (50 + 50) * 2000
    assert both.generation_s("H100") == pytest.approx((2 * 2e9 * 100 + kv) / (3.35e12 * 0.75))
    assert both.kind == "tandem" and m.kind == "grpo"
    assert P.gpu_hours(3600.0, 10, 2, 3) == 60.0


def test_pass_at_k_components_follow_the_estimates_variance():
    """pass@4's per-problem SD from the pass@k estimate's exact variance (Beta-binomial): between pass@1's and
    pass@8's (the measured one), insensitive to the assumed pass@1 level, and 1 at the measured k."""
    a, b = P.rate_distribution()
    assert 1 - math.exp(P._lbeta(a, b + 4) - P._lbeta(a, b)) == pytest.approx(P.PASS4_LEVEL, abs=1e-9)
    assert a / (a + b) == pytest.approx(P.PASS1_LEVEL)
    sds = {k: P.components_for(f"handoff/pass@{k}", 8).problem_sd for k in (1, 4, 8)}
    assert sds[8] == pytest.approx(P.DEFAULT_COMPONENTS.problem_sd) and sds[1] < sds[4] < sds[8]
    for pass1 in (0.35, 0.45):  # the stated insensitivity
        a2, b2 = P.rate_distribution(pass1)
        assert 31.4 <= 34 * math.sqrt(P.passk_variance(4, 8, a2, b2) / P.passk_variance(8, 8, a2, b2)) <= 32.8
    # the estimate's variance, by simulation: rates ~ Beta(a, b), c ~ Binomial(8, p)
    rng = np.random.default_rng(0)
    c = rng.binomial(8, rng.beta(a, b, size=200_000))
    est = 1 - np.array([math.comb(8 - x, 4) / math.comb(8, 4) for x in range(9)])[c]
    assert est.var() == pytest.approx(P.passk_variance(4, 8, a, b), rel=0.02)
    with pytest.raises(ValueError, match="pass@k with k <= n = 4"):
        P.components_for("handoff/pass@8", 4)


def test_plan_power_is_the_studys_pass4_with_its_gpus_selection_and_evaluation(capsys):
    """Issue 57: the study's own panels and macro, pass@4 (Table 2's metric), the recipe's 2 GPUs, selection and
    evaluation beside training, the floor and a one-sentence verdict."""
    from trlvr.cli.main import main

    assert main(["study", "plan", "paper-table2", "--power"]) == 0
    out = capsys.readouterr().out
    c = P.components_for("handoff/pass@4", 8)
    panels = [121, 90, 272, 581]
    assert "3 seeds x 1064 problems in 4 benchmarks (121, 90, 272, 581)" in out
    assert (
        f"handoff/pass@4 (paired difference): SE {P.standard_error(c, 3, panels):.2f} points, minimal detectable "
        f"effect {P.mde(c, 3, panels):.2f} points at 3 seeds" in out
    )
    assert "handoff/pass@1 (paired" not in out
    floor = P.floor(c, panels)
    assert f"#   floor: {floor:.2f} points" in out and P.seeds_needed(c, panels, floor * 0.99) is None
    (verdict,) = [ln for ln in out.splitlines() if ln.startswith("# Verdict: ")]
    assert verdict.count(". ") == 0 and verdict.endswith(".") and f"floor is {floor:.2f} points" in verdict
    for arm in ("tandem", "grpo", "grpo-kl-junior", "grpo-g16"):
        assert f"#   {arm}: 64 rollouts" in out or f"#   {arm}: 128 rollouts" in out
        assert f"#   {arm}: training " in out and "+ selection " in out and "+ evaluation " in out
    assert "2 GPU(s) per run" in out and out.count("GPU-hours per arm") == 4
    assert (
        "x2.97 (the paper's measured / model) = 94 GPU-hours" in out
    )  # 282 s per step x 200 x 2 GPUs x 3 seeds / 3600
    assert "tandem 33.5 s per step, grpo 18.6 s per step" in out


def test_the_paper_s_ratio_on_another_gpu_says_it_is_assumed_and_help_lists_the_gpus(capsys):
    """Newcomer walk 3, finding 15: the A100-measured ratio was applied to an H100 without a word, and --gpu's
    choices appeared only in its error."""
    from trlvr.cli.main import main

    assert main(["study", "plan", "paper-table2", "--power", "--gpu", "H100"]) == 0
    out = capsys.readouterr().out
    assert "(the paper's measured / model, measured on A100s and assumed to carry over to H100) = " in out
    assert main(["study", "plan", "--help"]) == 0
    assert "A100-80GB, H100, H200, A100, H100-80GB" in " ".join(capsys.readouterr().out.split())


def test_the_docs_state_the_floor_the_planner_prints():
    from pathlib import Path

    floor = f"{P.floor(P.components_for('handoff/pass@4', 8), [121, 90, 272, 581]):.2f}-point floor"
    root = Path(__file__).resolve().parents[1]
    for page in ("docs/reproducing-the-paper.md", "studies/paper-table2.yaml"):
        assert floor in (root / page).read_text(), page


def test_plan_power_components_from_a_folder_without_seeds_is_one_line(tmp_path, capsys):
    from trlvr.cli.main import main

    assert main(["study", "plan", "paper-table2", "--components-from", str(tmp_path / "none")]) != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "none" in err[0] and "Traceback" not in err[0], err

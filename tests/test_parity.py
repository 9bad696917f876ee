"""`trlvr smoke`'s parity gate on synthetic greedy rollouts (`trlvr.experiments.smoke.parity`), and the
sizing of its engines (`EngineOptions.parity_variants`): no vLLM needed.

A greedy flip where the top two log-probs nearly tie is what different kernels do (a pass); a flip at a
wide gap, authors that differ under the same tokens, or a row that ends early are a different forward.
"""

from __future__ import annotations

import pytest

from trlvr.experiments.smoke import (
    PARITY_MARGIN,
    PARITY_PROMPTS,
    PARITY_TOLERANCE,
    Greedy,
    parity,
    render_parity,
)
from trlvr.vllm.pair import PARITY_BATCHED_TOKENS, PARITY_SEQS, EngineOptions, capture_ceiling


def top(*gaps: float) -> list[list[float]]:
    """Top-2 log-probs of one row, one position per gap (the top-1 at -0.1)."""
    return [[-0.1, -0.1 - g] for g in gaps]


def run(ids, authors, tops) -> Greedy:
    return Greedy(completion_ids=ids, authors=authors, top_logprobs=tops)


A = run([[5, 6, 7, 8], [9, 10, 11]], [[1, 1, 0, 0], [1, 0, 1]], [top(3, 3, 0.2, 3), top(3, 3, 3)])


def test_identical_rollouts_pass_with_no_near_ties():
    check = parity(A, run(A.completion_ids, A.authors, A.top_logprobs))
    assert check["status"] == "ok" and check["near_ties"] == [] and check["failures"] == []
    assert check["max_logprob_delta"] == 0.0 and check["margin"] == PARITY_MARGIN


def test_a_flip_at_a_near_tie_passes_and_the_row_is_not_compared_after_it():
    # row 0 parts at token 2, where A's gap is 0.2 nat; after it the rows are different contexts: wildly
    # different tokens, authors and log-probs there do not count
    b = run([[5, 6, 4, 1], [9, 10, 11]], [[1, 1, 1, 1], [1, 0, 1]], [top(3, 3, 0.3, 9), top(3, 3, 3)])
    check = parity(A, b)
    assert check["status"] == "ok"
    assert check["near_ties"] == [{"row": 0, "token": 2, "kind": "token", "gaps": [0.2, 0.3]}]
    assert check["failures"] == []


def test_either_engines_gap_under_the_margin_makes_a_near_tie_when_their_log_probs_agree():
    b = run([[5, 6, 4, 8], [9, 10, 11]], A.authors, [top(3, 3, 0.3, 3), top(3, 3, 3)])
    wider = run(A.completion_ids, A.authors, [top(3, 3, 0.6, 3), top(3, 3, 3)])  # 0.6 > margin, 0.3 under it
    assert parity(wider, b)["status"] == "ok"  # b's own gap 0.3 < 0.5, top two within 0.3 nat of each other
    assert parity(b, wider)["status"] == "ok"


def test_a_near_tie_in_one_engine_only_fails():
    """Where one engine is sure of its token (a 4-nat gap) the other's near tie is a different forward: the
    engines' top two log-probs there are nats apart."""
    b = run([[5, 6, 4, 8], [9, 10, 11]], A.authors, [top(3, 3, 0.3, 3), top(3, 3, 3)])
    sure = run(A.completion_ids, A.authors, [top(3, 3, 4.0, 3), top(3, 3, 3)])
    check = parity(sure, b)
    assert check["status"] == "failed" and check["failures"][0]["top_two"] == [[-0.1, -4.1], [-0.1, -0.4]]
    assert check["reason"] == (
        "1 of 2 rows differ; row 0 from token 2: tokens part where the engines' top two "
        "log-probs differ ([-0.1, -4.1] vs [-0.1, -0.4] nat, tolerance 0.4): a near tie in "
        "one engine only"
    )


def test_the_same_tokens_with_log_probs_two_nats_apart_fail():
    """A corruption that moves the forward without flipping an argmax: the tokens agree, the log-probs do not."""
    shifted = run(
        A.completion_ids, A.authors, [[[v - 2.0 for v in pos] for pos in row] for row in A.top_logprobs]
    )
    check = parity(A, shifted)
    assert check["status"] == "failed" and check["max_logprob_delta"] == 2.0
    assert check["failures"][0] == {"row": 0, "token": 0, "kind": "logprob", "delta": 2.0}
    assert check["reason"] == (
        "2 of 2 rows differ; row 0 from token 0: the same tokens with log-probs 2.0 nat apart "
        f"(tolerance {PARITY_TOLERANCE})"
    )
    noise = run(
        A.completion_ids, A.authors, [[[v - 0.05 for v in pos] for pos in row] for row in A.top_logprobs]
    )
    assert parity(A, noise)["status"] == "ok"  # rounding-sized differences pass


def test_a_real_near_tie_passes():
    """Kernel rounding at a near tie: the two engines pick different tokens of nearly equal log-probs, and
    each gives both about the same log-probs (swapped)."""
    a = run([[5, 6, 7]], [[1, 1, 1]], [[[-0.1, -3.1], [-0.69, -0.70], [-0.2, -2.0]]])
    b = run([[5, 8, 9]], [[1, 1, 1]], [[[-0.1, -3.1], [-0.68, -0.71], [-1.0, -1.5]]])
    check = parity(a, b)
    assert check["status"] == "ok" and check["near_ties"] == [
        {"row": 0, "token": 1, "kind": "token", "gaps": [0.01, 0.03]}
    ]


def test_a_flip_at_a_wide_gap_fails_in_one_line():
    b = run([[5, 6, 7, 8], [9, 3, 11]], A.authors, [top(3, 3, 0.2, 3), top(3, 2.5, 3)])
    check = parity(A, b)
    assert check["status"] == "failed" and check["near_ties"] == []
    assert check["failures"] == [{"row": 1, "token": 1, "kind": "token", "gaps": [3.0, 2.5]}]
    assert (
        check["reason"]
        == "1 of 2 rows differ; row 1 from token 1: tokens part at a top-1/top-2 gap of 3.0 / 2.5 nat (margin 0.5)"
    )
    assert "\n" not in check["reason"]


def test_the_margin_is_a_bound_not_a_tolerance_of_anything():
    b = run([[5, 6, 4, 8], [9, 10, 11]], A.authors, [top(3, 3, 0.2, 3), top(3, 3, 3)])
    assert parity(A, b, margin=0.1)["status"] == "failed"  # a gap of 0.2 is no tie under a 0.1 margin
    assert parity(A, b, margin=0.25)["status"] == "ok"


def test_authors_that_differ_under_the_same_tokens_fail_whatever_the_gap():
    b = run(A.completion_ids, [[1, 1, 1, 0], [1, 0, 1]], [top(3, 3, 0.01, 3), top(3, 3, 3)])
    check = parity(A, b)
    assert check["status"] == "failed" and check["failures"][0]["kind"] == "author"
    assert check["reason"].endswith("row 0 from token 2: the authors differ where the tokens agree")


def test_a_row_that_ends_where_the_other_goes_on_fails():
    b = run([[5, 6, 7], [9, 10, 11]], [[1, 1, 0], [1, 0, 1]], [top(3, 3, 0.2), top(3, 3, 3)])
    check = parity(A, b)
    assert check["status"] == "failed" and check["failures"] == [
        {"row": 0, "token": 3, "kind": "length", "gaps": [3.0, None]}
    ]


def test_the_log_prob_delta_is_measured_on_shared_prefixes_only():
    b = run(
        [[5, 6, 4, 8], [9, 10, 11]],
        A.authors,
        [
            [[-0.1, -3.1], [-0.4, -3.1], [-9.0, -9.1], [-9.0, -9.1]],
            [[-0.1, -3.1], [-0.15, -3.1], [-0.1, -3.1]],
        ],
    )
    assert parity(A, b)["max_logprob_delta"] == 0.3  # row 0 positions 0-1; not position 2 (the flip) or 3


def test_render_names_what_was_compared():
    same = parity(A, A)
    check = {
        "status": "ok",
        "rows": 2,
        "margin": PARITY_MARGIN,
        "max_num_seqs": 16,
        "max_num_batched_tokens": 32,
        "graphs": same,
        "compile": parity(A, run([[5, 6, 4], [9, 10, 11]], [[1, 1, 1], [1, 0, 1]], A.top_logprobs)),
    }
    assert render_parity(check) == (
        "  parity: ok: 2 greedy rollouts agree, CUDA graphs = compiled = enforce_eager "
        "(1 near-tie flips under 0.5 nat, log-probs within 0.0 nat; 16 rows, 32 tokens "
        "a step)"
    )


@pytest.mark.parametrize(
    "base",
    [
        EngineOptions(),
        EngineOptions(max_num_seqs=1, max_num_batched_tokens=64),
        EngineOptions(max_num_seqs=512, extra={"compilation_config": {"mode": 3}}),
    ],
)
def test_the_parity_engines_run_every_step_under_the_capture_ceiling(base):
    """Every step of the parity engines holds at most max_num_batched_tokens tokens; at or under the
    capture ceiling vLLM replays a graph (PIECEWISE for mixed steps), above it the step runs eager."""
    variants = base.parity_variants()
    assert set(variants) == {"graphs", "no_graphs", "eager"}
    for v in variants.values():
        assert v.max_num_seqs == PARITY_SEQS and v.max_num_batched_tokens == PARITY_BATCHED_TOKENS
        assert v.max_num_seqs <= v.max_num_batched_tokens  # vLLM refuses fewer tokens a step than rows
        assert v.max_num_batched_tokens <= capture_ceiling(v.max_num_seqs, 1 << 30)
    # several rows at once, fewer than the prompts: later prompts are admitted beside running decodes
    assert 1 < PARITY_SEQS < PARITY_PROMPTS
    g, n, e = variants["graphs"], variants["no_graphs"], variants["eager"]
    assert not g.enforce_eager and not n.enforce_eager and e.enforce_eager
    assert n.llm_kwargs()["compilation_config"] == {
        **base.extra.get("compilation_config", {}),
        "cudagraph_mode": "NONE",
    }
    assert g.llm_kwargs().get("compilation_config") == base.extra.get(
        "compilation_config"
    )  # as the run builds it


def test_capture_ceiling_is_vllms_default():
    assert capture_ceiling(4, 8192) == 8  # the old parity engine: prefills of 60+ tokens ran eager
    assert capture_ceiling(16, 32) == 32
    assert capture_ceiling(64, 8192) == 128 and capture_ceiling(1024, 8192) == 512
    assert capture_ceiling(16, 24) == 24  # cut to the step's tokens

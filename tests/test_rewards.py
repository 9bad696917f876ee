"""Math reward: extraction, equivalence table, adversarial outputs under the hard timeout, threads, fuzz."""

from __future__ import annotations

import os
import threading
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trlvr.rewards import (
    MathReward,
    check_golds,
    extract_boxed,
    gold_parses,
    grade,
    grading_mode,
    math_reward,
    reward_stats,
    screen,
)

TIMEOUT = 2.0


@pytest.mark.parametrize(
    "text, want",
    [
        (r"\boxed{5}", "5"),
        (r"a \boxed{1} then \boxed{\frac{1}{2}}", r"\frac{1}{2}"),
        (r"\fbox{7}", "7"),
        (r"\boxed{\{1, 2\}}", r"\{1, 2\}"),
        (r"\boxed {x^{2}}", "x^{2}"),
        (r"\boxed{3} and a cut-off \boxed{12", "3"),  # last box unclosed: latest complete one
        ("no box here", None),
        (r"\boxedfoo{3}", None),
        ("\\boxed{" * 10_000, None),
    ],
)
def test_extract_boxed(text, want):
    assert extract_boxed(text) == want


def test_extract_boxed_is_linear_on_huge_input():
    text = ("\\boxed{" + "{" * 50 + "x") * 20_000  # ~1 MB of unclosed boxes
    t = time.monotonic()
    assert extract_boxed(text) is None
    assert time.monotonic() - t < 2.0


# (completion, gold, expected score): math-verify's notion of equality
EQUIV = [
    (r"\boxed{\frac{1}{2}}", "0.5", 1.0),
    (r"\boxed{0.5}", r"\frac{1}{2}", 1.0),
    (r"\boxed{1/2}", r"\frac{1}{2}", 1.0),
    (r"\boxed{\dfrac{1}{2}}", r"\frac{1}{2}", 1.0),
    (r"\boxed{\tfrac12}", "1/2", 1.0),
    (r"\boxed{0.75}", r"\frac{3}{4}", 1.0),
    (r"\boxed{\left( 1, 2 \right)}", "(1,2)", 1.0),
    (r"\boxed{[1,2)}", "[1,2)", 1.0),
    (r"\boxed{[1,2)}", "[1,2]", 0.0),
    (r"\boxed{5\text{ cm}}", "5", 1.0),
    (r"\boxed{5 cm}", "5", 1.0),
    ("so she makes \\boxed{18} dollars", "18", 1.0),
    (r"\boxed{1,000}", "1000", 1.0),
    (r"\boxed{-3}", "-3", 1.0),
    (r"\boxed{3}", "-3", 0.0),
    (r"\boxed{\{1,2,3\}}", r"\{3,2,1\}", 1.0),
    (r"\boxed{\{1,2\}}", r"\{1,2,3\}", 0.0),
    (r"\boxed{\frac{\sqrt{2}}{2}}", r"\frac{1}{\sqrt{2}}", 1.0),
    (r"\boxed{x^2+1}", "1+x^2", 1.0),
    (r"\boxed{17}", "18", 0.0),
    (r"\boxed{0.33}", r"\frac{1}{3}", 0.0),
    (r"first \boxed{2}, finally \boxed{3}", "3", 1.0),
    (r"first \boxed{3}, finally \boxed{2}", "3", 0.0),
    ("The final answer is $\\frac{3}{4}$.", "0.75", 0.0),  # no box scores 0 (strict default)
    ("I do not know.", "4", 0.0),
    ("", "4", 0.0),
]


def test_equivalence_table():
    comps = [c for c, _, _ in EQUIV]
    golds = [g for _, g, _ in EQUIV]
    scores = math_reward(comps, answer=golds)
    bad = [(c, g, s, w) for (c, g, w), s in zip(EQUIV, scores, strict=True) if s != w]
    assert not bad, bad


def test_chat_message_completions_and_stats():
    comps = [
        [{"role": "assistant", "content": r"so \boxed{4}"}],
        [{"role": "assistant", "content": r"\boxed{5}"}],
    ]
    assert math_reward(comps, answer=["4", "4"], prompts=["p", "p"]) == [1.0, 0.0]
    last = reward_stats()["last"]
    assert last["graded"] == 2 and last["timeouts"] == 0 and last["errors"] == 0
    assert math_reward.__name__ == "math_reward"


def test_grade_result():
    r = grade(r"The answer is \boxed{\frac{2}{4}}.", "0.5")
    assert r.score == 1.0 and r.parsed == r"\frac{2}{4}" and not r.timed_out


PWNED = "/tmp/trlvr_pwned_test"
ADVERSARIAL = [
    r"\boxed{9^{9^{9^{9^{9}}}}}",
    r"\boxed{((((9!)!)!)!)}",
    r"\boxed{9!!}",
    r"\boxed{10^{10^{10}}}",
    r"\boxed{9^9^9^9}",
    r"\boxed{2^{123456789}}",
    r"\boxed{123456!}",
    "\\boxed{" + "(" * 10_000 + "}",
    "(" * 10_000,
    "\\boxed{" + "[" * 10_000 + "1" + "]" * 10_000 + "}",
    "x" * 1_000_000,
    "\\boxed{" + "1+" * 500_000 + "1}",
    "$" + "\\frac{1}{" * 5000 + "$",
    f"\\boxed{{__import__('os').system('touch {PWNED}')}}",
    f"\\boxed{{eval(\"open('{PWNED}','w')\")}}",
    f"import os; os.system('touch {PWNED}') \\boxed{{exec('import os')}}",
]


@pytest.mark.parametrize("completion", ADVERSARIAL, ids=[a[:30] for a in ADVERSARIAL])
def test_adversarial_outputs_are_bounded_and_zero(completion):
    if os.path.exists(PWNED):
        os.remove(PWNED)
    t = time.monotonic()
    r = grade(completion, "3")
    assert time.monotonic() - t < TIMEOUT + 1.0
    assert r.score == 0.0
    assert not os.path.exists(PWNED)


def test_adversarial_batch_in_parallel_is_bounded():
    comps = ADVERSARIAL + [r"\boxed{3}", r"\boxed{\frac{6}{2}}"] * 8
    t = time.monotonic()
    scores = math_reward(comps, answer=["3"] * len(comps))
    assert time.monotonic() - t < 2 * TIMEOUT
    assert scores == [0.0] * len(ADVERSARIAL) + [1.0] * 16


def test_watchdog_kills_and_counts_unscreened_timeouts():
    # With the screen off, a power tower reaches sympy and stalls: the watchdog must cut it
    # at the timeout, score 0, count it, and leave a working pool behind.
    rew = MathReward(timeout=1.0, screen=False)
    t = time.monotonic()
    scores = rew([r"\boxed{9^{9^{9^{9}}}}", r"\boxed{0.5}"], ["3", "1/2"])
    assert time.monotonic() - t < 1.0 + 1.5
    assert scores == [0.0, 1.0]
    assert rew.last_stats["timeouts"] == 1
    assert rew([r"\boxed{0.25}"], ["1/4"]) == [1.0]  # replacement worker grades fine


# Answers that stall math-verify (issue 11 item 13) and legitimate answers of the same shapes.
# \binom{10^6}{3} is graded: measured at 0.04 s (it is 166666166667000000); the binomial that
# stalls is one with a large lower argument.
STALLING = [
    "9**9**9",
    r"(10^{6})!",
    r"999999^{999999}",
    r"(999999)^{999999}",
    r"\binom{10^6}{500000}",
    r"\dbinom{10^{6}}{10^{5}}",
    "(" * 25 + "1" + ")" * 25,
    "(" * 40 + "1" + ")" * 40,
    "{" * 12 + "1" + "}" * 12,
    r"9^{9^{9}}",
    r"10^{10^{10}}",
    r"9^9^9",
    r"e^{10^{10}}",
    r"2^{123456789}",
    r"123456!",
    r"((9!)!)",
    r"9!!",
]
ORDINARY = [
    r"e^{x^2}",
    r"\binom{10}{3}",
    r"2^{10}",
    r"\binom{10^6}{3}",
    r"\binom{100}{50}",
    r"\dbinom{2n}{n}",
    r"2^{2023}",
    r"2023^{2023}",
    r"2^{3^2}",
    r"10^{100}",
    r"3.5 \times 10^{8}",
    r"(n+1)!",
    r"10!",
    r"\frac{3!}{2}",
    r"e^{i\pi}",
    r"x_1^2 + x_2^2",
    r"\left(\frac{1}{2}\right)^{3}",
    r"((1+2)\cdot(3+4))",
    r"\frac{1}{\frac{1}{\frac{1}{\frac{1}{\frac{1}{\frac{1}{2}}}}}}",
    r"\sqrt{2+\sqrt{2+\sqrt{2}}}",
    r"(1,2]",
]


@pytest.mark.parametrize("answer", STALLING)
def test_screen_refuses_answers_that_stall_math_verify(answer):
    assert screen(answer) is not None


@pytest.mark.parametrize("answer", ORDINARY)
def test_screen_passes_ordinary_answers(answer):
    assert screen(answer) is None


def test_ordinary_answers_of_stalling_shapes_are_graded():
    golds = ["e^{x^2}", "120", "1024", "166666166667000000", r"\binom{100}{50}", "(n+1)!"]
    comps = [f"\\boxed{{{a}}}" for a in [r"e^{x^2}", r"\binom{10}{3}", r"2^{10}", r"\binom{10^6}{3}"]]
    comps += [r"\boxed{\binom{100}{50}}", r"\boxed{(n+1)!}"]
    rew = MathReward(timeout=TIMEOUT)
    assert rew(comps, golds) == [1.0] * len(comps)
    assert rew.last_stats["screened"] == 0 and rew.last_stats["timeouts"] == 0


def test_stalling_answers_in_a_batch_stay_under_the_bar():
    # Boxed and, in the lenient mode, bare: every one is refused before it can hold a worker.
    comps = [f"\\boxed{{{a}}}" for a in STALLING] + STALLING + [r"\boxed{3}", r"\boxed{\frac{6}{2}}"] * 4
    rew = MathReward(timeout=TIMEOUT, require_box=False)
    t = time.monotonic()
    scores = rew(comps, ["3"] * len(comps))
    assert time.monotonic() - t < 2 * TIMEOUT
    assert scores == [0.0] * (2 * len(STALLING)) + [1.0] * 8
    assert rew.last_stats["timeouts"] == 0


def test_no_box_scores_zero_and_is_counted():
    comps = ["The answer is 42.", r"so \boxed{42}", "42", ""]
    assert math_reward(comps, answer=["42"] * 4) == [0.0, 1.0, 0.0, 0.0]
    assert reward_stats()["last"]["no_box"] == 3
    r = grade("The answer is 42.", "42")
    assert (r.score, r.how, r.parsed) == (0.0, "no_box", None)


def test_lenient_mode_grades_the_tail_and_still_counts_no_box():
    rew = MathReward(require_box=False)
    comps = ["The answer is 42.", "The final answer is $\\frac{3}{4}$.", r"\boxed{41}", "I do not know."]
    assert rew(comps, ["42", "0.75", "42", "4"]) == [1.0, 1.0, 0.0, 0.0]
    assert rew.last_stats["no_box"] == 3


def test_grading_mode_is_named():
    assert grading_mode() == grading_mode(math_reward) == "boxed"
    assert MathReward().grading_mode == "boxed"
    assert grading_mode(MathReward(require_box=False)) == "boxed_or_tail"
    assert grading_mode(lambda completions, **kw: [0.0] * len(completions)) is None


def test_gold_checks():
    golds = ["18", "-3.5", r"\frac{1}{2}", "[1,2)", r"\{1,2\}", "", "   ", r"\frac{", "²"]
    assert check_golds(golds) == [
        None,
        None,
        None,
        None,
        None,
        "empty",
        "empty",
        "unparseable",
        "unparseable",
    ]
    assert gold_parses(r"\sqrt{2}") and not gold_parses(r"\frac{")


def test_math_reward_from_non_main_thread():
    out: list = []
    th = threading.Thread(
        target=lambda: out.append(math_reward([r"\boxed{\frac{1}{4}}", r"\boxed{2}"], answer=["0.25", "3"]))
    )
    th.start()
    th.join(timeout=30)
    assert out == [[1.0, 0.0]]


def test_concurrent_callers_share_the_pool():
    outs: list = []

    def call():
        outs.append(math_reward([r"\boxed{0.5}", r"\boxed{7}"], answer=["1/2", "7"]))

    threads = [threading.Thread(target=call) for _ in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(timeout=30)
    assert outs == [[1.0, 1.0]] * 4


def test_mismatched_lengths_raise():
    with pytest.raises(ValueError):
        math_reward(["a", "b"], answer=["1"])


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(
        st.one_of(
            st.text(max_size=60),
            st.text(alphabet="\\{}()[]^!0123456789+-*/.,$ abfracboxedsqrt", max_size=80),
            st.builds(
                lambda s: "\\boxed{" + s + "}", st.text(alphabet="\\{}()^!0123456789+-/.", max_size=40)
            ),
        ),
        min_size=1,
        max_size=8,
    ),
    st.sampled_from(["3", r"\frac{1}{2}", "[1,2)", "#### 18", r"\{1,2\}"]),
)
def test_fuzz_reward_never_raises(comps, gold):
    scores = math_reward(comps, answer=[gold] * len(comps))
    assert len(scores) == len(comps) and all(s in (0.0, 1.0) for s in scores)

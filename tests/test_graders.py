"""The graders (`trlvr.rewards.graders`): ``trlvr`` without false positives on numbers, its unit rule
(percent, dollars, degrees, pairs against sets), and the authors' two graders against their own published scores.

Issue 57: against the gold ``1e-8`` the trlvr grader scored ``10^{-7}``, ``10^{-9}`` and ``\\frac{1}{10^7}`` 1
(math-verify compares floats at 6 decimal places once a side is not a number literal); ``\\boxed{20\\%}`` scored
0 against the answer key's ``20``, ``18.90`` 0 against ``\\$18.90``, ``30°`` 0 against ``30``, ``(3, 5)`` 1
against ``\\{3, 5\\}``.
"""

from __future__ import annotations

import json
from decimal import Decimal
from fractions import Fraction
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trlvr.cli.main import main
from trlvr.errors import UserError
from trlvr.eval.prefix import answer_in_text
from trlvr.rewards import GRADERS, MathReward, equivalent, grade, require_grader
from trlvr.rewards.graders import check_grader, missing_for

STRICT, LENIENT = MathReward(), MathReward(require_box=False)


def trlvr_verdicts(answer: str, gold: str) -> dict[str, float]:
    """Every way the trlvr grader judges one pair: the one equality, both modes with a box, the lenient
    mode without one."""
    return {
        "equivalent": float(equivalent(answer, gold)),
        "boxed": STRICT([f"so \\boxed{{{answer}}}."], [gold])[0],
        "boxed_or_tail, boxed": LENIENT([f"so \\boxed{{{answer}}}."], [gold])[0],
        "boxed_or_tail, no box": LENIENT([f"The answer is {answer}."], [gold])[0],
    }


# -- the seam ------------------------------------------------------------------------------------


def test_the_graders_and_one_line_refusals():
    assert GRADERS == ("trlvr", "authors", "authors-paper")
    assert MathReward().grader == "trlvr"
    with pytest.raises(
        UserError, match=r"^unknown grader 'verl': expected one of trlvr, authors, authors-paper$"
    ):
        MathReward(grader="verl")
    with pytest.raises(UserError, match="unknown grader"):
        equivalent("1", "1", grader="Authors")
    with pytest.raises(UserError, match=r"boxed_or_tail grading mode is the trlvr grader's"):
        MathReward(grader="authors-paper", require_box=False)
    assert check_grader("authors") == "authors" and missing_for("trlvr") is None


def test_a_missing_dependency_of_the_authors_grader_is_one_line(monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "pylatexenc" else real(name, *a)
    )
    with pytest.raises(UserError) as err:
        require_grader("authors")
    assert (
        str(err.value)
        == "grader 'authors' needs pylatexenc, which is not installed: pip install 'trlvr[authors]'"
    )
    with pytest.raises(UserError):
        MathReward(grader="authors")  # never a silent weaker fallback
    with pytest.raises(UserError, match="^grader 'authors-paper' needs pylatexenc, which is not installed"):
        grade("\\boxed{1}", "1", grader="authors-paper")  # its sympy path reads LaTeX with pylatexenc
    assert require_grader("trlvr") == "trlvr"


# -- no false positive in trlvr -------------------------------------------------------------------


@pytest.mark.parametrize(
    "answer", ["10^{-7}", "10^{-9}", "\\frac{1}{10^7}", "\\frac{1}{10^{9}}", "10^{-8.5}"]
)
def test_an_order_of_magnitude_off_scores_0_against_1e_minus_8(answer):
    assert set(trlvr_verdicts(answer, "1e-8").values()) == {0.0}, trlvr_verdicts(answer, "1e-8")


@pytest.mark.parametrize(
    "answer", ["10^{-8}", "\\frac{1}{10^8}", "1\\times10^{-8}", "1 \\cdot 10^{-8}", "0.00000001"]
)
def test_1e_minus_8_in_its_written_forms_scores_1(answer):
    assert set(trlvr_verdicts(answer, "1e-8").values()) == {1.0}, trlvr_verdicts(answer, "1e-8")


def test_a_power_of_ten_with_or_without_a_box_is_one_equality():
    """gold 1e+23: \\boxed{10^{23}} and the box-less "The answer is 10^{23}." alike (lenient mode)."""
    assert LENIENT(
        ["The answer is 10^{23}.", "so \\boxed{10^{23}}", "The answer is 10^{22}."], ["1e+23"] * 3
    ) == [1.0, 1.0, 0.0]
    assert STRICT(["so \\boxed{10^{23}}"], ["1e+23"]) == [1.0]


@pytest.mark.parametrize(
    ("answer", "gold", "same"),
    [
        ("\\sqrt{10^{-14}}", "1e-7", True),  # numbers math-verify evaluates: compared exactly or to 1e-9
        ("\\sqrt{10^{-14}}", "1e-8", False),
        ("2^{-30}", "9.31322574615478515625e-10", True),
        ("2^{-30}", "9.31322e-10", False),
        ("\\pi \\times 10^{-8}", "3.14159e-8", False),
        ("\\sqrt{2}", "1.41421356", False),  # 6 decimal places said equal
        ("\\sqrt{2}", "2^{1/2}", True),
        ("\\frac{3}{2}\\pi", "1.5\\pi", True),
    ],
)
def test_numbers_math_verify_evaluates_are_compared_exactly(answer, gold, same):
    assert equivalent(answer, gold) is same
    assert STRICT([f"\\boxed{{{answer}}}"], [gold]) == [float(same)]


@st.composite
def numbers(draw):
    """A decimal mantissa in [1, 10) with 1-4 digits and an exponent: values 1e-30..1e30."""
    digits = draw(st.integers(1, 4))
    mantissa = Decimal(draw(st.integers(10 ** (digits - 1), 10**digits - 1))).scaleb(1 - digits)
    return mantissa, draw(st.integers(-30, 30))


def forms(mantissa: Decimal, exp: int) -> list[str]:
    """The number mantissa x 10^exp as answers and golds write it."""
    value = mantissa.scaleb(exp)
    m = f"{mantissa:f}"
    frac = Fraction(value)
    out = [
        f"{m}e{exp}",
        f"{m}E{exp:+d}",
        f"{m}\\times10^{{{exp}}}",
        f"{m} \\times 10^{{{exp}}}",
        f"{m}\\cdot 10^{{{exp}}}",
        f"\\frac{{{frac.numerator}}}{{{frac.denominator}}}",
    ]
    if -12 <= exp <= 12:
        out.append(f"{value:f}")  # plain decimal where sensible
    if mantissa == 1:
        out += [f"10^{{{exp}}}", f"\\frac{{1}}{{10^{{{-exp}}}}}" if exp < 0 else f"10^{{{exp}}}"]
    return out


@settings(max_examples=40, deadline=None)
@given(number=numbers(), data=st.data())
def test_every_number_equals_itself_in_every_form_and_never_a_neighbour(number, data):
    mantissa, exp = number
    value = mantissa.scaleb(exp)
    same = forms(mantissa, exp)
    answer, gold = data.draw(st.sampled_from(same)), data.draw(st.sampled_from(same))
    assert equivalent(answer, gold), (answer, gold)
    up, down, near = value.scaleb(1), value.scaleb(-1), value * (1 + Decimal("1e-6"))
    neighbours = forms(mantissa, exp + 1) + forms(mantissa, exp - 1) + [f"{near:E}", f"{up:f}", f"{down:f}"]
    other = data.draw(st.sampled_from(neighbours))
    assert not equivalent(other, gold), (other, gold)
    assert not equivalent(gold, other), (gold, other)
    # the reward reads the box as equivalent() does, in both modes
    assert STRICT([f"\\boxed{{{answer}}}", f"\\boxed{{{other}}}"], [gold, gold]) == [1.0, 0.0]
    assert LENIENT([f"\\boxed{{{answer}}}", f"\\boxed{{{other}}}"], [gold, gold]) == [1.0, 0.0]


# -- percent, dollars, degrees, pairs and sets (one rule, docs/concepts/metrics.md) -------------------


@pytest.mark.parametrize(
    ("answer", "gold", "same"),
    [
        ("20\\%", "20", True),
        ("20", "20\\%", True),
        ("20\\%", "0.2", True),
        ("20\\%", "0.02", False),
        ("20\\text{\\%}", "20\\%", True),
        ("\\$18.90", "18.90", True),
        ("18.90", "\\$18.90", True),
        ("18.9", "\\$18.90", True),
        ("\\$18.90", "18.91", False),
        ("\\$1,000", "1000", True),
        ("30^\\circ", "30", True),
        ("30°", "30", True),
        ("30\\degree", "30^\\circ", True),
        ("30^{\\circ}", "30°", True),
        ("31°", "30", False),
        ("7", "7\\text{ marbles}", True),
        ("(3, 5)", "\\{3, 5\\}", False),
        ("\\{3, 5\\}", "(3, 5)", False),
        ("\\{3, 5\\}", "\\{5, 3\\}", True),
        ("(3, 5)", "(3, 5)", True),
    ],
)
def test_units_as_answer_keys_write_them(answer, gold, same):
    verdicts = trlvr_verdicts(answer, gold)
    if answer.startswith(("(", "\\{")):
        verdicts.pop(
            "boxed_or_tail, no box"
        )  # a set in running text is not an answer math-verify extracts whole
    assert set(verdicts.values()) == {float(same)}, verdicts


@pytest.mark.parametrize("gold", ["\\$20", "\\$18.90", "\\$1,000", "\\$ 20"])
def test_data_check_accepts_dollar_golds(tmp_path, capsys, gold):
    path = tmp_path / "golds.jsonl"
    path.write_text(json.dumps({"problem": "How much?", "answer": gold}) + "\n")
    assert main(["data", "check", str(path)]) == 0, capsys.readouterr().out
    bare = gold.replace("\\$", "").replace(" ", "").replace(",", "")
    assert equivalent(bare, gold) and equivalent(gold, bare)


def test_the_prefix_leakage_control_reads_a_gold_as_the_reward_does():
    assert answer_in_text("so we have 7 of them", "7\\text{ marbles}")
    assert not answer_in_text("so we have 17 of them", "7\\text{ marbles}")
    assert answer_in_text("a rise of 20% here", "20") and answer_in_text("that is 10^{-8} m", "1e-8")
    assert not answer_in_text("that is 10^{-7} m", "1e-8")
    for tok, gold in [("7", "7\\text{ marbles}"), ("20%", "20"), ("10^{-8}", "1e-8"), ("\\$5", "5")]:
        assert answer_in_text(f"so {tok} and", gold) == equivalent(tok, gold)


# -- the authors' paper-era grader ------------------------------------------------------------------

needs_paper = pytest.mark.skipif(
    missing_for("authors-paper") is not None,
    reason=f"grader 'authors-paper': {missing_for('authors-paper')} (pip install '.[authors]')",
)
PUBLISHED = Path(__file__).parent / "data" / "authors_sample_scores.jsonl"


@needs_paper
@pytest.mark.parametrize(
    ("text", "gold", "score"),
    [
        ("so \\boxed{4.5 \\times 10^{33}}", "4.5e33", 0.0),  # what the published sample_scores say
        ("so \\boxed{6 \\times 10^{-3}}", "0.006", 1.0),  # ... and this (a value comparison)
        ("so \\boxed{6 \\times 10^{-3} \\, \\mathrm{m/s^2}}", "0.006", 0.0),  # ... and this (not math-verify)
        ("so \\boxed{41.8^\\circ}", "41.8", 1.0),
        ("so \\boxed{\\dfrac12}", "0.5", 1.0),
        ("so \\boxed{42.0}", "42", 1.0),  # the sympy path's integer reading
        ("so \\boxed{\\frac{6}{8}}", "\\frac{3}{4}", 0.0),  # unreduced fractions must match literally
        ("so \\boxed{20\\%}", "20", 1.0),
        ("\\fbox{42}", "42", 0.0),  # remove_boxed's assertion
        ("\\boxed {42}", "42", 0.0),
        ("\\boxed 42$ and", "42", 0.0),
        ("so \\boxed{5}", "\\boxed{5}", 1.0),  # a boxed gold is extracted
        ("no box 42", "42", 0.0),
        ("\\boxed{12 \\text{ cm}^3 x}", "12", 1.0),  # the "\\text{ " cut
        ("\\boxed{1\\text{ a}\\text{ b}}", "1", 0.0),  # two "\\text{ ": the normaliser gives up
    ],
)
def test_authors_paper_grader(text, gold, score):
    assert grade(text, gold, grader="authors-paper").score == score


def published_scores() -> list[dict]:
    return [json.loads(line) for line in PUBLISHED.read_text().splitlines()]


def test_the_published_scores_file_holds_each_sample_once_with_its_last_box():
    rows = published_scores()
    assert len(rows) >= 27 and {r["score"] for r in rows} == {0.0, 1.0}
    assert len({(r["path"], r["idx"], r["sample"]) for r in rows}) == len(rows)
    assert PUBLISHED.stat().st_size < 2_000_000
    for r in rows:  # both authors' graders read a text from its last \\boxed on: the tail holds it whole
        assert r["response_tail"].count("\\boxed{") >= 1, r


@needs_paper
def test_authors_paper_reproduces_every_published_score():
    rows = published_scores()
    reward = MathReward(grader="authors-paper")
    got = reward([r["response_tail"] for r in rows], [r["ground_truth"] for r in rows])
    wrong = [
        (r["path"], r["idx"], r["sample"], r["score"], s)
        for r, s in zip(rows, got, strict=True)
        if s != r["score"]
    ]
    assert not wrong, wrong


@needs_paper
def test_why_the_paper_era_grader_is_neither_string_equality_nor_math_verify():
    """The two published verdicts that separate the candidates (minerva idx 4, gold 0.006)."""
    from trlvr.rewards import authors_paper

    rows = {(r["idx"], r["sample"]): r for r in published_scores() if "minerva" in r["path"]}
    one, zero = rows[(4, 1)], rows[(4, 3)]
    assert (one["score"], zero["score"]) == (1.0, 0.0)
    from trlvr.rewards.authors import extract

    hendrycks = [
        float(authors_paper.strip_string(extract(r["response_tail"])) == "0.006") for r in (one, zero)
    ]
    assert hendrycks == [0.0, 0.0]  # string equality misses the 1
    if missing_for("authors") is None:
        assert MathReward(grader="authors")([one["response_tail"], zero["response_tail"]], ["0.006"] * 2) == [
            1.0,
            1.0,
        ]


# -- the authors' release grader ---------------------------------------------------------------------

needs_authors = pytest.mark.skipif(
    missing_for("authors") is not None,
    reason=f"grader 'authors': {missing_for('authors')} (pip install '.[authors]')",
)

# (completion, gold, the release's verdict): the disagreements with trlvr that ../design/authors-measurement.md
# §1b lists for the release grader, and its follow-up probe
RELEASE = [
    ("\\boxed{20\\%}", "20", 1.0),
    ("\\boxed{20%}", "20", 1.0),
    ("\\boxed{20 \\%}", "20", 1.0),
    ("\\boxed{20}", "20\\%", 1.0),
    ("\\boxed{30°}", "30", 1.0),
    ("\\boxed{30\\degree}", "30", 1.0),
    ("\\boxed{18.90}", "\\$18.90", 1.0),
    ("\\boxed{18.9}", "\\$18.90", 1.0),
    ("\\boxed{4.5\\times10^{33}}", "4.5e33", 0.0),
    ("\\boxed{4.5 \\times 10^{33}}", "4.5e33", 0.0),
    ("\\boxed{1\\times10^{-8}}", "1e-8", 0.0),
    ("\\boxed{10^{-8}}", "1e-8", 0.0),
    ("\\boxed{2.55e-10}", "2.55\\times10^{-10}", 0.0),
    ("\\boxed{10\\,080}", "10080", 0.0),
    ("\\fbox{42}", "42", 0.0),
    ("\\boxed {42}", "42", 0.0),
    ("\\boxed{10^{-7}}", "1e-8", 0.0),
    ("\\boxed{12 \\text{ cm}^3 x}", "12", 1.0),
    ("\\boxed{\\frac{6}{8}}", "\\frac{3}{4}", 1.0),
    ("\\boxed{b = m}", "m", 0.0),
    ("\\boxed{b=m}", "m", 1.0),
    ("\\boxed{10^{-9}}", "0.0000001", 1.0),
    ("\\boxed{\\frac{x}{2}}", "0.5x", 1.0),
    ("\\boxed{41.8^\\circ}", "41.8", 1.0),
    ("no box 42", "42", 0.0),
    ("\\boxed{\\text{(C)}}", "C", 1.0),  # sympy path: a one-element "tuple" (c) against c, element-wise
    ("\\boxed{(C)}", "\\text{(C)}", 1.0),
    ("\\boxed{1}", "\\boxed{1}", 1.0),
]


@needs_authors
def test_the_release_grader_gives_the_release_verdicts():
    reward = MathReward(grader="authors")
    got = reward([t for t, _, _ in RELEASE], [g for _, g, _ in RELEASE])
    assert reward.last_stats["timeouts"] == reward.last_stats["errors"] == 0
    wrong = [(t, g, want, s) for (t, g, want), s in zip(RELEASE, got, strict=True) if s != want]
    assert not wrong, wrong
    assert equivalent("20\\%", "20", grader="authors") and not equivalent(
        "4.5e33", "4.5\\times10^{33}", grader="authors"
    )


@needs_authors
def test_the_release_grader_in_process_parts():
    from trlvr.rewards import authors

    assert authors.extract("\\boxed{a} then \\boxed{\\frac{1}{2}}") == "\\frac{1}{2}"
    assert (
        authors.mathd_normalize("5 \\text{ apples}") == "5"
        and authors.mathd_normalize("\\frac12") == "\\frac{1}{2}"
    )
    assert authors.sympy_equal("(1, 2)", "(1,2)") and not authors.sympy_equal("(1,2)", "[1,2]")
    assert not authors.sympy_equal("3/6", "1/2")  # unreduced fractions must match literally
    assert authors.repetitive("1+" * 80) and not authors.repetitive(
        "The sum of 3 and 4 is 7, " * 1 + "so x = 12."
    )


# -- the differential table in the docs ------------------------------------------------------------------


@pytest.mark.slow
@needs_authors
def test_the_docs_grader_table_is_current():
    """docs/guides/evaluation.md's table is what tools/grader_table.py computes now (about 15 s)."""
    from helpers import load_script

    tool = load_script(Path(__file__).parents[1] / "tools" / "grader_table.py", "grader_table")
    assert tool.main(["--check"]) == 0


# ---- one description of each grader ----------------------------------------------------------------------


def _flat(text: str) -> str:
    return " ".join(text.split())


def test_every_text_describes_each_grader_by_its_one_line_and_none_by_string_equality():
    """`authors-paper` is DeepScaleR's grade_answer_verl (the MATH normaliser or sympy), not Hendrycks strip_string
    and string equality (which misses minerva idx 4's published 1): the flag's help, the config key's help and the
    docs all say so in the words of `GRADER_HELP`."""
    import argparse

    from trlvr.cli.eval_cmd import make_parser
    from trlvr.config import TandemConfig
    from trlvr.rewards.graders import GRADER_HELP, graders_help

    assert set(GRADER_HELP) == set(GRADERS) and "grade_answer_verl" in GRADER_HELP["authors-paper"]
    parser = make_parser(argparse.ArgumentParser().add_subparsers())
    (flag,) = [a for a in parser._actions if "--grader" in a.option_strings]
    config = next(f for f in TandemConfig.__dataclass_fields__.values() if f.name == "grader").metadata[
        "help"
    ]
    root = Path(__file__).resolve().parents[1]
    docs = {
        p: _flat((root / p).read_text())
        for p in (
            "docs/guides/evaluation.md",
            "docs/reproducing-the-paper.md",
            "docs/reference/configuration.md",
        )
    }
    for text in (flag.help, config):
        assert graders_help() in text
    for line in GRADER_HELP.values():
        assert _flat(line) in docs["docs/guides/evaluation.md"]
    assert "grade_answer_verl" in docs["docs/reproducing-the-paper.md"]
    for where, text in [("eval --grader", flag.help), ("config grader", config), *docs.items()]:
        for wrong in (
            "strip_string and string equality",
            "strip_string, string equality",
            "strip_string + string equality",
            "`strip_string`, then string equality",
        ):
            assert wrong not in _flat(text), f"{where} describes a grader as {wrong!r}"

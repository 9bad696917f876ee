"""One reading of math text (issue 44, mechanism 4): `trlvr data check`, the reward and evaluation read
every Unicode/typographic form of a number the same way, through `trlvr.rewards.mathtext.normalize_math`."""

from __future__ import annotations

import json
from fractions import Fraction

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trlvr.cli.main import main as cli_main
from trlvr.eval.grading import grade as eval_grade
from trlvr.rewards import check_golds, grade, math_reward
from trlvr.rewards.mathtext import normalize_math


def _write(path, golds):
    path.write_text(
        "".join(
            json.dumps({"id": f"q{i}", "problem": f"p{i}", "answer": g}) + "\n"
            for i, g in enumerate(golds, 1)
        )
    )
    return path


# Golds that real data sets write, with an ASCII answer that means the same number.
DEFECT = [
    ("1\u2009234", "1234"),  # thin space as thousands separator: math-verify reads the gold as 234
    ("3\u20444", "3/4"),  # fraction slash: math-verify reads the gold as 3
    ("2\u00b3", "8"),  # superscript: the gold reads as 2
    ("3\u00bd", "7/2"),  # vulgar fraction after digits: the gold reads as 3
]


@pytest.mark.parametrize("gold, answer", DEFECT)
def test_a_gold_data_check_calls_usable_is_not_scored_0_for_every_correct_answer(gold, answer):
    """The issue's defect: `data check` accepted these golds while the grader scored the correct answer 0."""
    assert check_golds([gold]) == [None]  # data check: usable
    assert grade(f"so \\boxed{{{answer}}}", gold).score == 1.0  # ... and the correct answer scores 1
    assert grade(f"so \\boxed{{{gold}}}", answer).score == 1.0  # the same form in an answer
    assert grade("so \\boxed{1}", gold).score == 0.0  # a wrong answer still scores 0


# ---- the table of forms: each renders a value drawn by Hypothesis; ASCII is the value's plain text ----
SUPER = str.maketrans("0123456789-", "⁰¹²³⁴⁵⁶⁷⁸⁹⁻")
FULL = str.maketrans("0123456789-/.", "０１２３４５６７８９－／．")
VULGAR = {
    Fraction(1, 2): "½",
    Fraction(1, 4): "¼",
    Fraction(3, 4): "¾",
    Fraction(1, 3): "⅓",
    Fraction(2, 3): "⅔",
    Fraction(1, 8): "⅛",
    Fraction(5, 6): "⅚",
    Fraction(1, 10): "⅒",
}


def _grouped(n: int, sep: str) -> str:
    sign, digits = ("-" if n < 0 else ""), str(abs(n))
    head = len(digits) % 3 or 3
    return sign + sep.join([digits[:head]] + [digits[i : i + 3] for i in range(head, len(digits), 3)])


def _signed(minus: str):
    return lambda d: (lambda n: (minus + str(n), str(-n)))(d(st.integers(1, 10**6)))


def _thousands(sep: str):
    return lambda d: (lambda n: (_grouped(n, sep), str(n)))(
        d(st.integers(1000, 10**9) | st.integers(-(10**9), -1000))
    )


def _slash(slash: str):
    def render(d):
        p, q = d(st.integers(-99, 99)), d(st.integers(2, 99))
        return f"{p}{slash}{q}", f"{p}/{q}"

    return render


def _times(op: str):
    return lambda d: (lambda a, b: (f"{a}{op}{b}", str(a * b)))(d(st.integers(2, 99)), d(st.integers(2, 99)))


def _vulgar(d):
    f, whole = d(st.sampled_from(sorted(VULGAR))), d(st.integers(0, 20))
    v = whole + f
    return (str(whole) if whole else "") + VULGAR[f], f"{v.numerator}/{v.denominator}"


def _superscript(d):
    b, e = d(st.integers(2, 12)), d(st.integers(-3, 6))
    return f"{b}{str(e).translate(SUPER)}", str(Fraction(b) ** e)


def _fullwidth(d):
    n = d(st.integers(-(10**6), 10**6))
    return str(n).translate(FULL), str(n)


def _divide(d):
    a, b = d(st.integers(1, 99)), d(st.integers(1, 99))
    return f"{a * b}÷{b}", str(a)


FORMS = {
    "U+2212 minus": _signed("\u2212"),
    "U+2012 figure dash": _signed("\u2012"),
    "U+2013 en dash": _signed("\u2013"),
    "U+2014 em dash": _signed("\u2014"),
    "U+2015 horizontal bar": _signed("\u2015"),
    "U+FE63 small minus": _signed("\ufe63"),
    "U+FF0D full-width minus": _signed("\uff0d"),
    "U+2044 fraction slash": _slash("\u2044"),
    "U+2215 division slash": _slash("\u2215"),
    "U+2009 thin space": _thousands("\u2009"),
    "U+00A0 no-break space": _thousands("\u00a0"),
    "U+202F narrow no-break space": _thousands("\u202f"),
    "U+2007 figure space": _thousands("\u2007"),
    "ASCII space thousands": _thousands(" "),
    "comma thousands": _thousands(","),
    "LaTeX thin space": _thousands("\\,"),
    "U+00B7 middle dot": _times("\u00b7"),
    "U+22C5 dot operator": _times("\u22c5"),
    "U+00D7 times": _times("\u00d7"),
    "U+00F7 divide": _divide,
    "superscript": _superscript,
    "full-width digits": _fullwidth,
    "vulgar fraction": _vulgar,
}


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(form=st.sampled_from(sorted(FORMS)), data=st.data())
def test_every_form_reads_the_same_in_data_check_reward_and_eval(form, data):
    """Build a number, render it in a form: `data check` (check_golds) calls it usable, and the reward and
    evaluation give 1 to the ASCII answer against the form gold, to the form answer against the ASCII
    gold, and 0 to a wrong answer, in either direction."""
    text, ascii_ = FORMS[form](data.draw)
    note = f"{form}: {text!r} vs {ascii_!r}"
    assert check_golds([text, ascii_]) == [None, None], note
    boxed = lambda s: f"so the answer is \\boxed{{{s}}}."  # noqa: E731
    wrong = str(Fraction(ascii_) + 1)
    assert [grade(boxed(ascii_), text).score, grade(boxed(text), ascii_).score] == [1.0, 1.0], note
    assert [grade(boxed(wrong), text).score, grade(boxed(text), wrong).score] == [0.0, 0.0], note
    rewards, outcomes = eval_grade(
        math_reward, [boxed(ascii_), boxed(text), boxed(wrong)], [text, text, text]
    )
    assert rewards == [1.0, 1.0, 0.0] and outcomes == ["ok"] * 3, note
    assert normalize_math(normalize_math(text)) == normalize_math(text), note  # one reading: idempotent


@pytest.mark.parametrize(
    "text", ["3\u20135", "pages 3\u20145", "x\u2013y", "2 3", "0.123 456", "12 3456", "a, b"]
)
def test_forms_that_are_not_numbers_stay(text):
    """A dash between two numbers is a range, digit groups that are not thousands stay apart."""
    assert normalize_math(text) == text


def test_normaliser_is_linear_on_adversarial_text():
    import time

    for text in ["1 234" * 20_000 + "5", "\u2013" * 100_000, "1" * 100_000 + "½", "²" * 100_000]:
        t = time.perf_counter()
        normalize_math(text)
        assert time.perf_counter() - t < 1.0, text[:10]


def test_data_check_flags_a_gold_that_reads_differently_raw(tmp_path, capsys):
    """One line per flagged gold, naming the file, row and field; the row stays usable (graded by its
    normalised reading) and the exit code is that of a clean file."""
    path = _write(tmp_path / "forms.jsonl", ["18", "\u22125", "1\u2009234", "2\u00b75", "\u20133"])
    assert cli_main(["data", "check", str(path)]) == 0
    out = capsys.readouterr().out
    assert "5 usable, 0 unusable" in out and "3 gold(s) read differently raw and normalised" in out
    flagged = [line.strip() for line in out.splitlines() if "reads differently" in line]
    assert [line.split(":")[0] for line in flagged] == [f"{path} row {n}" for n in (3, 4, 5)]
    assert all(" answer reads differently once normalised" in line for line in flagged)
    assert "reads 234 raw, 1234 normalised" in flagged[0] and "2*5 normalised" in flagged[1]
    assert "reads nothing raw, -3 normalised" in flagged[2]
    assert cli_main(["data", "check", str(path), "--no-math-verify"]) == 0
    assert "read differently" not in capsys.readouterr().out


@pytest.mark.parametrize(
    "text, gold",
    [
        ("The answer is \u22125.", "-5"),
        ("The answer is \u20135.", "-5"),
        ("So it is 1\u2009234.", "1234"),
        ("The answer is \uff14\uff12.", "42"),
    ],
)
def test_the_lenient_mode_reads_the_tail_through_the_same_normaliser(text, gold):
    from trlvr.rewards import MathReward

    lenient = MathReward(require_box=False, timeout=10.0)
    assert [r.score for r in lenient.grade_many([text, text], [gold, "7"])] == [1.0, 0.0]

"""Exact values end to end (issue 38): a gold read from data is never converted through a float, and
the grader compares exact values, for `trlvr data check`, the reward (trlvr.rewards) and eval's
grading (trlvr.eval.grading.grade) alike.

Hypothesis draws a value (an integer up to 60 digits, a decimal m x 10^e with e in [-300, 300], or a
fraction p/q) and writes it several ways (plain digits, scientific notation, p/q, \\frac{p}{q},
trailing zeros): into a data file as a JSON number and as a JSON string, and as the boxed answer of
a completion. The properties:
    data     every spelling loads as a usable row whose gold has exactly the value written (a JSON
             number's gold is its literal: "1e23", not 99999999999999991611392)
    grading  another spelling of the same value scores 1; the nearest other value written the same
             way (the last digit one up) scores 0, in the reward and in eval's two grading modes
Before: 0.1234567 graded equal to 0.1234568 and 0.3333333 to 1/3 (math-verify rounds to 6 places),
1.5e10 unequal to 15000000000, and a JSON gold 1e23 became 99999999999999991611392, 1e400 inf.
"""

from __future__ import annotations

import json
from fractions import Fraction

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trlvr.cli.main import main
from trlvr.data import load_problems
from trlvr.rewards import MathReward
from trlvr.rewards.boxed import exact_number, normalize

SETTINGS = settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


def value_of(text: str) -> Fraction:
    x = exact_number(normalize(text))
    assert x is not None, text
    return Fraction(x)


def _plain(m: int, e: int) -> str:
    """m x 10^e in plain digits (no exponent)."""
    if e >= 0:
        return str(m * 10**e)
    sign, digits = ("-" if m < 0 else ""), str(abs(m)).rjust(-e + 1, "0")
    return f"{sign}{digits[:e]}.{digits[e:]}"


@st.composite
def numbers(draw):
    """(value, spellings: [(text, is a JSON number)], neighbour: the nearest other value, spelt alike)."""
    kind = draw(st.sampled_from(["integer", "decimal", "tiny", "huge", "fraction"]))
    if kind == "integer":
        n = draw(st.integers(-(10**60), 10**60))
        return (
            Fraction(n),
            [(str(n), True), (f"{n}.0", True), (f"{n}/1", False), (f"{n}e0", True)],
            [(str(n + 1), True)],
        )
    if kind == "fraction":
        p, q = draw(st.integers(-(10**12), 10**12)), draw(st.integers(1, 10**12))
        v = Fraction(p, q)
        a, b = v.numerator, v.denominator
        spell = [(f"{a}/{b}", False), (f"\\frac{{{a}}}{{{b}}}", False), (f"{2 * a}/{2 * b}", False)]
        return v, spell, [(f"{a + 1}/{b}", False)]
    m = draw(st.integers(-(10**20), 10**20).filter(lambda x: x % 10))
    e = {
        "decimal": draw(st.integers(-20, 20)),
        "tiny": draw(st.integers(-300, -280)),
        "huge": draw(st.integers(280, 300)),
    }[kind]
    v = Fraction(m) * Fraction(10) ** e
    spell = [(f"{m}e{e}", True), (f"{m}E{e:+d}", True), (_plain(m, e), True)]
    if e < 0:
        spell += [(_plain(m, e) + "00", True), (f"{m}/{10**-e}", False)]
    return v, spell, [(f"{m + 1}e{e}", True)]


def _rows(path, cells) -> None:
    """One row per cell; a JSON number is written raw (its literal), a string quoted."""
    lines = []
    for i, (text, as_number) in enumerate(cells):
        answer = text if as_number else json.dumps(text)
        lines.append(f'{{"problem": "value {i}?", "answer": {answer}}}\n')
    path.write_text("".join(lines))


@SETTINGS
@given(numbers())
def test_a_gold_is_read_from_data_exactly(tmp_path_factory, drawn):
    value, spellings, _ = drawn
    cells = spellings + [
        (t, False) for t, _ in spellings
    ]  # each as a JSON number (where it is one) and a string
    path = tmp_path_factory.mktemp("data") / "golds.jsonl"
    _rows(path, cells)
    problems = load_problems(str(path))
    assert len(problems) == len(cells) and not problems.skipped
    for p, (text, as_number) in zip(problems, cells, strict=True):
        assert value_of(p.answer) == value, (text, p.answer)
        if as_number:
            assert p.answer == (
                text.removesuffix(".0") if text.endswith(".0") else text
            )  # the literal itself


@SETTINGS
@given(numbers())
def test_data_check_accepts_every_spelling(tmp_path_factory, capsys, drawn):
    value, spellings, _ = drawn
    path = tmp_path_factory.mktemp("check") / "golds.jsonl"
    _rows(path, spellings)
    capsys.readouterr()
    assert main(["data", "check", str(path)]) == 0, capsys.readouterr()
    assert f"{len(spellings)} rows, {len(spellings)} usable, 0 unusable" in capsys.readouterr().out


GRADERS = {"reward": lambda texts, golds: MathReward()(texts, golds)}


def _eval_grade(mode: str):
    def grade(texts, golds):
        from trlvr.eval.grading import grade, grader_for

        return grade(grader_for(mode), texts, golds)[0]

    return grade


GRADERS |= {f"eval {m}": _eval_grade(m) for m in ("boxed", "boxed_or_tail")}


@pytest.mark.parametrize("grader", sorted(GRADERS))
@SETTINGS
@given(drawn=numbers())
def test_the_grader_compares_exact_values(grader, drawn):
    value, spellings, neighbours = drawn
    grade = GRADERS[grader]
    golds = [t for t, _ in spellings]
    texts = [f"so the answer is \\boxed{{{t}}}." for t, _ in spellings]
    # every spelling against every gold: the same value
    same = grade([t for t in texts for _ in golds], [g for _ in texts for g in golds])
    assert all(s == 1.0 for s in same), [
        (t, g) for (t, g), s in zip([(t, g) for t in texts for g in golds], same, strict=True) if s != 1.0
    ][:3]
    near = [f"\\boxed{{{t}}}" for t, _ in neighbours]
    assert grade(near * len(golds), [g for g in golds for _ in near]) == [0.0] * (len(near) * len(golds))


@pytest.mark.parametrize(
    ("answer", "gold", "score"),
    [
        ("0.1234567", "0.1234568", 0.0),  # math-verify rounds to 6 places: graded equal before
        ("0.3333333", "\\frac{1}{3}", 0.0),  # as above
        ("1.5e10", "15000000000", 1.0),  # math-verify misread the exponent: graded unequal before
        ("1e-300", "2e-300", 0.0),
        ("99999999999999991611392", "1e23", 0.0),  # the float 1e23 is not 10^23
        ("100000000000000000000000", "1e23", 1.0),
        ("-\\frac{1}{2}", "-0.5", 1.0),
    ],
)
def test_exact_grading_regressions(answer, gold, score):
    """The examples the property found (and the classic float traps), kept explicit."""
    assert MathReward()([f"\\boxed{{{answer}}}"], [gold]) == [score]


@pytest.mark.parametrize(
    ("literal", "gold"),
    [
        ("1e23", "1e23"),
        ("1e400", "1e400"),
        ("142.0", "142"),
        ("0.1000000000000000055511151231257827", "0.1000000000000000055511151231257827"),
        ("2.50", "2.50"),
    ],
)
def test_json_number_golds_keep_their_literal(tmp_path, literal, gold):
    """Before: 1e23 -> '99999999999999991611392' (through int(float)), 1e400 -> refused as inf, the long
    decimal -> '0.1'."""
    path = tmp_path / "g.jsonl"
    path.write_text(f'{{"problem": "p", "answer": {literal}}}\n')
    assert [p.answer for p in load_problems(str(path))] == [gold]
    (tmp_path / "g.json").write_text(f'[{{"problem": "p", "answer": {literal}}}]')
    assert [p.answer for p in load_problems(str(tmp_path / "g.json"))] == [gold]

"""The one equality of answers: when an answer equals a gold, for every grader.

The reward (both grading modes, so training and every evaluation grading mode), ``trlvr data check``'s
gold reading and the prefix protocol's answer-leakage control (`trlvr.eval.prefix`) all decide through
this module; nothing else compares answers. The rule, in order:

1. Both texts are read through :func:`~trlvr.rewards.mathtext.normalize_math` (Unicode forms) and then
   :func:`~trlvr.rewards.boxed.normalize` (``$``, ``\\left``, spaces, ``\\dfrac``...): :func:`answer_form`.
2. Equal forms are equal.
3. Where both forms are numbers (:func:`~trlvr.rewards.boxed.exact_number`: integers, decimals,
   scientific notation ``1.5e10`` / ``1.5\\times10^{10}``, thousands commas, ``p/q``, ``\\frac{p}{q}``,
   percentages ``5%`` = 1/20), their exact values are compared: never through a float, so ``0.333``
   is not ``1/3`` and ``1.0e3`` is ``1000``.
4. Otherwise math-verify compares them symbolically (in the grading pool, under a hard timeout:
   ``trlvr.rewards._worker``), each side handed over as :func:`symbolic_form`: a number in the LaTeX
   math-verify reads exactly as written (it reads ``1.5e10`` as 1.5*e*10 and ``5\\%`` in running text as 5),
   anything else as normalised text.

Steps 1-3 are :func:`exact_verdict` (pure, in-process); step 4 runs in the worker, which calls
:func:`exact_verdict` again on the answer it extracted from a box-less tail. :func:`mark_numbers`
rewrites the numbers of a box-less tail into that LaTeX so math-verify's extraction reads them whole.
``trlvr.rewards.math_reward.equivalent`` is the whole rule for one pair.

Pure and linear in its input.
"""

from __future__ import annotations

import re
from decimal import Decimal  # noqa: F401  (doctests)
from fractions import Fraction

from trlvr.rewards.boxed import _same, _small, exact_number, normalize
from trlvr.rewards.mathtext import normalize_math

PLAIN_DIGITS = 30  # a decimal within 10^-30..10^30 is written out in full for math-verify; beyond, m\times10^{e}

# A number as written in running text: \frac{p}{q}, or digits (thousands commas, a decimal part) with an
# exponent (e-notation or \times10^{e}), a ratio /q and a percent sign; a sign where one can stand.
# Linear: possessive runs, and no match starts at a group of three digits inside a run of thousands groups
# (1,234,567 is read once, from its first digit; "1,2" is two numbers).
NUMBER_TOKEN = re.compile(
    r"(?<![\w.])(?:(?<!\d,)|(?!\d{3}(?!\d)))-?(?:\\frac\{-?\d+\}\{-?\d+\}"
    r"|(?:\d{1,3}(?:,\d{3})++(?![\d,])|\d++)(?:\.\d++)?"
    r"(?:[eE][+-]?\d+(?!\w)|\s*\\(?:times|cdot)\s*10\^(?:\{[+-]?\d+\}|\d))?"
    r"(?:/\d+(?!\d|[.,]\d))?(?:\\?%)?)(?!\d)"
)


def answer_form(text: str) -> str:
    """The text an answer or a gold is compared as: ``normalize(normalize_math(text))``.

    >>> answer_form(" $\\u2212\\\\dfrac{1}{2}$. ")
    '-\\\\frac{1}{2}'
    """
    return normalize(normalize_math(str(text)))


def number_of(text: str):
    """The exact value of ``text`` when it is a number (a Decimal or a Fraction), else None.

    >>> number_of("2.5e-3") == number_of("0.0025") == number_of("\\\\frac{1}{400}"), number_of("x")
    (True, None)
    """
    return exact_number(answer_form(text))


def fraction_of(text: str) -> Fraction | None:
    """:func:`number_of` as a Fraction (None for a non-number, or one too large to expand: 1e99999).

    >>> fraction_of("5%"), fraction_of("1e99999")
    (Fraction(1, 20), None)
    """
    v = number_of(text)
    return Fraction(v) if v is not None and _small(v) else None


def exact_verdict(answer: str, gold: str) -> bool | None:
    """True/False where the rule decides without math-verify (equal forms; two numbers, compared
    exactly), else None: the pair goes to math-verify.

    >>> exact_verdict("1.0e3", "1000"), exact_verdict("0.333", "1/3"), exact_verdict("5%", "0.05")
    (True, False, True)
    >>> exact_verdict("2.5\\\\times 10^{-3}", "0.0025"), exact_verdict("x^2", "x^{2}") is None
    (True, True)
    """
    a, g = answer_form(answer), answer_form(gold)
    if a and a == g:
        return True
    x, y = exact_number(a), exact_number(g)
    if x is not None and y is not None:
        return _same(x, y)
    return None


def latex_number(value) -> str:
    """A number's exact value as LaTeX that math-verify reads as exactly that value.

    >>> latex_number(Decimal("1.5e10")), latex_number(Fraction(-7, 2)), latex_number(Decimal("2E-40"))
    ('15000000000', '-\\\\frac{7}{2}', '2\\\\times10^{-40}')
    """
    if isinstance(value, Fraction):
        sign, v = ("-" if value < 0 else ""), abs(value)
        return f"{sign}{v.numerator}" if v.denominator == 1 else f"{sign}\\frac{{{v.numerator}}}{{{v.denominator}}}"
    sign, digit_tuple, exp = value.as_tuple()  # exact: Decimal.normalize() would round to the context
    digits = "".join(map(str, digit_tuple)).lstrip("0")
    if not digits:
        return "0"
    while digits.endswith("0"):
        digits, exp = digits[:-1], exp + 1
    sign = "-" if sign else ""
    if abs(len(digits) - 1 + exp) > PLAIN_DIGITS:
        return f"{sign}{digits}\\times10^{{{exp}}}"
    if exp >= 0:
        return f"{sign}{digits}{'0' * exp}"
    digits = digits.rjust(1 - exp, "0")
    return f"{sign}{digits[:exp]}.{digits[exp:]}"


def symbolic_form(text: str) -> str:
    """What math-verify is handed for ``text``: a number's :func:`latex_number`, else ``normalize_math(text)``.

    >>> symbolic_form("1.5e10"), symbolic_form("5\\\\%"), symbolic_form("\\\\sin x")
    ('15000000000', '\\\\frac{1}{20}', '\\\\sin x')
    """
    v = number_of(text)
    return normalize_math(str(text)).strip() if v is None else latex_number(v)


def mark_numbers(text: str) -> str:
    """``text`` with every number math-verify would misread in running text (scientific notation,
    percentages, ratios, ``\\frac``) rewritten as ``$<latex_number>$``; plain integers and decimals stay.

    >>> mark_numbers("so we get 1.0e3, i.e. 5% of 2/3, not 7.")
    'so we get $1000$, i.e. $\\\\frac{1}{20}$ of $\\\\frac{2}{3}$, not 7.'
    """

    def one(m: re.Match) -> str:
        tok = m.group()
        if re.fullmatch(r"-?\d+(?:\.\d+)?", tok):
            return tok
        v = exact_number(normalize(tok))
        return tok if v is None else f"${latex_number(v)}$"

    return NUMBER_TOKEN.sub(one, normalize_math(text))


def numbers_in(text: str) -> list[Fraction]:
    """Every number written in ``text`` (after ``normalize_math``), exactly, read as :func:`number_of`
    reads an answer. A minus after a letter, digit or closing bracket is an operator, not a sign.

    >>> [str(x) for x in numbers_in("4 + 3 = 7, so 1,200 (-2) and 2.50; x3 3-5, 1e3 or 5%")]
    ['4', '3', '7', '1200', '-2', '5/2', '3', '5', '1000', '1/20']
    """
    text = normalize_math(text)
    out = []
    for m in NUMBER_TOKEN.finditer(text):
        tok = m.group()
        if tok.startswith("-") and m.start() > 0 and (text[m.start() - 1].isalnum() or text[m.start() - 1] in ")]}"):
            tok = tok[1:]  # "3-5": a minus between operands
        v = exact_number(normalize(tok))
        if v is not None and _small(v):
            out.append(Fraction(v))
    return out

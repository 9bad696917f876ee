"""The one equality of answers: when an answer equals a gold under the ``trlvr`` grader.

The reward (both grading modes, so training and every evaluation grading mode), ``trlvr data check``'s
gold reading and the prefix protocol's answer-leakage control (`trlvr.eval.prefix`) all decide through
this module; nothing else compares answers. (The authors' graders, `trlvr.rewards.graders`, are theirs.)
The rule, in order:

1. Both texts are read through :func:`~trlvr.rewards.mathtext.normalize_math` (Unicode forms, ``°`` as
   ``^\\circ``), :func:`~trlvr.rewards.boxed.normalize` (``$``, ``\\left``, spaces, ``\\dfrac``...) and
   :func:`drop_units`: :func:`answer_form`. Units, as competition answer keys write them: a dollar sign
   ``\\$`` and a degree sign (``^\\circ``, ``^{\\circ}``, ``\\degree``, ``°``) are dropped (``\\$18.90`` is
   ``18.90``, ``30^\\circ`` is ``30``); ``\\text{\\%}`` is ``\\%``; a number followed by a unit in text
   (``7\\text{ marbles}``, ``12\\text{ cm}^3``) is the number.
2. Equal forms are equal.
3. An ordered pair or interval (``(3, 5)``, ``[3, 5)``) never equals a set (``\\{3, 5\\}``).
4. Where both forms are numbers (:func:`~trlvr.rewards.boxed.exact_number`: integers, decimals,
   scientific notation ``1.5e10`` / ``1.5\\times10^{10}`` / ``1.5\\cdot10^{10}``, powers of ten ``10^{-7}``,
   thousands commas, ``p/q``, ``\\frac{p}{q}`` of any of these), their exact values are compared: never
   through a float, so ``0.333`` is not ``1/3``, ``1.0e3`` is ``1000`` and ``10^{-7}`` is not ``1e-8``.
   Percent: where both or neither carry a percent sign it is dropped; where one side does, ``x\\%``
   equals ``x`` (the answer key's ``20`` for ``20\\%``) and equals its value ``x/100`` (``5\\%`` = ``0.05``).
5. Otherwise math-verify reads both (in the grading pool, under a hard timeout: ``trlvr.rewards._worker``),
   each side handed over as :func:`symbolic_form`: a number in the LaTeX math-verify reads exactly as
   written (it reads ``1.5e10`` as 1.5*e*10 and ``5\\%`` in running text as 5), anything else as
   normalised text with its units dropped. Where it reads both as numbers (``\\sqrt{2}``, ``2^{-30}``,
   ``\\pi``), they are compared exactly, or at a relative tolerance of :data:`REL_TOL` where one is
   irrational or a float, never at math-verify's 6 decimal places (under which ``10^{-7}`` was ``10^{-8}``);
   anything else (expressions, sets, intervals, equations) math-verify's ``verify`` decides.

Steps 1-4 are :func:`exact_verdict` (pure, in-process); step 5 runs in the worker, which calls
:func:`exact_verdict` again on the answer it extracted from a box-less tail. :func:`mark_numbers`
rewrites the numbers of a box-less tail into that LaTeX so math-verify's extraction reads them whole.
``trlvr.rewards.math_reward.equivalent`` is the whole rule for one pair.

Pure and linear in its input.
"""

from __future__ import annotations

import re
from decimal import Decimal  # noqa: F401  (doctests)
from fractions import Fraction

from trlvr.rewards.boxed import _close_of, _same, _small, exact_number, normalize
from trlvr.rewards.mathtext import normalize_math

REL_TOL = (
    1e-9  # two numbers math-verify reads, one of them irrational or a float: equal within this, relative
)
PLAIN_DIGITS = (
    30  # a decimal within 10^-30..10^30 is written out in full for math-verify; beyond, m\times10^{e}
)

# A number as written in running text: \frac{p}{q} (p, q integers or powers of ten), a power of ten 10^{k}, or
# digits (thousands commas, a decimal part) with an exponent (e-notation or \times10^{e}), a ratio /q and a
# percent sign; a sign where one can stand. Linear: possessive runs, and no match starts at a group of three
# digits inside a run of thousands groups (1,234,567 is read once, from its first digit; "1,2" is two
# numbers).
NUMBER_TOKEN = re.compile(
    r"(?<![\w.])(?:(?<!\d,)|(?!\d{3}(?!\d)))-?"
    r"(?:\\frac\{-?(?:10\^(?:\{[+-]?\d+\}|\d)|\d+)\}\{-?(?:10\^(?:\{[+-]?\d+\}|\d)|\d+)\}"
    r"|10\^(?:\{[+-]?\d+\}|\d)"
    r"|(?:\d{1,3}(?:,\d{3})++(?![\d,])|\d++)(?:\.\d++)?"
    r"(?:[eE][+-]?\d+(?!\w)|\s*\\(?:times|cdot)\s*10\^(?:\{[+-]?\d+\}|\d))?"
    r"(?:/\d+(?!\d|[.,]\d))?(?:\\?%)?)(?!\d)"
)


_DEGREES = ("^{\\circ}", "^\\circ", "^{\\degree}", "^\\degree", "\\degree")
_TEXT_UNIT = re.compile(r"\\(?:text|textrm|mathrm|mbox)\{")
_UNIT_POWER = re.compile(r"(?:\^\{?\d\}?)?")


def drop_units(s: str) -> str:
    """``s`` without the units answer keys write: ``\\$``, degree signs, ``\\text{\\%}`` as ``\\%``, and
    a trailing ``\\text{..}`` unit (with an optional power) after a number.

    >>> (drop_units("\\\\$18.90"), drop_units("30^\\\\circ"), drop_units("20\\\\text{\\\\%}"),
    ...     drop_units("7\\\\text{marbles}"))
    ('18.90', '30', '20\\\\%', '7')
    >>> drop_units("\\\\text{(C)}"), drop_units("x\\\\text{cm}")
    ('\\\\text{(C)}', 'x\\\\text{cm}')
    """
    s = s.replace("\\$", "").replace("\\text{\\%}", "\\%")
    for deg in _DEGREES:
        s = s.replace(deg, "")
    for m in _TEXT_UNIT.finditer(s):  # the first \text{ whose group ends the text (an optional ^2 after it)
        end = _close_of(s, m.end())
        if end < 0:
            break
        rest = s[end + 1 :]
        if _UNIT_POWER.fullmatch(rest) and m.start() > 0:
            head = s[: m.start()]
            if exact_number(head) is not None:
                return head
        break
    return s


def answer_form(text: str) -> str:
    """The text an answer or a gold is compared as: ``drop_units(normalize(normalize_math(text)))``.

    >>> (answer_form(" $\\u2212\\\\dfrac{1}{2}$. "), answer_form("30\\u00b0"),
    ...     answer_form("12 \\\\text{ cm}^3"))
    ('-\\\\frac{1}{2}', '30', '12')
    """
    return drop_units(normalize(normalize_math(str(text))))


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


def _percent(form: str) -> tuple[str, bool]:
    """(the form without a trailing percent sign, whether it had one)."""
    for pct in ("\\%", "%"):
        if form.endswith(pct) and len(form) > len(pct) and not form[: -len(pct)].endswith("%"):
            return form[: -len(pct)], True
    return form, False


def _shape(form: str) -> str | None:
    """ "set" for ``\\{..\\}``, "tuple" for ``(..)`` / ``[..]`` with a comma (pair, interval), else None."""
    if form.startswith("\\{") and form.endswith("\\}"):
        return "set"
    if form[:1] in "([" and form[-1:] in ")]" and "," in form:
        return "tuple"
    return None


def exact_verdict(answer: str, gold: str) -> bool | None:
    """True/False where the rule decides without math-verify (equal forms; a pair against a set; two
    numbers, compared exactly), else None: the pair goes to math-verify.

    >>> exact_verdict("1.0e3", "1000"), exact_verdict("0.333", "1/3"), exact_verdict("5%", "0.05")
    (True, False, True)
    >>> exact_verdict("2.5\\\\times 10^{-3}", "0.0025"), exact_verdict("x^2", "x^{2}") is None
    (True, True)
    >>> (exact_verdict("10^{-7}", "1e-8"), exact_verdict("20\\\\%", "20"),
    ...     exact_verdict("\\\\{3, 5\\\\}", "(3, 5)"))
    (False, True, False)
    """
    a, g = answer_form(answer), answer_form(gold)
    if a and a == g:
        return True
    if {_shape(a), _shape(g)} == {"set", "tuple"}:
        return False
    (a_bare, a_pct), (g_bare, g_pct) = _percent(a), _percent(g)
    if a_pct == g_pct:
        x, y = exact_number(a_bare), exact_number(g_bare)
        return _same(x, y) if x is not None and y is not None else None
    x, y = exact_number(a_bare), exact_number(g_bare)
    if x is None or y is None:
        return None
    pct, other = (x, y) if a_pct else (y, x)
    return _same(pct, other) or (_small(pct) and _small(other) and Fraction(pct) / 100 == Fraction(other))


def latex_number(value) -> str:
    """A number's exact value as LaTeX that math-verify reads as exactly that value.

    >>> latex_number(Decimal("1.5e10")), latex_number(Fraction(-7, 2)), latex_number(Decimal("2E-40"))
    ('15000000000', '-\\\\frac{7}{2}', '2\\\\times10^{-40}')
    """
    if isinstance(value, Fraction):
        sign, v = ("-" if value < 0 else ""), abs(value)
        return (
            f"{sign}{v.numerator}"
            if v.denominator == 1
            else f"{sign}\\frac{{{v.numerator}}}{{{v.denominator}}}"
        )
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
    """What math-verify is handed for ``text``: a number's :func:`latex_number`, else ``normalize_math(text)``
    with its units dropped (:func:`drop_units`).

    >>> symbolic_form("1.5e10"), symbolic_form("5\\\\%"), symbolic_form("\\\\sin x")
    ('15000000000', '\\\\frac{1}{20}', '\\\\sin x')
    """
    v = number_of(text)
    return drop_units(normalize_math(str(text)).strip()) if v is None else latex_number(v)


def mark_numbers(text: str) -> str:
    """``text`` with every number math-verify would misread in running text (scientific notation,
    percentages, ratios, ``\\frac``, powers of ten) rewritten as ``$<latex_number>$``, a decimal percentage
    as ``$<latex_number>\\%$`` (math-verify reads it as a hundredth; the percent rule needs the sign);
    plain integers and decimals stay. Dollar signs ``\\$`` are dropped (a unit; math-verify finds no answer
    in "costs \\$18.90").

    >>> mark_numbers("so we get 1.0e3, i.e. 5% of 2/3, not 7 or 10^{23}.")
    'so we get $1000$, i.e. $5\\\\%$ of $\\\\frac{2}{3}$, not 7 or $100000000000000000000000$.'
    """

    def one(m: re.Match) -> str:
        tok = m.group()
        if re.fullmatch(r"-?\d+(?:\.\d+)?", tok):
            return tok
        bare, pct = _percent(normalize(tok))
        v = exact_number(bare)
        if v is not None and pct and not isinstance(v, Fraction):
            return f"${latex_number(v)}\\%$"
        v = exact_number(normalize(tok))
        return tok if v is None else f"${latex_number(v)}$"

    return NUMBER_TOKEN.sub(one, normalize_math(text).replace("\\$", ""))


def number_tokens(text: str) -> list[str]:
    """Every number written in ``text`` (after ``normalize_math``) as written, in order. A minus after a
    letter, digit or closing bracket is an operator, not a sign.

    >>> number_tokens("x3 3-5, 10^{23} or 5%")
    ['3', '5', '10^{23}', '5%']
    """
    text = normalize_math(text)
    out = []
    for m in NUMBER_TOKEN.finditer(text):
        tok = m.group()
        if (
            tok.startswith("-")
            and m.start() > 0
            and (text[m.start() - 1].isalnum() or text[m.start() - 1] in ")]}")
        ):
            tok = tok[1:]  # "3-5": a minus between operands
        out.append(tok)
    return out


def numbers_in(text: str) -> list[Fraction]:
    """Every number written in ``text`` (:func:`number_tokens`), exactly, read as :func:`number_of` reads
    an answer.

    >>> [str(x) for x in numbers_in("4 + 3 = 7, so 1,200 (-2) and 2.50; x3 3-5, 1e3 or 5%")]
    ['4', '3', '7', '1200', '-2', '5/2', '3', '5', '1000', '1/20']
    """
    out = []
    for tok in number_tokens(text):
        v = exact_number(normalize(tok))
        if v is not None and _small(v):
            out.append(Fraction(v))
    return out

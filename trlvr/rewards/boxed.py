"""Pure string helpers for answer grading: boxed-answer extraction, cheap normalisation and the exact
reading of numbers (the one equality of answers that uses them is ``equivalence.py``; the pre-screen for
inputs that stall sympy is in ``screen.py``).

Nothing here parses mathematics or evaluates anything; every function is linear time in
its input (single passes, ``str.find`` jumps, no backtracking regexes), so it is safe to
run in the trainer process on arbitrary model output.
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation
from fractions import Fraction

BOX_COMMANDS = ("\\boxed", "\\fbox")
# Only the end of a box-less completion can hold its final answer; math-verify scans the
# whole string with many regexes, so hand it a bounded tail.
TAIL_CHARS = 2000
_BRACES = re.compile(r"\\.|[{}]", re.DOTALL)  # an escape pair, or a brace; no backtracking
# A box opener, an escape pair (skipped), or a brace; alternatives are tried in order.
_TOKENS = re.compile(r"\\(?:boxed|fbox)(?![A-Za-z]) *\{|\\.|[{}]", re.DOTALL)
_INT = re.compile(r"-?\d{1,40}")


def _box_open(text: str, i: int) -> int:
    """If ``text[i:]`` starts a box command followed by '{', return the index after '{', else -1."""
    for cmd in BOX_COMMANDS:
        if text.startswith(cmd, i):
            j = i + len(cmd)
            if j < len(text) and text[j].isalpha():  # e.g. \boxedfoo is another macro
                return -1
            while j < len(text) and text[j] == " ":
                j += 1
            return j + 1 if j < len(text) and text[j] == "{" else -1
    return -1


def _close_of(text: str, start: int) -> int:
    """Index of the '}' closing the group opened just before ``start``; -1 if unbalanced."""
    depth = 1
    for m in _BRACES.finditer(text, start):
        tok = m.group()
        if tok == "{":
            depth += 1
        elif tok == "}":
            depth -= 1
            if depth == 0:
                return m.start()
    return -1


def extract_boxed(text: str) -> str | None:
    """Content of the last complete ``\\boxed{...}`` (or ``\\fbox{...}``) in ``text``.

    Braces are matched with LaTeX escapes (``\\{``, ``\\}``) skipped. Linear time: the last
    box is tried first; only if it is unclosed (truncated output) does one full pass look
    for the latest-starting complete box.

    >>> extract_boxed(r"so \\boxed{\\frac{1}{2}} or \\boxed{\\{1, 2\\}}")
    '\\\\{1, 2\\\\}'
    >>> extract_boxed(r"\\boxed{12") is None
    True
    """
    last = max(text.rfind(cmd) for cmd in BOX_COMMANDS)
    if last < 0:
        return None
    start = _box_open(text, last)
    if start >= 0:
        end = _close_of(text, start)
        if end >= 0:
            return text[start:end]
    # Fallback: one regex pass with a stack of open groups; box groups remember their start.
    stack: list[int] = []
    best: tuple[int, int] | None = None
    for m in _TOKENS.finditer(text):
        tok = m.group()
        if tok == "{":
            stack.append(-1)
        elif tok == "}":
            if stack:
                s = stack.pop()
                if s >= 0 and (best is None or s > best[0]):
                    best = (s, m.start())
        elif tok.endswith("{") and len(tok) > 2:
            stack.append(m.end())  # \boxed{ or \fbox{
    return None if best is None else text[best[0] : best[1]]


_DROP = ("\\left", "\\right", "\\!", "\\,", "\\;", "\\:", "\\displaystyle", " ", "\t", "\n")


def normalize(s: str) -> str:
    """Trivial normalisation for the exact-match fast path (never changes meaning).

    >>> normalize(r" $\\dfrac{1}{2}$. ")
    '\\\\frac{1}{2}'
    """
    s = s.strip().rstrip(".").strip()
    while len(s) >= 2 and s[0] == "$" and s[-1] == "$":
        s = s[1:-1].strip()
    for tok in _DROP:
        s = s.replace(tok, "")
    s = s.replace("\\dfrac", "\\frac").replace("\\tfrac", "\\frac")
    return s.rstrip(".")


_DECIMAL = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")
_THOUSANDS = re.compile(r"[+-]?\d{1,3}(?:,\d{3})+(?:\.\d+)?")  # 1,234,567.5 (math-verify reads it so too)
# LaTeX scientific notation after normalize (spaces gone): 1.5\times10^{10}, 2\cdot10^-3, 3*10^{4}
_LATEX_SCI = re.compile(r"([+-]?(?:\d+\.?\d*|\.\d+))(?:\\times|\\cdot|\*)10\^(?:\{([+-]?\d+)\}|([+-]?\d))")
_RATIO = re.compile(r"([+-]?\d+)/([+-]?\d+)")
_POW10 = re.compile(r"([+-]?)10\^(?:\{([+-]?\d+)\}|([+-]?\d))")  # a power of ten: 10^{-7}, 10^3
_FRAC_OPEN = re.compile(r"(-?)\\frac\{")
FRAC_DEPTH = 3  # \frac{..}{..} of numbers read exactly, nested this deep (\frac{1}{\frac{1}{10^{7}}})
MAX_EXPONENT = 10_000  # beyond it an exact fraction would be a number of that many digits: Decimals only


def exact_number(s: str, depth: int = 0):
    """The exact value of a plain number: an integer, a decimal, scientific notation ("1.5e-300",
    "1.5\\times10^{-300}", "2\\cdot10^{3}"), a power of ten ("10^{-7}"), thousands commas ("1,234"), a
    ratio "p/q", "\\frac{p}{q}" of any of these ("\\frac{1}{10^{7}}"), any of them as a percentage ("5%",
    "5\\%": a hundredth of it), after :func:`normalize`; a Decimal or a Fraction, None for anything else
    (math-verify's). Never rounds.

    >>> exact_number("1.50") == exact_number("3/2") == exact_number(r"\\frac{3}{2}") == exact_number("15e-1")
    True
    >>> (exact_number(r"150\\%") == exact_number("1.5") == exact_number(r"0.15\\times10^{1}"),
    ...     exact_number("5%"))
    (True, Fraction(1, 20))
    >>> (exact_number("10^{-7}"),
    ...     exact_number(r"\\frac{1}{10^{7}}") == exact_number("1e-7") != exact_number("1e-8"))
    (Decimal('1E-7'), True)
    """
    if len(s) > 1000:
        return None
    for pct in ("\\%", "%"):
        if s.endswith(pct) and s != pct:
            inner = s[: -len(pct)]
            v = None if inner.endswith("%") else exact_number(inner)
            return None if v is None else Fraction(v) / 100 if _small(v) else None
    if m := _LATEX_SCI.fullmatch(s):
        s = f"{m.group(1)}e{m.group(2) or m.group(3)}"
    elif m := _POW10.fullmatch(s):
        s = f"{m.group(1)}1e{m.group(2) or m.group(3)}"
    elif _THOUSANDS.fullmatch(s):
        s = s.replace(",", "")
    if _DECIMAL.fullmatch(s):
        try:
            return Decimal(s)
        except InvalidOperation:
            return None
    if m := _RATIO.fullmatch(s):
        num, den = int(m.group(1)), int(m.group(2))
        return None if den == 0 else Fraction(num, den)
    return _frac_number(s, depth)


def _frac_number(s: str, depth: int):
    """``\\frac{p}{q}`` (an optional sign before it) of two numbers :func:`exact_number` reads, exactly."""
    m = _FRAC_OPEN.match(s)
    if m is None or depth >= FRAC_DEPTH:
        return None
    end = _close_of(s, m.end())
    if end < 0 or s[end + 1 : end + 2] != "{":
        return None
    end2 = _close_of(s, end + 2)
    if end2 != len(s) - 1:
        return None
    num, den = s[m.end() : end], s[end + 2 : end2]
    if num.endswith("%") or den.endswith("%"):
        return None
    p, q = exact_number(num, depth + 1), exact_number(den, depth + 1)
    if p is None or q is None or not (_small(p) and _small(q)) or q == 0:
        return None
    v = Fraction(p) / Fraction(q)
    return -v if m.group(1) else v


def _small(v) -> bool:
    """Whether ``v`` can be made an exact Fraction without expanding a huge power of ten."""
    return not (isinstance(v, Decimal) and (not v.is_finite() or abs(v.adjusted()) > MAX_EXPONENT))


def _same(x, y) -> bool:
    """Exact equality of two Decimals or Fractions (huge exponents compared as Decimals, never expanded)."""
    if isinstance(x, Decimal) and isinstance(y, Decimal):
        return x == y  # exact, whatever the context's precision
    for d in (x, y):
        if isinstance(d, Decimal) and abs(d.adjusted()) > MAX_EXPONENT:
            return False  # a fraction of integers below 1000 characters cannot be that large or small
    return Fraction(x) == Fraction(y)


def tail(text: str, n: int = TAIL_CHARS) -> str:
    """The last ``n`` characters of ``text`` (where a box-less final answer would be)."""
    return text[-n:] if len(text) > n else text

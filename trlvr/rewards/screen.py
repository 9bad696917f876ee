"""The pre-screen: refuse answer strings that would stall sympy before math-verify sees them.

sympy evaluates integer expressions eagerly: ``999999^{999999}`` is a 6-million-digit integer,
``(10^{6})!`` and ``\\binom{10^6}{500000}`` are worse, and deeply nested brackets make
math-verify's parser slow down exponentially. The worker timeout is the hard bound; this
screen keeps a batch of such answers from holding every worker for the full timeout.

It knows magnitudes, not mathematics: a tiny parser bounds ``log10 |value|`` of the purely
numeric sub-expressions around each ``^``, ``!`` and ``\\binom`` (digits, + - * / ^, braces,
parentheses), and refuses what would have more than :data:`MAX_DIGITS` digits. Anything with a
symbol in it (``e^{x^2}``, ``(n+1)!``) has no numeric bound and passes. Every function is
linear in its input apart from the bounded recursion of the parser (depth is checked first);
nothing is evaluated beyond float arithmetic on logarithms.
"""

from __future__ import annotations

import math
import re

MAX_DIGITS = 100_000  # measured: 7^{10^6} (845k digits) grades in 0.2 s, 999999^{999999} (6M) stalls
MAX_SYMBOLIC_EXPONENT = 1e6  # x^{n}: sympy keeps it symbolic, but expansions grow with n
MAX_FACTORIAL = 1e4  # n! for n >= 10^4 (35k+ digits) is refused
MAX_DEPTH = 20  # any brackets, \frac{}{} and \sqrt{} arguments included
MAX_BRACKET_DEPTH = 10  # ( [ and bare { only: math-verify's time doubles every ~2 levels of these
_LOG2 = math.log10(2)
_TOKEN = re.compile(r"\d+(?:\.\d*)?|\.\d+|\\left\(|\\right\)|\\cdot|\\times|[-+*/^{}()]")
_NUMERIC_JUNK = re.compile(r"\s+")


def _num_log10(tok: str) -> float:
    """log10 of max(1, value) of a decimal literal, without building huge floats."""
    whole = tok.split(".", 1)[0].lstrip("0")
    if len(whole) > 15:
        return len(whole) - 1 + math.log10(int(whole[:15]) / 10**14)
    return math.log10(max(1.0, float(tok)))


class _Bound:
    """Recursive-descent bound of log10 |value| for a numeric expression; None if not numeric."""

    def __init__(self, tokens: list[str]) -> None:
        self.toks, self.i = tokens, 0

    def peek(self) -> str | None:
        return self.toks[self.i] if self.i < len(self.toks) else None

    def take(self) -> str:
        self.i += 1
        return self.toks[self.i - 1]

    def expr(self) -> float:  # sum: |a +- b| <= 2 max(|a|, |b|)
        total = self.term()
        while self.peek() in ("+", "-"):
            self.take()
            total = max(total, self.term()) + _LOG2
        return total

    def term(self) -> float:  # product; a quotient is bounded by its numerator
        total = self.power()
        while self.peek() in ("*", "\\cdot", "\\times", "/"):
            op = self.take()
            right = self.power()
            total = total if op == "/" else total + right
        return total

    def power(self) -> float:  # right-associative: a^b^c = a^(b^c)
        base = self.unary()
        if self.peek() != "^":
            return base
        self.take()
        exp = self.power()
        return 0.0 if base == 0.0 else (math.inf if exp > 300 else base * 10**exp)

    def unary(self) -> float:
        while self.peek() in ("-", "+"):
            self.take()
        tok = self.take() if self.peek() is not None else ""
        if tok in ("{", "(", "\\left("):
            inner = self.expr()
            if self.peek() not in ("}", ")", "\\right)"):
                raise ValueError("unbalanced")
            self.take()
            return inner
        if tok[:1].isdigit() or tok[:1] == ".":
            return _num_log10(tok)
        raise ValueError(f"not numeric: {tok!r}")


def log10_bound(s: str) -> float | None:
    """Upper bound of log10 max(1, |value|) of a purely numeric expression, else None.

    >>> log10_bound("10^{6}"), log10_bound("x^2"), log10_bound("9^{9^{9}}") > 3e8
    (6.0, None, True)
    """
    s = _NUMERIC_JUNK.sub("", s)
    if not s:
        return None
    tokens = _TOKEN.findall(s)
    if "".join(tokens) != s:  # a letter, a command, '!': not a plain number
        return None
    parser = _Bound(tokens)
    try:
        value = parser.expr()
    except (ValueError, IndexError, OverflowError):
        return None
    return value if parser.i == len(tokens) else None


def _group_spans(s: str) -> tuple[dict[int, int], int, int]:
    """Each '{' '(' '[' index -> its closer's index; max nesting depth; max depth of brackets.

    "Brackets" are ( [ and bare braces (a '{' that is not a command's argument: not after a
    letter, '}', '^' or '_'), the groups math-verify's parser is slowest on.
    """
    pairs = {"}": "{", ")": "(", "]": "["}
    stack: list[tuple[int, bool]] = []
    match: dict[int, int] = {}
    depth = brackets = max_brackets = 0
    prev = ""
    for i, c in enumerate(s):
        if c in "{([":
            bare = c != "{" or not (prev.isalpha() or prev in "}^_")
            stack.append((i, bare))
            brackets += bare
            depth, max_brackets = max(depth, len(stack)), max(max_brackets, brackets)
        elif c in pairs and stack and s[stack[-1][0]] == pairs[c]:
            j, bare = stack.pop()
            brackets -= bare
            match[j] = i
        if not c.isspace():
            prev = c
    return match, depth, max_brackets


def _operand_before(s: str, i: int, closer_to_open: dict[int, int]) -> str | None:
    """The literal or bracketed group that ends just before index ``i`` (spaces skipped)."""
    k = i - 1
    while k >= 0 and s[k] == " ":
        k -= 1
    if k < 0:
        return None
    if s[k] in "})]" and k in closer_to_open:
        return s[closer_to_open[k] + 1 : k]
    j = k
    while j >= 0 and (s[j].isdigit() or s[j] == "."):
        j -= 1
    return s[j + 1 : k + 1] if j < k else None


def _exponent_after(s: str, i: int, match: dict[int, int]) -> tuple[str, int]:
    """(exponent text, index after it) for the '^' at ``i``: a group, a digit run or one char."""
    j = i + 1
    while j < len(s) and s[j] == " ":
        j += 1
    if j < len(s) and s[j] in "{(" and j in match:
        return s[j + 1 : match[j]], match[j] + 1
    k = j
    while k < len(s) and s[k].isdigit():
        k += 1
    k = max(k, j + 1)
    return s[j:k], k


def _power_reason(s: str, i: int, match: dict[int, int], closer_to_open: dict[int, int]) -> str | None:
    exp_text, after = _exponent_after(s, i, match)
    nxt = after
    while nxt < len(s) and s[nxt] == " ":
        nxt += 1
    if nxt < len(s) and s[nxt] == "^":
        return "power_tower"  # a^b^c without braces (invalid LaTeX; 9**9**9 in Python)
    exp = log10_bound(exp_text)
    if exp is None:
        # A symbolic exponent (e^{x^2}) passes; an unparseable numeric tower does not.
        has_letters = any(c.isalpha() for c in exp_text)
        return "power_tower" if "^" in exp_text and not has_letters else None
    exponent = math.inf if exp > 300 else 10**exp
    base_text = _operand_before(s, i, closer_to_open)
    base = log10_bound(base_text) if base_text else None
    if base is None:
        return "huge_power" if exponent > MAX_SYMBOLIC_EXPONENT else None
    return "huge_power" if base > 0 and exponent * base > MAX_DIGITS else None


def _factorial_reason(s: str, i: int, match: dict[int, int], closer_to_open: dict[int, int]) -> str | None:
    prev = i - 1
    while prev >= 0 and s[prev] == " ":
        prev -= 1
    if prev >= 0 and s[prev] == "!":
        return "nested_factorial"  # n!! : math-verify reads it as (n!)!
    if prev >= 0 and s[prev] in "})]" and prev in closer_to_open and "!" in s[closer_to_open[prev] : prev]:
        return "nested_factorial"
    operand = _operand_before(s, i, closer_to_open)
    bound = log10_bound(operand) if operand else None
    return "huge_factorial" if bound is not None and bound >= math.log10(MAX_FACTORIAL) else None


def _binomial_reason(s: str, match: dict[int, int]) -> str | None:
    """\\binom{n}{k} with numeric n, k and more than MAX_DIGITS digits (~ min(k, n-k) log10 n)."""
    for m in re.finditer(r"\\[dt]?binom *\{", s):
        open1 = m.end() - 1
        if open1 not in match:
            continue
        open2 = match[open1] + 1
        while open2 < len(s) and s[open2] == " ":
            open2 += 1
        if open2 not in match:
            continue
        n = log10_bound(s[open1 + 1 : match[open1]])
        k = log10_bound(s[open2 + 1 : match[open2]])
        if n is None or k is None:
            continue
        if n > 300 or k > 300:
            return "huge_binomial"
        top, low = 10**n, 10**k
        if min(low, max(0.0, top - low)) * n > MAX_DIGITS:
            return "huge_binomial"
    return None


def screen(s: str, max_chars: int = 1000) -> str | None:
    """Reason an answer string is refused before math-verify sees it, or None if it may go.

    Refused: longer than ``max_chars``; nesting deeper than :data:`MAX_DEPTH`, or brackets
    deeper than :data:`MAX_BRACKET_DEPTH`; powers, factorials and binomials of numeric
    arguments whose value has more than :data:`MAX_DIGITS` digits (power towers, ``(10^6)!``,
    ``999999^{999999}``); nested or double factorials; chained ``a^b^c`` without braces.
    Python's ``**`` counts as ``^``.

    >>> screen(r"9^{9^{9}}"), screen(r"((9!)!)"), screen(r"(10^{6})!"), screen(r"e^{x^2} + \\binom{10}{3}")
    ('huge_power', 'nested_factorial', 'huge_factorial', None)
    """
    if len(s) > max_chars:
        return "too_long"
    s = s.replace("**", "^")
    match, depth, brackets = _group_spans(s)
    if depth > MAX_DEPTH or brackets > MAX_BRACKET_DEPTH:
        return "too_deep"
    closer_to_open = {v: k for k, v in match.items()}
    for i, c in enumerate(s):
        reason = None
        if c == "^":
            reason = _power_reason(s, i, match, closer_to_open)
        elif c == "!":
            reason = _factorial_reason(s, i, match, closer_to_open)
        if reason is not None:
            return reason
    return _binomial_reason(s, match) if "binom" in s else None

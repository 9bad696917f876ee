"""Pure string helpers for answer grading: boxed-answer extraction, cheap normalisation,
the exact-match fast path and the pre-screen for inputs known to stall sympy.

Nothing here parses mathematics or evaluates anything; every function is linear time in
its input (single passes, ``str.find`` jumps, no backtracking regexes), so it is safe to
run in the trainer process on arbitrary model output.
"""

from __future__ import annotations

import re

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


def gold_answer(gold: str) -> str:
    """The gradable part of a gold string: text after GSM8K's ``####``, commas stripped.

    >>> gold_answer("She makes 9 * 2 = 18 dollars.\\n#### 1,018")
    '1018'
    >>> gold_answer(" \\\\frac{1}{2} ")
    '\\\\frac{1}{2}'
    """
    gold = str(gold)
    if "####" in gold:
        return gold.rsplit("####", 1)[1].strip().replace(",", "")
    return gold.strip()


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


def fast_grade(pred: str, gold: str) -> float | None:
    """1.0/0.0 when decidable without math-verify, else None.

    Decides exact matches after :func:`normalize`, and integer-vs-integer comparisons
    (where math-verify could only agree).

    >>> fast_grade(r"\\dfrac{1}{2}", r"\\frac{1}{2}"), fast_grade("17", "18"), fast_grade("0.5", "1/2")
    (1.0, 0.0, None)
    """
    p, g = normalize(pred), normalize(gold)
    if p == g and p:
        return 1.0
    if _INT.fullmatch(p) and _INT.fullmatch(g):
        return float(int(p) == int(g))
    return None


def _group_spans(s: str) -> tuple[dict[int, int], int]:
    """Map each '{' '(' '[' index to its closer's index, and the maximum nesting depth."""
    pairs = {"}": "{", ")": "(", "]": "["}
    stack: list[int] = []
    match: dict[int, int] = {}
    depth = 0
    for i, c in enumerate(s):
        if c in "{([":
            stack.append(i)
            depth = max(depth, len(stack))
        elif c in pairs and stack and s[stack[-1]] == pairs[c]:
            match[stack.pop()] = i
    return match, depth


def screen(s: str, max_chars: int = 1000, max_depth: int = 40) -> str | None:
    """Reason an answer string is refused before math-verify sees it, or None if it may go.

    Refused: longer than ``max_chars``; brackets nested deeper than ``max_depth``; power
    towers (an exponent that itself holds '^'); exponents with 7+ digit literals; nested or
    double factorials and factorials of 5+ digit literals. sympy evaluates such integers
    eagerly, which can take minutes or all memory. The worker timeout is the hard bound;
    this keeps a batch of adversarial answers from occupying every worker for the full timeout.

    >>> screen(r"9^{9^{9}}"), screen(r"((9!)!)"), screen(r"2^{10} + \\frac{3!}{2}")
    ('power_tower', 'nested_factorial', None)
    """
    if len(s) > max_chars:
        return "too_long"
    match, depth = _group_spans(s)
    if depth > max_depth:
        return "too_deep"
    carets = [0]  # prefix counts of '^' and '!' so "does this span contain one" is O(1)
    bangs = [0]
    for c in s:
        carets.append(carets[-1] + (c == "^"))
        bangs.append(bangs[-1] + (c == "!"))
    closer_to_open = {v: k for k, v in match.items()}
    n = len(s)
    for i, c in enumerate(s):
        if c == "^":
            j = i + 1
            while j < n and s[j] == " ":
                j += 1
            if j < n and s[j] in "{(" and j in match:
                body = s[j + 1 : match[j]]
                if carets[match[j]] - carets[j] > 0:
                    return "power_tower"
                if len(body.strip()) >= 7 and body.strip().isdigit():
                    return "huge_power"
            else:
                k = j
                while k < n and s[k].isdigit():
                    k += 1
                if k - j >= 7:
                    return "huge_power"
                nxt = k if k > j else j + 1
                while nxt < n and s[nxt] == " ":
                    nxt += 1
                if nxt < n and s[nxt] == "^":
                    return "power_tower"  # a^b^c written without braces
        elif c == "!":
            prev = i - 1
            while prev >= 0 and s[prev] == " ":
                prev -= 1
            if prev >= 0 and s[prev] == "!":
                return "nested_factorial"  # n!! : math-verify reads it as (n!)!
            if prev >= 0 and s[prev] in "})]" and prev in closer_to_open:
                if bangs[prev] - bangs[closer_to_open[prev]] > 0:
                    return "nested_factorial"
            k = prev
            while k >= 0 and s[k].isdigit():
                k -= 1
            if prev - k >= 5:
                return "huge_factorial"
    return None


def tail(text: str, n: int = TAIL_CHARS) -> str:
    """The last ``n`` characters of ``text`` (where a box-less final answer would be)."""
    return text[-n:] if len(text) > n else text

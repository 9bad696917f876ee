"""The ``authors`` grader: the Tandem RLVR release's reward, written here from its published behaviour.

The release (CSSLab/Tandem-RLVR 7ba85e0: ``train/tandem_grpo.sh``, ``train/vanilla_grpo.sh``,
``eval/common.py``) scores with ``reward/math_boxed_reward.compute_score``, which calls
``reward/hendrycks_math_grader.boxed_reward_fn(solution, str(gold), fast=False)``: the oat /
understand-r1-zero grader (sail-sg/understand-r1-zero ``understand_r1_zero/math_grader.py``), "modified by
the Tandem RLVR authors" (read from the fork ChrisG777/Tandem-RLVR at 5792118, whose history starts at the
release). Reward 1/0, no format score; any exception scores 0. Step by step:

- extraction (:func:`extract`): a completion without ``\\boxed`` scores 0; else the last ``\\boxed`` with
  its braces counted from the command (escaped braces count too), which must read ``\\boxed{...}``:
  ``\\boxed {x}``, ``\\boxed 5`` and an unclosed box score 0. A gold holding ``\\boxed`` is extracted alike.
- correct when any of three holds (:func:`is_equiv`):
  1. :func:`mathd_normalize` strings equal: a whole-answer ``\\text{..}`` unwrapped, then the Hendrycks
     ``strip_string`` (as `trlvr.rewards.authors_paper`) extended: ``array``/``bmatrix`` -> ``pmatrix``,
     ``\\neq \\leq \\geq`` -> ``\\ne \\le \\ge``, a trailing ``\\text{..}`` dropped (unless it is everything),
     the MathQA unit words deleted as whole words, twice (:data:`UNIT_TEXTS`, regex specials unescaped as
     upstream); a failure returns the unwrapped text.
  2. :func:`sympy_equal`: a second normaliser (:func:`normalize_sympy`; LaTeX read by pylatexenc) then equal
     strings, or element-wise for tuples and intervals (same brackets), literal for two fractions, an integer
     gold needing an integer answer, else ``sympy.simplify(gold - answer) == 0`` (refused with more than two
     distinct letters, ``^{``, ``^(``; the expression is parsed with ``sympy.parse_expr``, i.e. Python
     ``eval`` of at most two letters, in the grading worker).
  3. :func:`math_verify_equal` (``fast=False``): under a 1 s SIGALRM, the repetitive-string guard (a side
     over 128 characters whose suffix-LCP density exceeds 0.2 is refused), the second normaliser's strings
     compared again, then math-verify 0.9.0: each side without newlines, wrapped in ``$..$`` unless it has a
     ``$``, ``parse(side, extraction_config=(LatexExtractionConfig(boxed_match_priority=0),
     ExprExtractionConfig()), fallback_mode="no_fallback", extraction_mode=["first_match"],
     parsing_timeout=1)`` and ``verify(gold, answer, timeout_seconds=1)``. math-verify reads ``4.5e33`` in
     ``$..$`` as 4.5*e*33, so e-notation golds never match a LaTeX answer.

Where upstream falls back silently to a weaker path when math-verify or latex2sympy2_extended is missing,
trlvr refuses the grader in one line instead (`trlvr.rewards.graders.require_grader`). Runs in the grading
worker (`trlvr.rewards._worker`, op "authors"), whose main thread the SIGALRM timers need; the pool's own
watchdog bounds every job on top.
"""

from __future__ import annotations

import re
import signal
from contextlib import contextmanager

# MathQA's unit words, in upstream's order (the order matters: each is deleted in turn, twice), then each
# with an "s"; matched as regexes exactly as written (so "a ." matches "a" + any two characters).
UNIT_TEXTS = [
    "east",
    "degree",
    "mph",
    "kmph",
    "ft",
    "m sqaure",
    " m east",
    "sq m",
    "deg",
    "mile",
    "q .",
    "monkey",
    "prime",
    "ratio",
    "profit of rs",
    "rd",
    "o",
    "gm",
    "p . m",
    "lb",
    "tile",
    "per",
    "dm",
    "lt",
    "gain",
    "ab",
    "way",
    "west",
    "a .",
    "b .",
    "c .",
    "d .",
    "e .",
    "f .",
    "g .",
    "h .",
    "t",
    "a",
    "h",
    "no change",
    "men",
    "soldier",
    "pie",
    "bc",
    "excess",
    "st",
    "inches",
    "noon",
    "percent",
    "by",
    "gal",
    "kmh",
    "c",
    "acre",
    "rise",
    "a . m",
    "th",
    "π r 2",
    "sq",
    "mark",
    "l",
    "toy",
    "coin",
    "sq . m",
    "gallon",
    "° f",
    "profit",
    "minw",
    "yr",
    "women",
    "feet",
    "am",
    "pm",
    "hr",
    "cu cm",
    "square",
    "v â € ™",
    "are",
    "rupee",
    "rounds",
    "cubic",
    "cc",
    "mtr",
    "s",
    "ohm",
    "number",
    "kmph",
    "day",
    "hour",
    "minute",
    "min",
    "second",
    "man",
    "woman",
    "sec",
    "cube",
    "mt",
    "sq inch",
    "mp",
    "∏ cm ³",
    "hectare",
    "more",
    "sec",
    "unit",
    "cu . m",
    "cm 2",
    "rs .",
    "rs",
    "kg",
    "g",
    "month",
    "km",
    "m",
    "cm",
    "mm",
    "apple",
    "liter",
    "loss",
    "yard",
    "pure",
    "year",
    "increase",
    "decrease",
    "d",
    "less",
    "Surface",
    "litre",
    "pi sq m",
    "s .",
    "metre",
    "meter",
    "inch",
]
UNIT_TEXTS = UNIT_TEXTS + [t + "s" for t in UNIT_TEXTS]
_UNIT_RES = [re.compile(r"(^|\W)" + t + r"($|\W)") for t in UNIT_TEXTS]
SYMPY_UNITS = [
    "degree",
    "cm",
    "centimeter",
    "meter",
    "mile",
    "second",
    "minute",
    "hour",
    "day",
    "week",
    "month",
    "year",
    "foot",
    "feet",
    "inch",
    "yard",
]
_SYMPY_UNIT_RES = [re.compile(rf"{u}(es)?(s)? *(\^[0-9]+)?") for u in SYMPY_UNITS]
_WHOLE_TEXT = re.compile(r"^\\text\{(?P<text>.+?)\}$")
TUPLE_CHARS = "()[]"
REPEAT_CHARS, REPEAT_DENSITY = 128, 0.2
ALARM_S = 1


# -- extraction ------------------------------------------------------------------------------------


def extract(text: str) -> str | None:
    """The answer in the last ``\\boxed{..}`` of ``text``, or None (no ``\\boxed``, unclosed, not
    ``\\boxed{``).

    >>> (extract("so \\\\boxed{\\\\frac{1}{2}}."), extract("\\\\boxed {3}"), extract("\\\\fbox{3}"),
    ...     extract("\\\\boxed{3"))
    ('\\\\frac{1}{2}', None, None, None)
    """
    if "\\boxed" not in text:
        return None
    start, depth = text.rfind("\\boxed"), 0
    for i in range(start, len(text)):
        if text[i] == "{":
            depth += 1
        elif text[i] == "}":
            depth -= 1
            if depth == 0:
                span = text[start : i + 1]
                return span[len("\\boxed{") : -1] if span.startswith("\\boxed{") else None
    return None


# -- 1. the MATH normaliser ------------------------------------------------------------------------------


def _fix_fracs(s: str) -> str:
    parts = s.split("\\frac")
    out = parts[0]
    for sub in parts[1:]:
        out += "\\frac"
        if sub[0] == "{":  # IndexError for "\frac" at the end: the caller's fallback
            out += sub
        elif len(sub) < 2:
            return s
        else:
            a, b, rest = sub[0], sub[1], sub[2:]
            out += "{" + a + "}{" + b + "}" + rest if b != "{" else "{" + a + "}" + b + rest
    return out


def fix_a_slash_b(s: str) -> str:
    parts = s.split("/")
    if len(parts) != 2:
        return s
    try:
        a, b = int(parts[0]), int(parts[1])
    except ValueError:
        return s
    return f"\\frac{{{a}}}{{{b}}}" if s == f"{a}/{b}" else s


def _fix_sqrt(s: str) -> str:
    if "\\sqrt" not in s:
        return s
    parts = s.split("\\sqrt")
    out = parts[0]
    for sub in parts[1:]:  # IndexError for "\sqrt" at the end: the caller's fallback
        out += "\\sqrt{" + sub[0] + "}" + sub[1:] if sub[0] != "{" else "\\sqrt" + sub
    return out


def strip_string(s: str) -> str:
    """The release's extended Hendrycks normalisation; raises where upstream raises.

    >>> (strip_string("5 \\\\text{ apples}"), strip_string("\\\\begin{bmatrix}1\\\\end{bmatrix}"),
    ...     strip_string("x \\\\leq 3"))
    ('5', '\\\\begin{pmatrix}1\\\\end{pmatrix}', 'x\\\\le3')
    """
    s = s.replace("\n", "").replace("\\!", "").replace("\\\\", "\\")
    s = re.sub(r"\\begin\{array\}\{.*?\}", r"\\begin{pmatrix}", s)
    s = re.sub(r"\\end\{array\}", r"\\end{pmatrix}", s).replace("bmatrix", "pmatrix")
    s = s.replace("tfrac", "frac").replace("dfrac", "frac")
    s = s.replace("\\neq", "\\ne").replace("\\leq", "\\le").replace("\\geq", "\\ge")
    s = s.replace("\\left", "").replace("\\right", "")
    cut = re.sub(r"\\text\{.*?\}$", "", s).strip()  # a trailing unit in \text{}, unless it is everything
    if cut and cut != s:
        s = cut
    for _ in range(2):
        for unit in _UNIT_RES:
            cut = unit.sub(r"\1\2", s)
            if cut:
                s = cut
    s = s.replace("^{\\circ}", "").replace("^\\circ", "").replace("\\$", "")
    if "\\text{ " in s:
        parts = s.split("\\text{ ")
        if len(parts) != 2:
            raise ValueError("two '\\text{ '")
        s = parts[0]
    s = s.replace("\\%", "").replace(" .", " 0.").replace("{.", "{0.")
    if not s:
        return s
    if s[0] == ".":
        s = "0" + s
    parts = s.split("=")
    if len(parts) == 2 and len(parts[0]) <= 2:
        s = parts[1]
    s = _fix_fracs(_fix_sqrt(s).replace(" ", ""))
    if s == "0.5":
        s = "\\frac{1}{2}"
    return fix_a_slash_b(s)


def mathd_normalize(answer: str | None) -> str | None:
    """A whole-answer ``\\text{..}`` unwrapped, then :func:`strip_string` (its failure: the unwrapped text).

    >>> mathd_normalize("\\\\text{(C)}"), mathd_normalize(" \\\\dfrac{1}{2} ")
    ('(C)', '\\\\frac{1}{2}')
    """
    if answer is None:
        return None
    answer = answer.strip()
    try:
        m = _WHOLE_TEXT.search(answer)
        if m is not None:
            answer = m.group("text").strip()
        return strip_string(answer)
    except Exception:  # upstream's bare except: the text as unwrapped so far
        return answer


# -- 2. the sympy path -------------------------------------------------------------------------------


def _parse_latex_to_text(expr: str) -> str:
    from pylatexenc import latex2text

    expr = expr.replace("\\tfrac", "\\frac").replace("\\dfrac", "\\frac").replace("\\frac", " \\frac")
    expr = latex2text.LatexNodes2Text().latex_to_text(expr)
    for a, b in (("√", "sqrt"), ("π", "pi"), ("∞", "inf"), ("∪", "U"), ("·", "*"), ("×", "*")):
        expr = expr.replace(a, b)
    return expr.strip()


def _is_float(s: str) -> bool:
    try:
        float(s)
        return True
    except ValueError:
        return False


def _is_int(x: float) -> bool:
    try:
        return abs(x - int(round(x))) <= 1e-7
    except (OverflowError, ValueError):
        return False


def _strip_thousands(expr: str) -> str:
    pattern = re.compile(r"(\d)(,)(\d\d\d)($|\D)")
    while True:
        nxt = pattern.sub("\\1\\3\\4", expr)
        if nxt == expr:
            return nxt
        expr = nxt


def _str_is_int(x: str) -> bool:
    try:
        return _is_int(float(_strip_thousands(x)))
    except ValueError:
        return False


def normalize_sympy(expr: str | None) -> str | None:
    """The second normaliser (before sympy and again before math-verify).

    >>> (normalize_sympy("\\\\$1,000"), normalize_sympy("20\\\\%"), normalize_sympy("7 \\\\frac{3}{4}"),
    ...     normalize_sympy("\\\\text{Yes}"))
    ('1000', '20', '7+3/4', 'yes')
    """
    if expr is None:
        return None
    m = _WHOLE_TEXT.search(expr)
    if m is not None:
        expr = m.group("text")
    expr = expr.replace("\\%", "%").replace("\\$", "$").replace("$", "").replace("%", "")
    expr = expr.replace(" or ", " , ").replace(" and ", " , ")
    expr = expr.replace("million", "*10^6").replace("billion", "*10^9").replace("trillion", "*10^12")
    for unit in _SYMPY_UNIT_RES:
        expr = unit.sub("", expr)
    expr = re.sub(r"\^ *\\circ", "", expr)
    if expr and expr[0] == "{" and expr[-1] == "}":
        expr = expr[1:-1]
    expr = re.sub(r",\\! *", "", expr)
    if _is_float(expr) and _is_int(float(expr)):
        expr = str(int(round(float(expr))))
    if "\\" in expr:
        try:
            expr = _parse_latex_to_text(expr)
        except Exception:  # upstream: keep the text
            pass
    expr = re.sub("- *", "-", expr)
    expr = re.sub("([0-9]) +([0-9])", "\\1+\\2", expr)  # a mixed number 7 3/4 -> 7+3/4
    expr = expr.replace(" ", "").replace("{", "").replace("}", "").lower()
    if _str_is_int(expr):
        expr = str(int(float(expr.replace(",", ""))))
    return expr


def _split_tuple(expr: str) -> list[str]:
    expr = _strip_thousands(expr)
    if not expr:
        return []
    if (
        len(expr) > 2
        and expr[0] in TUPLE_CHARS
        and expr[-1] in TUPLE_CHARS
        and not any(ch in expr[1:-1] for ch in TUPLE_CHARS)
    ):
        return [e.strip() for e in expr[1:-1].split(",")]
    return [expr]


def _is_frac(expr: str) -> bool:
    return bool(re.search(r"^-?[0-9]+.?/0*[1-9][0-9]*.?$", expr))


def _allow_eval(expr: str) -> bool:
    letters = {c for c in expr.replace("sqrt", "").replace("frac", "") if c.isalpha()}
    if len(letters) > 2 or "^{" in expr or "^(" in expr:
        return False
    return not (re.search(r"\^[0-9]+\^", expr) or re.search(r"\^[0-9][0-9]+", expr))


def _sympy_zero(gold: str, answer: str) -> bool:
    """``simplify((gold)-(answer)) == 0`` where the guard allows it; any failure is False."""
    try:
        expr = f"({gold})-({answer})"
        if not _allow_eval(expr):
            return False
        import sympy
        from sympy.parsing import sympy_parser

        parsed = sympy_parser.parse_expr(
            expr.replace("^", "**"),
            transformations=sympy_parser.standard_transformations
            + (sympy_parser.implicit_multiplication_application,),
        )
        return sympy.simplify(parsed) == 0
    except Exception:
        return False


def sympy_equal(answer: str, gold: str) -> bool:
    """The sympy path (upstream ``grade_answer_sympy``).

    >>> (sympy_equal("\\\\frac{6}{8}", "\\\\frac{3}{4}"), sympy_equal("(1,2)", "[1,2]"),
    ...     sympy_equal("2x+2", "2(x+1)"))
    (False, False, True)
    """
    g, a = normalize_sympy(gold), normalize_sympy(answer)
    if g is None:
        return False
    if g == a:
        return True
    if not a:
        return False
    g_elems, a_elems = _split_tuple(g), _split_tuple(a)
    if len(g_elems) > 1 and (g[0] != a[0] or g[-1] != a[-1]):
        return False
    if len(g_elems) != len(a_elems):
        return False
    for ge, ae in zip(g_elems, a_elems, strict=True):
        if _is_frac(ge) and _is_frac(ae):
            ok = ge == ae  # unreduced fractions must match literally
        elif _str_is_int(ge) != _str_is_int(ae):
            ok = False  # an integer gold needs an integer answer
        else:
            ok = _sympy_zero(ge, ae)
        if not ok:
            return False
    return True


# -- 3. math-verify, under a 1 s alarm -------------------------------------------------------------


@contextmanager
def _alarm(seconds: int):
    def on_alarm(signum, frame):
        raise TimeoutError("authors' grader: over its 1 s alarm")

    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def _lcp_density(s: str) -> float:
    """2 * (sum of the LCPs of adjacent sorted suffixes) / (n (n + 1)): upstream's ``repeatness`` measure."""
    n = len(s)
    rank = [ord(c) for c in s]
    k = 1
    sa = list(range(n))
    while True:  # prefix doubling: sort by (rank[i], rank[i + k])
        key = [(rank[i], rank[i + k] if i + k < n else -1) for i in range(n)]
        sa.sort(key=key.__getitem__)
        new, r = [0] * n, 0
        for j in range(1, n):
            r += key[sa[j]] != key[sa[j - 1]]
            new[sa[j]] = r
        rank = new
        if r == n - 1 or k >= n:
            break
        k *= 2
    total, h = 0, 0  # Kasai
    for i in range(n):
        if rank[i] == n - 1:
            h = 0
            continue
        j = sa[rank[i] + 1]
        while i + h < n and j + h < n and s[i + h] == s[j + h]:
            h += 1
        total += h
        h = max(h - 1, 0)
    return total * 2 / (n * (n + 1))


def repetitive(s: str) -> bool:
    """Upstream's guard for strings over 128 characters: suffix-LCP density above 0.2.

    >>> (repetitive("ab" * 100),
    ...     repetitive("so x = \\\\frac{1}{2}, then 3x^2 + 2x - 7 = 0 has roots r_1, r_2 with sum -2/3"))
    (True, False)
    """
    return len(s) > 1 and _lcp_density(s) > REPEAT_DENSITY


def math_verify_equal(answer: str, gold: str) -> bool:
    """The math-verify path (upstream ``is_latex_equal``), with its exact call and settings.

    math-verify is imported before the alarm starts: upstream imports it inside the 1 s alarm, where a first
    import (over a second) is cut half-way and leaves sympy half-initialised (every later sympy parse in the
    process then fails); trlvr's workers import it at start-up anyway."""
    from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse, verify

    try:
        with _alarm(ALARM_S):
            try:
                if (len(answer) > REPEAT_CHARS and repetitive(answer)) or (
                    len(gold) > REPEAT_CHARS and repetitive(gold)
                ):
                    return False
                g = normalize_sympy(gold)
                if g is None:
                    return False
                if g == normalize_sympy(answer):
                    return True

                def read(side: str):
                    side = side.replace("\n", "")
                    side = side if "$" in side else f"${side}$"
                    return parse(
                        side,
                        extraction_config=(
                            LatexExtractionConfig(boxed_match_priority=0),
                            ExprExtractionConfig(),
                        ),
                        fallback_mode="no_fallback",
                        extraction_mode=["first_match"],
                        parsing_timeout=1,
                    )

                return bool(verify(read(gold), read(answer), timeout_seconds=1))
            except Exception:
                return False
    except TimeoutError:
        return False


# -- the grader -----------------------------------------------------------------------------------------


def is_equiv(answer: str, gold: str) -> bool:
    """Upstream ``grade(answer, gold, fast=False)``: a boxed gold extracted, then any of the three paths.

    >>> (is_equiv("4.5\\\\times10^{33}", "4.5e33"), is_equiv("20\\\\%", "20"),
    ...     is_equiv("\\\\frac{x}{2}", "0.5x"))
    (False, True, True)
    """
    if "\\boxed" in gold:
        gold = extract(gold)
    if gold is None:
        return False
    return (
        mathd_normalize(answer) == mathd_normalize(gold)
        or sympy_equal(answer, gold)
        or math_verify_equal(answer, gold)
    )


def score(text: str, gold: str) -> tuple[float, str]:
    """(1.0 or 0.0, the extracted answer or "no_box") for a completion ``text`` against ``gold``.

    >>> score("so \\\\boxed{41.8^\\\\circ}", "41.8"), score("no box: 42", "42")
    ((1.0, '41.8^\\\\circ'), (0.0, 'no_box'))
    """
    answer = extract(text)
    if answer is None:
        return 0.0, "no_box"
    try:
        return float(is_equiv(answer, str(gold))), answer[:200]
    except Exception:  # compute_score's own guard: 0
        return 0.0, answer[:200]

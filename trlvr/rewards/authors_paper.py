"""The ``authors-paper`` grader: the Hendrycks MATH answer check, as the Tandem RLVR paper-era scripts graded.

The paper-era scripts of CSSLab/Tandem-RLVR (``verl/run_*_deepscaler.sh``, ``tandem_eval/grader.py``:
``load_grader('math')``) score with ``verl.utils.reward_score.math_dataset.compute_score``, a file the
authors did not publish. It behaves as verl's Hendrycks grader (volcengine/verl
``verl/utils/reward_score/math.py``, adapted from EleutherAI lm-evaluation-harness
``lm_eval/tasks/hendrycks_math``, itself the MATH paper's ``math_equivalence.is_equiv``) on every published
``sample_scores`` entry read (``tests/data/authors_minerva_scores.jsonl``): this module is that behaviour,
written from its published description:

- extraction (:func:`last_box`): when the text holds ``"\\boxed "`` (with a space) anywhere, the answer is
  what follows the last ``"\\boxed "`` up to the next ``$``; else the last ``\\boxed`` (or, only without any
  ``\\boxed``, the last ``\\fbox``) with its braces counted from the command; the span must then start
  with ``\\boxed{`` (an ``\\fbox{..}`` fails: score 0). No box, or an unclosed one: score 0. The gold is
  used as written.
- :func:`strip_string` on both sides, then string equality (:func:`is_equiv`); a side whose stripping
  fails (two ``"\\text{ "``, a ``\\sqrt`` at the very end) compares raw. Nothing is numeric: ``42.0`` is not
  ``42``, ``4.5\\times10^{33}`` is not ``4.5e33``.

Pure string functions; no sympy, no math-verify.
"""

from __future__ import annotations


def last_box(text: str) -> str | None:
    """The answer inside the last box of ``text`` as the Hendrycks/verl extraction reads it, else None.

    >>> last_box("so \\\\boxed{\\\\frac{1}{2}}."), last_box("\\\\boxed 5$ and more"), last_box("\\\\fbox{3}")
    ('\\\\frac{1}{2}', '5', None)
    """
    if "\\boxed " in text:
        return text.split("\\boxed ")[-1].split("$")[0]
    idx = text.rfind("\\boxed")
    if idx < 0:
        idx = text.rfind("\\fbox")
        if idx < 0:
            return None
    depth, end = 0, None
    for i in range(idx, len(text)):
        if text[i] == "{":
            depth += 1
        elif text[i] == "}":
            depth -= 1
            if depth == 0:
                end = i
                break
    if end is None:
        return None
    span = text[idx : end + 1]
    if not span.startswith("\\boxed{"):  # remove_boxed's assertion: an \fbox (or "\boxed x{..}") scores 0
        return None
    return span[len("\\boxed{") : -1]


def _fix_fracs(s: str) -> str:
    parts = s.split("\\frac")
    out = parts[0]
    for sub in parts[1:]:
        out += "\\frac"
        if sub[:1] == "{":  # (an empty part raises IndexError upstream: the raw strings are compared)
            out += sub
        elif not sub:
            raise IndexError("\\frac at the end")
        elif len(sub) < 2:
            return s
        else:
            a, b, rest = sub[0], sub[1], sub[2:]
            out += "{" + a + "}{" + b + "}" + rest if b != "{" else "{" + a + "}" + b + rest
    return out


def _fix_a_slash_b(s: str) -> str:
    parts = s.split("/")
    if len(parts) != 2:
        return s
    try:
        a, b = int(parts[0]), int(parts[1])
    except ValueError:
        return s
    return f"\\frac{{{a}}}{{{b}}}" if s == f"{a}/{b}" else s


def _remove_right_units(s: str) -> str:
    if "\\text{ " in s:
        parts = s.split("\\text{ ")
        if len(parts) != 2:
            raise ValueError("two '\\text{ '")  # upstream's assertion: the raw strings are compared
        return parts[0]
    return s


def _fix_sqrt(s: str) -> str:
    if "\\sqrt" not in s:
        return s
    parts = s.split("\\sqrt")
    out = parts[0]
    for sub in parts[1:]:
        if not sub:
            raise IndexError("\\sqrt at the end")
        out += "\\sqrt{" + sub[0] + "}" + sub[1:] if sub[0] != "{" else "\\sqrt" + sub
    return out


def strip_string(s: str) -> str:
    """The Hendrycks MATH normalisation (in upstream order); raises where upstream raises.

    >>> strip_string("\\\\dfrac12"), strip_string("x = 0.5"), strip_string("30^\\\\circ"), strip_string("3/4")
    ('\\\\frac{1}{2}', '\\\\frac{1}{2}', '30', '\\\\frac{3}{4}')
    >>> strip_string("\\\\$18.90"), strip_string("20\\\\%"), strip_string("12\\\\text{ cm}")
    ('18.90', '20', '12')
    """
    s = s.replace("\n", "").replace("\\!", "").replace("\\\\", "\\")
    s = s.replace("tfrac", "frac").replace("dfrac", "frac")
    s = s.replace("\\left", "").replace("\\right", "")
    s = s.replace("^{\\circ}", "").replace("^\\circ", "")
    s = s.replace("\\$", "")
    s = _remove_right_units(s)
    s = s.replace("\\%", "")
    s = s.replace(" .", " 0.").replace("{.", "{0.")
    if not s:
        return s
    if s[0] == ".":
        s = "0" + s
    parts = s.split("=")
    if len(parts) == 2 and len(parts[0]) <= 2:
        s = parts[1]
    s = _fix_sqrt(s)
    s = s.replace(" ", "")
    s = _fix_fracs(s)
    if s == "0.5":
        s = "\\frac{1}{2}"
    return _fix_a_slash_b(s)


def is_equiv(answer: str | None, gold: str | None) -> bool:
    """Equal stripped strings (raw equality where stripping fails).

    >>> is_equiv("4.5\\\\times10^{33}", "4.5e33"), is_equiv("\\\\dfrac{1}{2}", "0.5"), is_equiv("42.0", "42")
    (False, True, False)
    """
    if answer is None or gold is None:
        return answer is None and gold is None
    try:
        return strip_string(answer) == strip_string(gold)
    except (ValueError, IndexError):
        return answer == gold


def score(text: str, gold: str) -> tuple[float, str | None]:
    """(1.0 or 0.0, the extracted answer) for a completion ``text`` against ``gold``, as the paper era scored.

    >>> score("The answer is \\\\boxed{41.8^\\\\circ}.", "41.8"), score("\\\\boxed{4.5 \\\\times 10^{33}}", "4.5e33")
    ((1.0, '41.8^\\\\circ'), (0.0, '4.5 \\\\times 10^{33}'))
    """
    answer = last_box(text)
    if answer is None:
        return 0.0, None
    return float(is_equiv(answer, str(gold))), answer

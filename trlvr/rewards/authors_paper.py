"""The ``authors-paper`` grader: the Tandem RLVR paper-era scripts' grader, as their published scores show it.

The paper-era scripts of CSSLab/Tandem-RLVR (``verl/run_*_deepscaler.sh``, ``tandem_eval/grader.py``:
``load_grader('math')``) score with ``verl.utils.reward_score.math_dataset.compute_score``, a file the
authors did not publish. Its published verdicts (``tandem_eval/MATH/generations/*.jsonl``, kept in
``tests/data/authors_sample_scores.jsonl``) rule out two readings and fit a third:

- not Hendrycks ``strip_string`` and string equality (verl's ``verl/utils/reward_score/math.py``, from
  EleutherAI lm-evaluation-harness ``hendrycks_math``): minerva idx 4 sample 1, final box
  ``6 \\times 10^{-3}`` against the gold ``0.006``, is scored 1, a value comparison;
- not math-verify (nor the release grader, `trlvr.rewards.authors`, which ends in math-verify): minerva idx 4
  sample 3, final box ``6 \\times 10^{-3} \\, \\mathrm{m/s^2}``, is scored 0, where math-verify reads 6/1000;
- DeepScaleR's grader for verl reproduces every published score read: ``grade_answer_verl`` (read from
  ``verl/utils/reward_score/deepscaler_math/utils/utils.py`` of a verl fork, stored under volcengine/verl at
  1bbbdd3; agentica-project/deepscaler's PRM800K-derived grader), which is the release grader without its
  math-verify step (``boxed_reward_fn(fast=True)``) with the plain Hendrycks normaliser.

So this module is: the answer in the last ``\\boxed{..}`` (`trlvr.rewards.authors.extract`: no box, an
unclosed box, ``\\boxed {x}`` or ``\\fbox{x}`` score 0; a gold holding ``\\boxed`` is extracted alike),
then right when the MATH normaliser's strings are equal (:func:`mathd_normalize`: a whole-answer
``\\text{..}`` unwrapped, then Hendrycks :func:`strip_string`) or the sympy path finds them equal
(`trlvr.rewards.authors.sympy_equal`: the second normaliser, element-wise tuples, literal fractions, integer
golds need integer answers, ``sympy.simplify``). Nothing reads ``4.5e33`` as the value of
``4.5\\times10^{33}``: the gold normalises to an integer and the answer is not one. Needs pylatexenc (the
``[authors]`` extra): the sympy path reads LaTeX with it.
"""

from __future__ import annotations

import re

from trlvr.rewards.authors import extract, fix_a_slash_b, sympy_equal


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
    return fix_a_slash_b(s)


def mathd_normalize(answer: str) -> str:
    """PRM800K's ``normalize_answer``: a whole-answer ``\\text{..}`` unwrapped, then :func:`strip_string`;
    where that raises, the unwrapped text.

    >>> mathd_normalize("\\\\text{(C)}"), mathd_normalize("\\\\sqrt"), mathd_normalize("\\\\dfrac12")
    ('(C)', '\\\\sqrt', '\\\\frac{1}{2}')
    """
    answer = answer.strip()
    m = re.search(r"^\\text\{(?P<text>.+?)\}$", answer)
    if m is not None:
        answer = m.group("text").strip()
    try:
        return strip_string(answer)
    except (ValueError, IndexError):
        return answer


def is_equiv(answer: str | None, gold: str | None) -> bool:
    """Equal MATH-normalised strings, or equal under the sympy path.

    >>> (is_equiv("4.5\\\\times10^{33}", "4.5e33"), is_equiv("6 \\\\times 10^{-3}", "0.006"),
    ...     is_equiv("42.0", "42"))
    (False, True, True)
    """
    if gold is not None and "\\boxed" in gold:
        gold = extract(gold)
    if answer is None or not gold:
        return False
    return mathd_normalize(answer) == mathd_normalize(gold) or sympy_equal(answer, gold)


def score(text: str, gold: str) -> tuple[float, str | None]:
    """(1.0 or 0.0, the extracted answer) for a completion ``text`` against ``gold``, as the paper era scored.

    >>> (score("The answer is \\\\boxed{41.8^\\\\circ}.", "41.8"),
    ...     score("\\\\boxed{4.5 \\\\times 10^{33}}", "4.5e33"))
    ((1.0, '41.8^\\\\circ'), (0.0, '4.5 \\\\times 10^{33}'))
    """
    answer = extract(text)
    if answer is None:
        return 0.0, None
    try:
        return float(is_equiv(answer, str(gold))), answer
    except Exception:  # the grader's own guard: 0
        return 0.0, answer

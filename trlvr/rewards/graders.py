"""The graders a run can be graded by: ``trlvr`` (ours, the default) and the Tandem RLVR authors' two.

``GRADERS`` is the one list of names; :func:`check_grader` turns a name into itself or one line naming the
choices; :func:`require_grader` also refuses (one line) when a grader's dependencies are missing: never a
silent weaker fallback (the authors' own grader falls back silently to a weaker sympy path when math-verify
is missing; a reproduction trained both arms that way without knowing).

- ``trlvr``: the one equality of answers, :mod:`trlvr.rewards.equivalence`.
- ``authors-paper``: the paper-era scripts' grader (:mod:`trlvr.rewards.authors_paper`) as their published
  scores show it: the MATH normaliser's strings equal, or the sympy path finds them equal (the DeepScaleR /
  PRM800K grader; not string equality alone, not math-verify). Needs pylatexenc (``[authors]``).
- ``authors``: the release's grader, ``reward/hendrycks_math_grader.boxed_reward_fn(fast=False)``
  (:mod:`trlvr.rewards.authors`): the MATH normaliser's strings equal, or sympy finds them equal, or
  math-verify 0.9.0 does. Needs ``pip install 'trlvr[authors]'`` (math-verify 0.9.0, latex2sympy2_extended,
  pylatexenc).

What this file does not know: how any grader decides (each grader's own module does).
"""

from __future__ import annotations

import importlib.metadata
import importlib.util

from trlvr.errors import UserError

TRLVR, AUTHORS, AUTHORS_PAPER = "trlvr", "authors", "authors-paper"
GRADERS = (TRLVR, AUTHORS, AUTHORS_PAPER)
DEFAULT_GRADER = TRLVR
# What each grader does, in one line: the one source of these words for the flags' and the config key's help
# (`graders_help`) and for the docs (tests/test_graders.py holds each page to them).
GRADER_HELP = {
    TRLVR: "trlvr's own rule (trlvr.rewards.equivalence): two numbers compared exactly, units, percent and "
    "dollars read as answer keys write them, math-verify for the rest",
    AUTHORS: "the Tandem RLVR release's grader (boxed_reward_fn(fast=False)): the last box, then the MATH "
    "normaliser's strings equal, or sympy, or math-verify 0.9.0 finds them equal",
    AUTHORS_PAPER: "the paper-era scripts' grader as their published scores show it (DeepScaleR's "
    "grade_answer_verl): the last box, then the MATH normaliser's strings equal or sympy finds "
    "them equal, no math-verify",
}

# The release pins these (CSSLab/Tandem-RLVR requirements: math-verify==0.9.0, latex2sympy2_extended==1.11.0,
# pylatexenc==2.10); the grader's behaviour is that of math-verify 0.9.0, so that version exactly.
AUTHORS_MATH_VERIFY = "0.9.0"
AUTHORS_MODULES = {
    "math_verify": "math-verify",
    "latex2sympy2_extended": "latex2sympy2_extended",
    "pylatexenc": "pylatexenc",
    "sympy": "sympy",
}


def graders_help() -> str:
    """Every grader's one line (`GRADER_HELP`), for a flag's or a config key's help.

    >>> graders_help().startswith("trlvr: trlvr's own rule")
    True
    """
    return (
        "; ".join(f"{g}: {GRADER_HELP[g]}" for g in GRADERS)
        + "; the authors' two need pip install 'trlvr[authors]'"
    )


def check_grader(name: object) -> str:
    """``name`` when it is a grader, else a one-line UserError listing the choices.

    >>> check_grader("authors")
    'authors'
    >>> check_grader("verl")
    Traceback (most recent call last):
    ...
    trlvr.errors.UserError: unknown grader 'verl': expected one of trlvr, authors, authors-paper
    """
    if name not in GRADERS:
        raise UserError(f"unknown grader {name!r}: expected one of {', '.join(GRADERS)}")
    return name  # type: ignore[return-value]


def missing_for(name: str) -> str | None:
    """None when grader ``name`` can run here, else what is missing (one phrase). ``authors-paper`` needs
    pylatexenc and sympy (its sympy path reads LaTeX with pylatexenc); ``authors`` also math-verify 0.9.0."""
    if check_grader(name) == TRLVR:
        return None
    modules = AUTHORS_MODULES if name == AUTHORS else {"pylatexenc": "pylatexenc", "sympy": "sympy"}
    missing = [pkg for mod, pkg in modules.items() if importlib.util.find_spec(mod) is None]
    if missing:
        return ", ".join(missing) + (", which are" if len(missing) > 1 else ", which is") + " not installed"
    if name == AUTHORS_PAPER:
        return None
    version = importlib.metadata.version("math-verify")
    if version != AUTHORS_MATH_VERIFY:
        return f"math-verify {AUTHORS_MATH_VERIFY} ({version} is installed)"
    return None


def require_grader(name: object) -> str:
    """``name`` when it is a grader whose dependencies are installed, else one line saying what to install.

    >>> require_grader("trlvr")
    'trlvr'
    """
    name = check_grader(name)
    why = missing_for(name)
    if why is not None:
        raise UserError(f"grader {name!r} needs {why}: pip install 'trlvr[authors]'")
    return name

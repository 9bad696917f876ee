"""The prefix-continuation protocols' pure parts: what the junior is handed, and whether the answer is in it.

prefix-K (suite entry `prefix`, `EvalSpec.prefix_ks`): for every solo sample (same problem, same sample
index), the first K% of the senior's completion tokens (its final EOS left out when it ended itself,
rounded to the nearest token) is kept, and the junior alone writes the rest from there, in the same
prompt, within the same total token budget. K = 0 is the junior alone from the prompt (the `junior`
protocol's sampling: the same row keys, so prefix-0 reproduces junior's samples); K = 100 hands the
junior the senior's whole trace, and it writes only the ending (its EOS, or whatever it adds).

Answer availability: transfer can come from the answer already being in the prefix. A row is flagged
`answer_in_prefix` when the gold answer appears as a number in the prefix's text: every number in it
(integers, decimals, thousands separators, a sign after a space or an opening bracket) is read with the
grader's exact number reader (`trlvr.rewards.boxed.exact_number`) and compared exactly; a gold that is
not a plain number (an expression, a word) is looked for as text. The gold, not the senior's own final
answer: a flagged prefix hands the junior the right answer, whoever would have found it.

What this file does not know: models, engines, files.
"""

from __future__ import annotations

import re
from fractions import Fraction

from trlvr.rewards.boxed import exact_number, normalize

_NUMBER = re.compile(r"(?<![\w.])(-?)(\d{1,3}(?:,\d{3})+|\d+)(\.\d+)?(?![\d])")


def cut(body: list[int], percent: int) -> list[int]:
    """The first `percent`% of a completion's tokens (rounded to the nearest token).

    >>> cut([1, 2, 3, 4], 50), cut([1, 2, 3], 0), cut([1, 2, 3], 100)
    ([1, 2], [], [1, 2, 3])
    """
    return list(body[: round(len(body) * percent / 100)])


def trace_body(row: dict) -> list[int]:
    """A solo row's completion tokens without the EOS that ended it (a row cut by the budget keeps all)."""
    ids = list(row["token_ids"])
    return ids[:-1] if ids and row.get("finish_reason") == "eos" else ids


def _value(text: str):
    v = exact_number(text)
    try:
        return None if v is None else Fraction(v)
    except (ValueError, OverflowError):  # inf / nan spelt as a Decimal
        return None


def numbers_in(text: str) -> list[Fraction]:
    """Every plain number written in `text`, exactly.

    >>> [str(x) for x in numbers_in("4 + 3 = 7, so 1,200 (-2) and 2.50; x3 3-5")]
    ['4', '3', '7', '1200', '-2', '5/2', '3', '5']
    """
    out = []
    for m in _NUMBER.finditer(text):
        sign, whole, frac = m.groups()
        if sign and m.start() > 0 and (text[m.start() - 1].isalnum() or text[m.start() - 1] == ")"):
            sign = ""  # "3-5": a minus between operands, not a sign
        v = _value(f"{sign}{whole.replace(',', '')}{frac or ''}")
        if v is not None:
            out.append(v)
    return out


def answer_in_text(text: str, gold: str) -> bool:
    """Whether the gold answer already appears in `text` (as a number when it is one, else as text).

    >>> answer_in_text("so 4 + 3 = 7 and", "7"), answer_in_text("so 4 + 3 = 17", "7"), answer_in_text("x", "")
    (True, False, False)
    """
    g = normalize(str(gold))
    if not g:
        return False
    value = _value(g)
    if value is None:
        return g in text
    return value in numbers_in(text)

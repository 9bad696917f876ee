"""The prefix-continuation protocols' pure parts: what the junior is handed, and whether the answer is in it.

prefix-K (suite entry `prefix`, `EvalSpec.prefix_ks`): for every solo sample (same problem, same sample
index), the first K% of the senior's completion tokens (its final EOS left out when it ended itself,
rounded to the nearest token) is kept, and the junior alone writes the rest from there, in the same
prompt, within the same total token budget. K = 0 is the junior alone from the prompt (the `junior`
protocol's sampling: the same row keys, so prefix-0 reproduces junior's samples); K = 100 hands the
junior the senior's whole trace, and it writes only the ending (its EOS, or whatever it adds).

Answer availability: transfer can come from the answer already being in the prefix. A row is flagged
`answer_in_prefix` when the gold answer appears as a number in the prefix's text: every number in it
(integers, decimals, thousands separators, scientific notation, powers of ten, ratios, \\frac, percentages,
a sign after a space or an opening bracket) is judged against the gold by the trlvr grader's one rule
(`trlvr.rewards.equivalence.exact_verdict`, the reward's own exact step: units dropped, so the gold
``7\\text{ marbles}`` is found in "so 7"; ``20`` is found in "20%"), so the flag says "the gold is in the
prefix" exactly where the grader would score that number right; a gold that is not a number (an
expression, a word) is looked for as text. The gold, not the senior's own final
answer: a flagged prefix hands the junior the right answer, whoever would have found it.

What this file does not know: models, engines, files.
"""

from __future__ import annotations

from trlvr.rewards.equivalence import answer_form, exact_verdict, number_of, number_tokens, numbers_in
from trlvr.rewards.mathtext import normalize_math

__all__ = ["answer_in_text", "cut", "numbers_in", "trace_body"]


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


def answer_in_text(text: str, gold: str) -> bool:
    """Whether the gold answer already appears in `text` (as a number when it is one, else as text).

    >>> answer_in_text("so 4 + 3 = 7 and", "7"), answer_in_text("so 4 + 3 = 17", "7"), answer_in_text("x", "")
    (True, False, False)
    >>> answer_in_text("we count 7 of them", "7\\\\text{ marbles}"), answer_in_text("a rise of 20%", "20")
    (True, True)
    """
    g = answer_form(gold)
    if not g:
        return False
    if number_of(gold) is None:
        return g in normalize_math(text)
    return any(exact_verdict(tok, gold) for tok in number_tokens(text))

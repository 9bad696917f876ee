"""The one problem-row schema every loader produces, and the registry of source schemas.

A :class:`Schema` says which columns hold the problem and the gold answer for one family of
datasets (DeepScaleR, MATH-500, GSM8K, ...) and how to turn its answer column into a gold
string. Adding a dataset is one entry in :data:`SCHEMAS`. :func:`problem_key` is a problem's
content id (what eval keys samples by). Nothing here reads files or grades answers.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from trlvr.errors import UserError


class DataError(UserError):
    """A source that cannot be loaded, or rows that cannot be used; the message names them."""


@dataclass(frozen=True)
class Problem:
    """One problem. ``fields`` keeps every original column; ``prompt`` is set only when the
    row carries a ready-made ``prompt`` (a string or a list of chat messages, used verbatim, see
    `trlvr.data.prompt_for`); ``row`` is its 1-based row in the source (None when built by hand).

    >>> Problem("gsm8k:1", "What is 2+2?", "4", "gsm8k-test.jsonl", {"question": "What is 2+2?"}).answer
    '4'
    """

    id: str
    problem: str
    answer: str
    source: str
    fields: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)
    prompt: str | list[dict] | None = field(default=None, hash=False)
    row: int | None = field(default=None, compare=False)


KEY_HEX = 16  # 64 bits: two of a million problems collide with probability ~3e-8


def problem_key(problem: Problem) -> str:
    """A problem's content id: sha256 of its text and gold, as KEY_HEX hex digits.

    Two rows with the same text and gold share a key wherever they come from (file name, row
    order and id columns do not enter it); changing either changes it.

    >>> problem_key(Problem("a", "What is 2+2?", "4", "x.jsonl"))
    '0aac1a47b77bf866'
    """
    digest = hashlib.sha256(f"{problem.problem}\x00{problem.answer}".encode()).hexdigest()
    return digest[:KEY_HEX]


class JsonNumber(float):
    """A JSON number with a fraction or an exponent, as the file writes it: its float value (for any
    arithmetic) and `literal`, the text itself. A gold is read from the literal, never through the
    float: "1e23" would be 99999999999999991611392, "0.1000000000000000055511" would be 0.1 and
    "1e400" would be inf. The JSON readers (`trlvr.data.jsonl`, `.json` files) make them."""

    literal: str

    def __new__(cls, text: str):
        self = super().__new__(cls, text)
        self.literal = text
        return self


_WHOLE_LITERAL = re.compile(r"([+-]?\d+)\.0+")  # "142.0": a whole number written with a fraction


def as_text(value: Any) -> str:
    """A cell as a stripped string. A JSON number literal is its text ("142.0" as "142"; AMC stores
    142.0); a float from a binary file (parquet) is its shortest repr, integral ones below 2**53
    without ".0" (above, the integer a float holds is not the number written: 1e23 stays "1e+23").

    >>> as_text(142.0), as_text(None), as_text(" x "), as_text(1e23), as_text(JsonNumber("1.50"))
    ('142', '', 'x', '1e+23', '1.50')
    """
    if value is None:
        return ""
    literal = getattr(value, "literal", None)
    if isinstance(literal, str):
        whole = _WHOLE_LITERAL.fullmatch(literal)
        return whole.group(1) if whole else literal
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**53:
        return str(int(value))
    return str(value).strip()


def gsm8k_gold(value: Any) -> str:
    """GSM8K answers end in "#### N": the gold is N with thousands commas removed.

    >>> gsm8k_gold("2 + 2 = <<2+2=4>>4 eggs.\\n#### 1,004")
    '1004'
    >>> gsm8k_gold("no marker")
    ''
    """
    text = as_text(value)
    return text.rsplit("####", 1)[1].strip().replace(",", "") if "####" in text else ""


def first_or_joined(value: Any) -> str:
    """OlympiadBench's ``final_answer`` is a list: one element as is, several joined by ", "."""
    if isinstance(value, (list, tuple)):
        parts = [as_text(v) for v in value if as_text(v)]
        return parts[0] if len(parts) == 1 else ", ".join(parts)
    return as_text(value)


@dataclass(frozen=True)
class Schema:
    """Where a family of datasets keeps problem and answer.

    problem_fields / answer_fields: candidate column names, first present wins.
    answer: turns the answer cell into the gold string. hub_names: dataset ids that select
    this schema. split: default split for hub loading. id_fields: columns usable as row id.
    """

    name: str
    problem_fields: tuple[str, ...]
    answer_fields: tuple[str, ...]
    answer: Callable[[Any], str] = as_text
    hub_names: tuple[str, ...] = ()
    split: str = "test"
    id_fields: tuple[str, ...] = ("unique_id", "id", "ID")

    def pick(self, columns: set[str] | dict, kind: str) -> str | None:
        """The first candidate column of ``kind`` ("problem" or "answer") present in ``columns``."""
        cands = self.problem_fields if kind == "problem" else self.answer_fields
        return next((c for c in cands if c in columns), None)


SCHEMAS: dict[str, Schema] = {
    s.name: s
    for s in [
        Schema(
            "deepscaler",
            ("problem",),
            ("answer",),
            hub_names=("agentica-org/DeepScaleR-Preview-Dataset",),
            split="train",
        ),
        Schema("math500", ("problem",), ("answer",), hub_names=("HuggingFaceH4/MATH-500",)),
        Schema("gsm8k", ("question",), ("answer",), gsm8k_gold, hub_names=("openai/gsm8k", "gsm8k")),
        Schema(
            "aime24",
            ("Problem", "problem"),
            ("Answer", "answer"),
            hub_names=("HuggingFaceH4/aime_2024", "Maxwell-Jia/AIME_2024"),
            split="train",
        ),
        Schema(
            "aime25",
            ("problem", "question", "Problem"),
            ("answer", "Answer"),
            hub_names=("yentinglin/aime_2025", "opencompass/AIME2025"),
            split="train",
        ),
        Schema(
            "amc23",
            ("problem", "question"),
            ("answer",),
            hub_names=("AI-MO/aimo-validation-amc", "math-ai/amc23"),
            split="train",
        ),
        Schema("minerva", ("question", "problem"), ("answer",), hub_names=("math-ai/minervamath",)),
        Schema(
            "olympiadbench",
            ("question", "problem"),
            ("final_answer", "answer"),
            first_or_joined,
            hub_names=("Hothan/OlympiadBench", "math-ai/olympiadbench"),
        ),
        # pre-rendered rows {"prompt", "answer"}: the prompt (text or chat messages) is also the problem text
        Schema("prompt", ("prompt",), ("answer",)),
    ]
}


def generic_schema(problem_field: str, answer_field: str) -> Schema:
    """A one-off schema for any table: the problem and answer columns named explicitly."""
    return Schema("generic", (problem_field,), (answer_field,))


def schema_for_hub(name: str) -> Schema | None:
    """The registered schema whose hub names include ``name`` (case-insensitive), if any."""
    low = name.lower()
    return next((s for s in SCHEMAS.values() if low in (h.lower() for h in s.hub_names)), None)


def detect_schema(rows: list[dict]) -> Schema:
    """Guess the schema from the columns of the first rows.

    >>> detect_schema([{"question": "q", "answer": "x\\n#### 3"}]).name
    'gsm8k'
    >>> detect_schema([{"Problem": "p", "Answer": 7}]).name
    'aime24'
    """
    if not rows:
        raise DataError("no rows to detect a schema from")
    cols = set().union(*(r.keys() for r in rows[:20]))
    if "final_answer" in cols:
        return SCHEMAS["olympiadbench"]
    if {"question", "answer"} <= cols:
        gsm = any("####" in as_text(r.get("answer")) for r in rows[:20])
        return SCHEMAS["gsm8k" if gsm else "minerva"]
    if {"Problem", "Answer"} <= cols:
        return SCHEMAS["aime24"]
    if {"problem", "answer", "unique_id"} <= cols:
        return SCHEMAS["math500"]
    if {"problem", "answer"} <= cols:
        return SCHEMAS["deepscaler"]
    if {"prompt", "answer"} <= cols:
        return SCHEMAS["prompt"]
    raise DataError(
        f"cannot tell which columns hold problem and answer (columns: {sorted(cols)}); "
        "rename them to problem and answer, or name them in `trlvr data check --schema NAME` (one of "
        f"{', '.join(sorted(SCHEMAS))}) or `--problem-field F --answer-field A`"
    )

"""One raw row -> a :class:`~trlvr.data.schema.Problem`, or the :class:`BadRow` saying which field is
unusable and why.

The checks here are structural: the problem, gold and (optional) ready-made prompt have the types a
loader can trust, are not empty, and the gold's braces balance. A null gold never becomes the
string "None". Whether math-verify can parse a gold is a grader's question: the caller asks it
through ``load_problems(check_gold=...)`` (this package imports no grader). Nothing here reads files.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from trlvr.data.jsonl import json_type
from trlvr.data.schema import Problem, Schema, as_text, first_or_joined


@dataclass(frozen=True)
class BadRow:
    """An unusable row: 1-based ``row`` number, the ``field`` at fault, and why."""

    row: int
    field: str
    reason: str

    def __str__(self) -> str:
        return f"row {self.row}: {self.field} {self.reason}"


class _Bad(Exception):
    """Internal: a cell is unusable; the message is the reason (caught into a BadRow)."""


def braces_balanced(text: str) -> bool:
    """True when the unescaped ``{`` and ``}`` of ``text`` pair up (``\\{``, ``\\}`` are literal).

    >>> braces_balanced("\\\\frac{1}{2}"), braces_balanced("\\\\frac{"), braces_balanced("\\\\{1, 2\\\\}")
    (True, False, True)
    """
    depth, escaped = 0, False
    for ch in text:
        if escaped:
            escaped = False
        elif ch == "\\":
            escaped = True
        elif ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth < 0:
                return False
    return depth == 0


def _messages_ok(value: Any) -> bool:
    return (
        isinstance(value, list)
        and bool(value)
        and all(
            isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str)
            for m in value
        )
    )


def _last_user_text(messages: list[dict]) -> str:
    return next((m["content"].strip() for m in reversed(messages) if m["role"] == "user"), "")


def gold_of(cell: Any, schema: Schema) -> str:
    """The gold string of an answer cell; raises _Bad for a null, non-scalar, non-finite or empty one."""
    if cell is None:
        raise _Bad("is null (expected the gold answer as a string or number)")
    if (
        isinstance(cell, bool)
        or isinstance(cell, dict)
        or (isinstance(cell, (list, tuple)) and schema.answer is not first_or_joined)
    ):
        raise _Bad(f"expected a string or number, got a JSON {json_type(cell)}")
    if isinstance(cell, float) and not math.isfinite(cell) and getattr(cell, "literal", None) is None:
        raise _Bad(f"is {cell} (expected a finite number or a string)")
    gold = schema.answer(cell)
    if not gold:
        raise _Bad("empty (no '#### N' final answer)" if schema.name == "gsm8k" else "empty")
    if gold in ("None", "null", "nan", "NaN"):
        raise _Bad(f"is the text {gold!r} (expected the gold answer)")
    if not braces_balanced(gold):
        raise _Bad(f"has unbalanced braces: {gold[:60]!r}")
    return gold


def problem_of(cell: Any) -> str:
    """The problem text of a problem cell (a string, a number, or chat messages: the last user turn)."""
    if _messages_ok(cell):
        text = _last_user_text(cell)
    elif isinstance(cell, str) or (isinstance(cell, (int, float)) and not isinstance(cell, bool)):
        text = as_text(cell)
    else:
        raise _Bad(f"expected a string, got a JSON {json_type(cell)}")
    if not text:
        raise _Bad("empty")
    return text


def prompt_of(row: dict) -> str | list[dict] | None:
    """A row's ready-made prompt, verbatim (None when the row has none or it is null)."""
    cell = row.get("prompt")
    if cell is None:
        return None
    if isinstance(cell, str):
        if not cell.strip():
            raise _Bad("empty")
        return cell
    if _messages_ok(cell):
        return cell
    raise _Bad(
        f"expected a string or a list of {{role, content}} chat messages, got a JSON {json_type(cell)}"
    )


def row_to_problem(n: int, row: dict, schema: Schema, source: str, tag: str) -> Problem | BadRow:
    """Row ``n`` (1-based) of ``source`` as a Problem, or the BadRow naming its first unusable field.

    ``tag`` prefixes the fallback id (``tag:n``) when no id column is present.
    """
    pf, af = schema.pick(row, "problem"), schema.pick(row, "answer")
    if pf is None:
        return BadRow(n, schema.problem_fields[0], "missing")
    if af is None:
        return BadRow(n, schema.answer_fields[0], "missing")
    field = pf
    try:
        problem = problem_of(row[pf])
        field = af
        answer = gold_of(row[af], schema)
        field = "prompt"
        prompt = prompt_of(row)
    except _Bad as why:
        return BadRow(n, field, str(why))
    rid = next((as_text(row[k]) for k in schema.id_fields if row.get(k) not in (None, "")), f"{tag}:{n}")
    return Problem(rid, problem, answer, source, dict(row), prompt, row=n)

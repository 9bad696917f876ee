"""``load_problems``: any source -> validated ``list[Problem]``; bad rows raise or are listed.

A row is unusable when its problem or answer is missing or empty, or when math-verify cannot
parse its gold answer (it could never be graded). Unusable rows are never dropped silently:
by default :class:`DataError` names the source, the first offending rows (1-based) and the
field; with ``on_bad="skip"`` the good rows come back and ``.skipped`` lists the rest.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from trlvr.data.schema import (
    SCHEMAS,
    DataError,
    Problem,
    Schema,
    detect_schema,
    generic_schema,
    schema_for_hub,
)
from trlvr.data.sources import RG_PREFIX, is_local, parse_rg_source, read_hub, read_local, read_reasoning_gym

SHOW_BAD = 5  # offending rows named in an error message


@dataclass(frozen=True)
class BadRow:
    """An unusable row: 1-based ``row`` number, the ``field`` at fault, and why."""

    row: int
    field: str
    reason: str

    def __str__(self) -> str:
        return f"row {self.row}: {self.field} {self.reason}"


class ProblemList(list):
    """``list[Problem]`` plus ``source``, ``schema`` name and the ``skipped`` rows (``list[BadRow]``)."""

    def __init__(self, items=(), source: str = "", schema: str = "", skipped: list[BadRow] | None = None):
        super().__init__(items)
        self.source, self.schema, self.skipped = source, schema, list(skipped or [])


def _choose_schema(source, rows, schema, problem_field, answer_field, hub_schema) -> Schema:
    if problem_field or answer_field:
        base = SCHEMAS.get(schema) if isinstance(schema, str) else schema
        if not (problem_field and answer_field) and base is None and hub_schema is None and rows:
            try:
                base = detect_schema(rows)
            except DataError:
                base = None  # the missing field falls back to "problem"/"answer"
        base = base or hub_schema
        pf = problem_field or (base.pick(rows[0], "problem") if base and rows else None) or "problem"
        af = answer_field or (base.pick(rows[0], "answer") if base and rows else None) or "answer"
        return generic_schema(pf, af)
    if isinstance(schema, Schema):
        return schema
    if schema is not None:
        if schema not in SCHEMAS:
            raise DataError(
                f"{source}: unknown schema {schema!r}; known: {sorted(SCHEMAS)} (or pass problem_field/answer_field)"
            )
        return SCHEMAS[schema]
    return hub_schema or detect_schema(rows)


def rows_to_problems(
    rows: list[dict], schema: Schema, source: str, verify_answers: bool = True
) -> tuple[list[Problem], list[BadRow]]:
    """Map rows through ``schema``; return (usable problems, bad rows) in row order."""
    tag = Path(source).name if is_local(source) else source
    good: list[tuple[int, Problem]] = []
    bad: list[BadRow] = []
    for n, row in enumerate(rows, 1):
        pf, af = schema.pick(row, "problem"), schema.pick(row, "answer")
        if pf is None:
            bad.append(BadRow(n, schema.problem_fields[0], "missing"))
            continue
        if af is None:
            bad.append(BadRow(n, schema.answer_fields[0], "missing"))
            continue
        problem = str(row[pf] or "").strip()
        answer = schema.answer(row[af])
        if not problem:
            bad.append(BadRow(n, pf, "empty"))
            continue
        if not answer:
            bad.append(
                BadRow(n, af, "empty" if schema.name != "gsm8k" else "empty (no '#### N' final answer)")
            )
            continue
        rid = next((str(row[k]) for k in schema.id_fields if row.get(k) not in (None, "")), f"{tag}:{n}")
        prompt = row.get("prompt") if isinstance(row.get("prompt"), str) else None
        good.append((n, Problem(rid, problem, answer, source, dict(row), prompt)))
    if verify_answers and good:
        from trlvr.rewards import check_golds

        reasons = check_golds([p.answer for _, p in good])
        af_name = {p.id: schema.pick(p.fields, "answer") or "answer" for _, p in good}
        bad += [
            BadRow(n, af_name[p.id], f"not parseable by math-verify ({why}): {p.answer[:60]!r}")
            for (n, p), why in zip(good, reasons, strict=True)
            if why
        ]
        good = [(n, p) for (n, p), why in zip(good, reasons, strict=True) if not why]
    bad.sort(key=lambda b: b.row)
    return [p for _, p in good], bad


def read_rows(source: str, split: str | None = None, schema=None) -> tuple[list[dict], Schema | None]:
    """Raw rows of ``source`` and the schema its hub name implies (None for files)."""
    if source.startswith(RG_PREFIX):
        return read_reasoning_gym(*parse_rg_source(source)), SCHEMAS["minerva"]  # question/answer
    if is_local(source):
        return read_local(source), None
    hub_schema = schema_for_hub(source)
    chosen = SCHEMAS.get(schema) if isinstance(schema, str) else schema
    default_split = (chosen or hub_schema).split if (chosen or hub_schema) else "train"
    return read_hub(source, split or default_split), hub_schema


def load_problems(
    source: str,
    split: str | None = None,
    limit: int | None = None,
    schema: str | Schema | None = None,
    problem_field: str | None = None,
    answer_field: str | None = None,
    on_bad: str = "raise",
    verify_answers: bool = True,
) -> ProblemList:
    """Load problems from a local file, a hub dataset name or ``reasoning-gym:TASK?size=N&seed=S``.

    The schema comes from ``schema`` (a :data:`SCHEMAS` key), else the hub name, else the
    columns; ``problem_field``/``answer_field`` override the columns. ``limit`` keeps the
    first N rows (before validation). ``on_bad``: "raise" (default) or "skip".

    >>> probs = load_problems("reasoning-gym:chain_sum?size=3&seed=0")   # doctest: +SKIP
    >>> len(probs), probs[0].answer, probs.skipped                       # doctest: +SKIP
    (3, '-14282', [])
    """
    if on_bad not in ("raise", "skip"):
        raise ValueError(f"on_bad must be 'raise' or 'skip', not {on_bad!r}")
    rows, hub_schema = read_rows(source, split, schema)
    if limit is not None:
        rows = rows[:limit]
    if not rows:
        raise DataError(f"{source}: no rows")
    sch = _choose_schema(source, rows, schema, problem_field, answer_field, hub_schema)
    good, bad = rows_to_problems(rows, sch, source, verify_answers)
    if bad and on_bad == "raise":
        shown = "; ".join(str(b) for b in bad[:SHOW_BAD])
        more = f" (and {len(bad) - SHOW_BAD} more)" if len(bad) > SHOW_BAD else ""
        raise DataError(
            f"{source}: {len(bad)} of {len(rows)} rows unusable (schema {sch.name}): {shown}{more}. "
            "Fix them, or pass on_bad='skip' to load the rest; `trlvr data check` lists them."
        )
    return ProblemList(good, source=source, schema=sch.name, skipped=bad)


def reasoning_gym(task: str, size: int = 100, seed: int = 0) -> ProblemList:
    """Procedurally generated problems from the reasoning-gym package, e.g. "chain_sum".

    Answers are checked with math-verify like any other source.
    """
    return load_problems(f"{RG_PREFIX}{task}?size={size}&seed={seed}")

"""``load_problems``: any source -> validated ``list[Problem]``; bad rows raise or are listed.

This is the one path from a file (or hub name, or reasoning-gym task) to problems: training, eval,
the demo and `trlvr data check` all come through it. A row is unusable when its problem or gold is
missing, null, of the wrong type or empty, its gold's braces do not balance, its ready-made
``prompt`` is not text or chat messages, or (when the caller passes ``check_gold``, e.g.
``trlvr.rewards.check_golds``) the grader cannot parse its gold. Unusable rows are never dropped
silently: by default :class:`DataError` names the source, the first offending rows (1-based) and
the field; with ``on_bad="skip"`` the good rows come back and ``.skipped`` lists the rest.
This module imports no grader: loading data never starts grading processes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from trlvr.data.evalsets import is_panel, read_panel
from trlvr.data.rows import BadRow, row_to_problem
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
GoldCheck = Callable[[Sequence[str]], Sequence["str | None"]]  # golds -> None (parses) or the reason


class ProblemList(list):
    """``list[Problem]`` plus ``source``, ``schema`` name, the ``skipped`` rows (``list[BadRow]``),
    ``total`` rows read (after ``limit``) and the :class:`Schema` itself (``spec``, when known)."""

    def __init__(
        self,
        items=(),
        source: str = "",
        schema: str = "",
        skipped: list[BadRow] | None = None,
        total: int = 0,
        spec: Schema | None = None,
    ):
        super().__init__(items)
        self.source, self.schema, self.skipped = source, schema, list(skipped or [])
        self.total = total or len(self) + len(self.skipped)
        self.spec = spec

    def answer_field(self, problem: Problem) -> str:
        """The column ``problem``'s gold came from ("answer" when the schema is not known)."""
        return (self.spec.pick(problem.fields, "answer") if self.spec else None) or "answer"


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
        columns = {k for r in rows if isinstance(r, dict) for k in r}
        for what, name in (("problem", problem_field), ("answer", answer_field)):
            if name and name not in columns:  # a misspelt column: one line, not every row reported missing
                raise DataError(f"{source}: {what} field {name!r} is in no row (columns: {sorted(columns)})")
        return generic_schema(pf, af)
    if isinstance(schema, Schema):
        return schema
    if schema is not None:
        if schema not in SCHEMAS:
            raise DataError(
                f"{source}: unknown schema {schema!r}; known: {sorted(SCHEMAS)} (or pass "
                "problem_field/answer_field)"
            )
        return SCHEMAS[schema]
    if hub_schema is not None:
        return hub_schema
    try:
        return detect_schema(rows)
    except DataError as e:
        raise DataError(f"{source}: {e}") from None


def rows_to_problems(
    rows: list[dict], schema: Schema, source: str, check_gold: GoldCheck | None = None
) -> tuple[list[Problem], list[BadRow]]:
    """Map rows through ``schema``; return (usable problems, bad rows) in row order."""
    tag = Path(source).name if is_local(source) else source
    good: list[Problem] = []
    bad: list[BadRow] = []
    for n, row in enumerate(rows, 1):
        out = row_to_problem(n, row, schema, source, tag)
        (bad if isinstance(out, BadRow) else good).append(out)
    if check_gold is not None and good:
        reasons = list(check_gold([p.answer for p in good]))
        bad += [
            BadRow(
                p.row,
                schema.pick(p.fields, "answer") or "answer",
                "not parseable" + ("" if why == "unparseable" else f" ({why})") + f": {p.answer[:60]!r}",
            )
            for p, why in zip(good, reasons, strict=True)
            if why
        ]
        good = [p for p, why in zip(good, reasons, strict=True) if not why]
    bad.sort(key=lambda b: b.row)
    return good, bad


def read_rows(source: str, split: str | None = None, schema=None) -> tuple[list[dict], Schema | None]:
    """Raw rows of ``source`` and the schema its hub name implies (None for files)."""
    if source.startswith(RG_PREFIX):
        return read_reasoning_gym(*parse_rg_source(source)), SCHEMAS["minerva"]  # question/answer
    if is_panel(source):  # the paper's panels, as `trlvr data build-evals` wrote them
        return read_panel(source), None
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
    check_gold: GoldCheck | None = None,
    skip_flag: str | None = None,
) -> ProblemList:
    """Load problems from a local file, a hub dataset name or ``reasoning-gym:TASK?size=N&seed=S``.

    The schema comes from ``schema`` (a `trlvr.data.SCHEMAS` key), else the hub name, else the
    columns; ``problem_field``/``answer_field`` override the columns. ``limit`` keeps the
    first N rows (before validation). ``on_bad``: "raise" (default) or "skip". ``check_gold``:
    a grader's gold check (``trlvr.rewards.check_golds``), golds -> None or why it cannot parse.
    A source with no usable row raises DataError either way. ``skip_flag``: the command-line flag that
    skips bad rows, named in the refusal (e.g. ``--skip-bad-rows``); without one the refusal names none
    (a command without such a flag: fix the rows).

    >>> probs = load_problems("reasoning-gym:chain_sum?size=3&seed=0")   # doctest: +SKIP
    >>> len(probs), probs[0].answer, probs.skipped                       # doctest: +SKIP
    (3, '-14282', [])
    """
    if on_bad not in ("raise", "skip"):
        raise ValueError(f"on_bad must be 'raise' or 'skip', not {on_bad!r}")
    probs = read_problems(source, split, limit, schema, problem_field, answer_field, check_gold)
    bad = probs.skipped
    if bad and (on_bad == "raise" or not probs):
        shown = "; ".join(str(b) for b in bad[:SHOW_BAD])
        more = f" (and {len(bad) - SHOW_BAD} more)" if len(bad) > SHOW_BAD else ""
        what = f"{len(bad)} of {probs.total} rows unusable" if probs else f"none of {probs.total} rows usable"
        fix = (
            ("Fix them" + (f", or pass {skip_flag} to use the rest" if skip_flag else "") + "; ")
            if probs
            else ""
        )
        raise DataError(
            f"{source}: {what} (schema {probs.schema}): {shown}{more}. {fix}`trlvr data check` lists them."
        )
    return probs


def read_problems(
    source: str,
    split: str | None = None,
    limit: int | None = None,
    schema: str | Schema | None = None,
    problem_field: str | None = None,
    answer_field: str | None = None,
    check_gold: GoldCheck | None = None,
) -> ProblemList:
    """Every row of ``source`` mapped: the usable problems, with ``.skipped`` holding the rest (never
    raises for bad rows; raises DataError for a source that cannot be read or has no rows)."""
    if limit is not None and limit < 1:
        raise DataError(f"{source}: limit must be a positive number of rows, got {limit}")
    rows, hub_schema = read_rows(source, split, schema)
    if limit is not None:
        rows = rows[:limit]
    if not rows:
        raise DataError(f"{source}: no rows (empty dataset); expected at least one problem")
    sch = _choose_schema(source, rows, schema, problem_field, answer_field, hub_schema)
    good, bad = rows_to_problems(rows, sch, source, check_gold)
    return ProblemList(good, source=source, schema=sch.name, skipped=bad, total=len(rows), spec=sch)

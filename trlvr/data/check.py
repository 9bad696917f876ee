"""``check_source``: count a source's usable and unusable rows, and its duplicates, without raising
for bad rows; ``find_duplicates`` over any list of problems.

Duplicates matter downstream: eval keys samples by :func:`~trlvr.data.schema.problem_key` (text +
gold) and reports by id, so two rows with one id, or one problem twice, would merge or collide.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field

from trlvr.data.loaders import GoldCheck, read_problems
from trlvr.data.rows import BadRow
from trlvr.data.schema import Problem, Schema, problem_key


@dataclass(frozen=True)
class Duplicate:
    """Rows that collide. kind: "id" (one id on several rows), "problem" (same text and gold) or
    "text" (same text with different golds); ``value`` is the id, or the text's first 60 characters."""

    kind: str
    value: str
    rows: tuple[int, ...]

    def __str__(self) -> str:
        what = {
            "id": "share id",
            "problem": "repeat the problem",
            "text": "repeat the problem text with different golds",
        }
        rows = ", ".join(map(str, self.rows[:8])) + (
            f" (+{len(self.rows) - 8})" if len(self.rows) > 8 else ""
        )
        return f"rows {rows} {what[self.kind]} {self.value!r}"


def find_duplicates(problems: list[Problem]) -> list[Duplicate]:
    """Duplicate ids, duplicate problems (same :func:`problem_key`) and one text with several golds.

    Row numbers come from ``Problem.row`` (list position + 1 when unset), in order of first row.

    >>> ps = [Problem("a", "q", "1", "f"), Problem("a", "q", "1", "f"), Problem("b", "q", "2", "f")]
    >>> [(d.kind, d.rows) for d in find_duplicates(ps)]
    [('id', (1, 2)), ('problem', (1, 2)), ('text', (1, 2, 3))]
    """
    by_id: dict[str, list[int]] = defaultdict(list)
    by_key: dict[str, list[int]] = defaultdict(list)
    by_text: dict[str, list[int]] = defaultdict(list)
    golds: dict[str, set[str]] = defaultdict(set)
    for i, p in enumerate(problems, 1):
        n = p.row if p.row is not None else i
        by_id[p.id].append(n)
        by_key[problem_key(p)].append(n)
        by_text[p.problem].append(n)
        golds[p.problem].add(p.answer)
    text_of = {problem_key(p): p.problem for p in problems}
    out = [Duplicate("id", k, tuple(r)) for k, r in by_id.items() if len(r) > 1]
    out += [Duplicate("problem", text_of[k][:60], tuple(r)) for k, r in by_key.items() if len(r) > 1]
    out += [Duplicate("text", t[:60], tuple(r)) for t, r in by_text.items() if len(golds[t]) > 1]
    return sorted(out, key=lambda d: (["id", "problem", "text"].index(d.kind), d.rows))


@dataclass(frozen=True)
class CheckReport:
    """total/ok row counts, ``bad`` = {reason: count}, ``first`` = the first offending rows,
    ``duplicates`` among the usable rows, ``notes``: usable rows whose gold the grader's note check
    flags (a gold that reads one way raw and another once its Unicode forms are normalised)."""

    source: str
    schema: str
    total: int
    ok: int
    bad: dict[str, int] = field(default_factory=dict)
    first: list[BadRow] = field(default_factory=list)
    duplicates: list[Duplicate] = field(default_factory=list)
    notes: list[BadRow] = field(default_factory=list)

    @property
    def n_bad(self) -> int:
        return self.total - self.ok

    @property
    def clean(self) -> bool:
        """Every row usable and no duplicates (`trlvr data check` exits 0 only then; notes are flags,
        not faults: the row is graded by its normalised reading)."""
        return self.n_bad == 0 and not self.duplicates

    def format(self, show: int = 10) -> str:
        """Human-readable summary, one line per reason, per shown row and per shown duplicate."""
        lines = [
            (
                f"{self.source}: {self.total} rows, {self.ok} usable, {self.n_bad} unusable (schema "
                f"{self.schema})"
            )
        ]
        lines += [f"  {n:6d} x {reason}" for reason, n in sorted(self.bad.items())]
        lines += [f"  {self.source} {b}" for b in self.first]  # each offending row names its file
        if self.duplicates:
            kinds = Counter(d.kind for d in self.duplicates)
            names = {
                "id": "duplicate ids",
                "problem": "duplicate problems",
                "text": "texts with several golds",
            }
            lines.append("  duplicates: " + ", ".join(f"{kinds[k]} {names[k]}" for k in names if kinds[k]))
            lines += [f"  {d}" for d in self.duplicates[:show]]
        if self.notes:
            lines.append(
                f"  {len(self.notes)} gold(s) read differently raw and normalised (graded as normalised):"
            )
            lines += [f"  {self.source} {b}" for b in self.notes[:show]]
        return "\n".join(lines)


def _reason_key(b: BadRow) -> str:
    # "not parseable (...): '<gold>'" / "has unbalanced braces: '<gold>'" -> group by the part before the gold
    return f"{b.field} {b.reason.split(':')[0]}"


def check_source(
    source: str,
    split: str | None = None,
    schema: str | Schema | None = None,
    problem_field: str | None = None,
    answer_field: str | None = None,
    limit: int | None = None,
    show: int = 10,
    check_gold: GoldCheck | None = None,
    note_gold: GoldCheck | None = None,
) -> CheckReport:
    """Read every row of ``source`` and summarise; arguments as `trlvr.data.load_problems`.
    ``note_gold`` (e.g. ``trlvr.rewards.gold_reading_changes``): golds -> None or a note, for usable rows.

    Raises DataError only when the source itself cannot be read (or has no rows).
    """
    probs = read_problems(source, split, limit, schema, problem_field, answer_field, check_gold)
    bad = Counter(_reason_key(b) for b in probs.skipped)
    notes = []
    if note_gold is not None and probs:
        said = note_gold([p.answer for p in probs])
        notes = [BadRow(p.row, probs.answer_field(p), why) for p, why in zip(probs, said, strict=True) if why]
    return CheckReport(
        source,
        probs.schema,
        probs.total,
        len(probs),
        dict(bad),
        probs.skipped[:show],
        find_duplicates(probs),
        notes,
    )

"""``check_source``: count a source's usable and unusable rows without raising."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from trlvr.data.loaders import BadRow, load_problems


@dataclass(frozen=True)
class CheckReport:
    """total/ok row counts, ``bad`` = {reason: count}, ``first`` = the first offending rows."""

    source: str
    schema: str
    total: int
    ok: int
    bad: dict[str, int] = field(default_factory=dict)
    first: list[BadRow] = field(default_factory=list)

    @property
    def n_bad(self) -> int:
        return self.total - self.ok

    def format(self) -> str:
        """Human-readable summary, one line per reason and per shown row."""
        lines = [
            f"{self.source}: {self.total} rows, {self.ok} usable, {self.n_bad} unusable (schema {self.schema})"
        ]
        lines += [f"  {n:6d} x {reason}" for reason, n in sorted(self.bad.items())]
        lines += [f"  {b}" for b in self.first]
        return "\n".join(lines)


def _reason_key(b: BadRow) -> str:
    # "not parseable by math-verify (...): '<gold>'" -> group by the part before the gold text
    return f"{b.field} {b.reason.split(':')[0]}"


def check_source(
    source: str, split=None, schema=None, problem_field=None, answer_field=None, limit=None, show: int = 10
) -> CheckReport:
    """Load ``source`` with ``on_bad="skip"`` and summarise; arguments as :func:`load_problems`."""
    probs = load_problems(
        source,
        split=split,
        limit=limit,
        schema=schema,
        problem_field=problem_field,
        answer_field=answer_field,
        on_bad="skip",
    )
    bad = Counter(_reason_key(b) for b in probs.skipped)
    return CheckReport(
        source, probs.schema, len(probs) + len(probs.skipped), len(probs), dict(bad), probs.skipped[:show]
    )

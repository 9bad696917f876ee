"""Held-out validation slices of a training set, chosen by content so every reader agrees.

`holdout_split(problems, n, seed)` puts the n problems with the smallest seeded hash of their
text + gold into the validation slice: the choice does not depend on row order, a file
re-saved in another order gives the same slice, and training and selection (which both call
this, or read the slice training recorded) can never disagree about which problems are held out.
"""

from __future__ import annotations

import hashlib

from trlvr.data.schema import DataError


def _rank(problem, seed: int) -> str:
    text = f"{seed}\x00{getattr(problem, 'prompt', None) or problem.problem}\x00{problem.answer}"
    return hashlib.sha256(text.encode()).hexdigest()


def holdout_split(problems: list, n: int, seed: int = 0) -> tuple[list, list]:
    """(train, held_out): `n` problems held out, the rest for training, each in the input order.

    >>> from trlvr.data.schema import Problem
    >>> ps = [Problem(str(i), f"q{i}", str(i), "f", {}) for i in range(10)]
    >>> train, val = holdout_split(ps, 3)
    >>> len(train), len(val), set(p.id for p in train) & set(p.id for p in val)
    (7, 3, set())
    """
    if n < 0:
        raise DataError(f"holdout: the number of held-out problems must be >= 0, got {n}")
    if n >= len(problems):
        raise DataError(
            f"holdout: cannot hold out {n} of {len(problems)} problems and still train on some; "
            f"hold out fewer (--holdout 0: none)"
        )
    if n == 0:
        return list(problems), []
    chosen = set(sorted(range(len(problems)), key=lambda i: _rank(problems[i], seed))[:n])
    train = [p for i, p in enumerate(problems) if i not in chosen]
    held = [p for i, p in enumerate(problems) if i in chosen]
    return train, held

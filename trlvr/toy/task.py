"""Toy task: multi-step integer arithmetic word problems with one verifiable integer answer.

A problem is a start amount and 2-4 operations (add, subtract, double), e.g.

    Mia has 17 marbles. She finds 8 more. Then she loses 6. How many marbles does Mia have now?

Operands are 2..MAX_OPERAND and every intermediate result and answer lies in 0..MAX_VALUE: small enough
that a ~1M-parameter model learns the arithmetic in a few CPU minutes, and a ~0.1M one half of it.
Generation is deterministic from a seed; the train/test split is decided by hashing the problem
text, so a problem text can never be in both splits whatever the seeds.
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass

MAX_VALUE = 9
MAX_OPERAND = 6
NAMES = [
    ("Mia", "She", "she"),
    ("Leo", "He", "he"),
    ("Ava", "She", "she"),
    ("Sam", "He", "he"),
    ("Zoe", "She", "she"),
    ("Max", "He", "he"),
    ("Ivy", "She", "she"),
    ("Ben", "He", "he"),
]
ITEMS = ["marbles", "apples", "stickers", "coins", "books", "shells", "cards", "pens"]
ADD_VERBS = ["finds {n} more", "buys {n} more", "gets {n} more", "wins {n} more"]
SUB_VERBS = ["loses {n}", "gives away {n}", "sells {n}", "uses {n}"]
MUL_PHRASE = "doubles the {item}"
TEST_FRACTION = 0.2  # share of the hash space that is test


@dataclass(frozen=True)
class Op:
    """One operation: kind in {"add", "sub", "mul"} and its operand."""

    kind: str
    n: int

    def apply(self, x: int) -> int:
        return {"add": x + self.n, "sub": x - self.n, "mul": x * self.n}[self.kind]

    @property
    def symbol(self) -> str:
        return {"add": "+", "sub": "-", "mul": "*"}[self.kind]

    @property
    def word(self) -> str:
        return {"add": "plus", "sub": "minus", "mul": "times"}[self.kind]


@dataclass(frozen=True)
class ToyProblem:
    """A toy word problem: `text`, `start` value, the `ops`, and the integer `answer`.

    Not `trlvr.data.Problem` (a dataset row): a toy problem knows its steps, and becomes a row
    {"problem", "answer", "prompt"} in the toy world's data files.
    """

    text: str
    start: int
    ops: tuple[Op, ...]
    answer: int

    def steps(self) -> list[tuple[int, Op, int]]:
        """(left operand, op, result) for every step, in order."""
        out, x = [], self.start
        for op in self.ops:
            y = op.apply(x)
            out.append((x, op, y))
            x = y
        return out


def split_of(text: str) -> str:
    """'train' or 'test', from a hash of the problem text (stable across seeds and runs)."""
    h = int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big")
    return "test" if (h % 1000) < TEST_FRACTION * 1000 else "train"


def _sample_problem(rng: random.Random) -> ToyProblem:
    name, subj_cap, _subj = rng.choice(NAMES)
    item = rng.choice(ITEMS)
    n_ops = rng.choice([2, 3, 3, 4])
    x = rng.randint(2, MAX_VALUE)
    start = x
    ops: list[Op] = []
    for _ in range(n_ops):
        choices = []
        if x <= MAX_VALUE - 2:
            choices += ["add"] * 3
        if x >= 2:
            choices += ["sub"] * 3
        if 1 <= x <= MAX_VALUE // 2 and not (ops and ops[-1].kind == "mul"):
            choices += ["mul"]
        kind = rng.choice(choices)
        if kind == "add":
            n = rng.randint(2, min(MAX_OPERAND, MAX_VALUE - x))
        elif kind == "sub":
            n = rng.randint(2, min(MAX_OPERAND, x))
        else:
            n = 2
        op = Op(kind, n)
        ops.append(op)
        x = op.apply(x)
    sentences = [f"{name} has {start} {item}."]
    for i, op in enumerate(ops):
        if op.kind == "add":
            verb = rng.choice(ADD_VERBS).format(n=op.n)
        elif op.kind == "sub":
            verb = rng.choice(SUB_VERBS).format(n=op.n)
        else:
            verb = MUL_PHRASE.format(item=item)
        sentences.append(f"{subj_cap} {verb}." if i == 0 else f"Then {subj_cap.lower()} {verb}.")
    sentences.append(f"How many {item} does {name} have now?")
    return ToyProblem(" ".join(sentences), start, tuple(ops), x)


def generate_problems(n: int, split: str, seed: int = 0) -> list[ToyProblem]:
    """`n` distinct problems of `split` ('train' or 'test'), deterministic from `seed`."""
    if split not in ("train", "test"):
        raise ValueError(f"split must be 'train' or 'test', got {split!r}")
    rng = random.Random(f"trlvr-toy-{split}-{seed}")
    seen: set[str] = set()
    out: list[ToyProblem] = []
    tries = 0
    while len(out) < n:
        tries += 1
        if tries > 200 * n + 1000:
            raise RuntimeError(f"could not draw {n} distinct {split} problems")
        p = _sample_problem(rng)
        if p.text in seen or split_of(p.text) != split:
            continue
        seen.add(p.text)
        out.append(p)
    return out


def make_splits(n_train: int, n_test: int, seed: int = 0) -> tuple[list[ToyProblem], list[ToyProblem]]:
    """Train and test problems; asserts the two splits share no problem text."""
    train = generate_problems(n_train, "train", seed)
    test = generate_problems(n_test, "test", seed)
    overlap = {p.text for p in train} & {p.text for p in test}
    assert not overlap, f"train/test overlap: {sorted(overlap)[:3]}"
    return train, test

"""The kinds of value a user gives trlvr (a count, a seed, a share, a path to write), one checker each.

    p.add_argument("--n", type=COUNT)             argparse: "argument --n: expected an integer >= 1, got '0'"
    lora_r: Annotated[int, COUNT] = ...            a run-config field (trlvr.config): "lora_r: must be an
                                                   integer in [1, 2**63 - 1] (got 0)", the same rule
    COUNT.problem(value)                           None when an already parsed value is good, else the rule

Every option of every command and every run-config field declares its kind: the bad-input battery
(tests/test_cli_battery.py) walks the parsers and the config dataclasses, feeds each kind the values
users get wrong (negative, zero, huge, NaN, inf, empty, not a number, a missing path, a file where
a folder goes, ...) and fails for an option without a kind, so a new option is checked the day it
is added. A kind is argparse's `type=`: it turns the text into the value or raises
`argparse.ArgumentTypeError` with one line (argparse prefixes the flag). `base` says what the
battery feeds it: "int", "float", "ints" (a comma-separated list), "text", "dir" (a folder to
write), "file" (a file to write), "choice" or "switch".

What this file does not know: which option means what, or anything of trlvr (it imports none of it,
so every layer may use it). It only says what a good value looks like.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

SEED_MAX = 2**32 - 1  # numpy's legacy seed range, which transformers.set_seed (training) needs
INT_MAX = 2**63 - 1  # the largest count torch and numpy hold (an int64); a larger one overflows inside them


class Kind:
    """A named rule for one value: `kind(text)` for argparse, `kind.problem(value)` for a parsed one."""

    def __init__(
        self,
        name: str,
        base: str,
        expected: str,
        convert: Callable[[str], Any],
        accept: Callable[[Any], bool] = lambda v: True,
        check: Callable[[Any], str | None] | None = None,
        finish: Callable[[Any], Any] | None = None,
    ):
        self.name, self.base, self.expected = name, base, expected
        self.__name__ = name  # argparse names a type by it
        self._convert, self._accept, self._check, self._finish = convert, accept, check, finish

    def __repr__(self) -> str:
        return f"<kind {self.name}: {self.expected}>"

    def __call__(self, text: str):
        try:
            value = self._convert(text)
        except (ValueError, TypeError, OverflowError, KeyError):
            raise argparse.ArgumentTypeError(f"expected {self.expected}, got {text!r}") from None
        if not self._accepts(value):
            raise argparse.ArgumentTypeError(f"expected {self.expected}, got {text!r}")
        why = self._check(value) if self._check else None
        if why is not None:  # the rule's own words, naming the value once
            raise argparse.ArgumentTypeError(why if text in why else f"{text}: {why}")
        return self._finish(value) if self._finish else value

    def problem(self, value) -> str | None:
        """None when `value` (already parsed) is good; else what was expected, as "expected ..." text."""
        if not self._accepts(value):
            return f"expected {self.expected}"
        return self._check(value) if self._check else None

    def _accepts(self, value) -> bool:
        try:
            return bool(self._accept(value))
        except (TypeError, ValueError):
            return False

    def rule(self, value) -> str | None:
        """`problem` phrased for a config key: "must be an integer >= 1" (None when good)."""
        why = self.problem(value)
        if why is None:
            return None
        return "must be " + why.removeprefix("expected ") if why.startswith("expected ") else why


def _int(text) -> int:
    if isinstance(text, bool):
        raise TypeError(text)
    if isinstance(text, int):
        return text
    return int(str(text).strip())


def _float(text) -> float:
    if isinstance(text, bool):
        raise TypeError(text)
    return float(text)


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _finite(v) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)


def count(most: int | None = None) -> Kind:
    """An integer >= 1 and <= `most` (a count sizing memory up front) or INT_MAX (fits an int64)."""
    if most is None:
        return Kind(
            "count", "int", "an integer in [1, 2**63 - 1]", _int, lambda v: _is_int(v) and 1 <= v <= INT_MAX
        )
    return Kind(
        f"count up to {most}",
        "int",
        f"an integer in [1, {most}]",
        _int,
        lambda v: _is_int(v) and 1 <= v <= most,
    )


COUNT = count()
NONNEG = Kind(
    "non-negative integer",
    "int",
    "an integer in [0, 2**63 - 1]",
    _int,
    lambda v: _is_int(v) and 0 <= v <= INT_MAX,
)
SEED = Kind(
    "seed", "int", f"an integer seed in [0, {SEED_MAX}]", _int, lambda v: _is_int(v) and 0 <= v <= SEED_MAX
)
ANY_INT = Kind("integer", "int", "an integer", _int, _is_int)  # a hash seed: any integer is one
SHARE = Kind("share", "float", "a number in [0, 1]", _float, lambda v: _finite(v) and 0.0 <= v <= 1.0)
UNIT = Kind("fraction", "float", "a number in (0, 1]", _float, lambda v: _finite(v) and 0.0 < v <= 1.0)
DROPOUT = Kind("dropout", "float", "a number in [0, 1)", _float, lambda v: _finite(v) and 0.0 <= v < 1.0)
NONNEG_FLOAT = Kind(
    "non-negative number", "float", "a finite number >= 0", _float, lambda v: _finite(v) and v >= 0
)
POSITIVE_FLOAT = Kind(
    "positive number", "float", "a finite number > 0", _float, lambda v: _finite(v) and v > 0
)


def _text(text) -> str:
    if not isinstance(text, str) or not text.strip():
        raise ValueError(text)
    return text


def _filled(v) -> bool:
    return isinstance(v, str) and bool(v.strip())


TEXT = Kind("text", "text", "a non-empty value", _text, _filled)


def _ints(kind: Kind, distinct: bool = False) -> Callable[[str], list[int]]:
    def convert(text: str) -> list[int]:
        values = [_int(x) for x in _text(text).split(",") if x.strip()]
        if (
            not values
            or any(kind.problem(v) for v in values)
            or (distinct and len(set(values)) != len(values))
        ):
            raise ValueError(text)
        return values

    return convert


COUNTS = Kind("counts", "ints", "comma-separated integers >= 1", _ints(COUNT))
SEEDS = Kind(
    "seeds", "ints", f"distinct comma-separated integer seeds in [0, {SEED_MAX}]", _ints(SEED, distinct=True)
)


def _shares(text: str) -> list[float]:
    values = [_float(x) for x in _text(text).split(",") if x.strip()]
    if not values or any(SHARE.problem(v) for v in values):
        raise ValueError(text)
    return values


SHARES = Kind("shares", "floats", "comma-separated numbers in [0, 1]", _shares)


def choice(*values: str, name: str = "choice") -> Kind:
    """One of `values` (a config field's; argparse options use `choices=`)."""
    return Kind(name, "choice", "one of " + ", ".join(values), _text, lambda v: v in values)


def _steps(v) -> bool:
    return _is_int(v) and (v >= 1 or v == -1)


MAX_STEPS = Kind(
    "max steps",
    "int",
    "an integer in [1, 2**63 - 1], or -1 (train num_train_epochs)",
    _int,
    lambda v: _steps(v) and v <= INT_MAX,
)


SWITCH = Kind(
    "switch",
    "switch",
    "true or false",
    lambda t: {"true": True, "false": False}[str(t).lower()],
    lambda v: isinstance(v, bool),
)
SWITCH_OR_AUTO = Kind(
    "switch or auto",
    "choice",
    "true, false or auto",
    lambda t: {"true": True, "false": False, "auto": "auto"}[str(t).lower()],
    lambda v: v is True or v is False or v == "auto",
)


def _blocker(path: Path) -> Path | None:
    """The path itself or the first folder above it that exists and is not a directory."""
    return next((q for q in (path, *path.parents) if q.exists() and not q.is_dir()), None)


def _out_dir(value) -> str | None:
    p = Path(value)
    q = _blocker(p)
    if q is not None:
        where = "" if q == p else f" ({q}, above {value})"
        return f"a file{where} is in the way; pass a directory"
    return None


def _out_file(value) -> str | None:
    p = Path(value)
    if p.is_dir():
        return "a directory is in the way; pass a file name"
    q = _blocker(p.parent)
    return None if q is None else f"a file ({q}, above {value}) is in the way; pass a path in a directory"


OUT_DIR = Kind(
    "output directory",
    "dir",
    "a directory to write (a path that is not a file, nor under one)",
    _text,
    _filled,
    check=_out_dir,
)
OUT_FILE = Kind(
    "output file",
    "file",
    "a file to write (not a directory, nor under a file)",
    _text,
    _filled,
    check=_out_file,
)


def text_kind(
    name: str, expected: str, check: Callable[[str], str | None], finish: Callable[[str], Any] | None = None
) -> Kind:
    """A non-empty text that `check` judges (None: good; else why not, in one line), handed on as `finish`
    makes it (default: the text itself). A layer that knows the rule defines its own (`trlvr.models.DEVICE`:
    a device on this machine; `trlvr.memory.GPU_MEMORY`: a memory size or a GPU name); this module imports
    no trlvr."""
    return Kind(name, "text", expected, _text, _filled, check=check, finish=finish)


CONTEXT = Kind(
    "context length",
    "int",
    "an integer in [0, 2**63 - 1] or 'auto'",
    lambda t: "auto" if t == "auto" else _int(t),
    lambda v: v == "auto" or (_is_int(v) and 0 <= v <= INT_MAX),
    finish=lambda v: None if v == 0 else v,
)  # 0: flat


def kind_of(action: argparse.Action) -> Kind | str | None:
    """An argparse option's kind: its `type=` Kind, "choice" (choices=), "switch" (a flag), or None."""
    if isinstance(action.type, Kind):
        return action.type
    if action.choices is not None:
        return "choice"
    if action.nargs == 0:
        return "switch"
    return None

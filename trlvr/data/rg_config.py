"""A reasoning-gym task's own config fields from the text of a source string, typed by its dataclass.

``reasoning-gym:chain_sum?size=200&seed=0&min_digits=1&max_terms=3`` -> ``{"min_digits": 1,
"max_terms": 3}`` for ``reasoning_gym``'s ``ChainSumConfig``. The valid keys and each value's type
come from the task's config dataclass (never a list kept here). A key given twice is a list value
(``operators=+&operators=-``), so no value needs a comma (``--data`` splits on commas). Supported
field types: int, float, str, bool, ``Literal[...]``, enums (by name or value), ``Optional[...]``
(``none`` = None) and lists/tuples/sequences of those; a field of another type (a nested config,
a date) cannot be set from a source string and is refused by name.
"""

from __future__ import annotations

import dataclasses
import enum
import types
import typing
from collections.abc import Sequence

from trlvr.data.schema import DataError

RESERVED = ("size", "seed")  # read by the source itself, not passed as task fields
_TRUE, _FALSE = ("true", "1", "yes"), ("false", "0", "no")
_SEQUENCES = (list, tuple, Sequence, typing.Sequence)


def field_types(config_cls: type) -> dict[str, object]:
    """{field name: resolved type} of a config dataclass, in declaration order."""
    hints = typing.get_type_hints(config_cls)
    return {f.name: hints.get(f.name, f.type) for f in dataclasses.fields(config_cls) if f.init}


def type_name(tp: object) -> str:
    """A short readable name for a field type: ``int``, ``list[str]``, ``'simple' | 'natural'``."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is typing.Literal:
        return " | ".join(repr(a) for a in args)
    if _is_optional(tp):
        return f"{type_name(_unwrap_optional(tp))} or none"
    if origin in _SEQUENCES:
        return f"list of {type_name(args[0]) if args else 'str'}"
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return " | ".join(m.name for m in tp)
    return getattr(tp, "__name__", str(tp))


def _is_optional(tp: object) -> bool:
    return typing.get_origin(tp) in (typing.Union, types.UnionType) and type(None) in typing.get_args(tp)


def _unwrap_optional(tp: object) -> object:
    rest = [a for a in typing.get_args(tp) if a is not type(None)]
    return rest[0] if len(rest) == 1 else typing.Union[tuple(rest)]  # noqa: UP007


def _scalar(text: str, tp: object) -> object:
    """One value of scalar type ``tp`` from ``text``; ValueError when it does not parse."""
    if _is_optional(tp):
        return None if text.lower() == "none" else _scalar(text, _unwrap_optional(tp))
    if typing.get_origin(tp) is typing.Literal:
        for choice in typing.get_args(tp):
            if str(choice) == text:
                return choice
        raise ValueError
    if tp is bool:
        if text.lower() in _TRUE + _FALSE:
            return text.lower() in _TRUE
        raise ValueError
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        for member in tp:
            if text in (member.name, str(member.value)):
                return member
        raise ValueError
    if tp in (int, float, str):
        return tp(text)
    raise TypeError(tp)


def _is_scalar(tp: object) -> bool:
    if _is_optional(tp):
        return _is_scalar(_unwrap_optional(tp))
    if typing.get_origin(tp) is typing.Literal or tp in (bool, int, float, str):
        return True
    return isinstance(tp, type) and issubclass(tp, enum.Enum)


def _item_type(tp: object) -> object | None:
    """The item type of a list/tuple/sequence field made of scalars (bare ``tuple``: str), else None."""
    if tp in (list, tuple):
        return str
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin not in _SEQUENCES:
        return None
    item = args[0] if args else str
    if origin is tuple and len(args) > 1 and args[1] is not Ellipsis:
        return None  # a fixed-length tuple of mixed types
    return item if _is_scalar(item) else None


def typed_value(where: str, key: str, texts: list[str], tp: object) -> object:
    """The value of field ``key`` (type ``tp``) from its one or more texts; DataError naming ``where``
    and the key when it does not parse or cannot be given in a source string."""
    inner = _unwrap_optional(tp) if _is_optional(tp) else tp
    item = None if _is_scalar(tp) else _item_type(inner)
    if item is None and not _is_scalar(tp):
        raise DataError(f"{where}: field {key!r} has type {type_name(tp)}, which a source string cannot set")
    if item is None and len(texts) > 1:
        raise DataError(f"{where}: field {key!r} given {len(texts)} times; it takes one {type_name(tp)}")
    if item is not None and inner is not tp and [t.lower() for t in texts] == ["none"]:
        return None
    want = tp if item is None else item
    values = []
    for text in texts:
        try:
            values.append(_scalar(text, want))
        except ValueError:
            raise DataError(f"{where}: field {key!r} must be {type_name(want)}, got {text!r}") from None
    if item is None:
        return values[0]
    return tuple(values) if inner is tuple or typing.get_origin(inner) is tuple else values


def task_config(where: str, task: str, config_cls: type, query: dict[str, list[str]]) -> dict[str, object]:
    """Typed keyword arguments for ``config_cls`` from ``query`` ({key: [texts]}, ``size``/``seed``
    excluded); an unknown key is one DataError naming it and listing the task's fields."""
    types_ = field_types(config_cls)
    unknown = sorted(set(query) - set(types_))
    if unknown:
        valid = ", ".join(k for k in types_ if k not in RESERVED)
        raise DataError(
            f"{where}: expected reasoning-gym:TASK?size=N&seed=S (unknown keys: {unknown}); "
            f"other keys are {task}'s config fields: {valid}"
        )
    return {k: typed_value(where, k, v, types_[k]) for k, v in query.items()}

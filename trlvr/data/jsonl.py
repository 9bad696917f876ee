"""The one JSONL reader: a row per line, errors naming the file and line.

What it does not know: schemas (see `trlvr.data.schema`) or samples (see `trlvr.eval.store`).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from trlvr.data.schema import DataError, JsonNumber


def not_json(e: json.JSONDecodeError, line: bool = False) -> str:
    """`not valid JSON (what, where)`. Some of json's messages end in their own "at" ("Unterminated string
    starting at"): the place follows it once."""
    where = f"line {e.lineno}, column {e.colno}" if line else f"column {e.colno}"
    return f"not valid JSON ({e.msg}{' ' if e.msg.endswith(' at') else ' at '}{where})"


def json_type(value: Any) -> str:
    """The JSON name of a cell's type, for messages.

    >>> json_type(None), json_type([1]), json_type({}), json_type(True), json_type(2.5)
    ('null', 'array', 'object', 'boolean', 'number')
    """
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, (list, tuple)):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__


class DuplicateKey(ValueError):
    """A JSON object with a key written twice (the last value would win silently)."""

    def __init__(self, key: str):
        super().__init__(f"key {key!r} is written twice in one object; keep one")
        self.key = key


def strict_object(pairs: list[tuple[str, Any]]) -> dict:
    """`json.loads(..., object_pairs_hook=strict_object)`: an object, or DuplicateKey for a key written twice
    (the YAML loader's rule, `trlvr.config.read_yaml`, for JSON data: a gold written twice is refused)."""
    out = {}
    for key, value in pairs:
        if key in out:
            raise DuplicateKey(key)
        out[key] = value
    return out


def loads_strict(text: str) -> Any:
    """The one strict JSON loader of a value given as text (a JSON argument on the command line or in a
    config): `json.loads` with `strict_object` (DuplicateKey for a key written twice, at any depth)."""
    return json.loads(text, object_pairs_hook=strict_object)


def read_jsonl(
    path: str | Path,
    *,
    tolerate_torn_tail: bool = False,
    limit: int | None = None,
    read: Callable[[Path], bytes] | None = None,
) -> list[dict]:
    """Rows of a JSONL file, each a JSON object. Blank lines are skipped.

    tolerate_torn_tail: a last line that does not parse and has no trailing newline (a write cut
    short by a kill) is ignored instead of raising. Any other bad line raises DataError naming
    `path:line` (an object with a key written twice too: `strict_object`). Never writes.
    `read(path) -> bytes`: how the file is read (default: as is; `trlvr.artifacts.read_checked`: against a
    manifest).
    """
    path = Path(path)
    try:
        raw = (read or Path.read_bytes)(path)
    except FileNotFoundError:
        raise DataError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise DataError(f"{path}: is a directory, expected a .jsonl file") from None
    except OSError as e:
        raise DataError(f"{path}: cannot read ({e.strerror or type(e).__name__})") from None
    try:
        text = raw.decode("utf-8-sig")  # a leading byte-order mark is not part of the first row
    except UnicodeDecodeError as e:
        line = raw[: e.start].count(b"\n") + 1
        raise DataError(f"{path}:{line}: not valid UTF-8 (byte {e.start}); save the file as UTF-8") from None
    lines = text.split("\n")
    rows = []
    for i, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line, parse_float=JsonNumber, object_pairs_hook=strict_object)  # literals kept
        except DuplicateKey as e:
            raise DataError(f"{path}:{i}: {e}") from None
        except json.JSONDecodeError as e:
            if tolerate_torn_tail and i == len(lines) and not text.endswith("\n"):
                break
            raise DataError(f"{path}:{i}: {not_json(e)}") from None
        if not isinstance(row, dict):
            raise DataError(f"{path}:{i}: expected a JSON object per line, got a JSON {json_type(row)}")
        rows.append(row)
        if limit is not None and len(rows) >= limit:
            break
    return rows

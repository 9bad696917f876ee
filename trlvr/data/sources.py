"""Raw rows from a source: a local .jsonl/.json/.parquet file, a hub dataset, or reasoning-gym.

Returns plain ``list[dict]`` rows (row numbers are list index + 1); mapping rows to
:class:`~trlvr.data.schema.Problem` happens in :mod:`trlvr.data.rows`. Every way a source cannot
be read (missing path, a directory, not UTF-8, not JSON, not a table, corrupt parquet, no network)
is one DataError naming the file (and line) and what was expected.
"""

from __future__ import annotations

import difflib
import json
import os
import socket
from pathlib import Path
from typing import NamedTuple
from urllib.parse import unquote, urlparse

from trlvr.data.jsonl import DuplicateKey, json_type, not_json, read_jsonl, strict_object
from trlvr.data.rg_config import RESERVED, task_config
from trlvr.data.schema import DataError, JsonNumber

LOCAL_SUFFIXES = (".jsonl", ".json", ".parquet")
RG_PREFIX = "reasoning-gym:"
_OFFLINE_HINT = (
    "no network access to the Hugging Face Hub; download the split as JSONL (or parquet) "
    "on a machine with access and pass the path of that local file instead, e.g. "
    "load_problems('gsm8k-test.jsonl') or `trlvr data check gsm8k-test.jsonl`"
)
_EXPECTED = "expected a .jsonl, .json or .parquet file"


def is_local(source: str) -> bool:
    """True when ``source`` names a local path rather than a hub dataset id.

    A path is local when it exists, ends in a data suffix, starts like a path (``/``, ``.``,
    ``~``), has more than one ``/`` (a hub id is ``name`` or ``owner/name``), or its first
    component is a local directory.

    >>> is_local("openai/gsm8k"), is_local("/no/such/file"), is_local("x.parquet")
    (False, True, True)
    """
    if source.startswith(RG_PREFIX):
        return False
    p = Path(source).expanduser()
    if source.endswith(LOCAL_SUFFIXES) or source.startswith(("/", ".", "~")) or source.count("/") > 1:
        return True
    return p.exists() or ("/" in source and Path(source.split("/")[0]).is_dir())


def read_local(path: str | Path) -> list[dict]:
    """Rows of a .jsonl, .json (list of rows, {"data": rows} or column lists) or .parquet file."""
    path = Path(path).expanduser()
    if path.is_dir():
        inside = sorted(p.name for p in path.iterdir() if p.suffix in LOCAL_SUFFIXES)[:5]
        hint = f" (it holds {', '.join(inside)}: pass one of them)" if inside else ""
        raise DataError(f"{path}: is a directory; {_EXPECTED}{hint}")
    if not path.exists():
        raise DataError(f"{path}: no such file; {_EXPECTED} (or a hub dataset name like openai/gsm8k)")
    if path.suffix == ".jsonl":
        return read_jsonl(path)
    if path.suffix == ".parquet":
        return _read_parquet(path)
    if path.suffix != ".json":
        raise DataError(f"{path}: unsupported file type {path.suffix or '(no suffix)'!r}; {_EXPECTED}")
    raw = path.read_bytes()
    try:
        data = json.loads(
            raw.decode("utf-8"), parse_float=JsonNumber, object_pairs_hook=strict_object
        )  # as jsonl
    except DuplicateKey as e:
        raise DataError(f"{path}: {e}") from None
    except UnicodeDecodeError as e:
        raise DataError(f"{path}: not valid UTF-8 (byte {e.start}); save the file as UTF-8") from None
    except json.JSONDecodeError as e:
        raise DataError(f"{path}: {not_json(e, line=True)}") from None
    if isinstance(data, dict) and isinstance(data.get("data"), list):
        data = data["data"]
    if isinstance(data, dict) and data and all(isinstance(v, list) for v in data.values()):
        if len({len(v) for v in data.values()}) > 1:
            lens = {k: len(v) for k, v in data.items()}
            raise DataError(f"{path}: column lists of different lengths {lens}; expected one value per row")
        keys = list(data)  # column-oriented: {"problem": [...], "answer": [...]}
        data = [dict(zip(keys, vals, strict=True)) for vals in zip(*data.values(), strict=True)]
    if not isinstance(data, list):
        raise DataError(f"{path}: expected a JSON list of row objects, got a JSON {json_type(data)}")
    bad = next((i for i, r in enumerate(data, 1) if not isinstance(r, dict)), None)
    if bad is not None:
        raise DataError(f"{path}: row {bad}: expected a JSON object, got a JSON {json_type(data[bad - 1])}")
    return data


def _read_parquet(path: Path) -> list[dict]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        return pq.read_table(path).to_pylist()
    except (pa.ArrowException, OSError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise DataError(f"{path}: not a readable parquet file ({first})") from None


def _env_offline() -> bool:
    return any(
        os.environ.get(k, "").lower() in ("1", "true", "yes")
        for k in ("HF_DATASETS_OFFLINE", "HF_HUB_OFFLINE")
    )


def hub_reachable(timeout: float = 2.0) -> bool:
    """One TCP connect to the hub endpoint: the hub client retries for minutes when offline."""
    host = urlparse(os.environ.get("HF_ENDPOINT", "https://huggingface.co")).hostname or "huggingface.co"
    try:
        with socket.create_connection((host, 443), timeout=timeout):
            return True
    except OSError:
        return False


def read_hub(name: str, split: str) -> list[dict]:
    """Rows of a hub dataset split via ``datasets.load_dataset``; fails at once when offline.

    With HF_DATASETS_OFFLINE=1 a cached copy is used if there is one.
    """
    offline = _env_offline()
    if not offline and not hub_reachable():
        raise DataError(f"{name}: {_OFFLINE_HINT} (or set HF_DATASETS_OFFLINE=1 to use a cached copy)")
    import datasets

    try:
        ds = datasets.load_dataset(name, split=split)
    except Exception as exc:  # datasets raises many types (ConnectionError, FileNotFoundError, ...)
        hint = _OFFLINE_HINT if offline else "check the dataset name and split, or pass a local file"
        raise DataError(f"{name} (split {split!r}): {type(exc).__name__}: {exc}; {hint}") from exc
    return [dict(r) for r in ds]


class RgSource(NamedTuple):
    """A parsed ``reasoning-gym:`` source: task name, size, seed and the task's own config fields."""

    task: str
    size: int
    seed: int
    config: dict


def _split_query(source: str, query: str) -> dict[str, list[str]]:
    """``a=1&b=x&b=y`` -> {"a": ["1"], "b": ["x", "y"]}; percent-escapes decoded, "+" kept literal
    (an operator, not a space)."""
    out: dict[str, list[str]] = {}
    for part in filter(None, query.split("&")):
        key, eq, value = part.partition("=")
        if not eq or not key:
            raise DataError(
                f"{source}: {part!r} is not KEY=VALUE; expected reasoning-gym:TASK?size=N&seed=S&KEY=VALUE"
            )
        out.setdefault(unquote(key), []).append(unquote(value))
    return out


def _rg_config_class(source: str, task: str) -> type:
    import reasoning_gym  # noqa: F401  (fills the registry)
    from reasoning_gym.factory import DATASETS

    if task not in DATASETS:
        close = difflib.get_close_matches(task, DATASETS, n=3)
        hint = f"did you mean {', '.join(close)}?" if close else f"{len(DATASETS)} tasks, e.g. chain_sum"
        raise DataError(f"{source}: unknown reasoning-gym task {task!r} ({hint})")
    return DATASETS[task][1]


def parse_rg_source(source: str) -> RgSource:
    """``"reasoning-gym:chain_sum?size=100&seed=0&min_digits=1"`` -> its task, size (default 100),
    seed (default 0) and the task's config fields, typed by reasoning-gym's config dataclass
    (:mod:`trlvr.data.rg_config`; a list field repeats its key: ``operators=+&operators=-``).

    >>> parse_rg_source("reasoning-gym:chain_sum?size=5&max_terms=3")
    RgSource(task='chain_sum', size=5, seed=0, config={'max_terms': 3})
    """
    rest = source[len(RG_PREFIX) :]
    task, _, query = rest.partition("?")
    if not task:
        raise DataError(f"{source}: expected reasoning-gym:TASK?size=N&seed=S (no task name)")
    q = _split_query(source, query)
    own = {k: q.pop(k) for k in RESERVED if k in q}
    config = task_config(source, task, _rg_config_class(source, task), q)
    try:
        size, seed = (int(own[k][-1]) if k in own else d for k, d in (("size", 100), ("seed", 0)))
    except ValueError:
        raise DataError(
            f"{source}: size and seed must be integers, e.g. reasoning-gym:{task}?size=100&seed=0"
        ) from None
    return RgSource(task, size, seed, config)


def read_reasoning_gym(task: str, size: int, seed: int, config: dict | None = None) -> list[dict]:
    """Procedurally generated rows from ``reasoning_gym.create_dataset`` (question/answer/metadata);
    ``config``: the task's own config fields (:func:`parse_rg_source` types them)."""
    import reasoning_gym

    config = config or {}
    try:
        ds = reasoning_gym.create_dataset(task, size=size, seed=seed, **config)
    except Exception as exc:  # unknown names raise bare errors, a config's validate() bare assertions
        given = "".join(f"&{k}={v}" for k, v in config.items())
        why = " ".join(str(exc).split()) or "invalid config"
        raise DataError(
            f"reasoning-gym:{task}?size={size}&seed={seed}{given}: {type(exc).__name__}: {why}"
        ) from exc
    return [{"question": e["question"], "answer": e["answer"], "metadata": e.get("metadata", {})} for e in ds]

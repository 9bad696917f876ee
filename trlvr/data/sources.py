"""Raw rows from a source: a local .jsonl/.json/.parquet file, a hub dataset, or reasoning-gym.

Returns plain ``list[dict]`` rows (row numbers are list index + 1); mapping rows to
:class:`~trlvr.data.schema.Problem` happens in :mod:`trlvr.data.rows`. Every way a source cannot
be read (missing path, a directory, not UTF-8, not JSON, not a table, corrupt parquet, no network)
is one DataError naming the file (and line) and what was expected.
"""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path
from urllib.parse import parse_qs, urlparse

from trlvr.data.jsonl import json_type, read_jsonl
from trlvr.data.schema import DataError

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
        data = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as e:
        raise DataError(f"{path}: not valid UTF-8 (byte {e.start}); save the file as UTF-8") from None
    except json.JSONDecodeError as e:
        raise DataError(f"{path}: not valid JSON ({e.msg} at line {e.lineno}, column {e.colno})") from None
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


def parse_rg_source(source: str) -> tuple[str, int, int]:
    """``"reasoning-gym:chain_sum?size=100&seed=0"`` -> ("chain_sum", 100, 0).

    >>> parse_rg_source("reasoning-gym:chain_sum?size=5")
    ('chain_sum', 5, 0)
    """
    rest = source[len(RG_PREFIX) :]
    task, _, query = rest.partition("?")
    q = {k: v[-1] for k, v in parse_qs(query).items()}
    unknown = set(q) - {"size", "seed"}
    if not task or unknown:
        raise DataError(
            f"{source}: expected reasoning-gym:TASK?size=N&seed=S (unknown keys: {sorted(unknown)})"
        )
    try:
        return task, int(q.get("size", 100)), int(q.get("seed", 0))
    except ValueError:
        raise DataError(
            f"{source}: size and seed must be integers, e.g. reasoning-gym:{task}?size=100&seed=0"
        ) from None


def read_reasoning_gym(task: str, size: int, seed: int) -> list[dict]:
    """Procedurally generated rows from ``reasoning_gym.create_dataset`` (question/answer/metadata)."""
    import reasoning_gym

    try:
        ds = reasoning_gym.create_dataset(task, size=size, seed=seed)
    except Exception as exc:  # unknown task names raise a bare error inside the registry
        raise DataError(f"reasoning-gym task {task!r}: {type(exc).__name__}: {exc}") from exc
    return [{"question": e["question"], "answer": e["answer"], "metadata": e.get("metadata", {})} for e in ds]

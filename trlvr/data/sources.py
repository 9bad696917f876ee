"""Raw rows from a source: a local .jsonl/.json/.parquet file, a hub dataset, or reasoning-gym.

Returns plain ``list[dict]`` rows (row numbers are list index + 1); mapping rows to
:class:`~trlvr.data.schema.Problem` happens in :mod:`trlvr.data.loaders`.
"""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path
from urllib.parse import parse_qs, urlparse

from trlvr.data.schema import DataError

LOCAL_SUFFIXES = (".jsonl", ".json", ".parquet")
RG_PREFIX = "reasoning-gym:"
_OFFLINE_HINT = (
    "no network access to the Hugging Face Hub; download the split as JSONL (or parquet) "
    "on a machine with access and pass the path of that local file instead, e.g. "
    "load_problems('gsm8k-test.jsonl') or `trlvr data check gsm8k-test.jsonl`"
)


def is_local(source: str) -> bool:
    """True when ``source`` names a local file (by suffix or because it exists)."""
    return source.endswith(LOCAL_SUFFIXES) or Path(source).is_file()


def read_local(path: str | Path) -> list[dict]:
    """Rows of a .jsonl, .json (list of rows, {"data": rows} or column lists) or .parquet file."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"{path}: no such file")
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        return pq.read_table(path).to_pylist()
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".jsonl":
        rows = []
        for n, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise DataError(f"{path}: line {n} is not valid JSON ({exc.msg})") from None
        return rows
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise DataError(f"{path}: not valid JSON ({exc.msg} at line {exc.lineno})") from None
    if isinstance(data, dict) and isinstance(data.get("data"), list):
        data = data["data"]
    if isinstance(data, dict) and data and all(isinstance(v, list) for v in data.values()):
        keys = list(data)  # column-oriented: {"problem": [...], "answer": [...]}
        data = [dict(zip(keys, vals, strict=True)) for vals in zip(*data.values(), strict=True)]
    if not isinstance(data, list) or not all(isinstance(r, dict) for r in data):
        raise DataError(f"{path}: expected a list of objects (rows)")
    return data


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
    return task, int(q.get("size", 100)), int(q.get("seed", 0))


def read_reasoning_gym(task: str, size: int, seed: int) -> list[dict]:
    """Procedurally generated rows from ``reasoning_gym.create_dataset`` (question/answer/metadata)."""
    import reasoning_gym

    try:
        ds = reasoning_gym.create_dataset(task, size=size, seed=seed)
    except Exception as exc:  # unknown task names raise a bare error inside the registry
        raise DataError(f"reasoning-gym task {task!r}: {type(exc).__name__}: {exc}") from exc
    return [{"question": e["question"], "answer": e["answer"], "metadata": e.get("metadata", {})} for e in ds]

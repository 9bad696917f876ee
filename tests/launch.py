"""Run a `trlvr` command in N processes (torchrun) or one, and record what each process did.

`launch(argv, processes, dump)` runs `python -m torch.distributed.run --nproc_per_node N -m trlvr.cli.main
argv` (or the command alone for 1 process) with a sitecustomize loaded in every process that appends,
per rank, to dump/writes<rank>.jsonl every write to an evaluation directory or a selection record, and
to dump/batches<rank>.jsonl the signature of every batch the process generated.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

RECORDER = """
import json, os
if os.environ.get("TRLVR_TEST_DUMP"):
    from trlvr.eval import runner as _runner, store as _store
    from trlvr.experiments import selection as _selection

    _dump, _rank = os.environ["TRLVR_TEST_DUMP"], os.environ.get("RANK", "0")

    def _log(kind, what):
        with open(os.path.join(_dump, f"{kind}{_rank}.jsonl"), "a") as f:
            f.write(json.dumps(what) + "\\n")

    def _recording(name, fn):
        def wrapped(self, *a, **k):
            _log("writes", {"what": name, "dir": str(self.path)})
            return fn(self, *a, **k)
        return wrapped

    for _name in ("append", "rewrite", "write", "clear", "repair_tail"):
        setattr(_store.EvalDir, _name, _recording(_name, getattr(_store.EvalDir, _name)))
    _write_record = _selection.rundir.write_record

    def _record(path, obj):
        _log("writes", {"what": "record", "dir": str(path)})
        return _write_record(path, obj)

    _selection.rundir.write_record = _record
    _rows = _runner._Run._batch_rows

    def _batch_rows(self, pair, b, batch):
        _log("batches", {"batch": batch.signature, "protocol": batch.protocol, "items": [list(x) for x in batch.items]})
        return _rows(self, pair, b, batch)

    _runner._Run._batch_rows = _batch_rows
"""


def launch(
    argv: list[str],
    processes: int,
    dump: Path,
    *,
    python: str = sys.executable,
    timeout: int = 900,
    env: dict | None = None,
) -> subprocess.CompletedProcess:
    """Run `trlvr argv` in `processes` processes; the recorder's files go to `dump` (created)."""
    dump.mkdir(parents=True, exist_ok=True)
    (dump / "sitecustomize.py").write_text(RECORDER)
    launcher = ["-m", "torch.distributed.run", "--nproc_per_node", str(processes)] if processes > 1 else []
    cmd = [python, *launcher, "-m", "trlvr.cli.main", *argv]
    full_env = dict(
        os.environ,
        PYTHONPATH=f"{dump}{os.pathsep}{ROOT}{os.pathsep}{ROOT / 'tests'}",
        OMP_NUM_THREADS="1",
        TRLVR_TEST_DUMP=str(dump),
        **(env or {}),
    )
    for var in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        if processes == 1:
            full_env.pop(var, None)
    return subprocess.run(cmd, cwd=ROOT, env=full_env, capture_output=True, text=True, timeout=timeout)


def records(dump: Path, kind: str, rank: int) -> list[dict]:
    path = dump / f"{kind}{rank}.jsonl"
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []

"""The evaluation directory on disk: its sample store, its metadata files and its lock.

    DIR/samples.jsonl     one row per completion, appended and fsynced per finished batch
    DIR/samples-other-plans.jsonl  finished rows of another plan (another --limit, --n or --suite),
                          moved out of samples.jsonl when a run finishes and taken back by a run that
                          plans them again (never read as the evaluation's samples)
    DIR/fingerprint.json  everything that determined the samples (see `trlvr.eval.fingerprint`)
    DIR/config.json       the run's settings, written once the run holds the lock
    DIR/per_problem.json  {benchmark: {metric: {problem_id: value}}}
    DIR/results.json      metrics with CIs (see `trlvr.eval.runner.write_results`)
    DIR/trlvr_manifest.json   every file's size and sha256, written last by a finished run (`seal`):
                          `problem()` is `trlvr.artifacts`' check of a finished evaluation
    DIR/.lock, .lock.pid  the exclusive lock of the run writing DIR, and its holder's pid
    DIR/replaced-<time>/  an earlier run set aside by `--fresh` (`EvalDir.clear`)

The names, the lock and the JSON record helpers are `trlvr.rundir`'s (re-exported here for the
modules that read an evaluation directory).

Readers (`read_samples`, `read_json`) never write: a torn last line (a write cut short by a kill)
is skipped, and only the run holding the lock cuts it from the file (`EvalDir.repair_tail`).

What this file does not know: what a row means, metrics, models.
"""

from __future__ import annotations

import json
import os
from contextlib import contextmanager
from pathlib import Path

from trlvr import artifacts, rundir
from trlvr.data import read_jsonl
from trlvr.errors import UserError
from trlvr.rundir import CONFIG, FINGERPRINT, OTHER_SAMPLES, PER_PROBLEM, RESULTS, SAMPLES
from trlvr.rundir import write_record as write_json

__all__ = [
    "CONFIG",
    "FINGERPRINT",
    "PER_PROBLEM",
    "RESULTS",
    "SAMPLES",
    "BY",
    "EvalDir",
    "read_json",
    "read_samples",
    "write_json",
]
BY = "trlvr eval"  # who locks an evaluation directory (trlvr.rundir.LOCKS)
REQUIRED_FIELDS = ("benchmark", "protocol", "problem_id", "sample_idx", "reward", "finish_reason")


def _read_checked(path: Path) -> bytes:
    try:
        return artifacts.read_checked(path)
    except artifacts.Changed as e:
        raise rundir.changed_error(path, e) from None


def read_samples(path: str | Path, *, checked: bool = False) -> list[dict]:
    """Rows of a samples.jsonl ([] when there is none), each checked for the fields every reader needs.
    `checked`: a reader of a finished evaluation: the bytes read are those its manifest recorded (one read,
    `trlvr.artifacts.read_checked`), or a one-line UserError naming the file."""
    path = Path(path)
    if not path.exists():
        return []
    rows = read_jsonl(path, tolerate_torn_tail=True, read=_read_checked if checked else None)
    for i, r in enumerate(rows, 1):
        for key in REQUIRED_FIELDS:
            if key not in r:
                raise UserError(f"{path}: row {i} lacks field {key!r}")
    return rows


def read_json(path: str | Path, what: str = "file", *, checked: bool = False) -> dict:
    """A JSON object file; a missing or unreadable one is a UserError naming it (`trlvr.rundir.read_record`;
    `checked`: against the manifest beside it, in the same read)."""
    obj = rundir.read_record(path, checked=checked)
    if obj is None:
        raise UserError(f"{what} not found: {path}")
    return obj


def check_finished(path: str | Path) -> None:
    """UserError (one line) unless `path` is an evaluation a reader can trust (`trlvr.artifacts.problem` of
    `trlvr.rundir.EVALUATION_RESULTS`: its tables there, every file whole, none its manifest lists missing
    or cut short, none changed since: every listed file's sha256, `deep`): `trlvr report`, `trlvr compare` and
    the seed-group readers call it before reading. An evaluation is small (JSON and one JSONL of text), so a
    reader hashes all of it: what a table was computed from (samples.jsonl) counts as much as the table; the
    files a reader then parses are read through `read_checked` (`read_json`/`read_samples(checked=True)`)."""
    if why := artifacts.problem(path, rundir.EVALUATION_RESULTS, deep=True):
        raise UserError(
            f"{path} is not a finished evaluation ({why}): nothing was read; "
            f"run `trlvr eval` into it again (--fresh starts over)"
        )


class EvalDir:
    """One evaluation directory. Writing methods need the lock (`with d.lock(): ...`)."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self._lock = None

    def file(self, name: str) -> Path:
        return self.path / name

    @property
    def samples(self) -> Path:
        return self.path / SAMPLES

    def rows(self) -> list[dict]:
        return read_samples(self.samples)

    @property
    def other_samples(self) -> Path:
        return self.path / OTHER_SAMPLES

    def other_rows(self) -> list[dict]:
        """Finished rows of other plans of this evaluation, kept aside (`rewrite`)."""
        return read_samples(self.other_samples)

    def has_samples(self) -> bool:
        return self.samples.exists() and self.samples.stat().st_size > 0

    @contextmanager
    def lock(self):
        """Hold DIR's exclusive lock (`trlvr.rundir.lock`); a second holder (any process) is refused
        with the holder's pid."""
        with rundir.lock(self.path, by=BY) as held:
            for name in (*rundir.EVAL_OUTPUTS, OTHER_SAMPLES):  # appended to in place: never through a link
                if (self.path / name).is_symlink():
                    raise UserError(
                        f"--out {self.path}: {name} is a symlink (to {os.readlink(self.path / name)}); "
                        "an evaluation writes its own files, never through a link: nothing was written"
                    )
            self._lock = held
            try:
                yield self
            finally:
                self._lock = None

    def _need_lock(self) -> None:
        if self._lock is None:
            raise RuntimeError(f"writing {self.path} needs its lock (use `with EvalDir(...).lock():`)")

    def repair_tail(self) -> int:
        """Cut a torn last line from samples.jsonl (lock owner only); return the bytes removed."""
        self._need_lock()
        if not self.has_samples():
            return 0
        data = self.samples.read_bytes()
        if data.endswith(b"\n"):
            return 0
        keep = data.rfind(b"\n") + 1
        with open(self.samples, "r+b") as f:
            f.truncate(keep)
        return len(data) - keep

    def append(self, rows: list[dict]) -> None:
        """Append rows and fsync, so a kill loses at most the batch being written."""
        self._need_lock()
        with open(self.samples, "a", encoding="utf-8") as f:
            for r in rows:
                f.write(json.dumps(r) + "\n")
            f.flush()
            os.fsync(f.fileno())

    def rewrite(self, rows: list[dict], other: list[dict] | None = None) -> None:
        """Replace samples.jsonl with `rows` atomically; `other` (rows of other plans) replaces
        samples-other-plans.jsonl first, so a kill between the two leaves a row in both, never in neither."""
        self._need_lock()
        if other is not None:
            if other:
                self._replace(self.other_samples, other)
            else:
                self.other_samples.unlink(missing_ok=True)
        self._replace(self.samples, rows)

    @staticmethod
    def _replace(path: Path, rows: list[dict]) -> None:
        tmp = path.with_name(path.name + ".tmp")
        with open(tmp, "w", encoding="utf-8") as f:
            for r in rows:
                f.write(json.dumps(r) + "\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)

    def problem(self, deep: bool = False) -> str | None:
        """Why DIR is not a finished evaluation (`trlvr.artifacts.problem` of
        `trlvr.rundir.EVALUATION_ARTIFACT`: a file a reader opens is missing, cut short or does not parse;
        `deep`: or changed since it was sealed), or None."""
        return artifacts.problem(self.path, rundir.EVALUATION_ARTIFACT, deep=deep)

    def check_samples_unchanged(self) -> None:
        """Before a run reuses DIR's samples (lock owner): samples.jsonl of a sealed evaluation, still of its
        sealed size, must hold the sealed bytes (an edit after the seal is refused in one line naming it; a
        later run that appended or rewrote it, cut off before its own seal, changed its size and is
        resumed)."""
        listed, _ = artifacts.read_manifest(self.path)
        rec = (listed or {}).get(SAMPLES)
        if rec and self.samples.is_file() and self.samples.stat().st_size == rec.get("size"):
            if rec.get("sha256") and artifacts.sha256(self.samples) != rec["sha256"]:
                raise UserError(
                    f"{self.path}: {artifacts.changed_line(SAMPLES)}: its samples are not reused; "
                    "pass --fresh to set them aside and start over"
                )

    def seal(self) -> None:
        """After the last write of a run (lock owner only): every file's size and sha256 into DIR's manifest
        (`trlvr.artifacts.write_manifest`; earlier runs set aside are not this evaluation's)."""
        self._need_lock()
        artifacts.write_manifest(self.path, skip=(f"{rundir.ASIDE_PREFIX}*",))

    def write(self, name: str, obj: dict) -> None:
        self._need_lock()
        write_json(self.path / name, obj)

    def clear(self):
        """Start over (`--fresh`): everything in DIR but the lock moves into DIR/replaced-<time>/
        (`trlvr.rundir.set_aside`: nothing deleted, no file of the earlier run left for a later
        command, e.g. a study's `.done` marker); return that folder (None: DIR was empty)."""
        self._need_lock()
        return rundir.set_aside(self.path, keep=rundir.lock_files(BY))

    def remove_lock_files(self) -> None:
        """After a failed start: drop the lock files (call outside `lock()`)."""
        for name in rundir.lock_files(BY):
            (self.path / name).unlink(missing_ok=True)

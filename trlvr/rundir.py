"""A command's output directory: check that a path can be one, and start over in it without deleting.

    check_dir_path(path, "--out")            # UserError when a file is the path, or sits above it
    set_aside(path, keep=(".lock",))         # start over: move everything in `path` into
                                             # path/replaced-<UTC time>/; return that folder (or None)

Every command that starts over in a used directory (`trlvr train --force`, `trlvr eval --fresh`,
`trlvr demo --fresh`, a study stage run again) calls `set_aside`: the earlier run leaves no file at
the top of the directory that a later command could pick up (checkpoint-*, final/, selected.json,
metrics, eval folders, markers), and nothing is deleted. The folder is named `replaced-<time>` so no
scan of the directory (`checkpoint-*`, `seed-*`, `train-*`) matches it; earlier `replaced-*`
folders stay where they are, and the lock files the caller holds (`keep`) stay too.

What this file does not know: what a run is. It moves folder entries.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from trlvr.errors import UserError

ASIDE_PREFIX = "replaced-"


def check_dir_path(path: str | Path, flag: str) -> None:
    """UserError naming `flag` when `path` cannot be a directory: it is a file, or a file is above it."""
    p = Path(path)
    for q in (p, *p.parents):
        if q.exists() and not q.is_dir():
            where = "" if q == p else f" ({q}, above {path})"
            raise UserError(f"{flag} {path}: a file{where} is in the way; pass a directory")


def is_aside(name: str) -> bool:
    """Whether a folder entry is an earlier run set aside by `set_aside`."""
    return name.startswith(ASIDE_PREFIX)


def _aside_name(directory: Path) -> Path:
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    target, n = directory / f"{ASIDE_PREFIX}{stamp}", 1
    while target.exists():  # two starts in one second
        n += 1
        target = directory / f"{ASIDE_PREFIX}{stamp}-{n}"
    return target


def set_aside(directory: str | Path, keep=(), say=None) -> Path | None:
    """Move every entry of `directory` except `keep` (names) and earlier set-aside folders into a new
    `directory/replaced-<UTC time>/`; return it, or None when there was nothing to move.

    Renames within one directory: atomic per entry, no copy, on any file system. `say(line)` reports
    where the earlier run went (default: one line on stderr); pass `say=False` for silence.
    """
    directory = Path(directory)
    if not directory.is_dir():
        return None
    keep = set(keep)
    entries = sorted(p for p in directory.iterdir() if p.name not in keep and not is_aside(p.name))
    if not entries:
        return None
    target = _aside_name(directory)
    target.mkdir()
    for entry in entries:
        os.replace(entry, target / entry.name)
    if say is not False:
        line = f"started over in {directory}: the earlier run is now in {target} (nothing was deleted)"
        (say or _stderr)(line)
    return target


def _stderr(line: str) -> None:
    print(f"[trlvr] {line}", file=sys.stderr, flush=True)

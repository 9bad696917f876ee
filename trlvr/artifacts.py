"""One definition of a complete artifact: every file the next reader needs is there, whole, and loads.

    write_manifest(folder)                   after a save: every file's size and sha256 in folder/MANIFEST
    problem(folder, CHECKPOINT)              why `folder` is not a complete artifact of that kind, or None
    is_complete(folder, FINAL)               problem(...) is None
    problem(folder, WEIGHTS, deep=True)      also the recorded sha256 of every file a reader of that kind
                                             opens (reads every byte of them; a WEIGHTS reader's: not the
                                             resume state)
    read_checked(path)                       a file's bytes, checked in the same read against the sha256
                                             its folder's manifest records (Changed when they differ)

Kinds (an `Artifact`: the files a reader needs, and what may be missing without harm):
    CHECKPOINT   a `checkpoint-N/` to resume from: the model (config + weights) and the resume state
                 (optimizer, scheduler, RNG, trainer_state.json)
    WEIGHTS      a checkpoint a model is read from (selection, evaluation): config + weights; a checkpoint
                 whose resume state was pruned ("weights only") is complete as WEIGHTS, not as CHECKPOINT
    FINAL        `final/`: config + weights + trainer_state.json (where the run stands)
    the layouts' own kinds (an evaluation folder, a selection) are `trlvr.rundir`'s: EVALUATION_ARTIFACT,
    SELECTION_ARTIFACT

A file "loads" when: a .safetensors header parses and covers the file's size (safetensors checks both);
a torch state (.pt/.pth/.bin, a zip archive) has its central directory (a cut file loses it); a .json
parses; a .jsonl ends with a whole line; any other file is not empty. Every file the manifest lists and
every file at the folder's top is checked, whichever of them a reader opens. Writers add a manifest
(MANIFEST: each file's size and sha256, written last, atomically): a listed file missing or of another
size is torn, whatever its format. A folder without a manifest (written by an older trlvr, or a kill
between the save and the manifest) is judged by the format checks alone. Cheap by default (headers,
sizes, small JSON); `deep=True` hashes.

What this file does not know: trlvr (it imports none of it), runs or commands. It reads folders.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import os
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

MANIFEST = (
    "trlvr_manifest.json"  # in a checkpoint, final/ and a finished evaluation: every file's size and sha256
)
FORMAT = 1
# model files, as transformers / peft name them
CONFIGS = ("config.json", "adapter_config.json")
WEIGHT_FILES = ("model.safetensors", "adapter_model.safetensors", "pytorch_model.bin", "adapter_model.bin")
INDEX_FILES = ("model.safetensors.index.json", "pytorch_model.bin.index.json")
TRAINER_STATE = "trainer_state.json"  # the Trainer's step counter, in final/ and in each checkpoint
# what a checkpoint holds for resuming and the model does not (a "weights only" checkpoint lacks them)
RESUME_STATE = (
    "optimizer.pt",
    "scheduler.pt",
    "scaler.pt",
    "rng_state*.pth",
    "training_args.bin",
    "global_step*",
    "global_step*/*",
    "latest",
    "zero_to_fp32.py",
)
_TORCH_SUFFIXES = (".pt", ".pth", ".bin")


@dataclass(frozen=True)
class Artifact:
    """A kind of folder: `need` holds groups of names (one of each group must be there: "config.json or
    adapter_config.json"; a pattern like "rng_state*.pth" matches any), `model` whether it holds a model
    (weights, or an index with its shards), `optional` the patterns that may be missing although the
    manifest lists them (a pruned checkpoint's resume state)."""

    name: str
    need: tuple[tuple[str, ...], ...] = ()
    model: bool = False
    optional: tuple[str, ...] = field(default=())


WEIGHTS = Artifact("weights", need=(CONFIGS,), model=True, optional=RESUME_STATE + (TRAINER_STATE,))
FINAL = Artifact("final model", need=(CONFIGS, (TRAINER_STATE,)), model=True)
CHECKPOINT = Artifact(
    "checkpoint",
    need=(
        CONFIGS,
        ("optimizer.pt", "global_step*"),
        ("scheduler.pt",),
        (TRAINER_STATE,),
        ("rng_state.pth", "rng_state_*.pth"),
    ),
    model=True,
)


def _matches(name: str, patterns) -> bool:
    return any(fnmatch.fnmatch(name, p) for p in patterns)


def _files(folder: Path) -> list[str]:
    """Every file under `folder` (relative, '/'-separated), the manifest and hidden files (locks, temporary
    files, markers) aside."""
    out = []
    for root, _, names in os.walk(folder):
        for n in names:
            rel = os.path.relpath(os.path.join(root, n), folder).replace(os.sep, "/")
            if rel != MANIFEST and not n.startswith("."):
                out.append(rel)
    return sorted(out)


def sha256(path: str | Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            h.update(block)
    return h.hexdigest()


class Changed(ValueError):
    """A file whose bytes differ from those its folder's manifest recorded (changed since written)."""


def changed_line(rel: str) -> str:
    return f"{rel} changed since it was written (sha256 differs from {MANIFEST})"


def read_checked(path: str | Path) -> bytes:
    """The bytes of `path`, hashed as they are read and compared with the sha256 the manifest beside it
    (path.parent/MANIFEST) records for it: one read, so what is checked is what the caller parses.
    Changed (naming the file) when they differ; a file no manifest lists, or a folder without one, reads as
    is. OSError as `open` raises it."""
    path = Path(path)
    data = path.read_bytes()
    listed, _ = read_manifest(path.parent)
    rec = (listed or {}).get(path.name)
    if rec and rec.get("sha256") and hashlib.sha256(data).hexdigest() != rec["sha256"]:
        raise Changed(changed_line(path.name))
    return data


def list_sizes(folder: str | Path, skip=()) -> dict[str, int]:
    """The files `write_manifest` records in `folder` (`skip`: patterns left out) and their sizes now."""
    folder = Path(folder)
    return {rel: (folder / rel).stat().st_size for rel in _files(folder) if not _matches(rel, skip)}


def write_manifest(folder: str | Path, skip=(), size_only=(), sizes: dict[str, int] | None = None) -> dict:
    """Record every file of `folder` (sizes and sha256; `skip`: patterns left out; `size_only`: patterns
    recorded by size alone, not read: a checkpoint's large resume-state shards) in folder/MANIFEST,
    written last and atomically (temp file + rename), so a reader sees no manifest or a whole one.
    `sizes`: the files as `list_sizes` listed them earlier (a save's, hashed later in another thread); a
    hashed file whose size differs by then raises Changed, and no manifest is written."""
    folder = Path(folder)
    files = {}
    for rel, size in (list_sizes(folder, skip) if sizes is None else sizes).items():
        files[rel] = {"size": size}
        if not _matches(rel, size_only):
            files[rel]["sha256"] = sha256(folder / rel)
            if (now := (folder / rel).stat().st_size) != size:
                raise Changed(f"{rel} changed while its manifest was written ({now} bytes, {size} listed)")
    record = {"format": FORMAT, "files": files}
    tmp = folder / f".{MANIFEST}.{os.getpid()}.tmp"
    tmp.write_text(json.dumps(record, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    os.replace(tmp, folder / MANIFEST)
    return record


def read_manifest(folder: str | Path) -> tuple[dict | None, str | None]:
    """(the manifest's files, None), (None, None) when there is none, (None, why) when it does not read."""
    path = Path(folder) / MANIFEST
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None, None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None, f"{MANIFEST} does not parse"
    files = record.get("files") if isinstance(record, dict) else None
    if not isinstance(files, dict) or not all(
        isinstance(v, dict) and isinstance(v.get("size"), int) for v in files.values()
    ):
        return None, f"{MANIFEST} is not a manifest"
    return files, None


def file_problem(path: str | Path) -> str | None:
    """Why the file at `path` does not load by its format (see the module docstring), or None."""
    path = Path(path)
    name = path.name
    try:
        size = path.stat().st_size
        if name.endswith(".safetensors"):
            from safetensors import safe_open

            try:
                with safe_open(str(path), framework="pt") as f:
                    f.keys()
            except Exception as e:  # safetensors raises its own error type for a cut or corrupt file
                return f"{name} does not load ({' '.join(str(e).split())})"
            return None
        if size == 0:
            return f"{name} is empty"
        if name.endswith(".json"):
            try:
                json.loads(path.read_text(encoding="utf-8"))
            except (UnicodeDecodeError, json.JSONDecodeError):
                return f"{name} does not parse"
            return None
        if name.endswith(".jsonl"):
            with open(path, "rb") as f:
                f.seek(size - 1)
                return None if f.read(1) == b"\n" else f"{name} ends in a cut line"
        if name.endswith(_TORCH_SUFFIXES):
            with open(path, "rb") as f:
                zipped = f.read(4) == b"PK\x03\x04"
            if zipped:
                try:
                    zipfile.ZipFile(path).close()
                except (zipfile.BadZipFile, OSError, ValueError):
                    return f"{name} is cut short (its archive does not open)"
    except OSError as e:
        return f"{name} cannot be read ({e.strerror or e})"
    return None


def _present(folder: Path, pattern: str) -> list[str]:
    return [p.name for p in folder.glob(pattern)]


def _model_files(folder: Path) -> tuple[list[str], str | None]:
    """(the weight files a reader loads, why there are none)."""
    for name in INDEX_FILES:
        index = folder / name
        if index.is_file():
            try:
                shards = sorted(set(json.loads(index.read_text())["weight_map"].values()))
            except (OSError, UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError, AttributeError):
                return [], f"{name} is not a valid weight index"
            return [name, *shards], None
    for name in WEIGHT_FILES:
        if (folder / name).exists():
            return [name], None
    return [], "no weights file"


def weights_problem(folder: str | Path) -> str | None:
    """Why the weights of any model folder (trlvr's or not) do not load by their format (a safetensors header
    against the file's size, a torch archive's directory: `file_problem`), or None; cheap, reads no tensor.
    A folder without weights files is the loader's to judge (None)."""
    folder = Path(folder)
    weights, why = _model_files(folder)
    for rel in weights if not why else ():
        if (folder / rel).is_file() and (why := file_problem(folder / rel)):
            return why
    return None


def problem(folder: str | Path, kind: Artifact, *, deep: bool = False) -> str | None:
    """Why `folder` is not a complete `kind`, in a few words ("optimizer.pt is cut short ..."), or None.
    `deep`: also compare the sha256 of every listed file a reader of `kind` opens (all but `kind.optional`:
    a WEIGHTS reader never opens the resume state) with the manifest's: one streaming read of each, done
    just before the reader loads it (the bytes are then in the page cache: the load reads no disk twice)."""
    folder = Path(folder)
    if not folder.is_dir():
        return "not a folder"
    listed, why = read_manifest(folder)
    if why:
        return why
    needed: list[str] = []
    for group in kind.need:
        found = [n for pattern in group for n in _present(folder, pattern)]
        if not found:
            return f"no {' or '.join(group)}"
        needed += found
    if kind.model:
        weights, why = _model_files(folder)
        if why:
            return why
        needed += weights
    for rel in needed:
        if not (folder / rel).exists():
            return f"{rel} is missing"
    present = sorted(p.name for p in folder.iterdir() if p.is_file() and not p.name.startswith("."))
    for rel in dict.fromkeys([*needed, *(listed or {}), *present]):  # torn is torn, whoever reads which file
        if (folder / rel).is_file() and (why := file_problem(folder / rel)):
            return why
    for rel, rec in (listed or {}).items():
        path = folder / rel
        if not path.is_file():
            if _matches(rel, kind.optional):
                continue
            return f"{rel} is missing (listed in {MANIFEST})"
        if path.stat().st_size != rec["size"]:
            return f"{rel} is cut short or changed ({path.stat().st_size} bytes, {rec['size']} recorded)"
        if deep and rec.get("sha256") and not _matches(rel, kind.optional) and sha256(path) != rec["sha256"]:
            return changed_line(rel)
    return None


def is_complete(folder: str | Path, kind: Artifact, *, deep: bool = False) -> bool:
    """Whether `folder` is a complete `kind` (`problem` is None)."""
    return problem(folder, kind, deep=deep) is None

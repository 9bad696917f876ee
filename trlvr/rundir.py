"""The one run-directory module: a directory's layout, its lock, its identity, and starting over in it.

    RUN_FILE, FINAL, SELECTED_FILE, RESULTS, ...   every file and folder name of a run or evaluation
                                             directory (no other module spells them)
    checkpoints(run), checkpoint_step(path)  the `checkpoint-N` folders of a training run, newest first
    EVALUATION_ARTIFACT, SELECTION_ARTIFACT, EVALUATION_RESULTS   the kinds of artifact these layouts hold,
                                             for `trlvr.artifacts.is_complete` (a checkpoint's and final/'s
                                             are its own)
    train_state(run), resume_plan(run, max_steps)   where a training directory stands (new, started,
                                             finished) and what `--resume` does to it (`TrainState`)
    newest_step(run)                         the newest checkpoint's (or final/'s) step
    with lock(path, by="trlvr train"):       a second holder (any process, any command of `LOCKS` on the same
        ...                                  lock file) is refused: one line with the first holder's pid and
                                             command and the flag to choose another directory
    check_unlocked(run, "trlvr train", flag) a reader refused while a writer holds the folder
    read_record(path), write_record(path, obj)   a JSON record: bad JSON is one line naming the file;
                                             written atomically (temp file + rename)
    differences(old, new, ignore=("problems",))  ["key: old -> new", ...] over nested keys
    check_identity(path, RUN_FILE, new, compare, force=..., what=..., fix=...)
                                             read what made the directory, compare it with what would
                                             make it now, refuse (one line, differences listed) unless forced
    set_aside(path, keep=lock_files("trlvr train"))   start over: move everything into path/replaced-<time>/
                                             in one rename (`finish_swap(path)` completes one cut off)
    check_dir_path(path, "--out")            UserError when a file is the path, or sits above it
    folder_kind(path)                        what a folder holds: "training run", "evaluation", "study", ...
    check_report_path(path, "--out")         a report's file, resolved (symlinks followed): never over a
                                             file that is not a report
    resolve_output(path, flag)               where a write lands (symlinks followed) for the record checks
    write_file(path, text)                   every command's file write: temp file in the real folder + rename
    prepare_output(path, KIND, flag="--out", checks=[...], start_over=fresh)
                                             the one way a command readies the folder it writes: every
                                             check first (the folder's kind, then the command's own),
                                             and only then the earlier work set aside (--force, --fresh)

Layouts (what each command writes; the constants below name them):
    a training run, `trlvr train --output_dir RUN`:  RUN/trlvr_run.json (its identity:
        `trlvr.training.run_record`), checkpoint-N/ (preempted.json inside one saved on a signal),
        final/, holdout.jsonl, metrics.jsonl, selected.json (`trlvr select`), .train.lock(.pid)
    an evaluation, `trlvr eval --out DIR`:  DIR/samples.jsonl, fingerprint.json (its identity:
        `trlvr.eval.fingerprint`), config.json, per_problem.json, results.json, .lock(.pid); a study
        marks a finished one with .study-done

The lock is an OS file lock (filelock, timeout 0): the OS drops it when its holder dies, even by
SIGKILL, so a stale pid file never blocks. Each kind of directory keeps its own lock file name
(`.train.lock` for training, `.lock` for evaluation, as before this module) so an older trlvr and
this one exclude each other on the same directory. Only the main process of a multi-process job
locks (`main_process=False`: the other ranks share the directory by design and never wait).

Starting over (`trlvr train --force`, `trlvr eval --fresh`, `trlvr demo --fresh`, a study stage run
again) moves every entry but the held lock files into `replaced-<UTC time>/`: nothing is deleted,
and no file of the earlier run (checkpoint-*, final/, selected.json, metrics, eval folders,
markers) stays where a later command would pick it up. The earlier run moves in one rename (a fresh
folder is built beside it and swapped in: `set_aside`), so a failure or a kill never leaves it half
moved. No scan (`checkpoint-*`, `seed-*`) matches `replaced-*`.

What this file does not know: what a run is, what a record holds or which of its keys matter (each
owner passes its `compare`). It names files, locks folders, compares and moves them.
"""

from __future__ import annotations

import errno
import fcntl
import glob
import json
import os
import re
import shutil
import sys
import time
from collections.abc import Callable, Iterable
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path

from filelock import FileLock, Timeout

from trlvr.artifacts import FINAL as FINAL_MODEL
from trlvr.artifacts import TRAINER_STATE, Artifact, Changed, is_complete, read_checked
from trlvr.errors import UserError

# ---- layout -----------------------------------------------------------------------------------------

# a training run (`trlvr train --output_dir RUN`)
RUN_FILE = "trlvr_run.json"  # the run's identity (trlvr.training.run_record)
FINAL = "final"  # the trained model
CHECKPOINT = "checkpoint-"  # checkpoint-<step>/
PREEMPT_MARK = "preempted.json"  # in a checkpoint saved only because of a signal (trlvr.training.preempt)
WEIGHTS_ONLY_MARK = (
    "trlvr_weights_only.json"  # in an older checkpoint: weights only (trlvr.training.checkpoints)
)
HOLDOUT_FILE = "holdout.jsonl"  # training problems held out for selection
METRICS_FILE = "metrics.jsonl"  # the training log, one row per logged step
SELECTED_FILE = "selected.json"  # the checkpoint `trlvr select` chose
MEMORY_FILE = "memory_plan.json"  # backend vllm: the engine's memory plan beside vLLM's own KV report
MODEL_CARD = (
    "README.md"  # the tandem model card, in final/, each checkpoint and the run (trlvr.training.model_card)
)
# a smoke directory (`trlvr smoke --out DIR`)
SMOKE_FILE = "smoke.json"  # what `trlvr smoke` checked and measured
SMOKE_ARMS = ("train-tandem", "train-grpo")  # the smoke's two training runs
# a study directory (`trlvr study run`, `trlvr demo`)
STUDY_FILE = "study.json"  # the study's claim on the folder (trlvr.experiments.study)
OLD_DEMO_FILE = "demo.json"  # a demo from before it was a study (another layout; `trlvr demo` refuses it)
# a seed group of evaluations (`trlvr eval --seeds`)
GROUP_FILE = "group.json"  # the seeds of a `trlvr eval --seeds` group, and whether it finished
# an evaluation directory (`trlvr eval --out DIR`)
SAMPLES = "samples.jsonl"
# finished samples of another plan of the same evaluation (another --limit, --n or --suite), kept for a
# later run that asks for them again; never read as this evaluation's samples
OTHER_SAMPLES = "samples-other-plans.jsonl"
FINGERPRINT = "fingerprint.json"  # the evaluation's identity (trlvr.eval.fingerprint)
CONFIG = "config.json"
PER_PROBLEM = "per_problem.json"
RESULTS = "results.json"
# what a finished evaluation holds: every file its readers open (compare, report, groups, select,
# sample metrics); `trlvr eval` checks them before it reports success, and reruns a folder lacking one
EVAL_OUTPUTS = (SAMPLES, FINGERPRINT, CONFIG, PER_PROBLEM, RESULTS)
# the kinds of artifact these layouts hold, for `trlvr.artifacts.is_complete` (the models' kinds are its own):
# a finished evaluation (every file its readers open), a run's selection (selected.json, in the run folder)
EVALUATION_ARTIFACT = Artifact("evaluation", need=tuple((name,) for name in EVAL_OUTPUTS))
SELECTION_ARTIFACT = Artifact("selection", need=((SELECTED_FILE,),))
# an evaluation as `trlvr report`, `trlvr compare` and the seed-group readers read it: every file there
# whole, none that its manifest lists missing or of another size (each reader names the file it needs
# when that is not there at all)
EVALUATION_RESULTS = Artifact("evaluation")
# markers
COMPARE_FILE = "compare.json"  # `trlvr compare --out DIR`: DIR/compare.json beside DIR/report.html
STUDY_DONE = ".study-done"  # an eval folder whose `trlvr eval` returned 0 inside a study
ASIDE_PREFIX = "replaced-"  # an earlier run set aside by `set_aside`
_SWAP_SUFFIX = ".trlvr-swap"
# locks: who writes a directory -> (its lock file, the flag that chooses another directory)
TRAIN_LOCK, EVAL_LOCK = ".train.lock", ".lock"
# every command that writes a folder holds its lock; those that write into a training run (select:
# selected.json, select/) hold the run's own, so a run being trained refuses them and they refuse a training
# into it
LOCKS = {
    "trlvr train": (TRAIN_LOCK, "--output_dir"),
    "trlvr eval": (EVAL_LOCK, "--out"),
    "trlvr select": (TRAIN_LOCK, "RUN"),
    "trlvr compare": (EVAL_LOCK, "--out"),
    "trlvr report": (EVAL_LOCK, "--out"),
    "trlvr toy prepare": (EVAL_LOCK, "--out"),
    "trlvr study run": (EVAL_LOCK, "--out"),
    "trlvr smoke": (EVAL_LOCK, "--out"),
}
_CHECKPOINT_RE = re.compile(rf"^{re.escape(CHECKPOINT)}(\d+)$")


def final_dir(run: str | Path) -> Path:
    return Path(run) / FINAL


def checkpoint_dir(run: str | Path, step: int) -> Path:
    return Path(run) / f"{CHECKPOINT}{step}"


def checkpoint_step(path: str | Path) -> int | None:
    """N of a `checkpoint-N` folder name; None for any other name."""
    m = _CHECKPOINT_RE.match(Path(path).name)
    return int(m.group(1)) if m else None


def checkpoints(run: str | Path) -> list[Path]:
    """The `checkpoint-N` folders of `run`, newest (largest N) first ([] when `run` is no directory)."""
    run = Path(run)
    if not run.is_dir():
        return []
    found = [(step, p) for p in run.iterdir() if p.is_dir() and (step := checkpoint_step(p)) is not None]
    return [p for _, p in sorted(found, reverse=True)]


def check_dir_path(path: str | Path, flag: str) -> None:
    """UserError naming `flag` when `path` cannot be a directory: it is a file, or a file is above it."""
    p = Path(path)
    for q in (p, *p.parents):
        if q.exists() and not q.is_dir():
            where = "" if q == p else f" ({q}, above {path})"
            raise UserError(f"{flag} {path}: a file{where} is in the way; pass a directory")


# ---- what a folder is, and readying one to write --------------------------------------------------------

TRAINING, EVALUATION, STUDY, SMOKE, MODEL = "training run", "evaluation", "study", "smoke", "model"
COMPARISON, TOY_WORLD = "comparison", "toy world"
TOY_CARD = "card.json"
TRAINING_SEEDS, EVALUATION_SEEDS = "training seed group", "evaluation seed group"
_MODEL_FILES = (
    "model.safetensors",
    "model.safetensors.index.json",
    "adapter_model.safetensors",
    "pytorch_model.bin",
)
_SEED_RE = re.compile(r"^seed-\d+$")


def _marker(path: Path) -> tuple[str, str] | None:
    """(kind, the entry that shows it) of a folder that one command made, None for any other folder."""
    for name in (
        STUDY_FILE,
        OLD_DEMO_FILE,
    ):  # a study (or demo) holds training runs and evaluations of its own
        if (path / name).is_file():
            return STUDY, name
    if (path / SMOKE_FILE).is_file() or any((path / arm).is_dir() for arm in SMOKE_ARMS):
        return SMOKE, SMOKE_FILE if (path / SMOKE_FILE).is_file() else next(
            a for a in SMOKE_ARMS if (path / a).is_dir()
        )
    for name in (RUN_FILE, FINAL):
        if (path / name).exists():
            return TRAINING, name
    if found := checkpoints(path):
        return TRAINING, found[0].name
    for name in (FINGERPRINT, SAMPLES, RESULTS, PER_PROBLEM):
        if (path / name).is_file():
            return EVALUATION, name
    if (path / GROUP_FILE).is_file():
        return EVALUATION_SEEDS, GROUP_FILE
    if (path / COMPARE_FILE).is_file():
        return COMPARISON, COMPARE_FILE
    if (path / TOY_CARD).is_file() and any((path / d).is_dir() for d in ("senior", "junior", "data")):
        return TOY_WORLD, TOY_CARD
    for name in _MODEL_FILES:
        if (path / name).is_file():
            return MODEL, name
    return None


def folder_kind(path: str | Path) -> tuple[str, str] | None:
    """(kind, the entry that shows it) of what `path` holds: a training run, an evaluation, a study (or
    demo), a smoke, a model folder, or a seed group (`seed-<s>/` folders of training runs or evaluations);
    None for a folder no trlvr command made (empty, missing, or a user's own files). Earlier work set
    aside (`replaced-*`) is not looked at."""
    path = Path(path)
    if not path.is_dir():
        return None
    if (found := _marker(path)) is not None:
        return found
    for seed in sorted(p for p in path.iterdir() if _SEED_RE.match(p.name) and p.is_dir()):
        inner = _marker(seed)
        if inner is not None and inner[0] in (TRAINING, EVALUATION):
            return (TRAINING_SEEDS if inner[0] == TRAINING else EVALUATION_SEEDS), f"{seed.name}/{inner[1]}"
    return None


def _a(kind: str) -> str:
    return ("an " if kind[0] in "aeiou" else "a ") + kind


_NO_START_OVER = (COMPARISON, TOY_WORLD, SMOKE)  # kinds whose commands have no --force / --fresh


def check_kind(path: str | Path, kinds: str | Iterable[str], flag: str) -> str | None:
    """UserError (one line naming `flag`, the folder and what shows its kind) when `path` holds work of
    another kind than `kinds` (one kind, or those a command may write into); return the kind found."""
    kinds = (kinds,) if isinstance(kinds, str) else tuple(kinds)
    found = folder_kind(path)
    if found is None or found[0] in kinds:
        return None if found is None else found[0]
    kind, shown = found
    again = "" if kinds[0] in _NO_START_OVER else f" (--force and --fresh set aside only {_a(kinds[0])})"
    raise UserError(
        f"{flag} {path} holds {_a(kind)} ({shown}), not {_a(kinds[0])}: nothing was written or moved; "
        f"choose another {flag}{again}"
    )


_REPORT_SUFFIXES = (".html", ".htm")


def resolve_output(path: str | Path, flag: str) -> Path:
    """Where a write to `path` lands: every symlink followed (the real folder and file), so a command's record
    checks look at the file written, not at the name given. A symlink to nothing is refused in one line
    (the write would make a file where the link points, unseen)."""
    p = Path(path)
    if p.is_symlink() and not p.exists():
        raise UserError(
            f"{flag} {path} is a symlink to {os.readlink(p)}, which is not there: nothing was written; "
            f"pass the path itself"
        )
    return Path(os.path.realpath(p))


def check_report_path(path: str | Path, flag: str) -> Path:
    """UserError (one line naming `flag`) before a report is written to `path` over a file of trlvr's work
    (an evaluation's results.json, a run's trlvr_run.json: a file that is not an HTML page, in a folder
    `folder_kind` names), the path resolved first (`resolve_output`: a symlink named link.html onto a
    results.json is that results.json): a report replaces a report, or a file of the user's own, never an
    artifact's. Returns the resolved path, for `write_file`."""
    check_dir_path(Path(path).parent, flag)
    p = resolve_output(path, flag)
    shown = str(path) if str(p) == os.path.abspath(path) else f"{path} (a symlink to {p})"
    if p.is_dir():
        raise UserError(f"{flag} {shown}: a directory is in the way; pass a file name")
    if p.exists() and p.suffix.lower() not in _REPORT_SUFFIXES and (found := folder_kind(p.parent)):
        raise UserError(
            f"{flag} {shown} is a file of {_a(found[0])} ({p.parent}), not a report: nothing was "
            f"written; choose another {flag}"
        )
    return p


def report_lock(real: Path):
    """A report written into an evaluation (or a seed group of them) holds that folder's lock (`trlvr eval`'s,
    when its lock file is there: a finished evaluation's is; none is made for a report): refused at once
    while an evaluation writes there, and an evaluation is refused while the report is written. A report
    anywhere else holds nothing (its file is written whole by one rename)."""
    found = folder_kind(real.parent)
    if found is not None and found[0] in (EVALUATION, EVALUATION_SEEDS):
        if (real.parent / lock_files("trlvr report")[0]).exists():
            return lock(real.parent, by="trlvr report")
    return nullcontext()


def write_file(path: str | Path, data: str | bytes) -> Path:
    """The one way a command writes a file: into a temporary file in the real folder of `path` (its folder's
    symlinks followed), renamed over `path`'s name there. A symlink at `path` itself is replaced, never
    written through, so no write reaches another command's file by a link; a reader sees the old file or the
    new."""
    path = Path(path)
    folder = Path(os.path.realpath(path.parent))
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / path.name
    tmp = folder / f".{path.name}.{os.getpid()}.tmp"
    try:
        if isinstance(data, bytes):
            tmp.write_bytes(data)
        else:
            tmp.write_text(data, encoding="utf-8")
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return target


def prepare_output(
    path: str | Path,
    kind: str | Iterable[str],
    *,
    flag: str,
    checks: Iterable[Callable[[], object]] = (),
    start_over: bool = False,
    keep: Iterable[str] = (),
    say=None,
    set_aside_with: Callable[[Path], Path | None] | None = None,
) -> Path | None:
    """The one way a command readies the folder it writes (check, then write): `path` can be a directory
    (`check_dir_path`), it holds nothing of another kind (`check_kind`: an evaluation is never written into
    a training run, nor a training run into a study), then the command's own `checks` run in order
    (each raises UserError to refuse). Only when all passed, and `start_over` (--force, --fresh), is the
    earlier work set aside into path/replaced-<time>/ (`set_aside`, `keep`: the held lock files); a refusal
    leaves the folder byte for byte as it was. Returns where the earlier work went (None: nothing moved).
    `set_aside_with(path)`: the owner's own move (training's holds the lock of each run inside), instead of
    `set_aside(path, keep, say)`. Writes nothing else: the command makes the folder when its work starts."""
    finish_swap(path)  # a set-aside cut off between its two renames is completed first
    check_dir_path(path, flag)
    resolve_output(path, flag)  # a symlink to nothing is refused; a linked folder is checked where it points
    check_kind(path, kind, flag)
    for check in checks:
        check()
    if not start_over:
        return None
    if set_aside_with is not None:
        return set_aside_with(Path(path))
    return set_aside(path, keep=keep, say=say)


# ---- where a training directory stands ---------------------------------------------------------------


@dataclass(frozen=True)
class TrainState:
    """Where a training directory stands, read from its files (the one description of its states):

        new        nothing of a run: no record, no checkpoint, no final/
        started    a record or checkpoints, no complete final/ (running, killed, pre-empted or refused
                   mid-way, or killed while final/ was written: `trlvr.artifacts.is_complete`)
        finished   a complete final/: `step` (its trainer_state.json's global_step) of `target` (max_steps)

    The transitions (`trlvr train`): new -> started -> finished by training; started -> finished by
    `--resume`; finished stays finished, byte for byte, under every command but `--force` (everything
    is set aside: new). A `--resume` of a finished run at its own target does nothing; at another
    max_steps it is refused: training on would replace final/ (and, under a decaying learning-rate
    schedule, give a model of neither target: the checkpoints' schedule was made for the first one);
    `resume_plan` says which."""

    stage: str  # "new", "started" or "finished"
    step: int | None = None  # finished: final's global_step; started: the newest checkpoint's step
    target: int | None = None  # finished: the max_steps final/ was trained to


def _trainer_step(folder: Path) -> tuple[int | None, int | None]:
    try:
        state = json.loads((folder / TRAINER_STATE).read_text())
        return int(state["global_step"]), int(state.get("max_steps") or state["global_step"])
    except (OSError, ValueError, KeyError, TypeError):
        return None, None


def train_state(run: str | Path) -> TrainState:
    """The state of the training directory `run` (see `TrainState`)."""
    run = Path(run)
    if is_complete(final_dir(run), FINAL_MODEL):
        return TrainState("finished", *_trainer_step(final_dir(run)))
    found = checkpoints(run)
    if found or (run / RUN_FILE).is_file() or final_dir(run).exists():
        return TrainState("started", checkpoint_step(found[0]) if found else None)
    return TrainState("new")


def newest_step(run: str | Path) -> int | None:
    """The newest step `run` holds: its largest `checkpoint-N` (pre-emption checkpoints included) or its
    final/'s step, whichever is larger; None when it holds neither. A selection records it (`trlvr select`),
    and `RUN@selected` refuses a selection made before the run trained on."""
    steps = [checkpoint_step(p) for p in checkpoints(run)]
    if final_dir(run).is_dir():
        steps.append(_trainer_step(final_dir(run))[0])
    steps = [s for s in steps if s is not None]
    return max(steps) if steps else None


def resume_plan(run: str | Path, max_steps: int) -> str:
    """What `trlvr train --resume --max_steps N` does to `run` (N <= 0: the run's own target), before
    anything is written: "continue" (train from the newest complete checkpoint) or "done" (finished at
    that target: nothing to train, nothing written). UserError when N is below a step the run reached,
    or when the run finished and N is another target (a finished run is never changed without --force)."""
    state = train_state(run)
    reached = state.step
    if state.stage == "finished" and reached is not None and max_steps > 0 and max_steps != reached:
        raise UserError(
            f"--resume --max_steps {max_steps}: {run} finished at step {reached}, and a finished run's "
            f"{FINAL}/ and checkpoints are kept as they are; train {max_steps} steps into a new "
            f"--output_dir, or pass --force instead of --resume to set this run aside and start over"
        )
    if reached is not None and 0 < max_steps < reached:
        raise UserError(
            f"--resume --max_steps {max_steps}: {run} already reached step {reached}; "
            f"pass --max_steps {reached} or more (or --force to start over)"
        )
    if state.stage == "finished" and (max_steps <= 0 or max_steps == reached or reached is None):
        return "done"
    return "continue"


@contextmanager
def undone_unless_kept(path: str | Path, kept: Callable[[], bool], *, main_process: bool = True):
    """Check, then write, for a command whose checks end inside its work (a trainer that refuses at its
    first step): when the block fails and `kept()` says nothing worth keeping was made (no checkpoint),
    remove every entry of `path` the block created (and `path` itself when the block created it, its
    lock files included), so the refusal leaves the folder as it found it and no record of a run that
    never ran makes a later command refuse. Entries that were there before are never touched."""
    path = Path(path)
    existed = path.is_dir()
    before = {p.name for p in path.iterdir()} if existed else set()
    try:
        yield
    except BaseException:
        if main_process and path.is_dir() and not kept():
            for entry in path.iterdir():
                if (
                    entry.name in before
                    or is_aside(entry.name)
                    or (  # an earlier run set aside stays
                        existed and entry.name in {n for by in LOCKS for n in lock_files(by)}
                    )
                ):
                    continue
                shutil.rmtree(entry) if entry.is_dir() and not entry.is_symlink() else entry.unlink(
                    missing_ok=True
                )
            if not existed and not any(path.iterdir()):
                path.rmdir()
        raise


# ---- one lock -----------------------------------------------------------------------------------------


def lock_files(by: str) -> tuple[str, str]:
    """(lock file, pid file) of the directories `by` ("trlvr train", "trlvr eval") writes."""
    name = LOCKS[by][0]
    return name, name + ".pid"


def holder(path: str | Path, by: str) -> tuple[str, str]:
    """(pid, command) the lock's holder wrote in its pid file ("unknown" for what cannot be read; an older
    trlvr wrote the pid alone: the command is then `by`'s own)."""
    try:
        lines = (Path(path) / lock_files(by)[1]).read_text().split("\n")
    except OSError:
        return "unknown", by
    return lines[0].strip() or "unknown", (lines[1].strip() if len(lines) > 1 and lines[1].strip() else by)


def holder_pid(path: str | Path, by: str) -> str:
    """The pid the lock's holder wrote ("unknown" when it cannot be read)."""
    return holder(path, by)[0]


def _busy(path: Path, by: str) -> UserError:
    pid, command = holder(path, by)
    return UserError(
        f"{path} is being written by another {command} (pid {pid}); "
        f"wait for it to finish or choose another {LOCKS[by][1]}"
    )


@contextmanager
def lock(path: str | Path, *, by: str, main_process: bool = True):
    """Hold `path`'s exclusive lock for the block (made if missing); a second holder (any command that
    locks the same file, `LOCKS`) is refused at once with one line naming the first's pid and command.
    The OS drops a dead holder's lock: a stale pid file is taken over. A folder the lock made and the block
    left with nothing but the lock's files is removed again (a refusal leaves no folder behind).
    main_process False (another rank of the holder's job): pass through."""
    if not main_process:
        yield None
        return
    path = Path(path)
    name, pid_name = lock_files(by)
    finish_swap(path)  # a set-aside cut off between its two renames: completed before a fresh folder is made
    made = not path.exists()
    path.mkdir(parents=True, exist_ok=True)
    held = FileLock(str(path / name), timeout=0)
    try:
        held.acquire()
    except Timeout:
        raise _busy(path, by) from None
    (path / pid_name).write_text(f"{os.getpid()}\n{by}\n")
    try:
        yield held
    except BaseException:
        if made and path.is_dir() and {p.name for p in path.iterdir()} <= {name, pid_name}:
            (path / pid_name).unlink(missing_ok=True)
            held.release()
            (path / name).unlink(missing_ok=True)
            path.rmdir()
        raise
    finally:
        (path / pid_name).unlink(missing_ok=True)
        if held.is_locked:
            held.release()


def check_unlocked(path: str | Path, by: str, flag: str) -> None:
    """UserError (one line: the holder's pid and command) when `path`'s lock of `by` is held now, e.g. a
    training run being trained when `trlvr eval --senior RUN@selected` reads it. Reads only: the lock file
    is opened read-only and asked for a shared lock, so a record's folder is never touched by a reader."""
    path = Path(path)
    try:
        fd = os.open(path / lock_files(by)[0], os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except OSError:  # no lock file (never written), or one we may not open: nobody we can see writes it
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError as e:
        if e.errno not in (errno.EAGAIN, errno.EWOULDBLOCK, errno.EACCES):
            return  # a file system without flock: the writer's own lock still refuses a second writer
        pid, command = holder(path, by)
        raise UserError(
            f"{flag}: {path} is being written by another {command} (pid {pid}); nothing was read "
            "or written: wait for it to finish"
        ) from None
    finally:
        os.close(fd)  # closing drops the shared lock


# ---- one identity ---------------------------------------------------------------------------------------


def changed_error(path: str | Path, why: object, hint: str = "") -> UserError:
    """The one line for a file that is not what its folder's manifest recorded (`trlvr.artifacts.Changed`)."""
    fix = hint or "; run the command that wrote it again (--fresh / --force start over)"
    return UserError(f"{Path(path).parent}: {why}: nothing was read{fix}")


_JSON_TYPES = {
    list: "array",
    str: "string",
    int: "number",
    float: "number",
    bool: "boolean",
    type(None): "null",
}


def read_record(path: str | Path, hint: str = "", *, checked: bool = False) -> dict | None:
    """The JSON object in `path`, None when there is none; a file that is not one is a UserError naming
    it, with `hint` (e.g. "; remove it or pass --force") appended. `checked`: the bytes read are the ones
    the folder's manifest recorded (`trlvr.artifacts.read_checked`, one read), or a UserError naming the
    file."""
    path = Path(path)
    try:
        text = (read_checked(path) if checked else path.read_bytes()).decode("utf-8")
    except FileNotFoundError:
        return None
    except Changed as e:
        raise changed_error(path, e, hint) from None
    except (OSError, UnicodeDecodeError) as e:
        raise UserError(f"{path}: cannot read ({e}){hint}") from None
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as e:
        raise UserError(f"{path}: not valid JSON ({e}){hint}") from None
    if not isinstance(obj, dict):
        raise UserError(
            f"{path}: expected a JSON object, got a JSON {_JSON_TYPES.get(type(obj), 'value')}{hint}"
        )
    return obj


def write_record(path: str | Path, obj: dict, *, sort_keys: bool = False) -> None:
    """Write `obj` as JSON atomically (a temp file beside it, renamed): readers see the old or the new."""
    write_file(path, json.dumps(obj, indent=2, sort_keys=sort_keys) + "\n")


def flatten(d: dict, prefix: str = "") -> dict[str, object]:
    """Nested dicts as one level: {"a": {"b": 1}} -> {"a.b": 1} (an empty dict stays a value)."""
    out = {}
    for k, v in d.items():
        if isinstance(v, dict) and v:
            out.update(flatten(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def differences(
    old: dict | None, new: dict | None, *, ignore: Iterable[str] = (), show: Callable[[object], str] = repr
) -> list[str]:
    """["key: old -> new", ...] over every key of both (nested dicts as "a.b"), sorted; a key one side
    lacks shows as (absent), and a key absent on one side and None on the other is no difference (an
    older record that did not write it). Where one side holds a dict and the other does not, the key
    is one difference ("models.junior: {config, path} -> None"), not one per key inside the dict.
    Top-level keys in `ignore` are not compared. `show` writes a value."""
    skip = set(ignore)
    absent = object()
    out = []

    def written(v) -> str:
        if v is absent:
            return "(absent)"
        return "{" + ", ".join(map(str, sorted(v))) + "}" if isinstance(v, dict) and v else show(v)

    def walk(x, y, prefix: str) -> None:
        for key in sorted(set(x) | set(y), key=str):
            u, v = x.get(key, absent), y.get(key, absent)
            if isinstance(u, dict) and isinstance(v, dict) and u and v:
                walk(u, v, f"{prefix}{key}.")
            elif u != v and not (u in (absent, None) and v in (absent, None)):
                out.append(f"{prefix}{key}: {written(u)} -> {written(v)}")

    walk(
        {k: v for k, v in (old or {}).items() if k not in skip},
        {k: v for k, v in (new or {}).items() if k not in skip},
        "",
    )
    return sorted(out)


def listed(diffs: list[str], most: int = 8) -> str:
    """The first `most` differences, joined for one line ("a; b; and 3 more")."""
    more = f"; and {len(diffs) - most} more" if len(diffs) > most else ""
    return "; ".join(diffs[:most]) + more


def refuse(path: str | Path, diffs: list[str], *, force: bool, what: str, fix: str) -> list[str]:
    """UserError "<path> holds <what> (<differences>): <fix>" when `diffs` and not `force`; else `diffs`
    (what forcing lets through, for the caller to warn about)."""
    if diffs and not force:
        raise UserError(f"{path} holds {what} ({listed(diffs)}): {fix}")
    return diffs


def check_identity(
    path: str | Path,
    record_file: str,
    new: dict,
    compare: Callable[[dict, dict], list[str]],
    *,
    force: bool,
    what: str,
    fix: str,
) -> list[str]:
    """Compare the record `path/record_file` (what made the directory; none: a new directory) with
    `new` (what would make it now) by the owner's `compare`; refuse unless forced; return the differences.
    A record that does not read is refused the same way (one line naming it), unless forced."""
    try:
        old = read_record(Path(path) / record_file, hint=f"; {fix}")
    except UserError:
        if force:
            return [f"{record_file}: unreadable"]
        raise
    return refuse(path, compare(old, new) if old is not None else [], force=force, what=what, fix=fix)


# ---- starting over --------------------------------------------------------------------------------------


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


def _swap_name(directory: Path, aside: Path) -> Path:
    """The hidden folder beside `directory` where its fresh layout is built before the swap."""
    return directory.parent / f".{directory.name}.{aside.name}{_SWAP_SUFFIX}"


def finish_swap(directory: str | Path) -> None:
    """Complete a `set_aside` cut off between its two renames (a kill, a power cut): `directory` is missing
    and its fresh layout, the earlier run inside it whole, waits beside it under a hidden name; rename it
    into place. Called before anything looks at or locks `directory`; does nothing otherwise."""
    directory = Path(directory)
    if directory.exists() or not directory.parent.is_dir():
        return
    waiting = sorted(directory.parent.glob(f".{glob.escape(directory.name)}.{ASIDE_PREFIX}*{_SWAP_SUFFIX}"))
    if waiting:
        os.rename(waiting[-1], directory)
        aside = directory / waiting[-1].name[len(directory.name) + 2 : -len(_SWAP_SUFFIX)]
        if aside.is_dir():
            _tidy(directory, aside)


def set_aside(directory: str | Path, keep=(), say=None) -> Path | None:
    """Move every entry of `directory` except `keep` (names) and earlier set-aside folders into a new
    `directory/replaced-<UTC time>/`; return it, or None when there was nothing to move.

    The earlier run moves in ONE rename, so no failure or kill leaves it half moved (some of its files
    where a later command picks them up, some aside): a fresh `directory` is built beside it (a hidden
    sibling holding the `keep` files, hard links to the same files, so a held lock stays held), the
    whole old folder is renamed into it as `replaced-<time>/`, and the fresh folder is renamed to
    `directory`. A failure in between undoes what was done; a kill between the two renames leaves the
    earlier run whole in the hidden sibling, which `finish_swap` (called by `lock` and `prepare_output`)
    renames into place. Earlier `replaced-*` folders are then moved back up beside the new one (a kill
    there leaves one inside it: still kept). One entry to move is one rename in place; a folder that is a
    symlink, holds this process's working directory, or whose parent cannot be written, falls back to
    moving entry by entry (undone on a failure).
    `say(line)` reports where the earlier run went (default: one line on stderr); `say=False` for silence.
    """
    directory = Path(directory)
    finish_swap(directory)
    if not directory.is_dir():
        return None
    keep = set(keep)
    entries = sorted(p for p in directory.iterdir() if p.name not in keep and not is_aside(p.name))
    if not entries:
        return None
    target = _aside_name(directory)
    real = Path(os.path.abspath(directory))
    cwd = Path(os.getcwd())
    here = cwd == real or real in cwd.parents  # the swap would leave this process working in the aside
    if len(entries) == 1 or directory.is_symlink() or here or not _swap(real, real / target.name, keep):
        _move_each(entries, target)
    if say is not False:
        line = f"started over in {directory}: the earlier run is now in {target} (nothing was deleted)"
        (say or _stderr)(line)
    return target


def _swap(directory: Path, target: Path, keep: set[str]) -> bool:
    """`set_aside`'s one rename (see there); False, with nothing changed, when the fresh folder cannot be
    built beside `directory` (the caller then moves entry by entry)."""
    fresh = _swap_name(directory, target)
    try:
        fresh.mkdir()  # never an existing one (it may hold a run a kill left there)
    except OSError:
        return False
    try:
        os.chmod(fresh, directory.stat().st_mode & 0o7777)  # the folder keeps its permissions
    except OSError:
        fresh.rmdir()
        return False
    kept = [directory / name for name in sorted(keep) if (directory / name).exists()]
    try:
        for path in kept:
            if path.is_dir() and not path.is_symlink():
                raise OSError(f"{path}: a folder cannot be kept by a link")
            try:
                os.link(
                    path, fresh / path.name, follow_symlinks=False
                )  # the same file: a held lock stays held
            except OSError:
                shutil.copy2(path, fresh / path.name, follow_symlinks=False)
    except OSError:
        shutil.rmtree(fresh, ignore_errors=True)
        return False
    try:
        os.rename(directory, fresh / target.name)  # the one rename: the earlier run moves whole
    except BaseException:
        shutil.rmtree(fresh, ignore_errors=True)  # only the links and copies of the kept files
        raise
    try:
        os.rename(fresh, directory)
    except BaseException:
        os.rename(fresh / target.name, directory)  # undone: everything where it was
        shutil.rmtree(fresh, ignore_errors=True)
        raise
    _tidy(directory, target)
    return True


def _tidy(directory: Path, target: Path) -> None:
    """After the swap: the kept files stayed in place (links), so their other name in the aside goes; the
    earlier set-asides move back up beside the new one (a failure leaves one inside it: kept, reachable)."""
    for path in directory.iterdir():
        twin = target / path.name
        if path.is_file() and twin.is_file() and os.path.samefile(path, twin):
            twin.unlink()
    try:
        for earlier in sorted(p for p in target.iterdir() if is_aside(p.name)):
            os.rename(earlier, directory / earlier.name)
    except OSError:
        pass


def _move_each(entries: list[Path], target: Path) -> None:
    """Move `entries` into a new `target` one rename each; a failure moves back what had moved."""
    target.mkdir()
    moved = []
    try:
        for entry in entries:
            os.rename(entry, target / entry.name)
            moved.append(entry)
    except BaseException:
        for entry in reversed(moved):
            os.rename(target / entry.name, entry)
        if not any(target.iterdir()):
            target.rmdir()
        raise


def _stderr(line: str) -> None:
    print(f"[trlvr] {line}", file=sys.stderr, flush=True)

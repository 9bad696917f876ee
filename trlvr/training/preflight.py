"""A training run's check list: every check `trlvr train` makes before its first weight loads, in one place.

    start = check_run_start(tandem, args, resume=False, force=False)   # UserError on the first that fails
    start.record   the run's identity (`run_record`), as it will be stored
    start.forced   the differences from the stored run that --force lets through (warned about)
    start.plan     "new", "continue" (from start.last) or "done" (--resume of a finished run: nothing
                   to train)
    start.note     what could not be checked yet ("; dataset not checked (not there yet)")
    check_config(tandem, args)                                          # the part that needs no output folder

`trlvr train` calls `check_run_start` under the run's lock before it sets anything aside (`--force`) and
before the trainer is built; `trlvr train --dry-run` and `trlvr study plan` call the same function, so the
dry run says "config ok" exactly when the run gets past its checks, and refuses with the run's own line
when it does not. `trlvr smoke` checks both arms' configs with `check_config` (its folders are its own).

Order: --output_dir can be a folder and is not another command's (`trlvr.rundir.check_kind`); the run's
identity against the stored one (`run_record.check_output_dir`: another run, or this run without
--resume, is refused); what --resume does (`trlvr.rundir.resume_plan`, the newest complete checkpoint,
whether transformers can restore it here); then the config (`check_config`): the dataset read as
training reads it, the reward, the model paths, the run's capabilities and an epoch's steps.

What this file does not know: the CLI, or how the trainer is assembled (`build.py`). It checks.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import torch
import transformers
from packaging.version import Version

from trlvr import artifacts, rundir
from trlvr.data.schema import problem_key
from trlvr.data.sources import is_local
from trlvr.engine.backends import backend
from trlvr.errors import UserError
from trlvr.models import load_tokenizer_for, locate
from trlvr.team import Team
from trlvr.training.build import (
    NONE_LEFT,
    check_pairing,
    check_steps_per_epoch,
    load_training_problems,
    problems_within,
    resolve_reward,
)
from trlvr.training.checkpoints import pick_checkpoint
from trlvr.training.run_record import check_output_dir, run_record

__all__ = [
    "RESUME_ON_CPU",
    "RunStart",
    "check_config",
    "check_resume_device",
    "check_trainer_device",
    "check_run_start",
    "check_start",
]


# transformers before 5.18 restores a multi-process run's optimizer state to `args.device`, on the CPU
# "cpu:0", which torch cannot restore ("don't know how to restore data location ... (tagged with cpu:0)");
# 5.18 loads it to "cpu". vllm 0.31 requires transformers < 5.18, so a multi-process CPU run on backend vllm
# cannot resume.
RESUME_ON_CPU = "5.18.0"


def check_resume_device(args) -> None:
    """UserError, before any model loads, for a resume that transformers would fail after loading them:
    several processes on the CPU with transformers older than RESUME_ON_CPU. A GPU run (device cuda:N)
    resumes."""
    old = Version(transformers.__version__) < Version(RESUME_ON_CPU)
    if args.world_size > 1 and args.device.type == "cpu" and old:
        raise UserError(
            f"--resume: a run of {args.world_size} processes on the CPU cannot resume with transformers "
            f"{transformers.__version__} (it restores the optimizer state to 'cpu:0', which torch cannot "
            f"load); transformers >= {RESUME_ON_CPU} can (vllm 0.31 allows < 5.18: on backend vllm, resume "
            "on a GPU)"
        )


def check_start(output_dir: str | Path, *, resume: bool, force: bool) -> None:
    """What needs no model: `output_dir` can be a directory, and not both --force and --resume."""
    rundir.check_dir_path(output_dir, "--output_dir")
    if force and resume:
        raise UserError(
            f"--force starts over in {output_dir} and --resume continues the run there: pass one of them"
        )


@dataclass
class RunStart:
    """What `check_run_start` found (see the module docstring)."""

    record: dict
    forced: list[str] = field(default_factory=list)
    plan: str = "new"
    last: Path | None = None
    skipped: list = field(default_factory=list)
    note: str = ""


def check_run_start(
    tandem, args, *, resume: bool, force: bool, planning: bool = False, folder: bool = True
) -> RunStart:
    """Every check of a training run before its first weight load, in the order the run makes them;
    writes nothing (see the module docstring). UserError (one line) on the first that fails.
    planning (the dry run, a study's plan): a local dataset or model folder that is not there yet (an
    earlier stage makes it) is noted, not refused; the run itself refuses it here, in the loader's line.
    folder False (a study's plan of a stage it will skip as done, or refuse as made otherwise): the output
    folder's kind and state are not checked."""

    out = Path(args.output_dir)
    check_start(out, resume=resume, force=force)
    if not folder:
        return RunStart(run_record(tandem, args), note=check_config(tandem, args, planning=planning))
    rundir.check_kind(out, rundir.TRAINING, "--output_dir")
    record = run_record(tandem, args)
    forced = check_output_dir(out, record, resume=resume, force=force)
    start = RunStart(record, forced)
    if resume:
        start.plan = rundir.resume_plan(out, args.max_steps)
        if start.plan == "continue":
            start.last, start.skipped = pick_checkpoint(out)
            if start.last is None:
                raise UserError(f"--resume: no complete checkpoint in {out}")
            if why := artifacts.problem(
                start.last, artifacts.CHECKPOINT, deep=True
            ):  # what the resume loads, hashed
                raise UserError(
                    f"--resume: {start.last} is not what was saved ({why}); nothing was loaded or written"
                )
            if rundir.checkpoint_step(start.last) != args.max_steps:  # else: final/ from it, nothing trained
                check_resume_device(args)
    start.note = check_config(tandem, args, planning=planning)
    return start


def check_config(tandem, grpo, *, planning: bool = True) -> str:
    """Every check of a parsed run config that needs no model and no output folder: the dataset (read as
    training reads it), the reward, the model paths, and the run's capabilities
    (`trlvr.training.build.check_pairing`: schedule, KL reference, chat prompts and toy worlds against the
    pairing the two tokenizers give and the backend), and that an epoch of the training problems holds a
    step (`check_steps_per_epoch`, as training checks it). Returns what was not checked because it is not
    there yet ("; dataset not checked (not there yet)"), or "" (planning False: refused instead)."""
    if not tandem.dataset.strip():  # as training says it when it loads the data
        raise UserError("dataset: a training data source is required")
    check_trainer_device(tandem, grpo)
    resolve_reward(
        tandem.reward, tandem.grader
    )  # the reward function imports (its grader's dependencies are there) without a model
    note, problems, n_train = _check_dataset(tandem, planning)
    models = Team.of(tandem, grpo.beta).model_paths
    _check_model_paths(models, planning)
    if all(Path(p).is_dir() for p in models.values()):
        check_pairing(
            tandem,
            beta=grpo.beta,
            problems=problems,  # the run's capabilities, before any model
            max_completion_length=grpo.max_completion_length,
        )
    else:
        note += "; pairing not checked (a model folder is not there yet)"
    if n_train is not None:  # as training checks it: after the paths and capabilities, before any model
        after = ""
        if tandem.max_prompt_length is not None and problems is not None and Path(tandem.senior).is_dir():
            n_train = _within(
                tandem, problems[:n_train]
            )  # what build_dataset keeps, before --force sets aside
            after = f", after max_prompt_length {tandem.max_prompt_length}"
            if n_train == 0:
                raise UserError(NONE_LEFT)
        check_steps_per_epoch(n_train, tandem, grpo, after=after)
    return note


def cuda_available() -> bool:
    """torch's answer: whether this machine has a CUDA device (one seam for the checks, and for tests)."""
    return torch.cuda.is_available()


def check_trainer_device(tandem, grpo, cuda: bool | None = None) -> None:
    """use_cpu with a backend that builds its own engine (vllm) on a machine with CUDA: one line. The engine
    takes the GPU whatever use_cpu says (`EngineOptions.for_machine` asks torch), so the trainer would train
    on the CPU beside it and the importance-sampling ratios would compare a CPU trainer with a CUDA engine.
    cuda: whether this machine has CUDA (None: torch's answer)."""
    if not getattr(grpo, "use_cpu", False) or not backend(tandem.backend).own_engine:
        return
    if cuda is None:
        cuda = cuda_available()
    if cuda:
        raise UserError(
            f"use_cpu: true with backend {tandem.backend} on a machine with CUDA: the engine runs on the "
            "GPU and the trainer would train on the CPU beside it; set use_cpu: false (--use_cpu false)"
        )


_WITHIN: dict[tuple, int] = {}


def _within(tandem, train: list) -> int:
    """The training problems whose prompt fits max_prompt_length in the senior's tokens (`problems_within`;
    a study plans many runs on one file and one senior: counted once)."""
    # the problems by content (an object's id can be reused once it is freed: a stale count)
    key = (str(Path(tandem.senior).resolve()), tandem.max_prompt_length, tuple(map(problem_key, train)))
    if key not in _WITHIN:
        _WITHIN[key] = problems_within(
            train, load_tokenizer_for(tandem.senior, "senior"), tandem.max_prompt_length
        )
    return _WITHIN[key]


def _check_model_paths(models: dict[str, str], planning: bool) -> None:
    """A model path that is there must be a model folder; one that is not there yet (a study stage makes
    it) may be when planning, unless a file is at it or above it. models: `Team.model_paths`."""
    for role, path in models.items():
        p = Path(path).expanduser()
        is_path = p.is_absolute() or path.startswith(".") or path.count("/") > 1  # not a hub id
        if p.exists():
            locate(path, role, "model")  # a file, or a folder without config and weights: one line
        elif is_path:
            rundir.check_dir_path(p, role)  # under a file: it can never be made
            if not planning:
                locate(path, role, "model")  # not there: one line


_CHECKED_DATASETS: dict[tuple, tuple[list, int]] = {}


def _check_dataset(tandem, planning: bool) -> tuple[str, list | None, int | None]:
    """A local dataset that is there is loaded as training loads it (rows and golds checked): ("", its
    problems, how many of them training gets after the holdout); one that is not there yet (a study's world
    makes it) is noted, unless a file above it means it never can be: ("; dataset not checked (not there
    yet)", None, None); a hub dataset: ("", None, None)."""
    if not is_local(tandem.dataset):
        return "", None, None  # a hub name or reasoning-gym spec: read when the run starts
    path = Path(tandem.dataset).expanduser()
    if not path.exists():
        rundir.check_dir_path(path.parent, "dataset")  # under a file: it can never be made
        if planning:
            return "; dataset not checked (not there yet)", None, None
        load_training_problems(tandem)  # not there: the loader's own line
    if path.exists():
        st = path.stat()
        key = (
            str(path.resolve()),
            st.st_mtime_ns,
            st.st_size,
            tandem.dataset_split,
            tandem.dataset_limit,
            tandem.holdout,
            tandem.holdout_seed,
        )
        if key not in _CHECKED_DATASETS:  # a study plans many runs on one file: it is read once
            train, held = load_training_problems(tandem)
            _CHECKED_DATASETS[key] = (train + held, len(train))
        return "", *_CHECKED_DATASETS[key]
    raise UserError(f"dataset {tandem.dataset}: no such file")  # the loader refused it above

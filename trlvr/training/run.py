"""One training run from its configs to `output_dir/final`, as `trlvr train` and the demo run it.

    train_and_save(tandem, args, resume=False, force=False)   # -> output_dir/final
    start_over(output_dir)                                      # --force over a folder of runs (--seeds)
    seed_flags(args, seed)                                      # argv flags: the same run for another seed

Order: the run's check list (`trlvr.training.preflight.check_run_start`, what `--dry-run` runs: the
folder's kind and state, the run's identity against the stored record (`run_record`: another run is
refused unless `force`, its differences warned about), what `--resume` does, the config), before the
lock's files are made; then under the directory's lock (`trlvr.rundir.lock`: a second run into it is
refused) the same checks again and, only when all passed, with `force`, the earlier run moved into
OUTPUT_DIR/replaced-<time>/ (`trlvr.rundir.prepare_output`: nothing is deleted, and no checkpoint-*,
final/, selected.json, metrics or eval folder of it stays where a later `--resume`, `select` or `eval
RUN@selected` would find it); build the trainer, check the prompts survive the tokenizer, write the run
record (with the machine), train (the NonFiniteGuard stops on NaN; SIGTERM/SIGUSR1 checkpoint and stop:
`preempt`), refuse to save a non-finite model, save `final/` with its tokenizer.

What this file does not know: the CLI or how the trainer is assembled (`build.py`).
"""

from __future__ import annotations

import shutil
from contextlib import ExitStack
from pathlib import Path

from accelerate import PartialState
from transformers.trainer_callback import PrinterCallback

from trlvr import artifacts, rundir
from trlvr.config import TandemConfig
from trlvr.data.prompts import describe_lossy, lossy_prompts
from trlvr.engine.release import free_memory
from trlvr.errors import UserError
from trlvr.provenance import machine
from trlvr.rundir import FINAL, RUN_FILE
from trlvr.training.build import build_trainer
from trlvr.training.checkpoints import PruneResumeState
from trlvr.training.console import log, warn
from trlvr.training.guard import weights_are_finite
from trlvr.training.manifest import ManifestCallback, ManifestNotWritten
from trlvr.training.memory_plan import check_disk, launch_layout
from trlvr.training.preempt import Preempted, Preemption
from trlvr.training.preflight import check_run_start
from trlvr.training.run_record import add_machine, lossy_section, read_record, write_record

BY = "trlvr train"  # who locks a training run's directory (trlvr.rundir.LOCKS)


def seed_flags(args, seed: int) -> list[str]:
    """Flags that turn a run's arguments into the same run for `seed`, in OUTPUT_DIR/seed-<s>.

    The caller parses its argv again with these appended (not `dataclasses.replace`: GRPOConfig's
    `__post_init__` fills derived fields that it then refuses to see set twice).
    """
    return ["--seed", str(seed), "--output_dir", str(Path(args.output_dir) / f"seed-{seed}")]


def train_and_save(
    tandem: TandemConfig,
    args,
    *,
    resume: bool = False,
    force: bool = False,
    desc: str | None = None,
    callbacks=None,
    verbose: bool = False,
    resume_command: str | None = None,
) -> Path:
    """Train one run into `args.output_dir`; return the path of its final model.

    resume_command: the command line that continues this run, named in the pre-emption line.
    force: start over (the earlier run is set aside, see the module docstring); refused with `resume`.
    Raises `Preempted` (exit code 143) when a SIGTERM/SIGUSR1 stopped it after a checkpoint.
    """
    main = PartialState().is_main_process
    if (
        main
    ):  # the run's check list before the lock's files are made: a refusal leaves the folder byte for byte
        check_run_start(tandem, args, resume=resume, force=force)
        zero, processes = launch_layout()
        check_disk(
            tandem, args, zero_stage=zero, processes=processes, resume=resume
        )  # before hours are spent
    # a start that fails before its first checkpoint (the trainer's own checks, a NaN at step 1, a kill)
    # leaves output_dir as it found it: no record of a run that never ran
    with (
        rundir.undone_unless_kept(
            args.output_dir, lambda: bool(rundir.checkpoints(args.output_dir)), main_process=main
        ),
        training_lock(args.output_dir, main_process=main),
    ):
        start = prepare_run(tandem, args, resume=resume, force=force)
        for diff in start.forced:
            warn(f"--force: training into {args.output_dir} although {diff}")
        return _train_and_save(
            tandem,
            args,
            start=start,
            resume=resume,
            desc=desc,
            callbacks=callbacks,
            verbose=verbose,
            resume_command=resume_command,
        )


def prepare_run(tandem: TandemConfig, args, *, resume: bool, force: bool):
    """`trlvr.rundir.prepare_output` for a training run (its lock held by the caller): every check the run
    makes before its first weight load (`trlvr.training.preflight.check_run_start`, what `--dry-run`
    runs), and only when all passed, with --force, the earlier run set aside. Returns the checks' RunStart."""
    found = []
    rundir.prepare_output(
        args.output_dir,
        rundir.TRAINING,
        flag="--output_dir",
        start_over=force,
        set_aside_with=_set_aside_locked,
        checks=[lambda: found.append(check_run_start(tandem, args, resume=resume, force=force))],
    )
    return found[0]


def training_lock(output_dir: str | Path, *, main_process: bool | None = None):
    """`output_dir`'s lock (`trlvr.rundir.lock`), held by the main process only: the other ranks of one
    torchrun / accelerate job share the directory by design and never wait on it. main_process None
    asks accelerate's PartialState (the launcher's rank 0)."""
    if main_process is None:
        main_process = PartialState().is_main_process
    return rundir.lock(output_dir, by=BY, main_process=main_process)


def start_over(output_dir: str | Path, runs: list | None = None) -> Path | None:
    """`--force` over a whole folder of runs (`--seeds`: OUTPUT_DIR/seed-<s>/...): every seed run's checks
    first (`runs`: [(tandem, args)], as `--force` checks each), then, under its lock and the locks of the
    runs in it, everything in it moved aside (`trlvr.rundir.prepare_output`); return where it went (None:
    nothing moved)."""
    checks = [lambda t=t, a=a: check_run_start(t, a, resume=False, force=True) for t, a in runs or ()]
    if not Path(output_dir).is_dir():
        rundir.prepare_output(output_dir, rundir.TRAINING_SEEDS, flag="--output_dir", checks=checks)
        return None
    with training_lock(output_dir):
        return rundir.prepare_output(
            output_dir,
            rundir.TRAINING_SEEDS,
            flag="--output_dir",
            checks=checks,
            start_over=True,
            set_aside_with=_set_aside_locked,
        )


def _set_aside_locked(output_dir: str | Path) -> Path | None:
    """Set aside `output_dir` (its lock held by the caller), holding the lock of every run folder in it
    (a run being trained there refuses the whole); other processes of this job wait for the move."""
    lock_file, _ = files = rundir.lock_files(BY)
    state, moved = PartialState(), None
    if state.is_main_process:
        with ExitStack() as held:
            for child in sorted(Path(output_dir).iterdir()):
                if child.is_dir() and (child / lock_file).exists():
                    held.enter_context(training_lock(child, main_process=True))
            moved = rundir.set_aside(output_dir, keep=files, say=lambda line: warn(f"--force: {line}"))
    state.wait_for_everyone()
    return moved


def _check_prompts(trainer, tandem: TandemConfig, out: Path) -> dict:
    """The training prompts that do not survive the tokenizer: warned about, or refused by the flag."""
    tokenizer = getattr(trainer.processing_class, "tokenizer", trainer.processing_class)
    prompts = list(trainer.train_dataset["prompt"])
    lossy = lossy_prompts(tokenizer, prompts)
    if lossy:
        line = describe_lossy(lossy, len(prompts), "training prompts")
        if tandem.refuse_lossy_prompts:
            raise UserError(
                f"{line}; refuse_lossy_prompts: true refuses them (fix the data or the tokenizer)"
            )
        warn(f"{line}; listed in {out / RUN_FILE} (refuse_lossy_prompts: true makes this an error)")
    return lossy_section(lossy, len(prompts))


def _train_and_save(tandem, args, *, start, resume, desc, callbacks, verbose, resume_command) -> Path:
    out = Path(args.output_dir)
    record = start.record
    stored = read_record(out)
    last = None
    if start.plan == "done":  # checked before anything is written
        state = rundir.train_state(out)
        log(f"{out} finished at step {state.step}: nothing to train, {FINAL}/ unchanged")
        return rundir.final_dir(out)
    if resume:
        last = start.last
        for ckpt, why in start.skipped:
            warn(f"--resume: skipping {ckpt.name} ({why})")
        if last is None:
            raise UserError(f"--resume: no complete checkpoint in {out}")
        _set_aside_torn_final(out)  # checked, then moved: a refusal above leaves the folder as it was
        if rundir.checkpoint_step(last) == args.max_steps:  # killed after its last checkpoint, before final/
            return _final_from_checkpoint(last, out)  # training it again would run a step past max_steps
        log(f"resuming from {last}")
    trainer = build_trainer(tandem, args, callbacks, desc=desc)
    if not verbose:  # the log dicts go to metrics.jsonl and trainer_state.json, not the console
        trainer.remove_callback(PrinterCallback)
    record["lossy_prompts"] = _check_prompts(trainer, tandem, out)
    record["pairing"] = getattr(
        trainer, "pairing", None
    )  # the mode chosen (config `pairing` is what was asked)
    dtype = next(iter(trainer.model.parameters())).dtype
    facts = machine(dtype=str(dtype), device=str(trainer.accelerator.device))
    if diffs := add_machine(record, facts, stored, resume=resume):
        warn(
            f"--resume on another machine ({'; '.join(diffs)}): the result may differ from an uninterrupted "
            "one"
        )
    write_record(out, record)
    how = f"resume with: {resume_command}" if resume_command else "resume with the same command and --resume"
    main = trainer.accelerator.is_main_process
    with Preemption(tandem.preempt_grace_s, exit_line=how, main_process=main) as preemption:
        trainer.add_callback(preemption.callback)
        trainer.add_callback(PruneResumeState())  # resume state only in the two newest complete checkpoints
        try:
            trainer.train(resume_from_checkpoint=str(last) if last else None)
        except BaseException:  # a save's manifest still being hashed is written before the run raises
            wait_for_manifests(trainer, raised=True)
            raise
        wait_for_manifests(trainer, raised=False)
        stop = preemption.callback
        if preemption.stopped_early and trainer.state.global_step < trainer.state.max_steps:
            saved = (
                f"saved {rundir.checkpoint_dir(out, stop.saved_step)}"
                if stop.saved_step is not None
                else "no checkpoint saved (the step was not finite)"
            )
            raise Preempted(
                f"{preemption.signal_name} at step {stop.stop_step} of {trainer.state.max_steps}: "
                f"{saved}; {how}"
            )
        check_trained(trainer, out)
        if not weights_are_finite(trainer.model):
            raise UserError(f"{out}: the trained weights are not finite; {FINAL}/ was not written")
        final = rundir.final_dir(out)
        trainer.save_model(str(final))
        trainer.accelerator.wait_for_everyone()
        if trainer.accelerator.is_main_process:
            trainer.processing_class.save_pretrained(str(final))
            trainer.state.save_to_json(str(final / rundir.TRAINER_STATE))
            artifacts.write_manifest(final)  # last: sizes and hashes of what a reader of final/ opens
        step = trainer.state.global_step
    release_trainer(trainer)
    del trainer
    free_memory()  # the trainer (its model, optimizer state) is gone before the caller's next stage starts
    log(f"wrote {final} (step {step})")
    return final


RESUME_STATE = (
    *artifacts.RESUME_STATE,
    rundir.PREEMPT_MARK,
    artifacts.MANIFEST,
)  # a checkpoint's, not final/'s


def _set_aside_torn_final(out: Path) -> None:
    """A final/ that is not complete (a kill while it was written: `trlvr.artifacts.FINAL`) is no result: it
    moves into OUTPUT_DIR/replaced-<time>/ (nothing deleted), and the resume writes final/ again."""
    final, state = rundir.final_dir(out), PartialState()
    if state.is_main_process and final.exists() and (why := artifacts.problem(final, artifacts.FINAL)):
        moved = rundir.set_aside(
            out, keep=[p.name for p in out.iterdir() if p.name != rundir.FINAL], say=False
        )
        warn(
            f"--resume: {final} is torn ({why}); moved into {moved} (nothing deleted), written again at the "
            "end"
        )
    state.wait_for_everyone()


def _final_from_checkpoint(ckpt: Path, out: Path) -> Path:
    """final/ of a run whose newest complete checkpoint is at its target step: the checkpoint's model,
    tokenizer and trainer state (what `save_model` wrote there), without its resume state; written
    beside final/ and renamed, so a reader never sees half of it."""
    final = rundir.final_dir(out)
    tmp = final.with_name(f".{rundir.FINAL}.partial")
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(ckpt, tmp, ignore=shutil.ignore_patterns(*RESUME_STATE))
    artifacts.write_manifest(tmp)
    tmp.rename(final)
    log(
        f"wrote {final} (step {rundir.checkpoint_step(ckpt)}: {ckpt.name} is at the target; nothing to train)"
    )
    return final


def wait_for_manifests(trainer, *, raised: bool) -> None:
    """Join the checkpoint manifest `ManifestCallback` may still be writing in its thread; its failure is one
    line, a warning where `train()` already raised (that error is the one the caller sees)."""
    for callback in trainer.callback_handler.callbacks:
        if isinstance(callback, ManifestCallback):
            try:
                callback.wait()
            except ManifestNotWritten as e:
                if not raised:
                    raise
                warn(str(e))


def check_trained(trainer, out: Path) -> None:
    """What a training run promises, checked before `final/` is written (the one place): it reached the
    step it was asked for (max_steps, or the resumed run's target), and its rollouts gave the senior
    tokens to learn from. A run that broke either promise is one line and a non-zero exit, no final/;
    some rollouts without a senior token (possible at small p) are one warning line."""
    state = trainer.state
    if state.global_step != state.max_steps:
        how = "ended its loop early" if state.global_step < state.max_steps else "ran past max_steps"
        raise UserError(
            f"{out}: training stopped at step {state.global_step} of {state.max_steps} (the trainer "
            f"{how}); {FINAL}/ was not written"
        )
    counts = list(getattr(getattr(trainer, "rollout", None), "senior_tokens", None) or [])
    empty = sum(c == 0 for c in counts)
    if counts and empty == len(counts):
        raise UserError(
            f"{out}: none of the {len(counts)} rollout(s) of this run gave the senior a token (schedule "
            f"{getattr(trainer.rollout.schedule, 'name', trainer.rollout.schedule)!r}); nothing was "
            f"learned and {FINAL}/ was not written: raise p or change the schedule"
        )
    if empty:
        warn(f"{empty} of {len(counts)} rollout(s) gave the senior no token: their steps trained nothing")


def release_trainer(trainer) -> None:
    """After training: the trainer's vLLM engine shut down and dropped (backend vllm:
    `TandemVLLMGeneration.close`), so that the next stage in this process (smoke's second arm, selection,
    evaluation) finds the device memory free. The trainer itself goes once its holder drops it and calls
    `trlvr.engine.release.free_memory` (its callbacks hold it in reference cycles)."""
    generation = getattr(trainer, "vllm_generation", None)
    if hasattr(generation, "close"):
        generation.close()

"""One training run from its configs to `output_dir/final`, as `trlvr train` and the demo run it.

    train_and_save(tandem, args, resume=False, force=False)   # -> output_dir/final
    seed_flags(args, seed)                                      # argv flags: the same run for another seed

Order: take the directory's lock (`lock`: a second run into it is refused), refuse to mix runs
(`run_record`), pick the newest complete checkpoint when resuming (`checkpoints`), build the
trainer, check the prompts survive the tokenizer, write the run record (with the machine), train
(the NonFiniteGuard stops on NaN; SIGTERM/SIGUSR1 checkpoint and stop: `preempt`), refuse to
save a non-finite model, save `final/` with its tokenizer.

What this file does not know: the CLI or how the trainer is assembled (`build.py`).
"""

from __future__ import annotations

from pathlib import Path

from trlvr.config import TandemConfig
from trlvr.errors import UserError

FINAL = "final"


def seed_flags(args, seed: int) -> list[str]:
    """Flags that turn a run's arguments into the same run for `seed`, in OUTPUT_DIR/seed-<s>.

    The caller parses its argv again with these appended (not `dataclasses.replace`: GRPOConfig's
    `__post_init__` fills derived fields that it then refuses to see set twice).
    """
    return ["--seed", str(seed), "--output_dir", str(Path(args.output_dir) / f"seed-{seed}")]


def train_and_save(tandem: TandemConfig, args, *, resume: bool = False, force: bool = False,
                   desc: str | None = None, callbacks=None, verbose: bool = False,
                   resume_command: str | None = None) -> Path:  # fmt: skip
    """Train one run into `args.output_dir`; return the path of its final model.

    resume_command: the command line that continues this run, named in the pre-emption line.
    Raises `Preempted` (exit code 143) when a SIGTERM/SIGUSR1 stopped it after a checkpoint.
    """
    from trlvr.training.lock import training_lock

    with training_lock(args.output_dir):
        return _train_and_save(tandem, args, resume=resume, force=force, desc=desc, callbacks=callbacks,
                               verbose=verbose, resume_command=resume_command)  # fmt: skip


def _check_prompts(trainer, tandem: TandemConfig, out: Path) -> dict:
    """The training prompts that do not survive the tokenizer: warned about, or refused by the flag."""
    from trlvr.data.prompts import describe_lossy, lossy_prompts
    from trlvr.training.console import warn
    from trlvr.training.run_record import RUN_FILE, lossy_section

    tokenizer = getattr(trainer.processing_class, "tokenizer", trainer.processing_class)
    prompts = list(trainer.train_dataset["prompt"])
    lossy = lossy_prompts(tokenizer, prompts)
    if lossy:
        line = describe_lossy(lossy, len(prompts), "training prompts")
        if tandem.refuse_lossy_prompts:
            raise UserError(f"{line}; refuse_lossy_prompts: true refuses them (fix the data or the tokenizer)")
        warn(f"{line}; listed in {out / RUN_FILE} (refuse_lossy_prompts: true makes this an error)")
    return lossy_section(lossy, len(prompts))


def _train_and_save(tandem, args, *, resume, force, desc, callbacks, verbose, resume_command) -> Path:
    from trlvr.provenance import machine
    from trlvr.training.build import build_trainer
    from trlvr.training.checkpoints import pick_checkpoint
    from trlvr.training.console import log, warn
    from trlvr.training.guard import weights_are_finite
    from trlvr.training.preempt import Preempted, Preemption
    from trlvr.training.run_record import add_machine, check_output_dir, read_record, run_record, write_record

    out = Path(args.output_dir)
    record = run_record(tandem, args)
    stored = read_record(out)
    for diff in check_output_dir(out, record, resume=resume, force=force):
        warn(f"--force: training into {out} although {diff}")
    last = None
    if resume:
        last, skipped = pick_checkpoint(out)
        for ckpt, why in skipped:
            warn(f"--resume: skipping {ckpt.name} ({why})")
        if last is None:
            raise UserError(f"--resume: no complete checkpoint in {out}")
        log(f"resuming from {last}")
    trainer = build_trainer(tandem, args, callbacks, desc=desc)
    if not verbose:  # the log dicts go to metrics.jsonl and trainer_state.json, not the console
        from transformers.trainer_callback import PrinterCallback

        trainer.remove_callback(PrinterCallback)
    record["lossy_prompts"] = _check_prompts(trainer, tandem, out)
    record["pairing"] = getattr(trainer, "pairing", None)  # the mode chosen (config `pairing` is what was asked)
    dtype = next(iter(trainer.model.parameters())).dtype
    facts = machine(dtype=str(dtype), device=str(trainer.accelerator.device))
    if diffs := add_machine(record, facts, stored, resume=resume):
        warn(f"--resume on another machine ({'; '.join(diffs)}): the result may differ from an uninterrupted one")
    write_record(out, record)
    how = f"resume with: {resume_command}" if resume_command else "resume with the same command and --resume"
    main = trainer.accelerator.is_main_process
    with Preemption(tandem.preempt_grace_s, exit_line=how, main_process=main) as preemption:
        trainer.add_callback(preemption.callback)
        trainer.train(resume_from_checkpoint=str(last) if last else None)
        stop = preemption.callback
        if preemption.stopped_early and trainer.state.global_step < trainer.state.max_steps:
            saved = (f"saved {out / f'checkpoint-{stop.saved_step}'}" if stop.saved_step is not None
                     else "no checkpoint saved (the step was not finite)")  # fmt: skip
            raise Preempted(f"{preemption.signal_name} at step {stop.stop_step} of {trainer.state.max_steps}: "
                            f"{saved}; {how}")  # fmt: skip
        if not weights_are_finite(trainer.model):
            raise UserError(f"{out}: the trained weights are not finite; {FINAL}/ was not written")
        final = out / FINAL
        trainer.save_model(str(final))
        if trainer.accelerator.is_main_process:
            trainer.processing_class.save_pretrained(str(final))
            trainer.state.save_to_json(str(final / "trainer_state.json"))
    return final

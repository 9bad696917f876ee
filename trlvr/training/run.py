"""One training run from its configs to `output_dir/final`, as `trlvr train` and the demo run it.

    train_and_save(tandem, args, resume=False, force=False)   # -> output_dir/final
    seed_flags(args, seed)                                      # argv flags: the same run for another seed

Order: refuse to mix runs (`run_record`), build the trainer, pick the newest complete checkpoint
when resuming (`checkpoints`), train (the NonFiniteGuard stops on NaN), refuse to save a
non-finite model, save `final/` with its tokenizer, then write the run record.

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
                   desc: str | None = None, callbacks=None, verbose: bool = False) -> Path:  # fmt: skip
    """Train one run into `args.output_dir`; return the path of its final model."""
    from trlvr.training.build import build_trainer
    from trlvr.training.checkpoints import pick_checkpoint
    from trlvr.training.console import log, warn
    from trlvr.training.guard import weights_are_finite
    from trlvr.training.run_record import check_output_dir, run_record, write_record

    out = Path(args.output_dir)
    record = run_record(tandem, args)
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
    write_record(out, record)
    trainer.train(resume_from_checkpoint=str(last) if last else None)
    if not weights_are_finite(trainer.model):
        raise UserError(f"{out}: the trained weights are not finite; {FINAL}/ was not written")
    final = out / FINAL
    trainer.save_model(str(final))
    if trainer.accelerator.is_main_process:
        trainer.processing_class.save_pretrained(str(final))
        trainer.state.save_to_json(str(final / "trainer_state.json"))
    return final

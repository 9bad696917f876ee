"""The manifest of each saved checkpoint (`trlvr.artifacts.write_manifest`), written once the Trainer's save is done.

    trainer.add_callback(ManifestCallback())      build_trainer adds it: on_save, after `_save_checkpoint`

The Trainer writes `checkpoint-N/` (weights, optimizer, scheduler, RNG, trainer_state.json) and then calls
`on_save`; there every process has written its files (a barrier first: each rank writes its own RNG
state), and the main process records every file's size and sha256. A checkpoint without a manifest was
cut before the save ended, or written by an older trlvr: `trlvr.artifacts.problem` judges it by its
formats alone.

What this file does not know: what is trained. It runs after a save.
"""

from __future__ import annotations

from accelerate import PartialState
from transformers import TrainerCallback

from trlvr import artifacts
from trlvr.rundir import PREEMPT_MARK, checkpoint_dir


class ManifestCallback(TrainerCallback):
    def on_save(self, args, state, control, **kwargs):
        PartialState().wait_for_everyone()
        ckpt = checkpoint_dir(args.output_dir, state.global_step)
        if state.is_world_process_zero and ckpt.is_dir():
            artifacts.write_manifest(ckpt, skip=(PREEMPT_MARK,))  # the mark is written after, by another callback
        return control

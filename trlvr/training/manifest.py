"""The manifest of each saved checkpoint (`trlvr.artifacts.write_manifest`), written once the Trainer's save is done.

    trainer.add_callback(ManifestCallback())      build_trainer adds it: on_save, after `_save_checkpoint`

The Trainer writes `checkpoint-N/` (weights, optimizer, scheduler, RNG, trainer_state.json) and then calls
`on_save`; there every process has written its files (a barrier first: each rank writes its own RNG
state), and the main process records every file's size, and the sha256 of what a reader of the model
needs (the weights, the config, the tokenizer, the small state files); the optimizer's shards
(`optimizer.pt`, DeepSpeed's `global_step*/`: ~52 GiB a save for the 4B recipe under ZeRO-2) by size
alone (SIZE_ONLY): their format checks catch a cut file, and hashing them held every other rank at
its next collective for about a minute a save. A checkpoint without a manifest was
cut before the save ended, or written by an older trlvr: `trlvr.artifacts.problem` judges it by its
formats alone.

What this file does not know: what is trained. It runs after a save.
"""

from __future__ import annotations

from accelerate import PartialState
from transformers import TrainerCallback

from trlvr import artifacts
from trlvr.rundir import PREEMPT_MARK, checkpoint_dir

# a checkpoint's files recorded by size alone: the optimizer state (torch's, DeepSpeed's partitions and module states)
SIZE_ONLY = ("optimizer.pt", "global_step*/*")


class ManifestCallback(TrainerCallback):
    def on_save(self, args, state, control, **kwargs):
        PartialState().wait_for_everyone()
        ckpt = checkpoint_dir(args.output_dir, state.global_step)
        if state.is_world_process_zero and ckpt.is_dir():
            # the pre-emption mark is written after, by another callback
            artifacts.write_manifest(ckpt, skip=(PREEMPT_MARK,), size_only=SIZE_ONLY)
        return control

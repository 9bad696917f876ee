"""The manifest of each saved checkpoint (`trlvr.artifacts.write_manifest`), written once the Trainer's save
is done.

    trainer.add_callback(ManifestCallback())      build_trainer adds it: on_save, after `_save_checkpoint`
    callback.wait()                               the manifest in progress written (or its failure raised)

The Trainer writes `checkpoint-N/` (weights, optimizer, scheduler, RNG, trainer_state.json) and then calls
`on_save`; there every process has written its files (a barrier first: each rank writes its own RNG
state), and the main process lists every file and its size, then records, in a background thread
while training goes on, the sha256 of what a reader of the model needs (the weights, the config, the
tokenizer, the small state files); the optimizer's shards (`optimizer.pt`, DeepSpeed's `global_step*/`:
~52 GiB a save for the 4B recipe under ZeRO-2) by size alone (SIZE_ONLY): their format checks catch a
cut file. Hashing on the training thread held every rank for about 3 s per GiB a save.

The manifest is still written last and atomically (`write_manifest`: temp file + rename). The thread is
joined at the end of the next step (before that step's save, so the Trainer's `save_total_limit`
rotation and trlvr's pruning never meet a checkpoint still being hashed but the newest, which neither
touches), at the end of training (`on_train_end`; the pre-emption save ends there too), and by
`trlvr.training.run` after `train()` raised. A failure in the thread is `ManifestNotWritten`, one line,
raised where it is joined. A checkpoint without a manifest (a kill before it was written, or an older
trlvr) is judged by its formats alone: `trlvr.artifacts.problem`.

What this file does not know: what is trained. It runs after a save.
"""

from __future__ import annotations

import threading
from pathlib import Path

from accelerate import PartialState
from transformers import TrainerCallback

from trlvr import artifacts
from trlvr.errors import UserError
from trlvr.rundir import PREEMPT_MARK, checkpoint_dir

# a checkpoint's files recorded by size alone: the optimizer state (torch's, DeepSpeed's partitions and module
# states)
SIZE_ONLY = ("optimizer.pt", "global_step*/*")


class ManifestNotWritten(UserError):
    """The background thread could not write a checkpoint's manifest (the reason in the one line)."""


class ManifestCallback(TrainerCallback):
    """`background=False`: hash on the training thread, in `on_save` (the behaviour before issue 59's fix)."""

    def __init__(self, background: bool = True):
        self.background = background
        self._thread: threading.Thread | None = None
        self._failed: str | None = None

    def _write(self, ckpt: Path, sizes: dict[str, int]) -> None:
        try:
            artifacts.write_manifest(ckpt, size_only=SIZE_ONLY, sizes=sizes)
        except Exception as e:  # noqa: BLE001 - any failure is reported where the thread is joined
            why = " ".join(f"{type(e).__name__}: {e}".split())
            self._failed = (
                f"{ckpt}: its {artifacts.MANIFEST} was not written ({why}); "
                "the checkpoint is judged by its formats alone"
            )

    def wait(self) -> None:
        """Join the manifest in progress (if any); ManifestNotWritten when it failed."""
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.join()
        failed, self._failed = self._failed, None
        if failed:
            raise ManifestNotWritten(failed)

    def on_save(self, args, state, control, **kwargs):
        PartialState().wait_for_everyone()
        self.wait()  # a previous save's (joined at its next step end already, unless a save came first)
        ckpt = checkpoint_dir(args.output_dir, state.global_step)
        if state.is_world_process_zero and ckpt.is_dir():
            # what the save wrote, listed now; the pre-emption mark is written after, by another callback
            sizes = artifacts.list_sizes(ckpt, skip=(PREEMPT_MARK,))
            if self.background:
                self._thread = threading.Thread(target=self._write, args=(ckpt, sizes), name="trlvr-manifest")
                self._thread.start()
            else:
                self._write(ckpt, sizes)
                self.wait()
        return control

    def on_step_end(self, args, state, control, **kwargs):
        self.wait()
        return control

    def on_train_end(self, args, state, control, **kwargs):
        self.wait()
        return control

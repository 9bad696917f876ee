"""The run's identity, stored beside its checkpoints as `output_dir/trlvr_run.json`.

A record holds the TandemConfig (minus knobs that do not change what is trained), the GRPOConfig
fields that decide the updates, and the training data's content hash. Training into a directory
whose record differs (another arm, dataset, schedule, p, senior, junior, learning rate, ...) is
refused unless `--force`, with the differences listed; so is starting over (no `--resume`) where
checkpoints already are. `max_steps` is not part of the record: a run not yet finished is resumed to a
larger max_steps; a finished one is never changed (`trlvr.rundir.resume_plan`).

It also keeps facts that are recorded, never compared: `machine` (library versions, devices, dtype,
threads: `trlvr.provenance.machine`; a resume on another machine is a warning, and the earlier one
is kept in `earlier_machines`), `lossy_prompts` (training prompts the tokenizer cannot spell) and
`pairing` (the mode `pairing: auto` chose: lockstep or text; decided by the two tokenizers, which
the tandem section already names).

Paths in a record (`senior`, `junior`, `dataset`, the data's `source`) resolve the same from any
working directory: relative to the record's own directory when inside it, absolute otherwise, hub
names as typed (`trlvr.provenance.path_for_record`; format 2). A format-1 record stored them as
typed; reading it takes them as relative to the current directory, as that writer's comparison did.
`resolved_paths(record, run_dir)` gives them back as paths usable from the current directory.

What this file does not know: the Trainer or the models. It compares dictionaries.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path

from trlvr import rundir
from trlvr.config import TandemConfig
from trlvr.errors import UserError
from trlvr.provenance import DETERMINISM_KEYS, path_for_record, path_from_record
from trlvr.rundir import RUN_FILE

FORMAT = 2  # 2: paths relative to the record's directory or absolute (1: as typed)
# TandemConfig fields that do not change what is trained
NOT_IDENTITY = {"nonfinite_patience", "preempt_grace_s", "refuse_lossy_prompts"}
LOSSY_LISTED = 100  # lossy prompts listed in the record (all are counted)
# GRPOConfig fields that decide the updates
GRPO_IDENTITY = (
    "learning_rate", "lr_scheduler_type", "warmup_steps", "warmup_ratio", "weight_decay", "max_grad_norm",
    "optim", "adam_beta1", "adam_beta2", "adam_epsilon", "num_generations", "per_device_train_batch_size",
    "gradient_accumulation_steps", "steps_per_generation", "generation_batch_size", "max_completion_length",
    "loss_type", "epsilon", "epsilon_high", "beta", "scale_rewards", "num_iterations", "temperature", "top_p",
    "top_k", "min_p", "repetition_penalty", "mask_truncated_completions", "model_init_kwargs", "bf16", "seed",
    "optim_args", "vllm_importance_sampling_correction", "vllm_importance_sampling_mode",
    "vllm_importance_sampling_clip_min", "vllm_importance_sampling_clip_max",
)  # fmt: skip


def data_fingerprint(source: str, split: str | None = None) -> dict:
    """{"source", "split", "sha256"}: the content hash of a local file or folder; hub names carry none."""
    path = Path(source)
    digest = None
    if path.is_file() or path.is_dir():
        h = hashlib.sha256()
        files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
        for f in files:
            h.update(str(f.relative_to(path) if path.is_dir() else f.name).encode())
            with open(f, "rb") as fh:
                for block in iter(lambda: fh.read(1 << 20), b""):
                    h.update(block)
        digest = h.hexdigest()
    return {"source": source, "split": split, "sha256": digest}


def run_record(tandem: TandemConfig, args) -> dict:
    """The record of a run about to start (JSON-ready), its paths as the record in `args.output_dir` keeps them."""
    record = {
        "format": FORMAT,
        "tandem": {k: v for k, v in dataclasses.asdict(tandem).items() if k not in NOT_IDENTITY},
        "grpo": {k: getattr(args, k, None) for k in GRPO_IDENTITY},
        "data": data_fingerprint(tandem.dataset, tandem.dataset_split),
    }
    record = _stored_paths(record, args.output_dir)
    return json.loads(json.dumps(record, default=str))  # the form it has once stored


# (section, key) of every path a record names
PATH_FIELDS = (("tandem", "senior"), ("tandem", "junior"), ("tandem", "dataset"), ("data", "source"))


def _map_paths(record: dict, fn) -> dict:
    out = {k: dict(v) if isinstance(v, dict) else v for k, v in record.items()}
    for section, key in PATH_FIELDS:
        value = (out.get(section) or {}).get(key)
        if isinstance(value, str) and value and value != "self":
            out[section][key] = fn(value)
    return out


def _stored_paths(record: dict, output_dir: str | Path) -> dict:
    """Paths typed relative to the current directory -> as the record in `output_dir` stores them."""
    return _map_paths(record, lambda v: path_for_record(v, output_dir))


def resolved_paths(record: dict, run_dir: str | Path) -> dict:
    """The record with its paths usable from the current directory (relative ones resolve under `run_dir`)."""
    return _map_paths(record, lambda v: path_from_record(v, run_dir))


def differences(old: dict, new: dict) -> list[str]:
    """["p: 0.5 -> 0.3", "data sha256: ...", ...]: what makes a run, section by section (tandem, grpo,
    data); the recorded facts beside them (machine, lossy_prompts, pairing, format) are not compared."""
    out = []
    for section, name in (("tandem", ""), ("grpo", ""), ("data", "data ")):
        out += [name + d for d in rundir.differences(old.get(section), new.get(section))]
    return out


def machine_differences(old: dict | None, new: dict | None) -> list[str]:
    """["torch_threads: 2 -> 1", "versions.torch: '2.5.1' -> '2.6.0'", ...] over the facts that can change
    a run's numbers (`trlvr.provenance.DETERMINISM_KEYS`). A missing side (a record written before
    provenance existed) yields no differences."""
    if not old or not new:
        return []
    return rundir.differences(*({k: d.get(k) for k in DETERMINISM_KEYS} for d in (old, new)))


def add_machine(record: dict, facts: dict, stored: dict | None, *, resume: bool) -> list[str]:
    """Put this process' machine `facts` in `record`; on resume, keep the stored run's earlier machines
    and return how the machine differs from the one that wrote `stored` (for a warning)."""
    record["machine"] = facts
    if not resume or not stored:
        return []
    earlier = list(stored.get("earlier_machines") or [])
    diffs = machine_differences(stored.get("machine"), facts)
    if diffs:
        earlier.append(stored["machine"])
    if earlier:
        record["earlier_machines"] = earlier
    return diffs


def lossy_section(lossy: list, total: int) -> dict:
    """The record's `lossy_prompts`: how many of `total` training prompts do not survive the
    tokenizer (`trlvr.data.prompts.lossy_prompts`), and the first LOSSY_LISTED of them."""
    return {
        "count": len(lossy),
        "of": total,
        "listed": [{"index": x.index, "prompt": x.original, "roundtrip": x.roundtrip}
                   for x in lossy[:LOSSY_LISTED]],  # fmt: skip
    }


def read_record(output_dir: str | Path) -> dict | None:
    """The stored record (None if there is none), its paths as format 2 stores them."""
    record = rundir.read_record(Path(output_dir) / RUN_FILE)
    if record is not None and record.get("format", 1) < 2:  # paths as typed, relative to where the run started
        record = {**_stored_paths(record, output_dir), "format": FORMAT}
    return record


def write_record(output_dir: str | Path, record: dict) -> None:
    """Atomically (write + rename), so another process never reads half a file."""
    rundir.write_record(Path(output_dir) / RUN_FILE, record, sort_keys=True)


def _compare_stored(output_dir: str | Path, old: dict, new: dict) -> list[str]:
    """`differences` with a format-1 record's paths read as `read_record` reads them."""
    if old.get("format", 1) < 2:
        old = {**_stored_paths(old, output_dir), "format": FORMAT}
    return differences(old, new)


def check_output_dir(output_dir: str | Path, record: dict, *, resume: bool, force: bool) -> list[str]:
    """Refuse (UserError) to mix runs in `output_dir`; return the differences that --force let through."""
    diffs = rundir.check_identity(
        output_dir, RUN_FILE, record, lambda old, new: _compare_stored(output_dir, old, new), force=force,
        what="a different run",
        fix="use another --output_dir, or --force to start over in it (the earlier run is moved aside)",
    )  # fmt: skip
    existing = rundir.checkpoints(output_dir)
    if not resume and not force and (existing or rundir.final_dir(output_dir).exists()):
        newest = existing[0].name if existing else rundir.FINAL
        raise UserError(
            f"{output_dir} already holds this run ({newest}): pass --resume to continue it, another "
            "--output_dir for a new run, or --force to start over in it"
        )
    return diffs

"""The run's identity, stored beside its checkpoints as `output_dir/trlvr_run.json`.

A record holds the run's whole resolved configuration: every TandemConfig field and every GRPOConfig
field, minus the short lists of those that cannot change what is trained (NOT_IDENTITY: when to give
up on non-finite steps, the pre-emption grace, the lossy-prompt switch; NOT_IDENTITY_GRPO: output and
logging, save and eval cadence, publishing, and where and how fast it runs), and the training data's
content hash. A resume compares all of them and refuses any difference, naming the field. Training into a
directory whose record differs (another arm, dataset, schedule, p, senior, junior, learning rate, ...) is
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
from trlvr.team import is_self

FORMAT = 3  # 3: every GRPOConfig field but NOT_IDENTITY_GRPO; 2: paths relative to the record's directory
# TandemConfig fields that do not change what is trained: when a run gives up on non-finite steps, how long
# a pre-empted run has to save, whether lossy prompts are refused (the run trains the same prompts or none),
# and the GPU the dry run plans for (a plan, not a setting of the run: on a GPU its own memory is used)
NOT_IDENTITY = {"nonfinite_patience", "preempt_grace_s", "refuse_lossy_prompts", "gpu_memory"}
LOSSY_LISTED = 100  # lossy prompts listed in the record (all are counted)
# The GRPOConfig fields that cannot change what is trained; every other field is the run's identity.
NOT_IDENTITY_GRPO = frozenset(
    {
        # where it writes, and the target (a resume may raise max_steps: `trlvr.rundir.resume_plan` decides)
        "output_dir",
        "max_steps",
        "num_train_epochs",
        "resume_from_checkpoint",
        "overwrite_output_dir",
        # what it logs, and where to
        "logging_dir",
        "logging_strategy",
        "logging_steps",
        "logging_first_step",
        "log_on_each_node",
        "logging_nan_inf_filter",
        "include_num_input_tokens_seen",
        "log_level",
        "log_level_replica",
        "disable_tqdm",
        "report_to",
        "run_name",
        "project",
        "trackio_space_id",
        "trackio_bucket_id",
        "trackio_static_space_id",
        "log_completions",
        "log_multimodal",
        "num_completions_to_print",
        "log_unique_prompts",
        "log_completions_hub_repo",
        "skip_memory_metrics",
        "debug",
        # when it saves and evaluates (a checkpoint holds the same state whenever it is saved)
        "save_strategy",
        "save_steps",
        "save_total_limit",
        "save_on_each_node",
        "save_only_model",
        "enable_jit_checkpoint",
        "eval_strategy",
        "eval_steps",
        "eval_delay",
        "per_device_eval_batch_size",
        "prediction_loss_only",
        "eval_on_start",
        "eval_do_concat_batches",
        "eval_use_gather_object",
        "eval_accumulation_steps",
        "include_for_metrics",
        "batch_eval_metrics",
        "num_generations_eval",
        "bf16_full_eval",
        "fp16_full_eval",
        "load_best_model_at_end",
        "metric_for_best_model",
        "greater_is_better",
        "do_train",
        "do_eval",
        "do_predict",
        # publishing
        "push_to_hub",
        "hub_token",
        "hub_private_repo",
        "hub_model_id",
        "hub_strategy",
        "hub_always_push",
        "hub_revision",
        # where and how fast it runs, not what it computes (the record's `machine` keeps the machine; a resume
        # on another one is warned about): device, process layout, data-loader workers, memory savers, server
        # address
        "use_cpu",
        "local_rank",
        "ddp_find_unused_parameters",
        "ddp_bucket_cap_mb",
        "ddp_broadcast_buffers",
        "ddp_static_graph",
        "ddp_backend",
        "ddp_timeout",
        "dataloader_num_workers",
        "dataloader_pin_memory",
        "dataloader_persistent_workers",
        "dataloader_prefetch_factor",
        "dataloader_multiprocessing_context",
        "torch_empty_cache_steps",
        "gradient_checkpointing",
        "gradient_checkpointing_kwargs",
        "activation_checkpointing",
        "activation_checkpointing_kwargs",
        "torch_compile",
        "torch_compile_backend",
        "torch_compile_mode",
        "vllm_gpu_memory_utilization",
        "vllm_enable_sleep_mode",
        "vllm_server_base_url",
        "vllm_server_host",
        "vllm_server_port",
        "vllm_server_timeout",
        "vllm_group_port",
    }
)


def grpo_identity(args) -> dict:
    """Every field of the run's GRPOConfig (`args`) that can change what is trained (all but
    NOT_IDENTITY_GRPO), with the value the run uses."""
    if dataclasses.is_dataclass(args):
        names = [f.name for f in dataclasses.fields(args)]
    else:  # a plain namespace (library callers, tests): what it holds
        names = list(vars(args))
    return {
        k: getattr(args, k, None)
        for k in sorted(names)
        if k not in NOT_IDENTITY_GRPO and not k.startswith("_")
    }


def data_fingerprint(source: str, split: str | None = None) -> dict:
    """{"source", "split", "sha256"}: the content hash of a local file or folder; hub names carry none."""
    path = Path(source)
    digest = None
    if source and (path.is_file() or path.is_dir()):  # no dataset ("") is not the current folder
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
    """The record of a run about to start (JSON-ready), its paths as `args.output_dir`'s record keeps them."""
    record = {
        "format": FORMAT,
        "tandem": {k: v for k, v in dataclasses.asdict(tandem).items() if k not in NOT_IDENTITY},
        "grpo": grpo_identity(args),
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
        if isinstance(value, str) and value and not is_self(value):
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
        "listed": [
            {"index": x.index, "prompt": x.original, "roundtrip": x.roundtrip} for x in lossy[:LOSSY_LISTED]
        ],
    }


def read_record(output_dir: str | Path) -> dict | None:
    """The stored record (None if there is none), its paths as format 2 stores them."""
    record = rundir.read_record(Path(output_dir) / RUN_FILE)
    if (
        record is not None and record.get("format", 1) < 2
    ):  # paths as typed, relative to where the run started
        record = {**_stored_paths(record, output_dir), "format": FORMAT}
    return record


def write_record(output_dir: str | Path, record: dict) -> None:
    """Atomically (write + rename), so another process never reads half a file."""
    rundir.write_record(Path(output_dir) / RUN_FILE, record, sort_keys=True)


# TandemConfig fields added after records were first written, with the value every run before them had: a
# record without one was that (a run recorded before `grader` existed was graded by trlvr's grader)
ADDED_FIELDS = {"grader": "trlvr"}


def _compare_stored(output_dir: str | Path, old: dict, new: dict) -> list[str]:
    """`differences` with a format-1 record's paths read as `read_record` reads them; a record written
    before format 3 (a hand-picked list of GRPOConfig fields) is compared on the fields it holds; a field of
    ADDED_FIELDS the record lacks is the value it had then."""
    if isinstance(old.get("tandem"), dict):
        old = {**old, "tandem": {**ADDED_FIELDS, **old["tandem"]}}
    fmt = old.get("format", 1)
    if fmt < 2:
        old = {**_stored_paths(old, output_dir), "format": FORMAT}
    if fmt < 3:
        kept = set(old.get("grpo") or {})
        new = {**new, "grpo": {k: v for k, v in (new.get("grpo") or {}).items() if k in kept}}
    return differences(old, new)


def check_output_dir(output_dir: str | Path, record: dict, *, resume: bool, force: bool) -> list[str]:
    """Refuse (UserError) to mix runs in `output_dir`; return the differences that --force let through."""
    diffs = rundir.check_identity(
        output_dir,
        RUN_FILE,
        record,
        lambda old, new: _compare_stored(output_dir, old, new),
        force=force,
        what="a different run",
        fix="use another --output_dir, or --force to start over in it (the earlier run is moved aside)",
    )
    existing = rundir.checkpoints(output_dir)
    if not resume and not force and (existing or rundir.final_dir(output_dir).exists()):
        newest = existing[0].name if existing else rundir.FINAL
        raise UserError(
            f"{output_dir} already holds this run ({newest}): pass --resume to continue it, another "
            "--output_dir for a new run, or --force to start over in it"
        )
    return diffs

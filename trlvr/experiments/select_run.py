"""Selection as a recipe: load each checkpoint, evaluate it with `trlvr.eval.evaluate`, pick one.

What this file adds to `selection.py`: models, the validation data (a file, or the run's own
holdout for `split:N`), and the run's record (`trlvr_run.json`: its junior and its holdout).
"""

from __future__ import annotations

import json
from pathlib import Path

from trlvr.errors import UserError
from trlvr.experiments.selection import Candidate, list_checkpoints, select_checkpoint

RUN_FILE = "trlvr_run.json"
HOLDOUT_FILE = "holdout.jsonl"


def read_run(run_dir: str | Path) -> dict:
    path = Path(run_dir) / RUN_FILE
    if not path.is_file():
        raise UserError(f"{run_dir}: no {RUN_FILE}; is this a `trlvr train` output_dir?")
    return json.loads(path.read_text())


def validation_problems(run_dir: str | Path, val: str, limit: int | None = None) -> tuple[str, list]:
    """(name, problems) for --val: "split:N" = the run's recorded holdout, else a problems source."""
    from trlvr.data import load_problems

    if val.startswith("split:"):
        try:
            n = int(val.removeprefix("split:"))
        except ValueError:
            raise UserError(f"--val {val!r}: expected split:N with N an integer") from None
        held = Path(run_dir) / HOLDOUT_FILE
        recorded = read_run(run_dir).get("tandem", {}).get("holdout", 0)
        if not recorded or not held.is_file():
            raise UserError(f"--val {val}: {run_dir} held out no training problems; train with --holdout {n}")
        if int(recorded) != n:
            raise UserError(f"--val {val}: the run held out {recorded} problems, not {n}; use --val split:{recorded}")
        problems = load_problems(str(held), limit=limit)
        return f"holdout{n}", list(problems)
    problems = load_problems(val, limit=limit)
    return Path(val).stem, list(problems)


def run_selection(
    run_dir, val: str, *, metric: str, direction: str | None = None, junior: str | None = None,
    limit: int | None = None, n: int = 4, max_new_tokens: int = 3000, decoding: dict | None = None,
    seed: int = 0, batch_size: int = 64, include_initial: bool = False, progress: bool = True,
    dtype: str = "auto", device: str | None = None, junior_device: str | None = None,
):  # fmt: skip
    """Evaluate every checkpoint of `run_dir` on the validation data through `trlvr.eval.api.evaluate_specs`
    (the one path `trlvr eval` takes: same loading, vocabulary check and prompts), then pick one."""
    from trlvr.eval.api import EvalSpec, evaluate_specs
    from trlvr.models import SELF

    record = read_run(run_dir)
    junior = junior or record.get("tandem", {}).get("junior")
    if not junior:
        raise UserError(f"{run_dir}: the run has no junior; pass --junior")
    pairing = record.get("tandem", {}).get("pairing", "auto")  # the run's own setting (auto / lockstep / text)
    name, problems = validation_problems(run_dir, val, limit)
    candidates = list_checkpoints(run_dir)
    if include_initial:
        candidates = [Candidate(0, record["tandem"]["senior"]), *candidates]
    base = EvalSpec(n=n, ks=tuple(k for k in (1, 2, 4, 8) if k <= n), seed=seed, max_new_tokens=max_new_tokens,
                    batch_size=batch_size, **(decoding or {}))  # fmt: skip

    def evaluate_checkpoint(cand: Candidate, problems, out_dir: Path, suite):
        from trlvr.models import is_adapter_dir

        # `junior: self` pairs a LoRA checkpoint with its base; the starting senior (step 0) is that base
        partner = cand.path if junior == SELF and not is_adapter_dir(cand.path) else junior
        return evaluate_specs(
            cand.path, partner, {name: problems}, base.replace(suite=tuple(suite)), out_dir,
            data_identities={name: {"validation": val, "run": str(run_dir)}}, data_sources={name: val},
            dtype=dtype, device=device, junior_device=None if junior == SELF else junior_device,
            progress=progress, pairing=pairing,
        )  # fmt: skip

    return select_checkpoint(run_dir, problems, metric=metric, evaluate_checkpoint=evaluate_checkpoint,
                             val_name=name, direction=direction, candidates=candidates)  # fmt: skip

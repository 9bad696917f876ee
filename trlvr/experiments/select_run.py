"""Selection as a recipe: evaluate each checkpoint with `trlvr.eval.api.evaluate_specs`, pick one.

What this file adds to `selection.py`: models, the validation data (a file, or the run's own
holdout for `split:N`), and the run's record (`trlvr_run.json`: its junior and its holdout).
Every setting is checked before the first checkpoint is evaluated (`selection_spec`, `check_split`,
the validation file with the gold check evaluation and training run); `trlvr study` runs the same checks.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

from trlvr import rundir
from trlvr.data import load_problems
from trlvr.errors import UserError
from trlvr.eval.api import ModelSpec, evaluate_specs
from trlvr.eval.spec import EvalSpec
from trlvr.experiments.selection import (
    Candidate,
    check_metric,
    list_checkpoints,
    select_checkpoint,
    selection_folder,
    suite_for,
)
from trlvr.models import is_adapter_dir
from trlvr.ranks import Ranks
from trlvr.rewards import GRADERS, check_golds, require_grader
from trlvr.rundir import HOLDOUT_FILE, RUN_FILE
from trlvr.team import Team


def read_run(run_dir: str | Path) -> dict:
    """The run's record, its model and data paths usable from the current directory
    (`trlvr.training.run_record.read_record`: records store them relative to the run, or absolute)."""
    from trlvr.training.run_record import read_record, resolved_paths

    record = read_record(run_dir)
    if record is None:
        raise UserError(f"{run_dir}: no {RUN_FILE}; is this a `trlvr train` output_dir?")
    return resolved_paths(record, run_dir)


def split_size(val: str) -> int | None:
    """N of `--val split:N`; None for a problems source."""
    if not val.startswith("split:"):
        return None
    try:
        return int(val.removeprefix("split:"))
    except ValueError:
        raise UserError(f"--val {val!r}: expected split:N with N an integer") from None


def check_split(val: str, holdout: int | None, run_dir: str | Path) -> None:
    """`--val split:N` needs a run that held out exactly N training problems (`--holdout N`)."""
    n = split_size(val)
    if n is None:
        return
    if not holdout:
        raise UserError(f"--val {val}: {run_dir} held out no training problems; train with --holdout {n}")
    if int(holdout) != n:
        raise UserError(
            f"--val {val}: the run held out {holdout} problems, not {n}; use --val split:{holdout}"
        )


def load_validation(source: str, limit: int | None = None) -> list:
    """Validation problems from a source, refused (one line naming the row) where the grader cannot
    parse a gold, as `trlvr eval`, `trlvr data check` and training refuse them."""
    return list(load_problems(source, limit=limit, check_gold=check_golds))


def validation_problems(run_dir: str | Path, val: str, limit: int | None = None) -> tuple[str, list]:
    """(name, problems) for --val: "split:N" = the run's recorded holdout, else a problems source."""
    n = split_size(val)
    if n is not None:
        held = Path(run_dir) / HOLDOUT_FILE
        recorded = read_run(run_dir).get("tandem", {}).get("holdout", 0)
        check_split(val, recorded if held.is_file() else 0, run_dir)
        return f"holdout{n}", load_validation(str(held), limit)
    return Path(val).stem, load_validation(val, limit)


def selection_spec(
    metric: str,
    *,
    n: int = 4,
    max_new_tokens: int = 3000,
    decoding: dict | None = None,
    seed: int = 0,
    batch_size: int = 64,
    prompt_template: str = "trlvr",
    grader: str = "trlvr",
):
    """The EvalSpec every checkpoint is evaluated under, checked (n, budget, decoding, the metric's name, the
    grader the metric is computed with: one of `trlvr.rewards.GRADERS`, its dependencies installed)."""
    if n < 1:
        raise UserError(f"--n must be >= 1, got {n}")
    if grader not in GRADERS:
        raise UserError(f"--grader: {grader!r}; choose one of {', '.join(GRADERS)}")
    try:
        require_grader(grader)
    except UserError as e:
        raise UserError(f"--grader: {e}") from None
    spec = EvalSpec(
        n=n,
        ks=tuple(k for k in (1, 2, 4, 8) if k <= n),
        seed=seed,
        max_new_tokens=max_new_tokens,
        batch_size=batch_size,
        prompt_template=prompt_template,
        graders=(grader,),
        **(decoding or {}),
    )
    return spec.replace(suite=tuple(check_metric(metric, spec.ks)))


def _resolved(source: str) -> str:
    """A local file as its absolute path (naming the same file from any cwd); anything else as given."""
    return str(Path(source).resolve()) if Path(source).is_file() else source


@dataclass(frozen=True)
class SelectSpec:
    """What a selection chooses by: the validation data (`split:N` = the run's holdout, or a problems
    source), the metric and its direction (None: min for legibility/drift, else max), the first
    `limit` validation problems, and whether the run's starting senior (step 0) is a candidate."""

    val: str
    metric: str = "handoff/pass@1"
    direction: str | None = None
    limit: int | None = None
    include_initial: bool = False


def run_selection(
    run_dir,
    how: SelectSpec,
    spec,
    models: ModelSpec | None = None,
    *,
    progress: bool = True,
    fresh: bool = False,
):
    """Evaluate every checkpoint of `run_dir` on the validation data through `trlvr.eval.api.evaluate_specs`
    (the one path `trlvr eval` takes: same loading, vocabulary check and prompts), then pick one.

    spec: the EvalSpec every checkpoint is evaluated under (`selection_spec`); models: the junior and
    how to load (its `senior` is ignored: each checkpoint in turn; junior None = the run's own, pairing =
    the run's own setting). fresh: start each checkpoint's evaluation over (its folder was made under
    other settings): every checkpoint's checks first, then each folder set aside as it is evaluated.
    The run's lock is held from its first write on (`trlvr.rundir.LOCKS`: a run being trained is refused, and
    a training into it is refused while the selection runs); every check before it writes nothing."""
    rundir.check_unlocked(run_dir, "trlvr train", "RUN")  # a run being trained: refused at once
    record = read_run(run_dir)
    models = models or ModelSpec("")
    junior = models.junior or record.get("tandem", {}).get("junior")
    if not junior:
        raise UserError(f"{run_dir}: the run has no junior; pass --junior")
    pairing = record.get("tandem", {}).get("pairing", "auto")  # the run's own setting (PAIRINGS)
    team = Team.declared(None, junior, pairing=pairing)  # each checkpoint is the senior in turn
    name, problems = validation_problems(run_dir, how.val, how.limit)
    candidates = list_checkpoints(run_dir)
    if how.include_initial:
        candidates = [Candidate(0, record["tandem"]["senior"]), *candidates]
    val = how.val

    def evaluate_checkpoint(cand: Candidate, problems, out_dir: Path, suite, check_only: bool = False):
        # `junior: self` pairs a LoRA checkpoint with its base; the starting senior (step 0) is that base
        partner = cand.path if team.is_self and not is_adapter_dir(cand.path) else junior
        runs_junior = bool(
            set(suite) - {"solo"}
        )  # solo/* metrics load no junior: nothing to put on its device
        these = dataclasses.replace(
            models,
            senior=cand.path,
            junior=partner,
            pairing=pairing,
            junior_device=None if team.is_self or not runs_junior else models.junior_device,
        )
        return evaluate_specs(
            these,
            {name: problems},
            spec.replace(suite=tuple(suite)),
            out_dir,
            data_identities={name: {"validation": _resolved(val), "run": str(Path(run_dir).resolve())}},
            data_sources={name: val},
            progress=progress,
            fresh=fresh,
            check_only=check_only,
        )

    def check_checkpoint(
        cand: Candidate, problems, out_dir: Path, suite
    ):  # --fresh: each folder's checks first
        evaluate_checkpoint(cand, problems, out_dir, suite, check_only=True)

    if fresh:  # every checkpoint's checks before the first folder is set aside, and before the lock is taken
        for cand in candidates:
            check_checkpoint(
                cand, problems, selection_folder(run_dir, name) / f"step-{cand.step}", suite_for(how.metric)
            )
    with rundir.lock(run_dir, by="trlvr select", main_process=Ranks.current().writer):
        return select_checkpoint(
            run_dir,
            problems,
            metric=how.metric,
            evaluate_checkpoint=evaluate_checkpoint,
            val_name=name,
            direction=how.direction,
            candidates=candidates,
        )

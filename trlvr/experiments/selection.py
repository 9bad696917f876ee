"""Held-out checkpoint selection: evaluate every checkpoint of a run on validation data, pick one.

    select_checkpoint(run_dir, val_problems, metric="handoff/pass@1", ...)   # -> Selection
    RUN/select/<val>/step-<N>/      one evaluation directory per checkpoint (resumable)
    RUN/select/<val>/table.md, curve.png, selection.json   every checkpoint's value with its CI
    RUN/selected.json               the chosen checkpoint: step, path, metric, value, CI, val fingerprint,
                                    the checkpoints it covered (table) and the run's newest step then
                                    (paths relative to RUN when inside it, else absolute: the same from any
                                    cwd)

`trlvr.eval.api.resolve_senior("RUN@selected")` turns that record back into a model path for `trlvr eval`.

What this file does not know: how a checkpoint is evaluated (`trlvr.eval.api.evaluate_specs`) or trained.
It never reads test data: it sees only the validation problems it is given.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass
from pathlib import Path

from trlvr import artifacts, rundir
from trlvr.data import problem_key
from trlvr.errors import UserError
from trlvr.eval.aggregate import metric_specs, problem_table
from trlvr.eval.suite import protocol_of_metric, protocols_for
from trlvr.provenance import path_for_record
from trlvr.ranks import Ranks
from trlvr.rundir import CHECKPOINT, FINAL, PREEMPT_MARK, SELECTED_FILE

__all__ = [
    "Candidate",
    "Selection",
    "select_checkpoint",
    "list_checkpoints",
    "pick",
    "suite_for",
    "check_metric",
    "default_direction",
    "problems_fingerprint",
    "SELECTED_FILE",
]
WEIGHT_FILES = artifacts.WEIGHT_FILES + artifacts.INDEX_FILES  # a folder holding one is a candidate
# metric-name prefix -> the suite entry that produces it
_SUITE_OF = {
    "solo": "solo",
    "handoff": "handoff",
    "legibility": "legibility",
    "drift": "drift",
    "junior": "junior",
}
_LOWER_IS_BETTER = ("legibility/", "drift/")


@dataclass(frozen=True)
class Candidate:
    step: int
    path: str


@dataclass(frozen=True)
class Selection:
    step: int
    path: str
    metric: str
    direction: str  # "max" or "min"
    value: float
    ci_low: float
    ci_high: float
    val: dict  # what the validation data was: name, size, content fingerprint, problem keys
    table: list  # [{step, path, value, ci_low, ci_high}] for every candidate, by step
    newest_step: int | None = None  # the run's newest step when it was selected (`trlvr.rundir.newest_step`)
    grader: str = "trlvr"  # the grader the metric was computed with (`trlvr select --grader`)


def suite_for(metric: str) -> list[str]:
    """The evaluation suite entry a metric name needs: "handoff/pass@1" -> ["handoff"]."""
    head = metric.split("/", 1)[0]
    if head == "junior" and "/" in metric:
        raise UserError(
            f"--metric {metric!r} measures the junior alone: it is the same for every checkpoint, "
            "so it cannot choose one; choose a solo/*, handoff/*, dose-*/*, legibility/* or drift/* metric"
        )
    protocol = protocol_of_metric(metric)
    if protocol is not None and protocol.entry == "dose" and "/" in metric:
        return ["dose"]
    if head not in _SUITE_OF or "/" not in metric:
        raise UserError(
            f"--metric {metric!r}: expected a results.json metric such as solo/pass@1, handoff/pass@1, "
            "dose-0.5/pass@1, legibility/junior_ce or drift/kl"
        )
    return [_SUITE_OF[head]]


def check_metric(metric: str, ks: tuple[int, ...]) -> list[str]:
    """The suite `metric` needs; UserError unless the selection's evaluation (pass@k for `ks`) produces
    that metric name. The names come from the aggregation itself (`problem_table` over one synthetic
    sample per protocol), so they cannot drift from what results.json holds."""
    suite = suite_for(metric)
    names = producible_metrics(suite, ks)
    if metric not in names:
        raise UserError(
            f"--metric {metric!r} is not a metric this selection's evaluation produces "
            f"(suite {suite[0]}, k {list(ks)}); choose from {', '.join(sorted(names))}"
        )
    return suite


def producible_metrics(suite: list[str], ks: tuple[int, ...]) -> set[str]:
    """Metric names an evaluation of `suite` with pass@k for `ks` writes (legibility and drift included
    when either is asked: they are scored together)."""
    scored = (
        {"legibility": 0.0, "legibility_bpb": 0.0, "drift": 0.0}
        if {"legibility", "drift"} & set(suite)
        else {}
    )
    rows = [
        {
            "benchmark": "b",
            "problem_id": "p",
            "protocol": proto,
            "sample_idx": i,
            "reward": 1.0,
            "num_tokens": 1,
            "finish_reason": "eos",
            "senior_share": 1.0,
            **(scored if proto == "solo" else {}),
        }
        for proto in protocols_for(suite)
        for i in range(max(ks))
    ]
    return set(metric_specs(problem_table(rows, list(ks))))


def default_direction(metric: str) -> str:
    return "min" if metric.startswith(_LOWER_IS_BETTER) else "max"


def list_checkpoints(run_dir: str | Path) -> list[Candidate]:
    """`checkpoint-N` folders holding weights, by step; `final/` too when no checkpoint has its step.

    A checkpoint saved only because the run was pre-empted (marked `preempted.json`) is a resume
    point, not a candidate: a killed and resumed run offers the same checkpoints as an unbroken one.
    A candidate (or final/) that is not complete (`trlvr.artifacts`: a save cut short) is refused in
    one line naming it, before anything is evaluated.
    """
    run = Path(run_dir)
    if not run.is_dir():
        raise UserError(f"{run}: no such run directory")
    out, preempted = {}, []
    for d in rundir.checkpoints(run):
        if any((d / f).is_file() for f in WEIGHT_FILES):
            if (d / PREEMPT_MARK).is_file():
                preempted.append(d.name)
                continue
            step = rundir.checkpoint_step(d)
            out[step] = Candidate(step, str(d))
    final = rundir.final_dir(run)
    if final.exists():
        refuse_torn(final, artifacts.FINAL)
        step = _final_step(run)
        if step is not None and step not in out:
            out[step] = Candidate(step, str(final))
    if not out and preempted:
        raise UserError(
            f"{run}: only pre-emption checkpoints ({', '.join(sorted(preempted))}); "
            "resume the run (trlvr train ... --resume) before selecting"
        )
    if not out:
        raise UserError(f"{run}: no checkpoint with weights ({CHECKPOINT}N/ or {FINAL}/)")
    for cand in out.values():
        refuse_torn(cand.path, artifacts.WEIGHTS)
    return [out[s] for s in sorted(out)]


def refuse_torn(path: str | Path, kind: artifacts.Artifact) -> None:
    """UserError (one line) when `path` is not a complete `kind` (`trlvr.artifacts`): never evaluated."""
    if why := artifacts.problem(path, kind):
        raise UserError(
            f"{path}: {why} (a save cut short?); resume the run (trlvr train ... --resume) or move "
            "that folder out of the run before selecting"
        )


def _final_step(run: Path) -> int | None:
    """final/'s step (a complete final/ holds its trainer_state.json: `trlvr.rundir.train_state`)."""
    return rundir.train_state(run).step


def problems_fingerprint(problems) -> str:
    """sha256 over the problems' text and gold answers, in order (16 hex digits)."""
    h = hashlib.sha256()
    for p in problems:
        h.update(str(getattr(p, "prompt", None) or p.problem).encode())
        h.update(b"\x00")
        h.update(str(p.answer).encode())
        h.update(b"\x01")
    return h.hexdigest()[:16]


def pick(table: list[dict], direction: str) -> dict:
    """The best row; ties go to the earliest step (less training for the same value)."""
    if direction not in ("max", "min"):
        raise UserError(f"--direction must be 'max' or 'min', got {direction!r}")
    sign = 1.0 if direction == "max" else -1.0
    return max(table, key=lambda r: (sign * r["value"], -r["step"]))


def selection_folder(run_dir: str | Path, val_name: str) -> Path:
    """RUN/select/<val>/: the validation evaluations of one selection (step-N/ each)."""
    return Path(run_dir) / "select" / val_name


def select_checkpoint(
    run_dir: str | Path,
    val_problems: list,
    *,
    metric: str,
    evaluate_checkpoint,
    val_name: str = "val",
    direction: str | None = None,
    candidates: list[Candidate] | None = None,
    check_checkpoint=None,
) -> Selection:
    """Evaluate every candidate on `val_problems` and record the best.

    `evaluate_checkpoint(candidate, problems, out_dir, suite) -> results.json dict` runs one
    evaluation (`select_run.run_selection` passes a closure over `trlvr.eval.api.evaluate_specs`).
    `check_checkpoint` (same arguments; `trlvr select --fresh`): every candidate's checks, run for all of
    them before the first evaluation sets any folder aside.
    """
    suite = suite_for(metric)
    direction = direction or default_direction(metric)
    if not val_problems:
        raise UserError("validation set is empty")
    run = Path(run_dir)
    candidates = candidates or list_checkpoints(run)
    out_root = selection_folder(run, val_name)
    table, graders = [], set()
    for cand in candidates if check_checkpoint is not None else ():
        check_checkpoint(cand, val_problems, out_root / f"step-{cand.step}", suite)
    for cand in candidates:
        res = evaluate_checkpoint(cand, val_problems, out_root / f"step-{cand.step}", suite)
        metrics = res["macro"]["metrics"]
        if metric not in metrics:
            raise UserError(
                f"--metric {metric!r} is not in the results; available: {', '.join(sorted(metrics))}"
            )
        e = metrics[metric]
        graders.add((res.get("config") or {}).get("grader", "trlvr"))
        table.append(
            {
                "step": cand.step,
                "path": cand.path,
                "value": e["value"],
                "ci_low": e["ci_low"],
                "ci_high": e["ci_high"],
            }
        )
    best = pick(table, direction)
    val = {
        "name": val_name,
        "size": len(val_problems),
        "fingerprint": problems_fingerprint(val_problems),
        "keys": sorted(problem_key(p) for p in val_problems),
    }
    sel = Selection(
        best["step"],
        best["path"],
        metric,
        direction,
        best["value"],
        best["ci_low"],
        best["ci_high"],
        val,
        table,
        rundir.newest_step(run),
        *graders,
    )
    if not Ranks.current().writer:  # several processes evaluated it; rank 0 alone records the choice
        return sel
    out_root.mkdir(parents=True, exist_ok=True)
    rundir.write_file(out_root / "selection.json", json.dumps(stored(sel, out_root), indent=2))
    rundir.write_file(out_root / "table.md", format_table(sel))
    plot_selection(sel, out_root / "curve.png")
    rundir.write_record(
        run / SELECTED_FILE, stored(sel, run)
    )  # atomic: a reader sees the old or the new record
    return sel


def stored(sel: Selection, record_dir: Path) -> dict:
    """The selection as a record in `record_dir` keeps it: every checkpoint path relative to that
    directory when inside it, else absolute (`trlvr.provenance.path_for_record`), so that `RUN@selected`
    names the same checkpoint from any working directory."""
    rec = asdict(sel)
    rec["path"] = path_for_record(sel.path, record_dir)
    rec["table"] = [{**r, "path": path_for_record(r["path"], record_dir)} for r in sel.table]
    return rec


def format_table(sel: Selection) -> str:
    lines = [f"| step | {sel.metric} | 95% CI | |", "|---|---|---|---|"]
    for r in sel.table:
        mark = "selected" if r["step"] == sel.step else ""
        lines.append(f"| {r['step']} | {r['value']:.4f} | [{r['ci_low']:.4f}, {r['ci_high']:.4f}] | {mark} |")
    return "\n".join(lines) + "\n"


def plot_selection(sel: Selection, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = [r["step"] for r in sel.table]
    vals = [r["value"] for r in sel.table]
    lo = [r["ci_low"] for r in sel.table]
    hi = [r["ci_high"] for r in sel.table]
    fig, ax = plt.subplots(figsize=(5, 3.2))
    ax.plot(steps, vals, marker="o")
    ax.fill_between(steps, lo, hi, alpha=0.2)
    ax.axvline(sel.step, color="k", ls="--", lw=1, label=f"selected: step {sel.step}")
    ax.set_xlabel("step")
    ax.set_ylabel(sel.metric)
    ax.set_title(f"{sel.metric} on {sel.val['name']} ({sel.val['size']} problems)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)

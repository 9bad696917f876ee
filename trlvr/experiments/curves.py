"""Training curves from a run's `trainer_state.json` log history, and their plot across runs.

What this file does not know: how the metrics were produced (TRL + `trlvr.training` log them).
A curve is a named tuple (steps, values); a run without a metric simply has no such curve.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import NamedTuple

import numpy as np

from trlvr import rundir
from trlvr.errors import UserError
from trlvr.rundir import SELECTED_FILE

# label -> log-history key, in display order
CURVES = {
    "reward": "reward",
    "senior share": "tandem/senior_share",
    "switches / seq": "tandem/switches_per_seq",
    "length (total)": "tandem/team_length/mean",
    "length (senior)": "tandem/senior_tokens/mean",
    "length (junior)": "tandem/junior_tokens/mean",
    "step time (s)": "timing/step_s",
    "KL": "kl",
}
SELECTION = "held-out selection metric"  # from RUN/selected.json (`trlvr select`), not the log history


class Curve(NamedTuple):
    steps: np.ndarray  # (N,) optimizer steps
    values: np.ndarray  # (N,) the metric at each logged step


def find_trainer_state(run_dir: str | Path) -> Path:
    """`trainer_state.json` of a run: the run folder's own, else its newest checkpoint's."""
    run = Path(run_dir)
    direct = run / "trainer_state.json"
    if direct.is_file():
        return direct
    states = [
        c / "trainer_state.json" for c in rundir.checkpoints(run) if (c / "trainer_state.json").is_file()
    ]
    if not states:
        raise UserError(f"{run}: no trainer_state.json (not a training run folder, or no step logged yet)")
    return states[0]  # the newest checkpoint's


def load_curves(run_dir: str | Path) -> dict[str, Curve]:
    """{label: Curve} for every metric of CURVES that the run logged."""
    path = find_trainer_state(run_dir)
    try:
        history = json.loads(path.read_text())["log_history"]
    except (json.JSONDecodeError, KeyError) as e:
        raise UserError(f"{path}: not a trainer state file ({e})") from None
    out = {}
    for label, key in CURVES.items():
        pts = [(h["step"], h[key]) for h in history if key in h and "step" in h and h[key] is not None]
        if pts:
            steps, values = zip(*pts, strict=True)
            out[label] = Curve(np.asarray(steps), np.asarray(values, dtype=float))
    selection = selection_curve(run_dir)
    if selection is not None:
        out[SELECTION] = selection
    return out


def selection_curve(run_dir: str | Path) -> Curve | None:
    """The selection metric over checkpoints (`trlvr select`'s table in RUN/selected.json), or None."""
    path = Path(run_dir) / SELECTED_FILE
    record = rundir.read_record(path)
    if record is None:
        return None
    try:
        table = record["table"]
        pts = sorted((int(r["step"]), float(r["value"])) for r in table)
    except (KeyError, TypeError, ValueError) as e:
        raise UserError(f"{path}: not a selection record ({e})") from None
    if not pts:
        return None
    steps, values = zip(*pts, strict=True)
    return Curve(np.asarray(steps), np.asarray(values))


def band(curves: list[Curve]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Mean, min and max over seeds at the steps every seed logged: (steps, mean, lo, hi)."""
    common = sorted(set.intersection(*(set(c.steps.tolist()) for c in curves)))
    rows = np.stack([np.interp(common, c.steps, c.values) for c in curves])  # (S, N)
    return np.asarray(common), rows.mean(0), rows.min(0), rows.max(0)


def plot_curves(groups: dict[str, list[Curve | None]], label: str, ax, smooth: int = 1) -> None:
    """Draw one metric for several groups (arm -> per-seed curves) on `ax`: the seed mean, with a
    min-max band when a group has several seeds. `smooth` = moving-average window in logged steps."""
    for name, curves in groups.items():
        curves = [c for c in curves if c is not None and len(c.steps)]
        if not curves:
            continue
        steps, mean, lo, hi = band(curves)
        if smooth > 1 and len(mean) >= smooth:
            k = np.ones(smooth) / smooth
            mean, lo, hi = (np.convolve(x, k, mode="valid") for x in (mean, lo, hi))
            steps = steps[smooth - 1 :]
        (line,) = ax.plot(steps, mean, label=name if len(curves) == 1 else f"{name} ({len(curves)} seeds)")
        if len(curves) > 1:
            ax.fill_between(steps, lo, hi, alpha=0.2, color=line.get_color())
    ax.set_xlabel("step")
    ax.set_title(label)

"""What a training run shows and keeps: one progress bar, a few headers, every metric in a file.

- `quiet_libraries(verbose)`: silence transformers / TRL / datasets chatter (deprecation warnings,
  "Loading weights" bars, info logs) unless `--verbose`.
- `log`: trlvr's logger, through accelerate's `get_logger`, so only the main process prints.
- `ProgressBar`: a TrainerCallback drawing one tqdm bar per run with step, reward, senior share,
  s/step and ETA (TRL's own bar is off: `disable_tqdm: true` in the configs, and the trainer's
  dict printer is removed unless verbose); it warns once when the loophole statistics climb
  (`trlvr.engine.loophole.loophole_alarm`: the rule lives there).
- `MetricsFile`: a TrainerCallback appending every log dict to `output_dir/metrics.jsonl`.

What this file does not know: what the metrics mean or how training works.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import warnings
from pathlib import Path

import transformers
from accelerate import PartialState
from accelerate.logging import get_logger
from tqdm.auto import tqdm
from transformers import TrainerCallback

from trlvr.data import read_jsonl
from trlvr.engine.loophole import ALARM_RULES, LEVEL_RULE, loophole_alarm
from trlvr.rundir import METRICS_FILE

LOOPHOLE_PREFIX = "tandem/loophole/"  # the loophole statistics' keys in metrics.jsonl (training/rollout.py)
_LOGGER_NAME = "trlvr"


class _StderrHandler(logging.StreamHandler):
    """A StreamHandler on whatever `sys.stderr` is now (not the one at creation: tests and
    redirections replace it, and a handler on a closed stream prints "--- Logging error ---")."""

    @property
    def stream(self):
        return sys.stderr

    @stream.setter
    def stream(self, value):  # StreamHandler.__init__ assigns it; the property ignores it
        pass


def _setup_logger() -> None:
    base = logging.getLogger(_LOGGER_NAME)
    if not any(getattr(h, "_trlvr", False) for h in base.handlers):
        handler = _StderrHandler()
        handler.setFormatter(logging.Formatter("[trlvr] %(message)s"))
        handler._trlvr = True
        base.addHandler(handler)
        base.setLevel(logging.INFO)
        base.propagate = False


def log(message: str, level: int = logging.INFO) -> None:
    """Print `message` once (main process only), as `[trlvr] message`."""
    PartialState()  # accelerate's logger needs the process state; a no-op once it exists
    _setup_logger()
    get_logger(_LOGGER_NAME).log(level, message)


def warn(message: str) -> None:
    log(message, logging.WARNING)


def quiet_libraries(verbose: bool = False) -> None:
    """Keep the console to trlvr's own lines (verbose: leave the libraries as they are)."""
    _setup_logger()
    if verbose:
        return
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    transformers.utils.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()  # "Loading weights" bars
    try:
        import datasets

        datasets.utils.logging.set_verbosity_error()
        datasets.disable_progress_bars()
    except ImportError:  # pragma: no cover - datasets is a dependency
        pass
    for name in ("trl", "accelerate", "torch.distributed"):
        logging.getLogger(name).setLevel(logging.ERROR)
    for module in ("transformers", "trl", "accelerate", "torch", "peft"):
        warnings.filterwarnings("ignore", category=FutureWarning, module=module)
        warnings.filterwarnings("ignore", category=UserWarning, module=module)
    warnings.filterwarnings("ignore", category=DeprecationWarning)


def _fmt_seconds(s: float) -> str:
    return f"{s:.1f}s" if s < 60 else f"{s / 60:.1f}min"


class ProgressBar(TrainerCallback):
    """One tqdm bar over the run's optimizer steps, on the main process.

    The postfix shows the last logged reward, senior share and step time; tqdm adds elapsed time,
    ETA and rate. `desc` names the stage (e.g. "train tandem").
    """

    def __init__(self, desc: str = "train"):
        self.desc = desc
        self.bar = None
        self._loophole_warned = False

    def on_train_begin(self, args, state, control, **kwargs):
        if state.is_world_process_zero:
            self.bar = tqdm(
                total=state.max_steps,
                initial=state.global_step,
                desc=self.desc,
                unit="step",
                dynamic_ncols=True,
            )

    def on_step_end(self, args, state, control, **kwargs):
        if self.bar is not None:
            self.bar.update(state.global_step - self.bar.n)

    def on_log(self, args, state, control, logs=None, **kwargs):
        if self.bar is None or not logs:
            return
        shown = {}
        if "reward" in logs:
            shown["reward"] = f"{logs['reward']:.3f}"
        if "tandem/senior_share" in logs:
            shown["senior"] = f"{logs['tandem/senior_share']:.2f}"
        if "timing/step_s" in logs:
            shown["step"] = _fmt_seconds(logs["timing/step_s"])
        if shown:
            self.bar.set_postfix(shown, refresh=False)
        self._watch_loophole(state, logs)

    def _watch_loophole(self, state, logs: dict) -> None:
        """One `[trlvr]` warning line per run when a loophole statistic of `logs` climbs far above
        its first logged value (the rollouts of step 0; from the restored log history on resume), or
        when the senior writes nearly all of many spans with no boundary (`LEVEL_RULE`)."""
        keys = [f"{LOOPHOLE_PREFIX}{k}" for k in (*ALARM_RULES, *LEVEL_RULE)]
        if self._loophole_warned or not any(k in logs for k in keys):
            return
        first = next((h for h in state.log_history if any(k in h for k in keys)), logs)
        message = loophole_alarm(
            {k[len(LOOPHOLE_PREFIX) :]: first.get(k) for k in keys},
            {k[len(LOOPHOLE_PREFIX) :]: logs.get(k) for k in keys},
        )
        if message:
            self._loophole_warned = True
            warn(f"step {state.global_step}: {message}")

    def on_train_end(self, args, state, control, **kwargs):
        self.close()

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None


class MetricsFile(TrainerCallback):
    """Append each log dict, with its step, to `output_dir/metrics.jsonl` (main process only).

    On resume from step N, rows after N (written by the interrupted run) are dropped first, so the
    file reads as one uninterrupted run.
    """

    def __init__(self, output_dir: str | Path):
        self.path = Path(output_dir) / METRICS_FILE

    def on_train_begin(self, args, state, control, **kwargs):
        if not state.is_world_process_zero or not self.path.exists():
            return
        rows = read_jsonl(self.path, tolerate_torn_tail=True)  # a kill can tear the last line
        kept = [r for r in rows if r.get("step", 0) <= state.global_step]
        self.path.write_text("".join(json.dumps(r, default=float) + "\n" for r in kept))

    def on_log(self, args, state, control, logs=None, **kwargs):
        if state.is_world_process_zero and logs:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            row = {"step": state.global_step, **logs}
            with open(self.path, "a") as f:
                f.write(json.dumps(row, default=float) + "\n")

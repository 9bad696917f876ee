"""Tandem metrics that TRL does not log: step time split, reward split by junior share.

Rollout metrics (senior share, switches, lengths, tokens/s) are logged by `TandemRollout`. Both
paths append to `trainer._metrics[mode][key]`, the lists `GRPOTrainer.log` averages into every
logging step's entry of `trainer.state.log_history` (the same route TRL's own metrics take), or go
through the `log_metric` callable TRL hands to reward functions.
"""

from __future__ import annotations

import functools
import time

import torch
from transformers import TrainerCallback

from trlvr.algos import split_by_share


class StepTimeCallback(TrainerCallback):
    """Split each optimizer step's wall time into generation (rollout_func) and the rest (update).

    TRL's `step_time` covers both; here `timing/generation_s` + `timing/update_s` = the wall time
    between consecutive step ends (the update share includes reward and log-prob passes).
    """

    def __init__(self, trainer, rollout):
        self.trainer, self.rollout = trainer, rollout
        self._last = None

    def on_train_begin(self, args, state, control, **kwargs):
        self._last = time.perf_counter()
        self.rollout.take_generation_seconds()

    def on_step_end(self, args, state, control, **kwargs):
        now = time.perf_counter()
        total = now - (self._last if self._last is not None else now)
        self._last = now
        generation = self.rollout.take_generation_seconds()
        metrics = self.trainer._metrics["train"]
        metrics["timing/generation_s"].append(generation)
        metrics["timing/update_s"].append(max(total - generation, 0.0))
        metrics["timing/step_s"].append(total)


def with_share_split(reward_func):
    """Wrap a TRL reward function so it also logs its mean reward over the low / high junior-share
    half of each batch (`tandem/reward_low_junior_share`, `tandem/reward_high_junior_share`).

    Uses the per-completion `senior_share` column that `TandemRollout` returns and the `log_metric`
    callable TRL passes to reward functions. The rewards themselves are returned unchanged.
    """

    @functools.wraps(reward_func)
    def reward(*args, **kwargs):
        rewards = reward_func(*args, **kwargs)
        share, log_metric = kwargs.get("senior_share"), kwargs.get("log_metric")
        if share is not None and log_metric is not None and len(share) == len(rewards):
            values = torch.tensor([float("nan") if r is None else float(r) for r in rewards])
            low, high = split_by_share(values, 1.0 - torch.tensor(share, dtype=torch.float32))
            log_metric("tandem/reward_low_junior_share", low)
            log_metric("tandem/reward_high_junior_share", high)
        return rewards

    return reward

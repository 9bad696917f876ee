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


def with_share_split(reward_func, senior_share):
    """Wrap a TRL reward function so it also logs its mean reward over the low / high junior-share
    half of each batch (`tandem/reward_low_junior_share`, `tandem/reward_high_junior_share`).

    senior_share: a callable giving the per-completion senior share of the rollout being scored
    (`TandemRollout.last_senior_share`; TRL scores a rollout right after generating it, on the same
    process); uses the `log_metric` callable TRL passes to reward functions. The rewards themselves are
    returned unchanged, and the reward function receives exactly TRL's arguments.
    """

    @functools.wraps(reward_func)
    def reward(*args, **kwargs):
        rewards = reward_func(*args, **kwargs)
        share, log_metric = senior_share(), kwargs.get("log_metric")
        if share is not None and log_metric is not None and len(share) == len(rewards):
            values = torch.tensor([float("nan") if r is None else float(r) for r in rewards])
            low, high = split_by_share(values, 1.0 - torch.tensor(share, dtype=torch.float32))
            log_metric("tandem/reward_low_junior_share", low)
            log_metric("tandem/reward_high_junior_share", high)
        return rewards

    return reward


# --- the importance-sampling correction: how much of each arm's loss it zeroed or clipped -------------------

IS_TOKENS = "tandem/is/corrected_tokens"  # fraction of loss tokens whose IS ratio was zeroed or clipped
IS_ROWS = "tandem/is/corrected_rows"  # fraction of rows (with a loss token) with at least one such token


def is_corrected_counts(
    ratio: torch.Tensor, loss_mask: torch.Tensor, *, mode: str, clip_min: float | None, clip_max: float | None
) -> tuple[int, int, int, int]:
    """(corrected loss tokens, loss tokens, corrected rows, rows with a loss token) of one batch of TRL's
    `importance_sampling_ratio` as the loss receives it (after TRL's clamp or mask).

    ratio: (B, T) for TRL's token_* modes, (B, 1) for its sequence_* modes (one ratio for the row's tokens);
    loss_mask: (B, T), 1 on the tokens the loss sees (completion_mask x tool_mask: the senior's tokens).
    A ratio is corrected when the *_mask modes set it to 0, or the *_truncate modes clamped it to a bound
    (it equals clip_max or clip_min; a ratio exactly at a bound counts, a measure-zero event)."""
    mask = loss_mask.bool()
    r = ratio.detach().float().expand_as(mask)
    if mode.endswith("_mask"):
        hit = r == 0
    elif mode.endswith("_truncate"):
        hit = torch.zeros_like(mask)
        if clip_max is not None:
            hit |= r >= clip_max
        if clip_min is not None:
            hit |= r <= clip_min
    else:
        raise ValueError(f"unknown importance-sampling mode {mode!r}")
    hit &= mask
    rows = mask.any(dim=-1)
    return int(hit.sum()), int(mask.sum()), int((hit.any(dim=-1) & rows).sum()), int(rows.sum())


class ISCorrectionMeter(TrainerCallback):
    """IS_TOKENS and IS_ROWS for every optimizer step: `add` is called with each micro-batch the loss sees
    (`TandemGRPOTrainer.compute_loss`); at the step's end the counts of all its micro-batches, summed over
    the processes, become one value of each metric in the step's logged row. Steps without the correction
    (backend hf; `vllm_importance_sampling_correction: false`) log neither."""

    def __init__(self, trainer):
        self.trainer = trainer
        self.counts = torch.zeros(4, dtype=torch.float64)

    def add(self, inputs: dict) -> None:
        ratio = inputs.get("importance_sampling_ratio")
        if ratio is None:
            return
        mask = inputs["completion_mask"]
        if inputs.get("tool_mask") is not None:
            mask = mask * inputs["tool_mask"]
        t = self.trainer
        self.counts += torch.tensor(
            is_corrected_counts(
                ratio,
                mask,
                mode=t.vllm_importance_sampling_mode,
                clip_min=t.vllm_importance_sampling_clip_min,
                clip_max=t.vllm_importance_sampling_clip_max,
            ),
            dtype=torch.float64,
        )

    def on_step_end(self, args, state, control, **kwargs):
        t = self.trainer
        if not (getattr(t, "use_vllm", False) and getattr(t, "vllm_importance_sampling_correction", False)):
            return
        counts = t.accelerator.reduce(self.counts.to(t.accelerator.device), reduction="sum").cpu()
        self.counts.zero_()
        tokens_hit, tokens, rows_hit, rows = counts.tolist()
        if tokens:
            t._metrics["train"][IS_TOKENS].append(tokens_hit / tokens)
            t._metrics["train"][IS_ROWS].append(rows_hit / rows)

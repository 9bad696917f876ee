"""GRPO training of a tandem senior on TRL: `TandemGRPOTrainer` (rollouts from the tandem engine via
`rollout_func`, author mask via `env_mask`) and `build_trainer` (everything from a run config)."""

from trlvr.training.build import build_dataset, build_trainer, resolve_reward
from trlvr.training.rollout import TandemRollout
from trlvr.training.trainer import TandemGRPOTrainer

__all__ = [
    "TandemGRPOTrainer",
    "TandemRollout",
    "build_trainer",
    "build_dataset",
    "resolve_reward",
]

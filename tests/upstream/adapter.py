"""The swap: GRPOTrainer's constructor, TandemGRPOTrainer's method.

`TandemAsGRPO(model, reward_funcs, args, ...)` takes GRPOTrainer's arguments, positional or named, and builds a
TandemGRPOTrainer (arm tandem, word schedule, p = 0.5: `TandemConfig()`) whose junior is a self-pair: the same
model as the senior, frozen at its initial weights (the Hub id or folder loaded a second time, or a copy of a
model object). Nothing else is changed: every argument reaches TandemGRPOTrainer as the test passed it.
"""

from __future__ import annotations

import copy
import inspect

from trl import GRPOTrainer

from trlvr.training.trainer import TandemGRPOTrainer

_GRPO_SIGNATURE = inspect.signature(GRPOTrainer.__init__)


class TandemAsGRPO(TandemGRPOTrainer):
    built = 0  # how many were constructed (conftest: a tandem run that built none swapped nothing)

    def __init__(self, *args, **kwargs):
        TandemAsGRPO.built += 1
        bound = _GRPO_SIGNATURE.bind(
            None, *args, **kwargs
        ).arguments  # GRPOTrainer's names for every argument
        bound.pop("self")
        bound.update(bound.pop("kwargs", {}))
        model = bound.pop("model")
        junior = model if isinstance(model, str) else copy.deepcopy(model)
        super().__init__(model, junior, **bound)

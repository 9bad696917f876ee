"""Lockstep tandem decoding of two causal LMs over one shared token history."""

from trlvr.engine.generator import TandemGenerator
from trlvr.engine.rollout import FINISH_REASONS, TandemOutput
from trlvr.engine.sampling import filter_logits, sample_tokens

__all__ = ["TandemGenerator", "TandemOutput", "FINISH_REASONS", "filter_logits", "sample_tokens"]

"""trlvr: Tandem RLVR. A trainable senior co-writes every rollout with a frozen junior; GRPO
updates the senior on its own tokens only."""

__version__ = "0.1.0"

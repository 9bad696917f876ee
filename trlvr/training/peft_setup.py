"""LoRA for a run: the `peft.LoraConfig` TRL trains with.

TRL's `GRPOTrainer(peft_config=...)` wraps the senior with `get_peft_model`; with `beta > 0` and a
fresh adapter its KL reference is the same model with the adapters disabled, i.e. the base model,
which is the self-paired junior. `Trainer.save_model` of a PEFT model writes only the adapter
(`adapter_config.json` + `adapter_model.safetensors`, plus the tokenizer); its
`base_model_name_or_path` names the base the senior was loaded from.

Loading a saved adapter onto its base is `trlvr.models.load_model_or_adapter`; the self-paired
evaluation pair (senior + its adapters-off view) is `trlvr.eval.api.load_pair`.

What this file does not know: run configs and the trainer (they pass plain values), decoding.
"""

from __future__ import annotations

from trlvr.errors import UserError


def lora_config(rank: int = 16, alpha: int | None = None, dropout: float = 0.0, target_modules="all-linear"):
    """A causal-LM LoRA config with `bias='none'` (what `junior: self` needs). alpha defaults to 2 x rank."""
    from peft import LoraConfig

    if rank < 1:
        raise UserError(f"lora_r: must be >= 1, got {rank}")
    return LoraConfig(
        task_type="CAUSAL_LM",
        r=rank,
        lora_alpha=2 * rank if alpha is None else alpha,
        lora_dropout=dropout,
        target_modules=target_modules,
        bias="none",
    )

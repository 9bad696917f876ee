"""LoRA for a run: the `peft.LoraConfig` TRL trains with, and loading a saved adapter onto its base.

TRL's `GRPOTrainer(peft_config=...)` wraps the senior with `get_peft_model`; with `beta > 0` and a
fresh adapter its KL reference is the same model with the adapters disabled, i.e. the base model,
which is the self-paired junior. `Trainer.save_model` of a PEFT model writes only the adapter
(`adapter_config.json` + `adapter_model.safetensors`, plus the tokenizer); its
`base_model_name_or_path` names the base the senior was loaded from.

`load_senior(path)` loads a plain model folder as is, and an adapter folder as a `peft.PeftModel`
on its base; `load_pair(senior, "self")` gives the senior and its adapters-off view
(`trlvr.engine.self_pair`), one copy of the base weights.

What this file does not know: run configs and the trainer (they pass plain values), decoding.
"""

from __future__ import annotations

import json
from pathlib import Path

from trlvr.engine.self_pair import self_pair
from trlvr.errors import UserError

SELF = "self"  # the junior spelling that means: the senior's base model, adapters off
ADAPTER_CONFIG = "adapter_config.json"


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


def is_adapter_dir(path: str | Path) -> bool:
    return (Path(path) / ADAPTER_CONFIG).is_file()


def adapter_base(path: str | Path, base: str | None = None) -> str:
    """The base model an adapter folder belongs to: `base` if given, else its adapter_config.json's."""
    if base is not None:
        return base
    config_file = Path(path) / ADAPTER_CONFIG
    try:
        name = json.loads(config_file.read_text()).get("base_model_name_or_path")
    except (OSError, ValueError) as e:
        raise UserError(f"{config_file}: not a readable adapter config ({e})") from None
    if not name:
        raise UserError(f"{config_file}: base_model_name_or_path is empty; name the base model folder explicitly")
    local = Path(name).expanduser()
    if local.is_dir():
        return str(local)
    if name.startswith((".", "/", "~")) or name.count("/") > 1:  # a path, not a hub id
        raise UserError(
            f"{config_file}: base_model_name_or_path {name!r} is not a folder (a relative path is read from "
            f"{Path.cwd()}); run from where training ran, or name the base model folder"
        )
    return name  # a hub id


def load_senior(path: str | Path, base: str | None = None, **model_kwargs):
    """A model folder as a causal LM; an adapter folder as a frozen `peft.PeftModel` on its base."""
    from transformers import AutoModelForCausalLM

    if not is_adapter_dir(path):
        return AutoModelForCausalLM.from_pretrained(str(path), **model_kwargs)
    from peft import PeftModel

    base_model = AutoModelForCausalLM.from_pretrained(adapter_base(path, base), **model_kwargs)
    return PeftModel.from_pretrained(base_model, str(path), is_trainable=False)


def load_pair(senior_path: str | Path, junior: str | None, base: str | None = None, **model_kwargs):
    """(senior, junior) for evaluation. junior "self": the senior's base model, sharing its weights."""
    senior = load_senior(senior_path, base, **model_kwargs)
    if junior != SELF:
        return senior, (None if junior is None else load_senior(junior, **model_kwargs))
    if not is_adapter_dir(senior_path):
        raise UserError(
            f"--junior self: {senior_path} has no {ADAPTER_CONFIG}; 'self' needs a LoRA senior "
            "(a run trained with use_peft: true, e.g. RUN/final)"
        )
    return self_pair(senior)

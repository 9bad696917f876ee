"""LoRA for a run: a fresh `peft.LoraConfig` for TRL to wrap the senior with, or an adapter folder to
continue.

Fresh LoRA (`use_peft: true`, `senior:` a model folder): TRL's `GRPOTrainer(peft_config=...)` wraps
the senior with `get_peft_model`; with `beta > 0` its KL reference is the same model with the adapters
disabled, i.e. the base model, which is the self-paired junior.

Continuing an adapter (`use_peft: true`, `senior:` a PEFT adapter folder, adapter_config.json + weights,
its base in base_model_name_or_path): the run loads the base and the adapter on it, trainable
(`trlvr.models.load_model_or_adapter(..., trainable=True)`), and passes that `PeftModel` to TRL with no
`peft_config`, so RL continues the adapter instead of a fresh one over the base. The adapter keeps its
own LoRA config (rank, alpha, dropout, target modules, bias): `lora_r`, `lora_alpha`, `lora_dropout` and
`lora_target_modules` left at their defaults are not used, and a value set to anything other than the
adapter's own is refused (`check_lora_run`). `junior: self` is the base with the adapters off, on the one
copy of the weights. TRL 1.16's reference for a `PeftModel` with `beta > 0` is a frozen copy of the
adapter as loaded (an adapter named "ref", grpo_trainer.py 478-505, used at 2724-2727), i.e. the starting
senior: right for `kl_ref: initial`; for `kl_ref: junior` (with `junior: self`) the trainer removes that
copy (`use_base_as_reference`), and TRL then takes its reference with the adapters disabled: the junior.

`Trainer.save_model` of a PEFT model writes only the adapter (`adapter_config.json` +
`adapter_model.safetensors`, plus the tokenizer); its `base_model_name_or_path` names the base the senior
was loaded from (a continued adapter keeps the one its folder named). Loading a saved adapter onto its
base is `trlvr.models.load_model_or_adapter`; the self-paired evaluation pair (senior + its adapters-off
view) is `trlvr.team.Team.load`.

What this file does not know: the trainer, decoding, data.
"""

from __future__ import annotations

import json
from pathlib import Path

from trlvr.config import TandemConfig
from trlvr.errors import UserError
from trlvr.models import ADAPTER_CONFIG, is_adapter_dir
from trlvr.team import Team

LORA_FIELDS = ("lora_r", "lora_alpha", "lora_dropout", "lora_target_modules")
_ADAPTER_KEYS = {
    "lora_r": "r",
    "lora_alpha": "lora_alpha",
    "lora_dropout": "lora_dropout",
    "lora_target_modules": "target_modules",
}
REFERENCE_COPY = "ref"  # the name TRL 1.16 gives its frozen copy of a passed PeftModel's adapter (beta > 0)


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


def continues_adapter(tandem: TandemConfig) -> bool:
    """True when the run's senior is an adapter folder training continues (checked by `check_lora_run`)."""
    return bool(tandem.use_peft) and is_adapter_dir(tandem.senior)


def adapter_settings(path: str | Path) -> dict:
    """An adapter folder's adapter_config.json, as a dict; UserError naming the file when unreadable."""
    config_file = Path(path) / ADAPTER_CONFIG
    try:
        settings = json.loads(config_file.read_text())
    except (OSError, ValueError) as e:
        raise UserError(f"{config_file}: not a readable adapter config ({e})") from None
    if not isinstance(settings, dict):
        raise UserError(f"{config_file}: not a readable adapter config (not a JSON object)")
    return settings


def _targets(value) -> set[str] | str:
    if isinstance(value, str):
        return value if value == "all-linear" else {t.strip() for t in value.split(",") if t.strip()}
    return set(value or ())


def _differs(name: str, ours, theirs) -> bool:
    if name == "lora_target_modules":
        return _targets(ours) != _targets(theirs)
    if name == "lora_dropout":
        return abs(float(ours) - float(theirs or 0.0)) > 1e-12
    return ours != theirs


def check_lora_run(tandem: TandemConfig, team: Team) -> None:
    """Refuse, in one line and before any weights load, an adapter-folder senior that cannot be continued:
    use_peft off, a non-LoRA adapter, a trained bias with `junior: self`, or a lora_* setting that differs
    from the adapter's own (a setting left at its default is not compared: the adapter's is used)."""
    if not is_adapter_dir(tandem.senior):
        return
    where = f"senior: {tandem.senior} is a LoRA adapter folder"
    if not tandem.use_peft:
        raise UserError(
            f"{where}: set use_peft: true to continue training that adapter (or merge it into its "
            "base and pass the merged model folder)"
        )
    settings = adapter_settings(tandem.senior)
    kind = settings.get("peft_type")
    if kind != "LORA":
        raise UserError(f"{where} of type {kind}: trlvr continues LoRA adapters only")
    if team.is_self and settings.get("bias", "none") != "none":
        raise UserError(
            f"{where} with bias {settings.get('bias')!r}: junior: self needs bias 'none' (trained "
            "biases stay on with the adapters off, so the junior would not be the base model)"
        )
    defaults = {f.name: f.default for f in TandemConfig.__dataclass_fields__.values()}
    for name in LORA_FIELDS:
        ours, theirs = getattr(tandem, name), settings.get(_ADAPTER_KEYS[name])
        if ours != defaults[name] and _differs(name, ours, theirs):
            shown = ",".join(sorted(theirs)) if isinstance(theirs, list) else theirs
            raise UserError(
                f"{name}: {ours!r} differs from the adapter's {_ADAPTER_KEYS[name]} = {shown!r} ({where}; "
                f"training continues it with its own LoRA config: leave {name} unset or set it to "
                f"the adapter's)"
            )


def describe_adapter(path: str | Path) -> str:
    """One line for the log: what continuing the adapter in `path` trains."""
    s = adapter_settings(path)
    targets = s.get("target_modules")
    targets = ",".join(sorted(targets)) if isinstance(targets, list) else targets
    return (
        f"senior: continuing the LoRA adapter in {path} (r {s.get('r')}, alpha {s.get('lora_alpha')}, "
        f"dropout {s.get('lora_dropout')}, targets {targets}) on its base "
        f"{s.get('base_model_name_or_path')}; the run's lora_* settings are the adapter's"
    )


def peft_config_for(tandem: TandemConfig):
    """The fresh LoRA config TRL wraps the senior with; None without use_peft or continuing an adapter."""
    if not tandem.use_peft or continues_adapter(tandem):
        return None
    targets = tandem.lora_target_modules
    targets = targets if targets == "all-linear" else [t.strip() for t in targets.split(",") if t.strip()]
    return lora_config(tandem.lora_r, tandem.lora_alpha, tandem.lora_dropout, targets)


def use_base_as_reference(peft_model) -> None:
    """Make TRL's KL reference of a passed `PeftModel` its base with the adapters off (`kl_ref: junior`
    with `junior: self`): remove the frozen copy of the adapter TRL made as the reference. TRL then takes
    the reference log-probs with the adapters disabled (grpo_trainer.py 2724-2727)."""
    if REFERENCE_COPY in peft_model.peft_config:
        peft_model.delete_adapter(REFERENCE_COPY)

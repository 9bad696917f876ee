"""`TandemConfig`: the settings trlvr adds on top of TRL's `GRPOConfig`.

A training run is one YAML file with two sections:

    tandem:   # fields of TandemConfig (this file): arm, models, schedule, data, reward
    grpo:     # fields of trl.GRPOConfig: optimiser, batch sizes, loss, sampling, logging

The two field sets are disjoint, so a plain key (`--p 0.3`) names one field unambiguously; a dotted
key (`--tandem.p 0.3`, `--grpo.learning_rate 1e-6`) names the section too. Anything else is an
error that names the key. Shared settings live once, under TRL's name: sampling temperature, top_p
and top_k, `max_completion_length`, `num_generations`, `beta` (KL coefficient) and `seed`.

What this file does not know: TRL. `load_run_config` returns the GRPOConfig fields as a plain dict;
`trlvr.training` builds the `GRPOConfig`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

ARMS = ("tandem", "grpo")
SCHEDULES = ("word", "token", "step", "chunk")
KL_REFS = ("initial", "junior")
SECTIONS = ("tandem", "grpo")


@dataclass(frozen=True)
class TandemConfig:
    """What a tandem (or matched GRPO) run trains, with what, on what."""

    # "tandem": senior and junior co-write every rollout; "grpo": solo senior rollouts (baseline).
    arm: str = "tandem"
    # Trainable senior: a local folder or hub id.
    senior: str = ""
    # Frozen junior: a local folder or hub id; required by arm=tandem and by kl_ref=junior.
    junior: str | None = None
    # Who writes the next token (arm=tandem): "word" | "token" | "step" | "chunk".
    schedule: str = "word"
    # Probability that a redraw picks the senior (word/token schedules).
    p: float = 0.5
    # Word schedule: force a redraw after this many tokens without one.
    max_gap: int = 32
    # Chunk schedule: tokens per turn.
    chunk_size: int = 16
    # Step/chunk schedules: who writes first, "senior" or "junior".
    first_author: str = "senior"
    # Step schedule: the rollout ends after this many steps.
    max_rounds: int = 150
    # KL reference when grpo.beta > 0: "initial" (the senior's starting weights, TRL's default)
    # or "junior" (the junior's weights).
    kl_ref: str = "initial"
    # Training data: a JSONL file / folder / name understood by trlvr.data.load_problems.
    dataset: str = ""
    # Dataset split (None = the loader's default).
    dataset_split: str | None = None
    # Use only the first N problems (None = all).
    dataset_limit: int | None = None
    # Reward: "math" (trlvr.rewards.math_reward) or a dotted path "package.module:function".
    reward: str = "math"
    # Drop problems whose prompt is longer than this many tokens (None = keep all).
    max_prompt_length: int | None = None

    def __post_init__(self):
        def bad(field: str, msg: str):
            raise ValueError(f"tandem.{field}: {msg} (got {getattr(self, field)!r})")

        if self.arm not in ARMS:
            bad("arm", f"must be one of {ARMS}")
        if not self.senior:
            bad("senior", "a senior model path is required")
        if self.schedule not in SCHEDULES:
            bad("schedule", f"must be one of {SCHEDULES}")
        if not 0.0 <= self.p <= 1.0:
            bad("p", "must be in [0, 1]")
        if self.arm == "tandem" and self.p == 0.0 and self.schedule in ("word", "token"):
            bad("p", "p = 0 lets the senior write nothing, so there is nothing to train")
        if self.max_gap < 1:
            bad("max_gap", "must be >= 1")
        if self.chunk_size < 1:
            bad("chunk_size", "must be >= 1")
        if self.first_author not in ("senior", "junior"):
            bad("first_author", "must be 'senior' or 'junior'")
        if self.max_rounds < 1:
            bad("max_rounds", "must be >= 1")
        if self.kl_ref not in KL_REFS:
            bad("kl_ref", f"must be one of {KL_REFS}")
        if self.arm == "tandem" and not self.junior:
            bad("junior", "arm=tandem needs a junior model path")
        if self.kl_ref == "junior" and not self.junior:
            bad("junior", "kl_ref=junior needs a junior model path")
        if self.dataset_limit is not None and self.dataset_limit < 1:
            bad("dataset_limit", "must be >= 1 or null")
        if self.max_prompt_length is not None and self.max_prompt_length < 1:
            bad("max_prompt_length", "must be >= 1 or null")

    @property
    def expects_junior_tokens(self) -> bool:
        """True when every training batch must contain junior tokens (a stochastic schedule with 0 < p < 1)."""
        return self.arm == "tandem" and self.schedule in ("word", "token") and 0.0 < self.p < 1.0

    def schedule_kwargs(self) -> tuple[str, dict]:
        """(name, settings) for `Schedule.from_config`; the grpo arm is a solo senior."""
        if self.arm == "grpo":
            return "solo", {"author": "senior"}
        return self.schedule, {
            "p": self.p, "max_gap": self.max_gap, "size": self.chunk_size,
            "first": self.first_author, "max_rounds": self.max_rounds,
        }


TANDEM_FIELDS = {f.name for f in dataclasses.fields(TandemConfig)}


def grpo_field_names() -> set[str]:
    """Field names of trl.GRPOConfig (imported lazily: TRL is heavy)."""
    from trl import GRPOConfig

    return {f.name for f in dataclasses.fields(GRPOConfig) if f.init}


def parse_scalar(text: str) -> Any:
    """A CLI value read as a YAML scalar: "1e-6" -> 1e-06, "true" -> True, "null" -> None, "[1, 2]" -> [1, 2]."""
    import yaml

    value = yaml.safe_load(text)
    # YAML 1.1 reads "1e-6" as a string (it wants "1.0e-6"); accept the usual float spelling.
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            pass
    return value


def split_sections(raw: dict, grpo_fields: set[str] | None = None) -> tuple[dict, dict]:
    """Check a parsed YAML mapping {"tandem": {...}, "grpo": {...}}; return (tandem_kwargs, grpo_kwargs)."""
    grpo_fields = grpo_field_names() if grpo_fields is None else grpo_fields
    raw = raw or {}
    for section in raw:
        if section not in SECTIONS:
            raise ValueError(f"unknown config section {section!r}; expected {SECTIONS}")
    tandem = dict(raw.get("tandem") or {})
    grpo = dict(raw.get("grpo") or {})
    for key in tandem:
        if key not in TANDEM_FIELDS:
            raise ValueError(f"unknown key tandem.{key}; TandemConfig fields are {sorted(TANDEM_FIELDS)}")
    for key in grpo:
        if key not in grpo_fields:
            raise ValueError(f"unknown key grpo.{key}: not a field of trl.GRPOConfig")
    return tandem, grpo


def apply_overrides(
    tandem: dict, grpo: dict, overrides: dict[str, Any], grpo_fields: set[str] | None = None
) -> tuple[dict, dict]:
    """Apply `{key: value}` overrides, keys plain ("p") or dotted ("tandem.p", "grpo.beta"). Overrides win."""
    grpo_fields = grpo_field_names() if grpo_fields is None else grpo_fields
    tandem, grpo = dict(tandem), dict(grpo)
    for key, value in overrides.items():
        section, _, name = key.rpartition(".")
        if section == "tandem" and name in TANDEM_FIELDS or not section and name in TANDEM_FIELDS:
            tandem[name] = value
        elif section == "grpo" and name in grpo_fields or not section and name in grpo_fields:
            grpo[name] = value
        else:
            raise ValueError(
                f"unknown config key {key!r}: not a TandemConfig field nor a trl.GRPOConfig field"
                + (f" (section must be one of {SECTIONS})" if section and section not in SECTIONS else "")
            )
    return tandem, grpo


def load_run_config(path: str, overrides: dict[str, Any] | None = None) -> tuple[TandemConfig, dict]:
    """Read a run YAML, apply overrides; return (TandemConfig, GRPOConfig kwargs)."""
    import yaml

    with open(path) as f:
        raw = yaml.safe_load(f)
    if raw is not None and not isinstance(raw, dict):
        raise ValueError(f"{path}: expected a mapping with sections {SECTIONS}")
    grpo_fields = grpo_field_names()
    tandem, grpo = split_sections(raw, grpo_fields)
    tandem, grpo = apply_overrides(tandem, grpo, overrides or {}, grpo_fields)
    return TandemConfig(**tandem), grpo

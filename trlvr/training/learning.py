"""Does the run learn? The two checks that keep a run from silently training nothing.

    check_updates_land(tandem, args, sharding)  # before any model loads: refuse a precision that rounds
                                                # updates away
    WeightsMoved(trainer)                       # first step: fp32 masters; after it: the weights changed

1. Before: torch's AdamW (the Trainer's default optimizer) updates a parameter in the parameter's own
   dtype. Full fine-tuning of bf16 (or fp16) weights, without DeepSpeed ZeRO (which keeps fp32 master
   weights inside), adds each step's update of ~learning_rate to a weight whose bf16 spacing is ~2**-8 of
   its size: at lr 1e-6 most updates round away (on CPU, 4B-like tensors, 2 steps: 1.9% of a linear
   layer's weights and none of a norm's changed). Loss and rewards look normal. Such a run is refused in
   one line naming the setting and the fixes (`low_precision_problem`, a pure function of the settings):
   fp32 weights (`model_init_kwargs: {dtype: float32}` with `bf16: true` trains in bf16 autocast on fp32
   master weights), LoRA (`use_peft: true`: PEFT keeps the adapters in fp32), DeepSpeed ZeRO, or an
   optimizer made for low-precision weights (`BF16_SAFE_OPTIMS`, through transformers' `optim`).
2. At the first step, structurally: `WeightsMoved` reads the optimizer the Trainer built (through
   accelerate's and DeepSpeed's wrappers, `master_weights_problem`): the tensors its innermost optimizer
   updates must be fp32 (a torch optimizer's: the model's parameters; ZeRO-1/2's: its fp32 partitions),
   and no DeepSpeed layer may keep bf16 masters (`bf16_master_weights_and_grads: true`, which the
   settings check above lets through as "zero2"). Else the run stops before its first update
   (`UpdatesRoundAway`, one line). The measurement below cannot see this: after one AdamW step at lr 1e-6,
   pure-bf16 weights and an fp32 master rounded to bf16 change the same share of elements (~2%).
3. After: `WeightsMoved` samples every trainable tensor (a fixed strided subset, at most SAMPLE elements
   each) before the first optimizer step and compares it after each step until one with a non-zero
   gradient norm. The fraction of sampled elements that changed is logged once as WEIGHTS_MOVED
   (metrics.jsonl, trainer_state.json); none changed after a non-zero gradient is one line and a
   non-zero exit (`WeightsDidNotMove`). Steps whose gradient is exactly zero (every group's rewards equal:
   zero advantages) change nothing by design and are waited out. Under ZeRO the model's bf16 copy of an
   fp32 master changes in a small fraction at lr 1e-6 (~2% after one step on CPU): any change passes.

What this file does not know: the CLI, the models, where the run's files go.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import torch
from transformers import TrainerCallback

from trlvr.errors import UserError
from trlvr.memory import read_config
from trlvr.models import model_folder

LOW_PRECISION = ("bfloat16", "float16")
# transformers `optim` values whose optimizer keeps bf16 updates: torch-optimi's StableAdamW applies Kahan
# summation to low-precision parameters by default; torchao's 8/4-bit AdamW with
# `optim_args: "bf16_stochastic_round=True"` rounds stochastically (checked in `low_precision_problem`)
KAHAN_OPTIMS = ("stable_adamw",)
STOCHASTIC_ROUND_OPTIMS = ("adamw_torch_8bit", "adamw_torch_4bit")
BF16_SAFE_OPTIMS = KAHAN_OPTIMS + STOCHASTIC_ROUND_OPTIMS
WEIGHTS_MOVED = (
    "train/weights_moved"  # logged once: the fraction of sampled trainable elements the first step changed
)
SAMPLE = 4096  # elements sampled per trainable tensor


class WeightsDidNotMove(UserError):
    """An optimizer step with a non-zero gradient changed none of the sampled trainable weights."""


def _dtype_name(dtype) -> str | None:
    if dtype is None:
        return None
    return str(dtype).removeprefix("torch.")


def _optim_args(text: str | None) -> dict[str, str]:
    """x"""
    pairs = (item.split("=", 1) for item in (text or "").replace(" ", "").split(",") if "=" in item)
    return {k: v for k, v in pairs}


def low_precision_problem(
    *, dtype, use_peft: bool, sharding: str | None, optim: str, optim_args: str | None, learning_rate: float
) -> str | None:
    """Why a run's optimizer updates would round away, as the first half of a line, or None when they land.

    dtype: the senior's weights as loaded ("bfloat16", torch.bfloat16, "float32", None = unknown: not
    judged); sharding: `launch_sharding` ("zero2", "fsdp2", None); optim / optim_args:
    transformers' TrainingArguments fields."""
    name = _dtype_name(dtype)
    if use_peft or name not in LOW_PRECISION or (sharding or "").startswith("zero"):
        return None
    optim = str(getattr(optim, "value", optim))
    if optim in KAHAN_OPTIMS:
        return None
    stochastic = _optim_args(optim_args).get("bf16_stochastic_round", "").lower() in ("true", "1", "yes")
    if optim in STOCHASTIC_ROUND_OPTIMS and stochastic and name == "bfloat16":
        return None
    where = f"{sharding} sharding" if sharding else "no DeepSpeed ZeRO"
    return (
        f"full fine-tuning of {name} weights (model_init_kwargs dtype {name}, use_peft false) with {where} "
        f"and optim {optim}: the optimizer updates the {name} weights in place, with no fp32 master copy, "
        f"so at learning_rate {learning_rate:g} most updates round away and the run barely learns"
    )


FIXES = (
    "load the senior in float32 (model_init_kwargs: {dtype: float32}; bf16: true then trains in bf16 "
    "autocast on fp32 master weights), set use_peft: true (LoRA), launch with DeepSpeed ZeRO (accelerate "
    "launch "
    '--config_file "$(trlvr recipes --path accelerate-zero2-2gpu)"), or set optim: stable_adamw '
    "(torch-optimi, Kahan "
    "summation)"
)


def senior_dtype(tandem, args) -> str | None:
    """The dtype the senior's weights load in: `model_init_kwargs`' dtype, else ("auto", transformers'
    default) the dtype its config.json records; None when neither says (a hub id not downloaded yet)."""
    init = dict(getattr(args, "model_init_kwargs", None) or {})
    given = init.get("dtype", init.get("torch_dtype"))
    if given not in (None, "auto"):
        return _dtype_name(given)
    try:
        config = read_config(model_folder(tandem.senior))
    except Exception:  # noqa: BLE001 - an unreadable or absent config is judged where the model loads
        return None
    text_config = config.get("text_config") if isinstance(config.get("text_config"), dict) else {}
    found = (
        config.get("dtype")
        or config.get("torch_dtype")
        or text_config.get("dtype")
        or text_config.get("torch_dtype")
    )
    return _dtype_name(found)


def check_updates_land(tandem, args, sharding: str | None, where: str = "run config") -> None:
    """UserError, before any model loads, for a run whose optimizer updates would round away (module doc)."""
    problem = low_precision_problem(
        dtype=senior_dtype(tandem, args),
        use_peft=tandem.use_peft,
        sharding=sharding,
        optim=args.optim,
        optim_args=args.optim_args,
        learning_rate=args.learning_rate,
    )
    if problem:
        raise UserError(f"{where}: {problem}; {FIXES}")


# --- at the first step: what the optimizer updates ----------------------------------------------------------


class UpdatesRoundAway(UserError):
    """At the first optimizer step, the optimizer updates low-precision tensors with no fp32 master copy."""


def _optimizer_layers(optimizer) -> list:
    """`optimizer` and every optimizer it wraps (`.optimizer`: accelerate's AcceleratedOptimizer and
    DeepSpeedOptimizerWrapper, DeepSpeed's ZeRO / BF16 optimizers, whose innermost torch optimizer updates the
    fp32 partitions), outermost first."""
    layers, seen = [], set()
    while optimizer is not None and id(optimizer) not in seen:
        layers.append(optimizer)
        seen.add(id(optimizer))
        optimizer = getattr(optimizer, "optimizer", None)
    return layers


def master_weights_problem(optimizer, *, optim="adamw_torch", optim_args: str | None = None) -> str | None:
    """Why the optimizer's updates would round away, read from the optimizer itself (module doc, 1, checked
    structurally), or None: the innermost optimizer's parameter groups (a torch optimizer's: the model's
    parameters; DeepSpeed ZeRO-1/2's and BF16_Optimizer's: their fp32 partitions) must hold no bf16 / fp16
    tensor, and no DeepSpeed layer may keep low-precision masters (`bf16_master_weights_and_grads: true`).
    An optimizer made for low-precision weights (`BF16_SAFE_OPTIMS`, as `low_precision_problem` allows it)
    passes."""
    optim = str(getattr(optim, "value", optim))
    stochastic = _optim_args(optim_args).get("bf16_stochastic_round", "").lower() in ("true", "1", "yes")
    if optim in KAHAN_OPTIMS or optim in STOCHASTIC_ROUND_OPTIMS and stochastic:
        return None
    layers = _optimizer_layers(optimizer)
    if any(getattr(layer, "low_precision_master_weights_and_grads", False) is True for layer in layers):
        return (
            "DeepSpeed keeps its master weights in low precision (bf16.bf16_master_weights_and_grads: true): "
            "its optimizer updates them with no fp32 copy"
        )
    inner = next((layer for layer in reversed(layers) if hasattr(layer, "param_groups")), None)
    if inner is None:
        return None  # not an optimizer this can read: not judged
    tensors = [p for group in inner.param_groups for p in group["params"] if isinstance(p, torch.Tensor)]
    low = [p for p in tensors if _dtype_name(p.dtype) in LOW_PRECISION]
    if not low:
        return None
    name = _dtype_name(low[0].dtype)
    return (
        f"the optimizer ({type(inner).__name__}, optim {optim}) updates {len(low)} of its {len(tensors)} "
        f"tensors in {name} with no fp32 master copy, so most updates round away"
    )


# --- after the first step -----------------------------------------------------------------------------------


def _sample(param: torch.Tensor) -> torch.Tensor:
    """A fixed strided subset of at most SAMPLE elements of `param` (a copy)."""
    flat = param.detach().reshape(-1)
    stride = max(1, flat.numel() // SAMPLE)
    return flat[::stride][:SAMPLE].clone()


def moved_fraction(before: list[torch.Tensor], after: list[torch.Tensor]) -> float:
    """The fraction of elements that differ between two lists of same-shaped tensors (0.0 when empty)."""
    changed = sum(int((a != b).sum()) for a, b in zip(before, after, strict=True))
    total = sum(a.numel() for a in before)
    return changed / total if total else 0.0


class WeightsMoved(TrainerCallback):
    """The postcondition of the first optimizer step (module doc, 2). `trainer`: the GRPOTrainer (its
    `_metrics`, the lists TRL averages into each logged row, carry WEIGHTS_MOVED)."""

    def __init__(self, trainer):
        self.trainer = trainer
        self.before: list[torch.Tensor] | None = None
        self.pending: int | None = None  # the step that moved nothing, awaiting its logged gradient norm
        self.result: dict | None = None  # {"step", "fraction", "elements"} once measured
        self.checked = False  # the optimizer's master weights checked (`master_weights_problem`)

    def _trainable(self, model):
        return [p for p in model.parameters() if p.requires_grad and p.numel() > 0]

    def on_step_begin(self, args, state, control, model=None, optimizer=None, **kwargs):
        if (
            not self.checked and optimizer is not None
        ):  # the first step's precondition, read from the optimizer
            self.checked = True
            if problem := master_weights_problem(optimizer, optim=args.optim, optim_args=args.optim_args):
                raise UpdatesRoundAway(
                    f"step {state.global_step + 1}: {problem}; the run would barely learn: stopped "
                    f"before its first update; {FIXES}"
                )
        if self.before is None and self.result is None and model is not None:
            self.before = [_sample(p) for p in self._trainable(model)]
            if not self.before:  # nothing trainable held here (ZeRO-3 partitions): not measured
                self.before, self.result = None, {"step": None, "fraction": None, "elements": 0}

    def on_step_end(self, args, state, control, model=None, **kwargs):
        if self.before is None or self.result is not None or model is None:
            return
        after = [_sample(p) for p in self._trainable(model)]
        if len(after) != len(self.before) or any(
            a.shape != b.shape for a, b in zip(after, self.before, strict=False)
        ):
            self.before = None  # the trainable set changed under us (not expected): nothing to compare
            return
        fraction = moved_fraction(self.before, after)
        if fraction > 0:  # measured: logged once, with this step's row
            self.result = {
                "step": state.global_step,
                "fraction": fraction,
                "elements": sum(b.numel() for b in after),
            }
            self.trainer._metrics["train"][WEIGHTS_MOVED].append(fraction)
            self.before = self.pending = None
        else:  # judged by this step's gradient norm, when it is logged
            self.pending = state.global_step

    def on_log(self, args, state, control, logs=None, **kwargs):
        if self.pending is None or self.result is not None:
            return
        step, grad_norm = self.pending, (logs or {}).get("grad_norm")
        if grad_norm is None or not math.isfinite(float(grad_norm)):
            return  # not a logged step, or a non-finite one (NonFiniteGuard's)
        if float(grad_norm) == 0.0:
            self.pending = None  # zero advantages: nothing to learn at this step; the next one is measured
            return
        elements = sum(b.numel() for b in self.before)
        raise WeightsDidNotMove(
            f"step {step}: the optimizer step changed none of {elements} sampled trainable weights although "
            f"the gradient norm was {float(grad_norm):.3g} (learning_rate {args.learning_rate:g}, optim "
            f"{getattr(args.optim, 'value', args.optim)}): the run learns nothing; stopped without saving "
            "(check learning_rate; bf16 weights need fp32 master weights, LoRA or DeepSpeed ZeRO)"
        )


def launch_sharding(args=None) -> str | None:
    """How this launch shards the trained parameters: "zero<stage>" (DeepSpeed), "fsdp<version>", or None.
    Read from what `accelerate launch` exports (ACCELERATE_USE_DEEPSPEED + ACCELERATE_DEEPSPEED_ZERO_STAGE
    or the DeepSpeed config file it names; ACCELERATE_USE_FSDP + FSDP_VERSION) and from the run's own
    `deepspeed` (a config file or dict) / `fsdp` arguments when `args` is given. "zero?": DeepSpeed
    with a stage this cannot read ("auto")."""
    env = os.environ

    def stage_of(config) -> str:
        if isinstance(config, str | Path):
            try:
                config = json.loads(Path(config).read_text())
            except (OSError, ValueError):
                return "?"
        stage = (
            ((config or {}).get("zero_optimization") or {}).get("stage") if isinstance(config, dict) else None
        )
        return str(stage) if isinstance(stage, int) else "?"

    if env.get("ACCELERATE_USE_DEEPSPEED", "").lower() == "true":
        stage = env.get("ACCELERATE_DEEPSPEED_ZERO_STAGE") or stage_of(
            env.get("ACCELERATE_DEEPSPEED_CONFIG_FILE")
        )
        return f"zero{stage}"
    if args is not None and getattr(args, "deepspeed", None):
        return f"zero{stage_of(args.deepspeed)}"
    if env.get("ACCELERATE_USE_FSDP", "").lower() == "true":
        return f"fsdp{env.get('FSDP_VERSION') or 1}"
    if args is not None and getattr(args, "fsdp", None):
        return f"fsdp{(getattr(args, 'fsdp_config', None) or {}).get('version', 1)}"
    return None

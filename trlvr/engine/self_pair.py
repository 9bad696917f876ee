"""Self-paired tandem on one copy of the weights: a LoRA senior and its own base model as the junior.

With a PEFT (LoRA) senior, the self-paired junior (the senior before RL) is exactly the base model
with the adapters switched off. `self_pair(peft_model)` returns `(senior, junior)` for
`TandemGenerator(senior, junior, tokenizer)`: the senior is the PEFT model itself; the junior is an
`AdapterOffView` of the same object, whose forward runs with the adapter layers switched off
(what `peft_model.disable_adapter()` does, minus its per-call cost). The
generator keeps one KV cache per author as usual, so the only thing shared is the weights.

The view registers nothing as its own submodule or parameter (it holds the PEFT model outside
`nn.Module`'s registry): `.eval()` / `.train()` on it never flip the senior's mode, an optimizer or
`state_dict` never sees the base weights twice, and `parameters()` yields the base weights (not
the adapters) so that device checks and memory counts see what the junior reads.

What this file does not know: how the PEFT model was built or loaded (`trlvr.training`), schedules,
sampling, and training.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator

import torch
from torch import nn


def _is_peft_model(model) -> bool:
    try:
        from peft import PeftModel
    except ImportError:  # peft is optional for everything but self-pairing
        return False
    return isinstance(model, PeftModel)


def _tuner_layers(peft_model) -> list[nn.Module]:
    from peft.tuners.tuners_utils import BaseTunerLayer

    return [m for m in peft_model.modules() if isinstance(m, BaseTunerLayer)]


def check_self_pairable(peft_model) -> None:
    """Raise ValueError unless switching the adapters off gives exactly the base model, cheaply."""
    if not _is_peft_model(peft_model):
        raise ValueError(
            f"junior: self needs a PEFT (LoRA) senior, got {type(peft_model).__name__}; "
            "set use_peft: true or pass a peft.PeftModel"
        )
    config = peft_model.active_peft_config
    if config.is_prompt_learning or config.is_adaption_prompt:
        raise ValueError(f"junior: self supports adapter methods such as LoRA, not {config.peft_type}")
    bias = getattr(config, "bias", "none")
    if bias != "none":
        raise ValueError(
            f"junior: self needs LoRA bias='none' (got {bias!r}): trained biases stay on with the "
            "adapters off, so the junior would not be the base model"
        )
    if any(getattr(layer, "merged", False) for layer in _tuner_layers(peft_model)):
        raise ValueError(
            "junior: self needs unmerged adapters: with merged ones every junior forward would "
            "unmerge and re-merge the weights; call peft_model.unmerge_adapter() first"
        )


class _AdapterSwitch:
    """Adapters off for one forward, on the cached adapter layers only.

    `peft_model.disable_adapter()` is exact but walks every module and resets `requires_grad` on
    every adapter weight on each entry and exit (about 10 ms per call on the 10M bench model,
    a third of a decode step; see bench/RESULTS.md). The switch sets the flag that each adapter
    layer's forward reads (`disable_adapters`), on the layers found once at construction, and
    restores every layer's previous value on exit, so nesting and partly disabled models come back
    exactly as they were and `requires_grad` is never touched. If a peft version stores the flag
    elsewhere, it falls back to `disable_adapter()`.
    """

    def __init__(self, peft_model):
        from peft.tuners.tuners_utils import BaseTunerLayer
        from peft.utils.other import AuxiliaryTrainingWrapper

        self.peft_model = peft_model
        # The same modules peft's own disable_adapter_layers() toggles.
        self.layers = [
            m for m in peft_model.modules() if isinstance(m, (BaseTunerLayer, AuxiliaryTrainingWrapper))
        ]
        self.fast = all(
            "_disable_adapters" in vars(m) and m.disable_adapters is vars(m)["_disable_adapters"]
            for m in self.layers
        ) and "_adapters_disabled" in vars(peft_model)

    @contextlib.contextmanager
    def off(self):
        if not self.fast:
            with self.peft_model.disable_adapter():
                yield
            return
        before = [vars(m)["_disable_adapters"] for m in self.layers]
        model_before = vars(self.peft_model)["_adapters_disabled"]
        try:
            for m in self.layers:
                vars(m)["_disable_adapters"] = True
            vars(self.peft_model)["_adapters_disabled"] = True
            yield
        finally:
            for m, flag in zip(self.layers, before, strict=True):
                vars(m)["_disable_adapters"] = flag
            vars(self.peft_model)["_adapters_disabled"] = model_before


def _forward_adapters_off(switch: _AdapterSwitch, *args, **kwargs):
    """One forward of the base model: adapters off, eval mode; both restored on the way out."""
    model = switch.peft_model
    was_training = model.training
    if was_training:  # not the case inside TandemGenerator, which puts the senior in eval first
        model.eval()
    try:
        with switch.off():
            return model(*args, **kwargs)
    finally:
        if was_training:
            model.train()


class AdapterOffView(nn.Module):
    """The base model inside a PEFT model: calling it runs the PEFT model with adapters disabled.

    >>> senior = get_peft_model(base, LoraConfig(r=16, target_modules=["q_proj", "v_proj"]))  # doctest: +SKIP
    >>> junior = AdapterOffView(senior)                # no copy: the same weights, adapters off
    >>> TandemGenerator(senior, junior, tokenizer)     # doctest: +SKIP

    Its `forward` has the base model's signature (the generator reads it to pick the cache
    keyword). The junior is frozen, so the forward always runs in eval mode (no dropout), whatever
    mode the shared model is in, and leaves that mode as it found it.
    """

    def __init__(self, peft_model):
        check_self_pairable(peft_model)
        super().__init__()
        object.__setattr__(self, "peft_model", peft_model)  # not a submodule: see the module docstring
        base = peft_model.get_base_model()
        self._adapter_markers = (peft_model.base_model.prefix, "modules_to_save.")
        self._switch = _AdapterSwitch(
            peft_model
        )  # adapter layers are found now: build the view after adding them
        # An instance attribute shadows the method for nn.Module.__call__, and `functools.wraps`
        # gives it the base forward's signature (e.g. `cache` vs `past_key_values` keywords).
        self.forward = functools.wraps(base.forward)(functools.partial(_forward_adapters_off, self._switch))
        self.eval()

    # What the generator and callers read from a model, answered from the shared base.
    @property
    def config(self):
        return self.peft_model.get_base_model().config

    @property
    def generation_config(self):
        return getattr(self.peft_model.get_base_model(), "generation_config", None)

    def get_output_embeddings(self) -> nn.Module:
        return self.peft_model.get_base_model().get_output_embeddings()

    def get_input_embeddings(self) -> nn.Module:
        return self.peft_model.get_base_model().get_input_embeddings()

    def named_parameters(
        self, prefix: str = "", recurse: bool = True, remove_duplicate: bool = True
    ) -> Iterator[tuple[str, nn.Parameter]]:
        """The base weights the junior reads (adapter weights left out), as named in the PEFT model."""
        for name, param in self.peft_model.named_parameters(prefix=prefix, remove_duplicate=remove_duplicate):
            if not any(marker in name for marker in self._adapter_markers):
                yield name, param

    def parameters(self, recurse: bool = True) -> Iterator[nn.Parameter]:
        for _, param in self.named_parameters(recurse=recurse):
            yield param

    @property
    def device(self) -> torch.device:
        return next(self.parameters()).device

    @property
    def dtype(self) -> torch.dtype:
        return next(self.parameters()).dtype

    def extra_repr(self) -> str:
        return f"of {type(self.peft_model.get_base_model()).__name__} (adapters off)"


def self_pair(peft_model) -> tuple[nn.Module, AdapterOffView]:
    """(senior, junior) on one copy of the base weights: the PEFT model and its adapters-off view."""
    return peft_model, AdapterOffView(peft_model)


def resident_weight_bytes(*models: nn.Module) -> int:
    """Bytes of the distinct parameter and buffer storages the models hold together (shared ones once)."""
    seen, total = set(), 0
    for model in models:
        owner = model.peft_model.get_base_model() if isinstance(model, AdapterOffView) else model
        tensors = [*model.parameters(), *owner.buffers()]
        for t in tensors:
            storage = t.untyped_storage()
            key = (t.device, storage.data_ptr())
            if key not in seen:
                seen.add(key)
                total += storage.nbytes()
    return total

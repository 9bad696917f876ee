"""`TandemForCausalLM`: the senior and the junior as one vLLM model.

Built from the senior's and the junior's own configs: two vLLM stacks (the senior's architecture and
the junior's, e.g. two `Qwen3ForCausalLM` of different sizes) under the prefixes `senior` and
`junior`, each with its own compile tag, every attention layer of both with its paged KV cache in the
one cache vLLM plans. The senior's config is the engine's (its length and tokenizer), but for its
vocabulary: the shared ids (below).

One tokenizer, two paddings: the two stacks may have different embedding row counts (Qwen2.5-0.5B
has 151,936 rows, Qwen2.5-7B 152,064, for one 151,665-token tokenizer). Rows past the tokenizer are
padding (`trlvr.engine.vocab`): only the N shared ids (`n_ids`, the pair's "ids") are tokens.

The engine sees an ordinary N-token model (the pair overrides the engine config's `vocab_size` to N;
the senior stack is built with its real rows, "senior_rows") whose logits are the senior's:
`compute_logits` returns the senior's first N logit columns (B, N) and keeps the junior's first N
for the same rows (the stash), which the logits processor (`trlvr.vllm.logits`) takes to write the
junior's rows wherever the junior is the author. So no padded row of either model is ever sampled
or counted in a log-prob, and vLLM's sampler, which draws a noise value per column, samples what an
unpadded pair samples: vLLM's raw log-probs (`logprobs_mode="raw_logprobs"`) are the senior's at
temperature 1, its processed ones (the pair's default) the author's at the sampling temperature.

Selected without touching the checkpoint: `LLM(model=senior_dir, hf_overrides={"architectures":
["TandemForCausalLM"], "tandem": {"junior": junior_dir, "senior_architectures": [...]}})`.
`load_weights` routes HF names to the senior (the checkpoint load, and every weight sync after an
optimizer step) and loads the junior from its own directory once.
"""

from __future__ import annotations

import copy
import weakref
from collections.abc import Iterable
from pathlib import Path

import torch
from torch import nn
from transformers import AutoConfig, AutoTokenizer
from vllm.compilation.backends import set_model_tag
from vllm.config import VllmConfig
from vllm.model_executor.model_loader.reload import finalize_layerwise_reload, initialize_layerwise_reload
from vllm.model_executor.model_loader.weight_utils import safetensors_weights_iterator
from vllm.model_executor.models.utils import init_vllm_registered_model, maybe_prefix

from trlvr.engine.vocab import check_vocab_rows

_MODELS: dict[str, weakref.ref] = {}  # vLLM instance id -> its composite, for the logits processor


def model_for(vllm_config: VllmConfig) -> TandemForCausalLM | None:
    """The composite of the engine `vllm_config` belongs to, or None (an ordinary model)."""
    ref = _MODELS.get(vllm_config.instance_id)
    return None if ref is None else ref()


def _senior_of(model: nn.Module) -> nn.Module:
    return model.senior if isinstance(model, TandemForCausalLM) else model


def begin_senior_reload(model: nn.Module) -> None:
    """Open a weight sync of the engine's senior (`model`: the composite, or a plain senior): from now on
    `model.load_weights` calls, in any number and grouping (TRL pushes one parameter per call), load the
    senior's layers the way vLLM's own in-place reload does: each layer is processed again (on a CPU,
    linear weights are repacked) once all its weights arrived. `end_senior_reload` closes it."""
    initialize_layerwise_reload(_senior_of(model))


def end_senior_reload(model: nn.Module, model_config) -> None:
    """Close the sync `begin_senior_reload` opened: the attention layers and any layer not fully loaded
    are finished (a layer that got no weight keeps its old ones)."""
    finalize_layerwise_reload(_senior_of(model), model_config)


def reload_senior(model: nn.Module, weights: list[tuple[str, torch.Tensor]], model_config) -> None:
    """Load HF-named weights into the engine's senior in place (a whole weight sync in one call; a plain
    `load_weights` cannot: on a CPU linear weights are repacked after loading). `model`: the
    composite (only its senior stack is touched) or a plain senior."""
    begin_senior_reload(model)
    _senior_of(model).load_weights(weights)
    end_senior_reload(model, model_config)


def _junior_weights(junior_dir: str) -> Iterable[tuple[str, torch.Tensor]]:
    files = sorted(str(p) for p in Path(junior_dir).glob("*.safetensors"))
    if not files:
        raise ValueError(f"tandem junior {junior_dir}: no *.safetensors weights there")
    return safetensors_weights_iterator(files, False)


UNIT_KEY = "tandem_unit"  # the config attribute that names a compile unit: "senior" or "junior"


def unit_configs(config, junior_config):
    """The two compile units' HF configs, from the engine's (`config`: the senior's, with the pair's "tandem"
    spec and its vocabulary of the shared ids) and the junior's own: the senior's with its real rows and no
    spec; each marked with its unit (UNIT_KEY). vLLM's AOT compile cache key hashes the unit's hf_config
    (`compilation/caching.py:aot_compile_hash_factors`: `vllm_config.compute_hash()`, whose model config
    hashes `hf_config.to_json_string()`) but not the compile tag, so without the mark a self-pair's two units
    (same config) would share one AOT artifact: the junior would load the senior's compiled forward."""
    spec = config.tandem
    senior_config = copy.deepcopy(config)
    del senior_config.tandem
    senior_config.vocab_size = spec.get("senior_rows") or config.vocab_size  # the engine's is N (the pair's)
    junior_config = copy.deepcopy(junior_config)
    setattr(senior_config, UNIT_KEY, "senior")
    setattr(junior_config, UNIT_KEY, "junior")
    return senior_config, junior_config


class TandemForCausalLM(nn.Module):
    """A senior stack and a junior stack over one token stream; the senior's logits, the junior's stashed."""

    def __init__(self, *, vllm_config: VllmConfig, prefix: str = ""):
        super().__init__()
        config = vllm_config.model_config.hf_config
        spec = getattr(config, "tandem", None)
        if not isinstance(spec, dict) or "junior" not in spec:
            raise ValueError(
                'TandemForCausalLM needs hf_overrides={"tandem": {"junior": <junior model dir>}}'
            )
        junior_config = AutoConfig.from_pretrained(spec["junior"])
        tokens = spec.get("ids") or len(AutoTokenizer.from_pretrained(vllm_config.model_config.tokenizer))
        # from the configs, before any weight loads: a model with fewer rows than tokens is refused
        rows = {"vocab_size": spec.get("senior_rows") or config.vocab_size}
        self.n_ids = check_vocab_rows(
            int(tokens),
            {
                f"tandem senior {vllm_config.model_config.model}": rows,
                f"tandem junior {spec['junior']}": junior_config,
            },
        )
        if config.vocab_size not in (self.n_ids, rows["vocab_size"]):
            raise ValueError(
                f"TandemForCausalLM: the engine's vocab_size {config.vocab_size} is neither the shared "
                f"ids ({self.n_ids}) nor the senior's rows ({rows['vocab_size']})"
            )
        senior_config, junior_config = unit_configs(config, junior_config)
        senior_arch = list(spec.get("senior_architectures") or ["Qwen3ForCausalLM"])
        with set_model_tag("tandem_senior"):
            self.senior = init_vllm_registered_model(
                vllm_config,
                prefix=maybe_prefix(prefix, "senior"),
                hf_config=senior_config,
                architectures=senior_arch,
            )
        with set_model_tag("tandem_junior"):
            self.junior = init_vllm_registered_model(
                vllm_config,
                prefix=maybe_prefix(prefix, "junior"),
                hf_config=junior_config,
                architectures=junior_config.architectures,
            )
        self.senior_hidden = senior_config.hidden_size
        self.junior_dir = spec["junior"]
        self.junior_loaded = False
        self.stash: torch.Tensor | None = None  # the junior's logits of the last compute_logits
        _MODELS[vllm_config.instance_id] = weakref.ref(self)

    def embed_input_ids(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.senior.embed_input_ids(input_ids)

    def forward(self, input_ids, positions, intermediate_tensors=None, inputs_embeds=None) -> torch.Tensor:
        if input_ids is None or intermediate_tensors is not None:
            raise ValueError(
                "TandemForCausalLM reads token ids on one rank (no prompt embeddings, no pipeline "
                "parallelism): the junior needs the ids to embed them itself"
            )
        # the clone: under PIECEWISE CUDA graphs the senior unit's output is a weak reference into the graph
        # pool (vLLM frees each unit's last piece's output: compilation/backends.py, weak_ref_output), which
        # the junior unit's pieces then write over; vLLM's own two-unit models clone there (gemma3n, gemma4)
        senior = self.senior(input_ids, positions).clone()
        junior = self.junior(input_ids, positions)
        return torch.cat([senior, junior.to(senior.dtype)], dim=-1)  # (T, Hs + Hj)

    def compute_logits(self, hidden_states: torch.Tensor) -> torch.Tensor | None:
        """The senior's logits of the shared ids, (B, n_ids), and the junior's stashed: views of each
        model's first `n_ids` columns (as vLLM's own LogitsProcessor cuts its head's padding), so no padded
        row is read."""
        senior = self.senior.compute_logits(hidden_states[..., : self.senior_hidden])
        self.stash = self.junior.compute_logits(hidden_states[..., self.senior_hidden :])[..., : self.n_ids]
        return senior[..., : self.n_ids]

    def take_stash(self, rows: int) -> torch.Tensor:
        """The junior's logits (rows, n_ids) of the rows the sampler is about to draw, once: a second take, or
        rows that are not the last compute_logits call's, means vLLM broke the order this design relies on."""
        stash, self.stash = self.stash, None
        if stash is None or stash.shape[0] != rows:
            got = "none" if stash is None else f"{stash.shape[0]} rows"
            raise RuntimeError(
                f"tandem: the junior's logits of this step are missing ({got} for {rows} rows): "
                "the sampler's logits are not the last compute_logits output"
            )
        return stash

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> set[str]:
        """HF-named weights go to the senior (checkpoint load, weight sync: TRL's `sync_weights` calls this
        once per parameter, inside `begin_senior_reload` / `end_senior_reload`); the junior loads from its
        own directory on the first call only, so no sync can touch it. Returns the loaded names with their
        `senior.` / `junior.` prefix."""
        loaded = {f"senior.{name}" for name in self.senior.load_weights(weights)}
        if not self.junior_loaded:
            loaded |= {
                f"junior.{name}" for name in self.junior.load_weights(_junior_weights(self.junior_dir))
            }
            self.junior_loaded = True
        return loaded

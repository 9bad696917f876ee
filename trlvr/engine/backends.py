"""The backends: which engine runs a pair, and what that engine decides for the code around it.

    backend("vllm").own_engine      # True: the engine loads the models from their folders
    tuple(BACKENDS)                 # ("hf", "vllm"): the config's and the commands' choices

`BACKENDS` is the one table. Training, evaluation, the memory plan, the config checks and the commands ask a
`Backend` for a property, never for its name, so a new backend is its own package (a `Pair` subclass) and
one entry here. "hf" is this package's engine (`LockstepPair` / `TextPair` on HF models); others are
optional plugins, imported only when asked for (`trlvr.engine.pair.pair_class`: the core never imports
vLLM, and neither does this module).
"""

from __future__ import annotations

import importlib
import importlib.util
from dataclasses import dataclass

from trlvr.errors import UserError


@dataclass(frozen=True)
class Backend:
    """One engine that runs pairs, and what it decides (each property names the places that ask it).

    name: what `backend:` / `--backend` say. pair: the Pair as "module:Class", imported only when asked for
    (None: this package's LockstepPair / TextPair). package: what it needs installed (pip install
    'trlvr[<name>]'), or None.
    """

    name: str
    pair: str | None = None
    package: str | None = None
    # an own engine's parts, each "module:name" in the backend's package, imported when asked (`load`):
    #  engine: its options, `for_machine(dtype, seed, context, share, max_num_seqs=)` (training's
    #  `run_engine`, evaluation's engine, the smoke's parity check); trl_generation: what the trainer attaches
    #  as TRL's `vllm_generation` (`TandemGRPOTrainer._attach_engine`: TRL's weight sync before each rollout);
    #  distribution: `(accelerator, tensor_parallel_size, seed) -> dict` of engine options for one process of
    #  a multi-process run (`TandemRollout.engine_pair`)
    engine: str | None = None
    trl_generation: str | None = None
    distribution: str | None = None
    # it runs pairs with one shared vocabulary only: a text pair (two tokenizers) is refused
    # (`pair_class`, `trlvr.engine.capabilities`)
    one_vocabulary: bool = False
    # the engine holds its own copy of the weights, one engine of the models it is given:
    #  - it loads the models from their folders: full model folders, checked before training
    #    (`TandemGRPOTrainer`; no junior device, no LoRA adapter folder: `trlvr.engine.capabilities`),
    #    the junior is not loaded as an HF model (`trlvr.training.build.load_models`, the trainer);
    #  - training syncs the senior's weights into it: TRL's own vLLM machinery built the pair and syncs
    #    its weights (`TandemGRPOTrainer._attach_engine`, `TandemRollout`: one engine per process; with TP,
    #    over its group's rows); shardings that release a gathered parameter before the sync has copied
    #    it are refused (`trlvr.engine.capabilities`);
    #  - evaluation builds one engine per set of models a protocol needs, and its HF scorers load after
    #    the engine is closed (`trlvr.eval.api`, `trlvr.eval.runner`).
    own_engine: bool = False
    # it holds a share of the GPU's memory (the memory plan applies: `trlvr.training.memory_plan`, `trlvr
    # train --dry-run`, `trlvr eval --dry-run`, the smoke check); else the engine sizes its decode
    # sub-batches to the memory free at run time and the plan is the shapes and lengths only
    gpu_share: bool = False
    # its engine is built with a context length (max_model_len): training derives it from the longest
    # prompt when the config sets none (`trlvr.training.build`), evaluation from its plan (`eval.runner`)
    needs_context_length: bool = False
    # the log-probs its rollouts return are the sampler's (after temperature, top-p, top-k), so TRL's
    # importance-sampling correction means something (`trlvr.config.check_backend_settings`); hf's engine
    # returns the senior's at temperature 1
    sampler_logprobs: bool = False
    # an evaluation's fingerprint names it (two backends' samples never share a directory); hf's is not
    # named, so fingerprints written before backends existed still match (`trlvr.eval.runner`)
    fingerprinted: bool = False

    @property
    def engine_options(self) -> bool:
        """Its engine is built from options (`engine`): TRL's vllm_enable_sleep_mode and
        vllm_tensor_parallel_size are its settings (`trlvr.config.check_backend_settings`), and the smoke
        check compares its engine with the same engine in eager mode first (a wrong forward makes every later
        number meaningless)."""
        return self.engine is not None

    def load(self, part: str):
        """The object its field `part` ("pair", "engine", "trl_generation", "distribution") names, imported
        now; a missing package is a UserError in one line."""
        target = getattr(self, part)
        if target is None:
            raise ValueError(f"backend {self.name} has no {part}")
        if self.package is not None and importlib.util.find_spec(self.package) is None:
            raise UserError(
                f"backend {self.name} needs {self.package}, which is not installed here (pip install "
                f"'trlvr[{self.name}]'; on a CPU: see the README's vLLM section)"
            )
        module, _, name = target.partition(":")
        return getattr(importlib.import_module(module), name)


BACKENDS: dict[str, Backend] = {
    "hf": Backend("hf"),
    "vllm": Backend(
        "vllm",
        pair="trlvr.vllm.pair:VLLMPair",
        package="vllm",
        engine="trlvr.vllm.pair:EngineOptions",
        trl_generation="trlvr.vllm.trl_backend:TandemVLLMGeneration",
        distribution="trlvr.vllm.trl_backend:engine_distribution",
        one_vocabulary=True,
        own_engine=True,
        gpu_share=True,
        needs_context_length=True,
        sampler_logprobs=True,
        fingerprinted=True,
    ),
}


def backend(name: str) -> Backend:
    """The backend called `name`; an unknown name is a UserError in one line."""
    if name not in BACKENDS:
        raise UserError(f"backend: must be one of {', '.join(BACKENDS)}, got {name!r}")
    return BACKENDS[name]

"""The models one evaluation runs: `Partners` describes them before they load; `EngineBuilder` loads them
(the Pair that generates, the HF models that score) for a resolved `trlvr.team.Team`, and closes every
engine it made.

    builder = EngineBuilder.of(team, spec, dtype="auto", device=None, junior_device=None)
    partners = builder.partners(identities, paths, context_length)  # `trlvr.eval.runner.evaluate` takes it
    ...
    builder.close()  # in a finally: each vLLM engine closed, the memory free for the next stage

What this file does not know: command-line flags, selections, the run loop.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from trlvr.engine.backends import Backend, backend
from trlvr.engine.release import free_memory
from trlvr.engine.schedules import JUNIOR, SoloSchedule
from trlvr.errors import UserError
from trlvr.eval import fingerprint as fpr
from trlvr.eval.prepare import model_context_length
from trlvr.eval.spec import EvalSpec
from trlvr.gpu import free_memory_check
from trlvr.models import adapter_base, is_adapter_dir, model_folder, vocab_fingerprint
from trlvr.team import LOCKSTEP, TEXT, Team, pair_fingerprint

EVAL_ENGINE_SHARE = 0.9  # evaluation's vLLM engine: the GPU is its alone while it generates
SCORED = frozenset({"legibility", "drift"})  # suite entries scored teacher-forced by the HF models


@dataclass
class Partners:
    """The models one evaluation runs, described before they load.

    tokenizer: the senior's (prompts and completions are in its ids); junior_tokenizer: a text pair's
    junior's own (None: one vocabulary). build(junior_prompts=None) -> `trlvr.engine.Pair`, called once
    the output directory is known to be resumable (a text pair's junior prompts come from the problems).
    identities: {"senior", "junior", "data"} for the fingerprint; paths: what config.json's "models"
    records; context_length: the models' shortest context (None: unknown). scorers: () -> (senior,
    junior), the HF models that score teacher-forced legibility and drift, for a pair that holds none
    (backend vllm): called after generation, once the engine is closed and its memory free.
    """

    tokenizer: object
    build: Callable[..., object]
    has_junior: bool
    identities: dict
    junior_tokenizer: object = None
    paths: dict = field(default_factory=dict)
    context_length: int | None = None
    backend: str = "hf"
    scorers: Callable[[], tuple] | None = None

    @classmethod
    def of(
        cls,
        senior,
        junior,
        tokenizer,
        *,
        junior_tokenizer=None,
        identities: dict | None = None,
        paths: dict | None = None,
        **pair_options,
    ) -> Partners:
        """Partners of two models already in memory: identified by a hash of their weights unless
        `identities` says; `pair_options` go to `trlvr.engine.make_pair` (e.g. decode, junior_device)."""
        ids = dict(identities or {})
        ids.setdefault("senior", {"weights": fpr.weights_digest(senior)})
        if junior is not None:
            ids.setdefault("junior", {"weights": fpr.weights_digest(junior)})

        def build(junior_prompts=None):
            text = (
                {"junior_tokenizer": junior_tokenizer, "junior_prompts": junior_prompts}
                if junior_tokenizer
                else {}
            )
            return _make_pair(senior, junior, tokenizer, **text, **pair_options)

        return cls(
            tokenizer,
            build,
            junior is not None,
            ids,
            junior_tokenizer if junior is not None else None,
            dict(paths or {}),
            model_context_length(senior, junior),
        )

    @property
    def pairing(self) -> str | None:
        return None if not self.has_junior else TEXT if self.junior_tokenizer is not None else LOCKSTEP

    def fingerprint(self) -> dict:
        """fingerprint.json's "models": who wrote the samples, with which vocabularies and backend."""
        return {
            "senior": self.identities["senior"],
            "junior": self.identities.get("junior") if self.has_junior else None,
            "tokenizer": vocab_fingerprint(self.tokenizer)[:16],
            **pair_fingerprint(self.pairing, self.junior_tokenizer),
            **({"backend": self.backend} if backend(self.backend).fingerprinted else {}),
        }


def _make_pair(*args, **kwargs):
    from trlvr.engine import make_pair  # the engine (transformers) loads with the first Pair, not with `api`

    return make_pair(*args, **kwargs)


def check_self_junior(senior_path: str) -> None:
    """`--junior self` is the LoRA senior's base with its adapters off: refused for a plain model folder."""
    if not is_adapter_dir(senior_path):
        raise UserError(
            f"--junior self: {senior_path} has no adapter_config.json; 'self' needs a LoRA senior "
            "(a run trained with use_peft: true, e.g. RUN/final)"
        )


def torch_dtype(name: str):
    table = {"auto": "auto", "bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}
    if name not in table:
        raise UserError(f"dtype: {name!r}; choose from {', '.join(table)}")
    return table[name]


def hf_eos_ids(senior_path: str, tokenizer) -> list[int]:
    """What ends a row in the HF engine (`trlvr.engine.generator`): the tokenizer's EOS and the senior's
    generation config's, so every engine of an evaluation stops where the HF engine would."""
    from transformers import GenerationConfig

    ids = {tokenizer.eos_token_id} if tokenizer.eos_token_id is not None else set()
    base = adapter_base(senior_path) if is_adapter_dir(senior_path) else model_folder(senior_path)
    try:
        gen = GenerationConfig.from_pretrained(base).eos_token_id
    except OSError:  # no generation_config.json: the tokenizer's EOS alone, as the HF engine
        gen = None
    ids.update([gen] if isinstance(gen, int) else (gen or []))
    return sorted(ids)


class JuniorAlone:
    """The junior-alone protocol on an engine that holds only the junior (as its `senior`): it runs the
    engine's solo schedule and reports every token as the junior's."""

    def __init__(self, engine):
        self.engine = engine

    def __getattr__(self, name):
        return getattr(self.engine, name)

    def generate(self, prompts, schedule, sampling, row_keys=None):
        if schedule.writers != frozenset({JUNIOR}):
            raise ValueError(f"this engine holds the junior alone; it cannot run {schedule!r}")
        out = self.engine.generate(prompts, SoloSchedule(), sampling, row_keys)
        out.senior_authored = out.senior_authored & False
        out.junior_logprob = out.senior_logprob  # the author's, i.e. the junior's
        return out


@dataclass
class EngineBuilder:
    """Loads one evaluation's team when the run asks: `build` gives the Pair that generates (an HF pair, or
    an engine of the models a stack names), `models` the HF (senior, junior) that score. A solo-only team
    (no junior) loads no junior; a `self` team's junior is the senior's adapter-off view."""

    team: Team
    dtype: str = "auto"
    device: str | None = None
    junior_device: str | None = None
    decode: str = "auto"  # the HF pair's decode options (`EvalSpec.decode`)
    seed: int = 0  # an engine's seed
    max_num_seqs: int = 256  # the rows one generate call sends: the evaluation's batch size
    # the suite scores teacher-forced (legibility, drift): an engine that holds no HF models needs scorers
    scores: bool = False
    engines: list = field(default_factory=list)  # every engine `build` made: `close` shuts them all

    @classmethod
    def of(cls, team: Team, spec: EvalSpec, dtype="auto", device=None, junior_device=None) -> EngineBuilder:
        """The builder of `team` for an evaluation under `spec` (only its engine settings are kept)."""
        scores = bool(SCORED & set(spec.suite))
        return cls(team, dtype, device, junior_device, spec.decode, spec.seed, spec.batch_size, scores)

    @property
    def backend(self) -> Backend:
        return backend(self.team.backend)

    @property
    def junior_tokenizer(self):
        """A text pair's junior tokenizer; None for one vocabulary (lockstep, self) or no junior."""
        return self.team.junior_tok if self.team.is_text else None

    def models(self) -> tuple:
        """The HF (senior, junior) on their devices; adapters load onto their base."""
        dev = self.device or ("cuda" if torch.cuda.is_available() else "cpu")
        return self.team.load(torch_dtype(self.dtype), dev, self.junior_device, with_junior=True)

    def build(self, junior_prompts=None, max_model_len=None, stacks=("senior", "junior")):
        """The Pair, called once the output folder is known to be resumable (`Partners.build`)."""
        if self.backend.own_engine:
            return self._engine(max_model_len, stacks)
        senior, junior = self.models()
        tok = self.team.senior_tok
        if self.junior_tokenizer is not None:
            return _make_pair(
                senior, junior, tok, junior_tokenizer=self.junior_tokenizer, junior_prompts=junior_prompts
            )
        devices = {"junior_device": self.junior_device} if self.junior_device else {}
        return _make_pair(senior, junior, tok, decode=self.decode, **devices)

    def _engine(self, max_model_len, stacks):
        """An engine of the models `stacks` names, its context the plan's longest prompt + budget and its
        `max_num_seqs` the evaluation's batch size; the HF scorers load after it is closed."""
        if self.backend.gpu_share:  # the previous engine closed: its memory is free, or this names it
            free_memory()
            free_memory_check(
                f"eval: the {'+'.join(stacks)} engine",
                "this evaluation's previous engine" if self.engines else None,
                EVAL_ENGINE_SHARE,
            )
        senior, junior = self.team.senior, self.team.junior_weights
        first = senior if "senior" in stacks else junior
        second = junior if len(stacks) == 2 else None
        tok = self.team.senior_tok
        eos = hf_eos_ids(senior, tok)
        engine = self.backend.load("engine").for_machine(
            self.dtype, self.seed, max_model_len, EVAL_ENGINE_SHARE, max_num_seqs=self.max_num_seqs
        )
        pair = _make_pair(first, second, tok, backend=self.backend.name, engine=engine, eos_token_ids=eos)
        self.engines.append(pair)
        pair = pair if "senior" in stacks else JuniorAlone(pair)
        pair.senior = pair.junior = None
        return pair

    def partners(self, identities: dict, paths: dict, context_length: int | None) -> Partners:
        """The `Partners` the runner takes: this builder's `build`, and its `models` as the scorers of an
        engine that holds no HF models."""
        return Partners(
            self.team.senior_tok,
            self.build,
            self.team.writes,
            identities,
            self.junior_tokenizer,
            paths,
            context_length,
            self.team.backend,
            scorers=self.models if self.backend.own_engine and self.scores else None,
        )

    def close(self) -> None:
        """Close every engine this builder made (idempotent: the runner closed most already), free memory."""
        for pair in self.engines:
            pair.close()
        free_memory()

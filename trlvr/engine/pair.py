"""The pairing interface: one object that co-generates with a senior and a junior, whatever the engine.

    pair = make_pair(senior, junior, tokenizer)                          # built once per run
    out = pair.generate(prompt_ids, WordSchedule(0.5), Sampling(256, temperature=0.6), row_keys)
    out.completion_ids, out.authors, out.senior_logprobs                 # a TandemOutput

Three implementations, one contract (`Pair`):
- `LockstepPair` ("lockstep"): one shared vocabulary, token by token on HF models (`TandemGenerator`).
- `TextPair` ("text"): two tokenizers over one shared text, on HF models (`TextPairGenerator`); the
  returned TandemOutput is the senior's tokenization of the text.
- `trlvr.vllm.pair.VLLMPair` ("vllm", optional): one vLLM engine holding both models.

Every implementation takes the same `Schedule` objects and the same per-row keys: a row's tokens and
authors are a function of (sampling.seed, row key, token history), not of its batch-mates. A
schedule a pairing cannot run is named by `unsupported(schedule)` (a class method, so a config can be
checked before any model loads) and refused by `check`. Training and evaluation receive a Pair and
never look at which one it is.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any, ClassVar

from trlvr.engine import backends
from trlvr.engine.generator import DecodeOptions, TandemGenerator
from trlvr.engine.options import Sampling
from trlvr.engine.output import TandemOutput
from trlvr.engine.schedules import SENIOR, Schedule
from trlvr.engine.text_pair import TextPairGenerator, text_schedules
from trlvr.errors import UserError

if TYPE_CHECKING:  # annotations only
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

MECHANISMS = ("lockstep", "text")  # how two models share a rollout (`trlvr.team.choose_pairing`)


class Pair(ABC):
    """A senior and a junior (or a senior alone) that generate together. See the module docstring."""

    backend: ClassVar[str]  # its name in `trlvr.engine.backends.BACKENDS`
    pairing: ClassVar[str]  # "lockstep" | "text"

    senior = None  # the HF senior module (None where the engine holds the only copy)
    junior = None  # the HF junior module, or None
    tokenizer = None  # the senior's tokenizer: prompt ids in, completion ids out are in its vocabulary
    junior_tokenizer = None  # text pairs: the junior's own tokenizer

    @classmethod
    def unsupported(cls, schedule: Schedule) -> str | None:
        """Why this kind of pair cannot run `schedule` (one sentence), or None."""
        return None

    def check(self, schedule: Schedule) -> None:
        why = self.unsupported(schedule)
        if why is not None:
            raise UserError(why)

    @abstractmethod
    def generate(
        self,
        prompts: list[list[int]],
        schedule: Schedule,
        sampling: Sampling,
        row_keys: list[int] | None = None,
    ) -> TandemOutput:
        """One completion per prompt (senior token ids); row_keys: one int per row (None: its index)."""

    @abstractmethod
    def sync_senior(self, model) -> None:
        """Generate with `model`'s current weights from now on (training calls it before the first
        rollout after an optimizer step, with the senior as it holds it). HF pairs point at the module
        itself (nothing to copy); an engine with its own copy (vLLM) loads the weights."""

    @property
    def pad_token_id(self) -> int:
        raise NotImplementedError


class LockstepPair(Pair):
    """One shared vocabulary, token by token, on HF models (`TandemGenerator`).

    decode, compile: the run's `DecodeOptions`; every other keyword (eos_token_ids, pad_token_id,
    tables, step_end_ids, junior_device, ...) goes to `TandemGenerator` as it is.
    """

    backend, pairing = "hf", "lockstep"

    def __init__(
        self,
        senior,
        junior,
        tokenizer,
        *,
        decode: str = "auto",
        compile: bool | str = "auto",
        **generator_options,
    ):
        self.senior, self.junior, self.tokenizer = senior, junior, tokenizer
        self.gen = TandemGenerator(
            senior, junior, tokenizer, options=DecodeOptions(decode, compile), **generator_options
        )

    @property
    def pad_token_id(self) -> int:
        return self.gen.pad_token_id

    @property
    def tables(self):
        return self.gen.tables

    def sync_senior(self, model) -> None:
        self.senior = self.gen.senior = model  # the same module after an optimizer step: nothing to copy

    def generate(self, prompts, schedule, sampling, row_keys=None) -> TandemOutput:
        self.check(schedule)
        return self.gen.generate(prompts, schedule, sampling, row_keys)


class TextPair(Pair):
    """Two tokenizers over one shared text, on HF models (`trlvr.engine.text_pair.TextPairGenerator`);
    `generate` returns the senior's tokenization of the text (junior log-probs: None).

    junior_prompts: senior prompt ids -> the junior's prompt ids. A caller holding the prompt text
    passes its own encoding (training and evaluation do: the rendered prompt in the junior's
    tokenizer); default: decode with the senior's tokenizer (special tokens dropped) and encode with
    the junior's (its special tokens, e.g. a BOS, added). `last` holds the last `TextPairOutput`
    (texts, char authors, withdrawn and catch-up counts).
    """

    backend, pairing = "hf", "text"

    def __init__(
        self,
        senior,
        junior,
        tokenizer,
        junior_tokenizer,
        *,
        junior_prompts=None,
        eos_token_ids: list[int] | None = None,
    ):
        if junior_tokenizer is not None and junior_tokenizer.pad_token is None:
            junior_tokenizer.pad_token = junior_tokenizer.eos_token
        self.senior, self.junior, self.tokenizer, self.junior_tokenizer = (
            senior,
            junior,
            tokenizer,
            junior_tokenizer,
        )
        self.gen = TextPairGenerator(
            senior, tokenizer, junior, junior_tokenizer, senior_eos_ids=eos_token_ids
        )
        self._pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else self.gen.eos[SENIOR][0]
        if junior_prompts is None and junior is not None:

            def junior_prompts(ids: list[int]) -> list[int]:
                text = tokenizer.decode(ids, skip_special_tokens=True)
                return list(junior_tokenizer(text, add_special_tokens=True)["input_ids"])

        self.junior_prompts = junior_prompts
        self.last = None

    @classmethod
    def unsupported(cls, schedule: Schedule) -> str | None:
        if schedule.text_rule() is not None:
            return None
        names = ", ".join(text_schedules())
        return (
            f"schedule {schedule.name!r} needs one shared vocabulary (it reads token ids); this senior and "
            f"junior are text-paired (two tokenizers), which runs the schedules {names}"
        )

    @property
    def pad_token_id(self) -> int:
        return self._pad

    def sync_senior(self, model) -> None:
        self.senior = self.gen.models[SENIOR] = model

    def generate(self, prompts, schedule, sampling, row_keys=None) -> TandemOutput:
        self.check(schedule)
        junior = [self.junior_prompts(p) for p in prompts] if self.junior_prompts is not None else None
        self.last = self.gen.generate(prompts, junior, schedule, sampling, row_keys)
        return self.last.as_tandem_output(self._pad)


def pair_class(backend: str = "hf", pairing: str = "lockstep") -> type[Pair]:
    """The Pair implementation for (backend, pairing); a combination that does not exist is a UserError."""
    spec = backends.backend(backend)
    if pairing not in MECHANISMS:
        raise UserError(f"pairing: must be one of {', '.join(MECHANISMS)}, got {pairing!r}")
    if pairing == "text" and spec.one_vocabulary:
        raise UserError(
            f"backend {backend} runs pairs with one shared vocabulary; this pair has two tokenizers "
            "(text pairing): use backend hf"
        )
    if spec.pair is None:  # this package's engine
        return TextPair if pairing == "text" else LockstepPair
    return spec.load(
        "pair"
    )  # an optional backend's, imported only when asked for (the core never imports vLLM)


def unsupported_schedule(schedule: Schedule, backend: str = "hf", pairing: str = "lockstep") -> str | None:
    """Why (backend, pairing) cannot run `schedule`, or None: for config checks before models load."""
    return pair_class(backend, pairing).unsupported(schedule)


def make_pair(
    senior: PreTrainedModel | str,
    junior: PreTrainedModel | str | None = None,
    tokenizer: PreTrainedTokenizerBase | None = None,
    *,
    junior_tokenizer: PreTrainedTokenizerBase | None = None,
    backend: str = "hf",
    **options: Any,
) -> Pair:
    """The one constructor: a text pair when `junior_tokenizer` is given (the junior has its own
    vocabulary), else lockstep.

    Args:
        senior: The senior: a model (backend hf), or a model or its folder (backend vllm).
        junior: The junior, as the senior; None: the senior generates alone.
        tokenizer: The senior's tokenizer (backend vllm: None reads the senior's folder).
        junior_tokenizer: The junior's own tokenizer, for a junior on another vocabulary (a text pair).
        backend: "hf" (trlvr's engine on transformers models) or "vllm" (one vLLM engine for both).
        **options: The implementation's own (engine options, EOS ids, `junior_prompts` for a text pair).

    Returns:
        The `Pair` whose `generate(prompt_ids, schedule, sampling, row_keys)` returns a `TandemOutput`.
    """
    pairing = "text" if junior is not None and junior_tokenizer is not None else "lockstep"
    cls = pair_class(backend, pairing)
    if cls is TextPair:
        return TextPair(senior, junior, tokenizer, junior_tokenizer, **options)
    return cls(senior, junior, tokenizer, **options)

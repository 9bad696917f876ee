"""`EvalSpec`: every setting of an evaluation, in one frozen dataclass (no torch import).

    spec = EvalSpec(suite=("solo", "handoff"), n=4, ks=(1, 2, 4), seed=0, max_new_tokens=160)
                                                  # validated once, here: a SettingError names the field
    spec.fingerprint_part(context_length, max_prompt_tokens)   # what determined the samples
    spec.config_part(context_length, max_prompt_tokens)        # what config.json records

Both `fingerprint.json` and `config.json` are derived from the one spec, so they cannot disagree.
The fingerprint holds what changes a sample (decoding, seed, batching, budget, rounds, grading);
n, ks and the suite are left out of it, so a larger `n` or another suite extends a directory.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from trlvr.data.prompts import PROMPT_TEMPLATES
from trlvr.engine.options import check_decoding
from trlvr.errors import UserError
from trlvr.eval import defaults as D
from trlvr.rewards import GRADERS

GRADINGS = ("boxed", "boxed_or_tail")


class SettingError(UserError):
    """An evaluation setting that cannot work. The message starts with the field's name; `field` lets a
    caller name its own spelling of it (the CLI: its flag, `as_flag`)."""

    def __init__(self, field: str, message: str):
        super().__init__(message)
        self.field = field

    def as_flag(self, flag: str) -> UserError:
        text = str(self)
        return UserError(flag + text[len(self.field) :] if text.startswith(self.field) else f"{flag}: {text}")


BUDGET_RULE = f"min(max_new_tokens, context_length - prompt_tokens - {D.BUDGET_MARGIN})"


@dataclass(frozen=True)
class EvalSpec:
    """What to measure and how to sample it. `context_length` / `max_prompt_tokens`: "auto" = read
    from the models' configs / what the context leaves room for, None = unknown / no cap."""

    suite: tuple[str, ...] = D.DEFAULT_SUITE
    n: int = D.N
    ks: tuple[int, ...] = D.KS
    temperature: float = D.DEFAULT_DECODING["temperature"]
    top_p: float = D.DEFAULT_DECODING["top_p"]
    top_k: int = D.DEFAULT_DECODING["top_k"]
    seed: int = D.SEED
    max_new_tokens: int = D.MAX_NEW_TOKENS
    context_length: int | str | None = "auto"
    max_prompt_tokens: int | str | None = "auto"
    handoff_max_rounds: int = D.HANDOFF_MAX_ROUNDS
    include_eos: bool = False
    batch_size: int = D.BATCH_SIZE
    score_batch_size: int = D.SCORE_BATCH_SIZE
    grading: str = "boxed"
    prompt_template: str = "trlvr"  # trlvr.data.prompts.PROMPT_TEMPLATES: trlvr's instruction or the authors'
    # the graders every sample is graded by (trlvr.rewards.GRADERS): the first gives each row's `reward` and
    # every metric results.json has always held; each other one a second set of pass@k (results.json `by_grader`)
    graders: tuple[str, ...] = ("trlvr",)
    dose_shares: tuple[float, ...] = D.DEFAULT_DOSE_SHARES
    prefix_ks: tuple[int, ...] = D.DEFAULT_PREFIX_KS  # suite entry prefix: the prefix-K protocols (K in %)
    num_resamples: int = D.NUM_RESAMPLES
    decode: str = "auto"  # engine KV path; outputs are equal across paths (tested), so not fingerprinted
    extra: dict = field(default_factory=dict, compare=False)  # caller-named facts for config.json

    def __post_init__(self):
        object.__setattr__(self, "suite", tuple(self.suite))
        object.__setattr__(self, "ks", tuple(sorted({int(k) for k in self.ks})))
        object.__setattr__(self, "dose_shares", tuple(float(x) for x in self.dose_shares))
        object.__setattr__(self, "prefix_ks", tuple(self.prefix_ks))
        object.__setattr__(
            self, "graders", (self.graders,) if isinstance(self.graders, str) else tuple(self.graders)
        )
        self._check()

    @property
    def decoding(self) -> dict:
        return {"temperature": self.temperature, "top_p": self.top_p, "top_k": self.top_k}

    @property
    def needs_junior(self) -> bool:
        """Whether any suite entry runs or scores with the junior (`solo` alone does not)."""
        return bool(set(self.suite) - {"solo"})

    def replace(self, **changes) -> EvalSpec:
        return dataclasses.replace(self, **changes)

    def _check(self) -> None:
        """A SettingError for the first setting that cannot work (on creation: an EvalSpec is valid)."""
        unknown = sorted(set(self.suite) - set(D.SUITE_NAMES))
        if unknown or not self.suite:
            raise SettingError(
                "suite", f"suite: unknown entries {unknown}; choose from {','.join(D.SUITE_NAMES)}"
            )
        for name, lo in (
            ("n", 1),
            ("max_new_tokens", 1),
            ("batch_size", 1),
            ("score_batch_size", 1),
            ("handoff_max_rounds", 1),
        ):
            if getattr(self, name) < lo:
                raise SettingError(name, f"{name} must be >= {lo}, got {getattr(self, name)}")
        if self.n > D.MAX_N:  # every (problem, sample) item is planned before the first sample
            raise SettingError("n", f"n must be <= {D.MAX_N} samples per problem, got {self.n}")
        if not self.ks or self.ks[0] < 1 or self.ks[-1] > self.n:
            raise SettingError("ks", f"ks: every k must be in [1, n = {self.n}], got {list(self.ks)}")
        if not self.prefix_ks or any(
            isinstance(k, bool) or not isinstance(k, int) or not 0 <= k <= 100 for k in self.prefix_ks
        ):
            raise SettingError(
                "prefix_ks", f"prefix_ks: expected integer percents in [0, 100], got {list(self.prefix_ks)}"
            )
        if self.prompt_template not in PROMPT_TEMPLATES:
            raise SettingError(
                "prompt_template",
                f"prompt_template: {self.prompt_template!r}; choose from {', '.join(PROMPT_TEMPLATES)}",
            )
        if self.grading not in GRADINGS:
            raise SettingError("grading", f"grading: {self.grading!r}; choose from {', '.join(GRADINGS)}")
        unknown = [g for g in self.graders if g not in GRADERS]
        if unknown or not self.graders:
            raise SettingError(
                "graders",
                f"graders: unknown {unknown or 'none given'}; choose one or more (comma-separated) "
                f"from {','.join(GRADERS)}",
            )
        if len(set(self.graders)) < len(self.graders):
            raise SettingError("graders", f"graders: {','.join(self.graders)} names a grader twice")
        if self.grading == "boxed_or_tail" and set(self.graders) != {"trlvr"}:
            raise SettingError(
                "graders",
                f"graders: {','.join(self.graders)}: the authors' graders read the last "
                "\\boxed{} only; grading boxed_or_tail is trlvr's grader's alone",
            )
        try:
            check_decoding(self.temperature, self.top_p, self.top_k)
        except ValueError as e:  # its message starts with the setting's name
            field = next((n for n in ("top_p", "top_k") if str(e).startswith(n)), "temperature")
            raise SettingError(field, str(e)) from None

    @property
    def grader(self) -> str:
        """The first grader: each row's `reward`, and the metrics results.json has always held."""
        return self.graders[0]

    def fingerprint_part(
        self, context_length: int | None, max_prompt_tokens: int | None, grading: str
    ) -> dict:
        """The settings that determine the samples (fingerprint.json's "generation" and "scoring"; the grader of
        each row's `reward` is the first of `graders`; the others are graded from the stored texts, so a
        folder takes more of them, or fewer, without generating again). A caller's own score function
        (grading "custom:<name>") has no grader."""
        return {
            "generation": {
                "decoding": self.decoding,
                "seed": self.seed,
                "batch_size": self.batch_size,
                "max_new_tokens": self.max_new_tokens,
                "context_length": context_length,
                "max_prompt_tokens": max_prompt_tokens,
                "handoff_max_rounds": self.handoff_max_rounds,
                # only where not trlvr's: an evaluation written before the setting keeps its fingerprint
                **({"prompt_template": self.prompt_template} if self.prompt_template != "trlvr" else {}),
            },
            "scoring": {
                "grading": grading,
                **({} if _custom(grading) else {"grader": self.grader}),
                "include_eos": self.include_eos,
                "score_batch_size": self.score_batch_size,
            },
        }

    def config_part(self, context_length: int | None, max_prompt_tokens: int | None, grading: str) -> dict:
        """Every setting, resolved, as config.json records it."""
        return {
            "n": self.n,
            "ks": list(self.ks),
            "decoding": self.decoding,
            "seed": self.seed,
            "max_new_tokens": self.max_new_tokens,
            "batch_size": self.batch_size,
            "score_batch_size": self.score_batch_size,
            "handoff_max_rounds": self.handoff_max_rounds,
            "handoff_round": "one senior step + one junior step",
            "suite": list(self.suite),
            "dose_shares": list(self.dose_shares),
            "num_resamples": self.num_resamples,
            "grading": grading,
            "prompt_template": self.prompt_template,
            **({} if _custom(grading) else {"grader": self.grader, "graders": list(self.graders)}),
            "budget": {
                "rule": BUDGET_RULE if context_length else "flat max_new_tokens",
                "max_new_tokens": self.max_new_tokens,
                "context_length": context_length,
            },
            "max_prompt_tokens": max_prompt_tokens,
            "legibility_drift": {"include_eos": self.include_eos},
            "decode": self.decode,
            # only where asked for: a finished evaluation of another suite keeps the config it was written with
            **({"prefix_ks": list(self.prefix_ks)} if "prefix" in self.suite else {}),
            **(
                {"handoff_paper": {**D.PAPER_HANDOFF, "decoding": dict(D.PAPER_HANDOFF["decoding"])}}
                if "handoff-paper" in self.suite
                else {}
            ),
        }


def _custom(grading: str) -> bool:
    """A caller's own score function grades (`trlvr.eval.grading.grading_name`): no grader of trlvr's."""
    return grading.startswith("custom:")

"""`EvalSpec`: every setting of an evaluation, in one frozen dataclass (no torch import).

    spec = EvalSpec(suite=("solo", "handoff"), n=4, ks=(1, 2, 4), seed=0, max_new_tokens=160)
                                                  # validated once, here: a SettingError names the field
    spec.fingerprint_part(context_length, max_prompt_tokens)   # what determined the samples
    spec.config_part(context_length, max_prompt_tokens)        # what config.json records
    SETTINGS["ks"].flag, SETTINGS["ks"].study                  # "--k", "k": how a user gives a field

Both `fingerprint.json` and `config.json` are derived from the one spec, so they cannot disagree.
The fingerprint holds what changes a sample (decoding, seed, batching, budget, rounds, grading);
n, ks and the suite are left out of it, so a larger `n` or another suite extends a directory.
Each field a user sets is declared once, with its `Setting`: `trlvr eval`'s flag, the study key under
`evaluation:` and the eval command line a study records are derived from it.
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from trlvr.data.prompts import PROMPT_TEMPLATES
from trlvr.engine.options import DECODE_MODES, check_decoding
from trlvr.errors import UserError
from trlvr.eval import defaults as D
from trlvr.kinds import (
    CONTEXT,
    COUNT,
    COUNTS,
    NONNEG,
    NONNEG_FLOAT,
    SEED,
    SHARES,
    TEXT,
    UNIT,
    count,
    text_kind,
)
from trlvr.rewards import GRADERS
from trlvr.rewards.graders import graders_help

GRADINGS = ("boxed", "boxed_or_tail")
SECTIONS = ("sampling", "grading", "engine")  # where `trlvr eval --help` lists a setting's flag


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


def _same(value):
    return value


def _joined(one: Callable[[Any], str] = str) -> Callable[[list], str]:
    return lambda values: ",".join(one(x) for x in values)


@dataclass(frozen=True)
class Setting:
    """How a user gives one EvalSpec field: its `trlvr eval` flag and, where a study may set it, its key
    under `evaluation:`. `default` is the flag's as argparse holds it, `parse` turns the parsed flag into
    the field's value, `render` a study value into the flag's text."""

    flags: tuple[str, ...]
    section: str
    kind: Any = None  # argparse's `type=` (trlvr.kinds); None for a choice or a switch
    default: Any = None
    help: str | None = None
    choices: tuple[str, ...] | None = None
    switch: bool = False
    parse: Callable[[Any], Any] = _same
    study: str | None = None
    study_type: type | None = None
    render: Callable[[Any], str] = str

    @property
    def flag(self) -> str:
        return self.flags[0]

    @property
    def dest(self) -> str:
        return self.flag.lstrip("-").replace("-", "_")

    def read(self, text: str | None):
        """The field's value of the flag's text, as `trlvr eval` reads it (a switch: None = given); a bad
        text raises argparse.ArgumentTypeError, in the words of its kind."""
        if self.choices is not None and text not in self.choices:
            raise argparse.ArgumentTypeError(f"expected one of {', '.join(self.choices)}, got {text!r}")
        return self.parse(True if self.switch else self.kind(text) if self.kind else text)


_FIELD = object()  # the flag's default is the field's


def setting(default, *flags: str, section: str, flag_default=_FIELD, study=None, **kw):
    """A dataclass field with its `Setting` (`study`: the key, or (key, type) where the type differs)."""
    key, study_type = study if isinstance(study, tuple) else (study, type(default) if study else None)
    how = Setting(
        flags,
        section,
        default=default if flag_default is _FIELD else flag_default,
        study=key,
        study_type=study_type,
        **kw,
    )
    return field(default=default, metadata={"setting": how})


def _names(text: str) -> tuple[str, ...]:
    return tuple(g.strip() for g in text.split(","))


def graders_problem(text: str) -> str | None:
    """None when `text` is distinct comma-separated graders, else why not. Their dependencies are checked
    where the evaluation starts (`trlvr.eval.api.check_eval`), so a study plans on a machine without them."""
    names = _names(text)
    unknown = [g for g in names if g not in GRADERS]
    if unknown:
        return (
            f"unknown grader(s) {', '.join(map(repr, unknown))}: "
            f"expected comma-separated graders of {', '.join(GRADERS)}"
        )
    if len(set(names)) < len(names):
        return f"{text!r} names a grader twice"
    return None


# --grader "trlvr,authors" -> ("trlvr", "authors"): the first grades the reported metrics, each other its own
GRADER_LIST = text_kind(
    "graders", f"comma-separated graders of {', '.join(GRADERS)}", graders_problem, finish=_names
)


def _percents(text: str | None) -> tuple:
    """ "0,50,100" -> (0, 50, 100); a piece that is not an integer stays as text (EvalSpec names it)."""
    if not text:
        return D.DEFAULT_PREFIX_KS
    return tuple(int(x) if x.strip().isdigit() else x.strip() for x in text.split(",") if x.strip())


def _suite(text: str) -> tuple[str, ...]:
    return tuple(s.strip() for s in text.split(",") if s.strip())


SUITE_DEFAULT = ",".join(D.DEFAULT_SUITE)


@dataclass(frozen=True)
class EvalSpec:
    """What to measure and how to sample it. `context_length` / `max_prompt_tokens`: "auto" = read
    from the models' configs / what the context leaves room for, None = unknown / no cap."""

    suite: tuple[str, ...] = setting(
        D.DEFAULT_SUITE,
        "--suite",
        section="sampling",
        kind=TEXT,
        flag_default=SUITE_DEFAULT,
        help=f"comma-separated subset of {','.join(D.SUITE_NAMES)} (default {SUITE_DEFAULT}; prefix = the "
        "prefix-continuation curve: the junior continues the senior's solo trace after K%% of it)",
        parse=_suite,
        study=("suite", list),
        render=_joined(),
    )
    n: int = setting(
        D.N,
        "--n",
        "--samples",
        section="sampling",
        kind=count(D.MAX_N),
        help="samples per problem and protocol "
        "(--samples: the same, for a launcher whose own flags take --n)",
        study="n",
    )
    ks: tuple[int, ...] = setting(
        D.KS,
        "--k",
        section="sampling",
        kind=COUNTS,
        flag_default=list(D.KS),
        help="pass@k values, comma-separated (each <= n)",
        parse=lambda v: tuple(v or ()),
        study=("k", list),
        render=_joined(),
    )
    temperature: float = setting(
        D.DEFAULT_DECODING["temperature"], "--temperature", section="sampling", kind=NONNEG_FLOAT
    )
    top_p: float = setting(D.DEFAULT_DECODING["top_p"], "--top-p", section="sampling", kind=UNIT)
    top_k: int = setting(D.DEFAULT_DECODING["top_k"], "--top-k", section="sampling", kind=NONNEG)
    seed: int = setting(D.SEED, "--seed", section="sampling", kind=SEED, study="seed")
    max_new_tokens: int = setting(
        D.MAX_NEW_TOKENS,
        "--max-new-tokens",
        section="sampling",
        kind=COUNT,
        help="completion budget cap; with a known context the budget is min(cap, context - prompt - 8)",
        study="max_new_tokens",
    )
    context_length: int | str | None = setting(
        "auto",
        "--context-length",
        section="sampling",
        kind=CONTEXT,
        help="model context for the budget rule "
        "(default: the models' max_position_embeddings; 0 = flat budget)",
        study=("context_length", int),
    )
    max_prompt_tokens: int | str | None = setting(
        "auto",
        "--max-prompt-tokens",
        section="sampling",
        kind=COUNT,
        flag_default=None,
        help="drop longer prompts up front, listed in results.json "
        "(default: what the context leaves room for)",
        parse=lambda v: "auto" if v is None else v,
    )
    handoff_max_rounds: int = setting(
        D.HANDOFF_MAX_ROUNDS,
        "--handoff-max-rounds",
        section="sampling",
        kind=COUNT,
        help="round cap of the handoff protocol (a round = one senior step + one junior step)",
    )
    include_eos: bool = setting(
        False,
        "--include-eos",
        section="sampling",
        switch=True,
        help="legibility and drift also score the final EOS",
    )
    batch_size: int = setting(
        D.BATCH_SIZE,
        "--batch-size",
        section="sampling",
        kind=COUNT,
        help="sequences per generation batch",
        study="batch_size",
    )
    score_batch_size: int = setting(
        D.SCORE_BATCH_SIZE,
        "--score-batch-size",
        section="sampling",
        kind=COUNT,
        help="sequences per teacher-forced scoring pass",
    )
    grading: str = setting(
        "boxed",
        "--grading",
        section="grading",
        choices=GRADINGS,
        help="boxed (the paper's: no \\boxed{} scores 0) or boxed_or_tail (a box-less answer is "
        "graded from the text's tail); named in results.json",
        study="grading",
    )
    # trlvr.data.prompts.PROMPT_TEMPLATES: trlvr's instruction or the authors'
    prompt_template: str = setting(
        "trlvr",
        "--prompt-template",
        section="grading",
        choices=tuple(PROMPT_TEMPLATES),
        help='the instruction after each problem: trlvr ("Let\'s think step by step ...") or authors (the '
        'paper\'s release: "Solve the following math problem step by step ...", enable_thinking=False); '
        "the one the senior was trained with",
        study="prompt_template",
    )
    # every sample is graded by each (trlvr.rewards.GRADERS): the first gives each row's `reward` and the
    # metrics results.json has always held; each other one a second set of pass@k (results.json `by_grader`)
    graders: tuple[str, ...] = setting(
        ("trlvr",),
        "--grader",
        section="grading",
        kind=GRADER_LIST,
        flag_default="trlvr",
        help=f"comma-separated graders ({', '.join(GRADERS)}): every sample is graded by each, in one run; "
        "the first gives the reported metrics (and each sample's reward), each other one its own pass@k "
        f"(results.json by_grader). {graders_help()}",
        parse=lambda v: tuple(v or ("trlvr",)),
        study=("grader", str),
    )
    dose_shares: tuple[float, ...] = setting(
        D.DEFAULT_DOSE_SHARES,
        "--dose-shares",
        section="sampling",
        kind=SHARES,
        flag_default=list(D.DEFAULT_DOSE_SHARES),
        help="junior shares of the dose protocols (suite entry dose), comma-separated; dose-0.5 = the word "
        f"schedule at p = 0.5 (default {','.join(f'{x:g}' for x in D.DEFAULT_DOSE_SHARES)})",
        parse=lambda v: tuple(v or D.DEFAULT_DOSE_SHARES),
        study=("dose_shares", list),
        render=_joined(lambda x: f"{float(x):g}"),
    )
    prefix_ks: tuple[int, ...] = setting(  # suite entry prefix: the prefix-K protocols (K in %)
        D.DEFAULT_PREFIX_KS,
        "--prefix-ks",
        section="sampling",
        kind=TEXT,
        flag_default=",".join(map(str, D.DEFAULT_PREFIX_KS)),
        help="suite entry prefix: the shares K (integer percents in [0, 100]) of the senior's solo trace the "
        "junior continues from, comma-separated (default %(default)s)",
        parse=_percents,
    )
    num_resamples: int = D.NUM_RESAMPLES
    decode: str = setting(  # engine KV path; outputs are equal across paths (tested), so not fingerprinted
        "auto",
        "--decode",
        section="engine",
        choices=tuple(DECODE_MODES),
        help="KV caches: eager (grown per step; the auto default until measured on a GPU) "
        "or static (allocated once)",
    )
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
        """The settings that determine the samples (fingerprint.json's "generation" and "scoring"; the grader
        of each row's `reward` is the first of `graders`; the others are graded from the stored texts, so a
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
            # only where asked for: a finished evaluation of another suite keeps the config it was made with
            **({"prefix_ks": list(self.prefix_ks)} if "prefix" in self.suite else {}),
            **(
                {"handoff_paper": {**D.PAPER_HANDOFF, "decoding": dict(D.PAPER_HANDOFF["decoding"])}}
                if "handoff-paper" in self.suite
                else {}
            ),
        }


SETTINGS: dict[str, Setting] = {
    f.name: f.metadata["setting"] for f in dataclasses.fields(EvalSpec) if "setting" in f.metadata
}
FLAGS = {name: s.flag for name, s in SETTINGS.items()}  # an EvalSpec field -> the flag that sets it


def from_flags(args) -> EvalSpec:
    """The EvalSpec of parsed `trlvr eval` flags (a field whose flag `args` lacks keeps its default); a
    setting that cannot work is one UserError naming its flag."""
    values = {name: s.parse(getattr(args, s.dest)) for name, s in SETTINGS.items() if hasattr(args, s.dest)}
    try:
        return EvalSpec(**values)
    except SettingError as e:  # name the flag: --k for ks, --top-p for top_p, ...
        raise e.as_flag(FLAGS.get(e.field, "--" + e.field.replace("_", "-"))) from None


def from_texts(texts: dict[str, str | None]) -> EvalSpec:
    """The EvalSpec of settings given as their flags' text ({field: text}, e.g. a study's recorded flags)."""
    return EvalSpec(**{name: SETTINGS[name].read(text) for name, text in texts.items()})


def _custom(grading: str) -> bool:
    """A caller's own score function grades (`trlvr.eval.grading.grading_name`): no grader of trlvr's."""
    return grading.startswith("custom:")

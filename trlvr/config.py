"""Run configuration: `TandemConfig` (what trlvr adds to TRL) parsed together with TRL's `GRPOConfig`.

A run is one flat YAML file whose keys are fields of either dataclass, read by TRL's own parser
(`trl.TrlParser`, as `trl/scripts/grpo.py` does), with `--key value` overrides on the command line:

    trlvr train --config toy --arm grpo --max_steps 20      # `toy` = the config shipped in the package

The two field sets are disjoint, so a key names one field. Shared settings live once, under TRL's
name: sampling temperature, top_p and top_k, `max_completion_length`, `num_generations`, `beta`
(KL coefficient) and `seed`. `{arm}` in `output_dir` becomes the arm, so the arms of one config
never share a directory. Every mistake (unknown key, wrong type, bad value) is a `UserError` that
names the key.

What this file does not know: models, data, training. It only turns text into the two configs.
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, get_type_hints

import yaml

from trlvr import kinds as K
from trlvr.data.jsonl import DuplicateKey as DuplicateJsonKey
from trlvr.data.jsonl import loads_strict, not_json
from trlvr.data.prompts import PROMPT_TEMPLATES
from trlvr.engine.backends import BACKENDS, backend
from trlvr.engine.capabilities import Plan, check_capabilities
from trlvr.engine.options import DECODE_MODES, check_decoding
from trlvr.engine.schedules import JUNIOR, SENIOR, WORD_HANDOFFS, schedule_fields, settings_for
from trlvr.engine.schedules import SCHEDULES as ENGINE_SCHEDULES
from trlvr.errors import UserError
from trlvr.memory import GPU_MEMORY
from trlvr.models import DEVICE, check_device
from trlvr.rewards import GRADERS
from trlvr.rewards.graders import graders_help
from trlvr.rewards.length import LENGTH_PENALTIES
from trlvr.team import PAIRINGS, SELF, is_self

ARMS = ("tandem", "grpo")
# the engine's registered schedules a tandem run can train with ("solo" is what arm=grpo uses)
SCHEDULES = tuple(name for name in ENGINE_SCHEDULES if name != "solo")
KL_REFS = ("initial", "junior")
CONFIGS_DIR = Path(__file__).resolve().parent / "configs"
# the GPU recipes, shipped in the package (in a clone, trlvr/recipes is a link to the top-level recipes/)
RECIPES_DIR = Path(__file__).resolve().parent / "recipes"
DEFAULT_OUTPUT_DIR = "runs/{arm}"
# TRL's importance-sampling correction (backend vllm; docs/reproducing-the-paper.md), trlvr's default for
# both arms: per-token truncation (verl's truncated IS), not TRL's `sequence_mask`, which multiplies a row's
# token ratios and so zeroes more of the GRPO arm's rows (about twice the senior tokens of a tandem row) than
# of the tandem arm's
IS_MODE = "token_truncate"


def _help(text: str, default: Any = dataclasses.MISSING):
    return field(default=default, metadata={"help": text})


# A field's kind rides in its annotation, `Annotated[int, K.COUNT]`: TRL's parser (transformers'
# HfArgumentParser) passes every `metadata` key to argparse, but reads the type without the extras.
def _one_of(values: tuple[str, ...], says: str | None = None) -> K.Kind:
    """A choice kind (`trlvr.kinds.choice`) refused in the words this key has always used."""
    words = says or f"must be one of {values}"
    plain = K.choice(*values)
    return K.Kind(
        plain.name, plain.base, plain.expected, plain, check=lambda v: None if v in values else words
    )


def _or(values: tuple[str, ...]) -> str:
    return ", ".join(values[:-1]) + " or " + values[-1]


@dataclass
class TandemConfig:
    """What a tandem (or matched GRPO) run trains, with what, on what. Errors name the field.

    `senior` and `junior` are paths or hub ids for runs that load their own models (`trlvr train`); a
    script that passes model objects to `TandemGRPOTrainer` leaves them unset (`junior="self"` still
    means the LoRA senior's base with its adapters off).
    """

    _argument_group_name = "trlvr run fields (TandemConfig)"  # `trlvr train --config X --help` groups

    arm: Annotated[str, _one_of(ARMS)] = _help(
        "tandem: senior and junior co-write every rollout; grpo: solo senior (the baseline)", "tandem"
    )
    senior: Annotated[str, K.TEXT] = _help("trainable senior: a local folder or hub id", "")
    junior: Annotated[str | None, K.TEXT] = _help(
        "frozen junior: a local folder or hub id (arm=tandem, kl_ref=junior)", None
    )
    schedule: Annotated[str, _one_of(SCHEDULES)] = _help(
        f"who writes the next token (arm=tandem): one of {SCHEDULES}", "word"
    )
    p: Annotated[float, K.SHARE] = _help(
        "probability that a redraw picks the senior (word/boundary/token schedules)", 0.5
    )
    max_gap: Annotated[int, K.COUNT] = _help(
        "word/boundary schedules: force a redraw after this many tokens without one", 32
    )
    handoff: Annotated[str, _one_of(WORD_HANDOFFS)] = _help(
        "word/boundary schedules, at a word start or the backstop: bernoulli (redraw with p: the paper's "
        "rule) or toggle (the other author takes over: the authors' sampler before 2026-05-05, "
        "trlvr.engine.schedules.WORD_HANDOFFS)",
        "bernoulli",
    )
    chunk_size: Annotated[int, K.COUNT] = _help("chunk schedule: tokens per turn", 16)
    first_author: Annotated[str, _one_of((SENIOR, JUNIOR), f"must be {SENIOR!r} or {JUNIOR!r}")] = _help(
        "step/chunk schedules: who writes first, senior or junior", "senior"
    )
    max_rounds: Annotated[int, K.COUNT] = _help(
        "step schedule: the rollout ends after this many rounds (senior + junior step)", 150
    )
    kl_ref: Annotated[str, _one_of(KL_REFS)] = _help(
        "KL reference when beta > 0: initial (the senior's start) or junior", "initial"
    )
    dataset: Annotated[str, K.TEXT] = _help(
        "training problems: a file, folder or hub name (trlvr.data.load_problems)", ""
    )
    dataset_split: Annotated[str | None, K.TEXT] = _help("dataset split (default: the loader's)", None)
    dataset_limit: Annotated[int | None, K.COUNT] = _help("use only the first N problems", None)
    reward: Annotated[str, K.TEXT] = _help(
        "reward: math (trlvr.rewards.math_reward) or package.module:function", "math"
    )
    grader: Annotated[str, _one_of(GRADERS)] = _help(
        f"how reward: math decides that an answer equals the gold (trlvr.rewards.GRADERS): {graders_help()}",
        "trlvr",
    )
    length_penalty: Annotated[str, _one_of(LENGTH_PENALTIES)] = _help(
        "a length penalty added to the reward, the same for both arms (trlvr.rewards.length): none, kimi "
        "(Kimi k1.5's group length reward, arXiv 2501.12599) or overlong (DAPO's soft overlong punishment, "
        "arXiv 2503.14476)",
        "none",
    )
    length_penalty_weight: Annotated[float, K.NONNEG_FLOAT] = _help(
        "weight of the length penalty (Kimi k1.5 and DAPO add it with weight 1)", 1.0
    )
    max_prompt_length: Annotated[int | None, K.COUNT] = _help(
        "drop problems whose prompt has more tokens than this", None
    )
    prompt_template: Annotated[str, K.choice(*PROMPT_TEMPLATES)] = _help(
        "the instruction after each problem (trlvr.data.prompts.PROMPT_TEMPLATES): trlvr "
        "(\"Let's think step by step ...\") or authors (the paper's release, enable_thinking=False); "
        "select and eval with the same (--prompt-template)",
        "trlvr",
    )
    nonfinite_patience: Annotated[int, K.COUNT] = _help(
        "stop after this many consecutive non-finite losses or grad norms", 1
    )
    # finite: the watchdog waits it out
    preempt_grace_s: Annotated[float, K.POSITIVE_FLOAT] = _help(
        "on SIGTERM/SIGUSR1: finish the step, checkpoint and exit within this many seconds", 120.0
    )
    refuse_lossy_prompts: Annotated[bool, K.SWITCH] = _help(
        "refuse training prompts the tokenizer cannot spell (default: count, list, warn)", False
    )
    decode: Annotated[str, _one_of(DECODE_MODES)] = _help(
        "rollout KV caches: auto (= static on CUDA, eager elsewhere), eager or static", "auto"
    )
    compile: Annotated[str, K.SWITCH_OR_AUTO] = _help(
        "compile the static path's decode step (torch.compile; CUDA graphs on CUDA): auto (= off until the "
        "GPU bench measures it), true or false",
        "auto",
    )
    junior_device: Annotated[str | None, DEVICE] = _help(
        "device for the junior (e.g. cuda:1; the authors' second GPU); null = the senior's", None
    )
    pairing: Annotated[str, _one_of(PAIRINGS, "must be " + _or(PAIRINGS))] = _help(
        "how senior and junior decode together: auto (lockstep when the vocabularies are identical, text "
        "otherwise), lockstep (one shared vocabulary, token by token) or text (each model on its own tokens "
        "of one shared text)",
        "auto",
    )
    gpu_memory: Annotated[str | None, GPU_MEMORY] = _help(
        "the GPU a run is planned for (a size such as 80GB, or a name such as H100 or H200): "
        "`trlvr train --dry-run` checks the engine's memory plan against it; on a GPU the device's own "
        "memory is used",
        None,
    )
    backend: Annotated[str, _one_of(BACKENDS, "must be " + " or ".join(BACKENDS))] = _help(
        "rollout engine: hf (trlvr's engine on the HF models) or vllm (one vLLM engine holding both models, "
        "the senior's weights synced after every optimizer step; pip install 'trlvr[vllm]')",
        "hf",
    )
    holdout: Annotated[int, K.NONNEG] = _help(
        "hold out this many training problems for `trlvr select --val split:N` (never trained on)", 0
    )
    # seeds a content hash (trlvr.data.splits): any integer is one
    holdout_seed: Annotated[int, K.ANY_INT] = _help(
        "which problems are held out (a seeded hash of their content)", 0
    )
    use_peft: Annotated[bool, K.SWITCH] = _help(
        "train a LoRA adapter on the senior instead of all its weights", False
    )
    lora_r: Annotated[int, K.COUNT] = _help("LoRA rank (use_peft)", 16)
    lora_alpha: Annotated[int | None, K.COUNT] = _help("LoRA alpha (default: 2 x lora_r)", None)
    lora_dropout: Annotated[float, K.DROPOUT] = _help("LoRA dropout", 0.0)
    lora_target_modules: Annotated[str, K.TEXT] = _help(
        "LoRA target modules: all-linear, or comma-separated module names", "all-linear"
    )

    def __post_init__(self):
        def bad(name: str, msg: str):
            raise UserError(f"{name}: {msg} (got {getattr(self, name)!r})")

        words = {
            "true": True,
            "yes": True,
            "1": True,
            "false": False,
            "no": False,
            "0": False,
            "auto": "auto",
        }
        if isinstance(self.compile, str) and self.compile.lower() in words:
            self.compile = words[self.compile.lower()]  # YAML gives a bool, the command line a string
        # each field against its declared kind; an unset default (null, or "" for senior and dataset) is
        # left to what needs it (senior: check_model_paths; dataset: the train command)
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if not (value == f.default and value in (None, "")) and (rule := FIELD_KINDS[f.name].rule(value)):
                bad(f.name, rule)
        # what no single field can say
        if self.arm == "tandem" and self.p == 0.0 and "p" in schedule_fields(self.schedule):
            bad("p", "p = 0 lets the senior write nothing, so there is nothing to train")
        if self.grader != "trlvr" and self.reward != "math":
            bad(
                "grader",
                f"grades the math reward only; reward {self.reward!r} decides itself (leave grader: trlvr)",
            )
        if is_self(self.junior) and not self.use_peft:
            bad("junior", "'self' needs use_peft: true (the junior is the senior's base with adapters off)")
        if self.compile is True and self.decode == "eager":
            bad("compile", "true needs decode: static or auto (the eager cache changes shape every step)")
        # what the pairing asked for and the backend can run together (the rest waits for the tokenizers)
        check_capabilities(
            Plan(
                "train",
                SELF if is_self(self.junior) else None,
                self.backend,
                requested=self.pairing,
                junior_device=self.junior_device is not None,
            )
        )
        if self.kl_ref == "junior" and self.use_peft and not is_self(self.junior):
            # TRL's KL reference for a PEFT model is always the senior's base with adapters off
            bad(
                "kl_ref",
                "with use_peft, TRL's KL reference is the senior's base with adapters off: "
                "set junior: self, or kl_ref: initial",
            )

    def check_model_paths(self) -> None:
        """The model paths a run that loads its own models needs (the CLI, a config file, backend vllm).
        Not checked on construction: `TandemGRPOTrainer` takes model objects and needs no path."""
        if not self.senior:
            raise UserError(f"senior: a senior model path is required (got {self.senior!r})")
        if self.arm == "tandem" and not self.junior:
            raise UserError(f"junior: arm=tandem needs a junior model path (got {self.junior!r})")
        if self.kl_ref == "junior" and not self.junior:
            raise UserError(f"junior: kl_ref=junior needs a junior model path (got {self.junior!r})")

    @property
    def expects_junior_tokens(self) -> bool:
        """True when every training batch must hold junior tokens (a stochastic schedule with 0 < p < 1)."""
        return self.arm == "tandem" and "p" in schedule_fields(self.schedule) and 0.0 < self.p < 1.0

    def schedule_kwargs(self) -> tuple[str, dict]:
        """(name, settings) for `Schedule.from_config`: only the settings the chosen schedule takes,
        under the same names as here; the grpo arm is a solo senior."""
        if self.arm == "grpo":
            return "solo", {"author": "senior"}
        return self.schedule, settings_for(self.schedule, {k: getattr(self, k) for k in SCHEDULE_SETTINGS})


def _declared_kinds(cls) -> dict[str, K.Kind]:
    """{field: kind} from each field's `Annotated[type, kind]` (each field has one: tests/test_configs.py)."""
    hints = get_type_hints(cls, include_extras=True)
    return {
        f.name: kind
        for f in dataclasses.fields(cls)
        for kind in getattr(hints[f.name], "__metadata__", ())
        if isinstance(kind, K.Kind)
    }


# Every TandemConfig field's kind (trlvr.kinds: what a good value looks like), as declared with the field;
# tests/test_cli_battery.py feeds each kind the values users get wrong.
FIELD_KINDS = _declared_kinds(TandemConfig)

# The trl.GRPOConfig fields the README and the shipped configs set, with their kinds, checked by
# `parse_run_args` after TRL's own checks (TRL accepts, e.g., a NaN learning rate or temperature 0, which
# divides the logits by zero). null is accepted where TRL's default is null.
TRL_KINDS = {
    "learning_rate": K.POSITIVE_FLOAT,
    "max_steps": K.MAX_STEPS,
    "num_train_epochs": K.POSITIVE_FLOAT,
    "num_generations": K.COUNT,
    "per_device_train_batch_size": K.COUNT,
    "gradient_accumulation_steps": K.COUNT,
    "max_completion_length": K.COUNT,
    "temperature": K.POSITIVE_FLOAT,
    "top_p": K.UNIT,
    "top_k": K.NONNEG,
    "beta": K.NONNEG_FLOAT,
    "epsilon": K.POSITIVE_FLOAT,
    "num_iterations": K.COUNT,
    "seed": K.SEED,
    "save_steps": K.POSITIVE_FLOAT,
    "logging_steps": K.POSITIVE_FLOAT,
    "save_total_limit": K.COUNT,
    "weight_decay": K.NONNEG_FLOAT,
    "max_grad_norm": K.NONNEG_FLOAT,
    "warmup_steps": K.NONNEG_FLOAT,
    "vllm_gpu_memory_utilization": K.UNIT,
    "vllm_max_model_length": K.COUNT,
    "output_dir": K.OUT_DIR,
    "vllm_tensor_parallel_size": K.COUNT,
}


class _StrictLoader(yaml.SafeLoader):
    """PyYAML's safe loader, except that a mapping with one key written twice is an error (PyYAML keeps
    the last value silently)."""


class DuplicateKey(yaml.YAMLError):
    def __init__(self, key: object, first: int, again: int) -> None:
        super().__init__(f"key {key!r} is written twice (lines {first} and {again}); keep one")


def _strict_mapping(loader: yaml.SafeLoader, node: yaml.MappingNode) -> dict:
    seen: dict[object, int] = {}
    for key_node, _ in node.value:
        if (
            key_node.tag == "tag:yaml.org,2002:merge"
        ):  # `<<: *base` may be overridden key by key: not a duplicate
            continue
        key = loader.construct_object(key_node, deep=True)
        try:
            first = seen.get(key)
        except TypeError:  # an unhashable key: PyYAML refuses it below
            continue
        if first is not None:
            raise DuplicateKey(key, first, key_node.start_mark.line + 1)
        seen[key] = key_node.start_mark.line + 1
    return loader.construct_mapping(node, deep=True)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _strict_mapping)


def read_yaml(path: str | Path, what: str = "config") -> Any:
    """The YAML file at ``path``, parsed: the one loader of run configs, recipes and studies. A file that
    cannot be read or parsed, or a mapping with a key written twice, is one line naming ``what`` and the file.
    """
    try:
        return yaml.load(Path(path).read_bytes(), Loader=_StrictLoader)  # noqa: S506 (a SafeLoader)
    except DuplicateKey as e:
        raise UserError(f"{what} {path}: {e}") from e
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as e:
        raise UserError(f"{what} {path}: not a readable YAML file ({' '.join(str(e).split())})") from e


def _named_kind_error(argv: list[str], config: Path | None, where: str) -> str | None:
    """When TRL's own checks fail on a value (its message may not name it: "integer modulo by zero"),
    the first given TRL_KINDS key whose value its kind refuses, named; None if none is."""
    given: dict[str, object] = {}
    if config is not None:
        raw = read_yaml(config)
        given.update(raw if isinstance(raw, dict) else {})
    for i, a in enumerate(argv[:-1]):
        if a.startswith("--"):
            given[a[2:].split("=")[0]] = argv[i + 1]
    for a in argv:
        if a.startswith("--") and "=" in a:
            key, _, value = a[2:].partition("=")
            given[key] = value
    for name, kind in TRL_KINDS.items():
        if name in given and given[name] is not None:
            value = given[name]
            try:
                rule = kind.rule(kind(value) if isinstance(value, str) else value)
            except argparse.ArgumentTypeError:
                rule = kind.rule(None) or f"must be {kind.expected}"
            if rule:
                return f"{where}: {name}: {rule} (got {value!r})"
    return None


def check_trl_kinds(grpo, where: str) -> None:
    """TRL_KINDS on a parsed GRPOConfig: one line naming the key."""
    defaults = {f.name: f.default for f in dataclasses.fields(type(grpo))}
    for name, kind in TRL_KINDS.items():
        value = getattr(grpo, name, None)
        if value is None and defaults.get(name) is None:
            continue
        rule = kind.rule(value)
        if rule:
            raise UserError(f"{where}: {name}: {rule} (got {value!r})")


# report_to integrations whose pip package has another name (transformers' INTEGRATION_TO_CALLBACK names)
REPORT_TO_PACKAGES = {"azure_ml": "azureml-core", "comet_ml": "comet-ml", "flyte": "flytekit"}


def check_report_to(report_to, where: str) -> None:
    """Every logger in `report_to` (GRPOConfig's, a list after its __post_init__) is one transformers knows
    and finds installed: one line naming the package to install, before any model loads (transformers itself
    fails only when the trainer starts, after the weights have loaded)."""
    from transformers.integrations import integration_utils

    names = [report_to] if isinstance(report_to, str) else list(report_to or [])
    installed = set(integration_utils.get_available_reporting_integrations())
    for name in names:
        if name in ("none", "all"):
            continue
        if name not in integration_utils.INTEGRATION_TO_CALLBACK:
            known = sorted(integration_utils.INTEGRATION_TO_CALLBACK)
            close = difflib.get_close_matches(name, known, n=1)
            hint = f"did you mean {close[0]}? " if close else ""
            raise UserError(
                f"{where}: report_to {name}: not a logger transformers knows ({hint}one of: none, "
                f"{', '.join(known)})"
            )
        if name not in installed:
            package = REPORT_TO_PACKAGES.get(name, name)
            raise UserError(
                f"{where}: report_to {name}: its package is not installed (pip install {package}), "
                "or set --report_to none"
            )


# Every run-config field a schedule can take (schedule fields carry the same names; tested).
SCHEDULE_SETTINGS = ("p", "max_gap", "handoff", "chunk_size", "first_author", "max_rounds")


@dataclass
class RunOptions:
    """Switches of one `trlvr train` invocation (command line only: not part of the run's config)."""

    _argument_group_name = "switches of this command (not config keys)"

    resume: bool = _help("continue from the newest complete checkpoint in output_dir", False)
    force: bool = _help("train into output_dir even if it holds a different run", False)
    verbose: bool = _help("print every log dict and the libraries' warnings and progress bars", False)


TANDEM_FIELDS = {f.name for f in dataclasses.fields(TandemConfig)}
OPTION_FIELDS = {f.name for f in dataclasses.fields(RunOptions)}


def grpo_field_names() -> set[str]:
    """Field names of trl.GRPOConfig (imported lazily: TRL is heavy)."""
    from trl import GRPOConfig

    return {f.name for f in dataclasses.fields(GRPOConfig) if f.init}


def shipped_configs() -> dict[str, Path]:
    """Every run config shipped in the package, by name: trlvr/configs/*.yaml and the recipes."""
    found = {p.stem: p for p in sorted(RECIPES_DIR.glob("*.yaml")) if not p.stem.startswith("accelerate-")}
    found.update({p.stem: p for p in sorted(CONFIGS_DIR.glob("*.yaml"))})
    return found


def resolve_config_path(name: str) -> Path:
    """A config file path, or the name of a config shipped in the package (`toy` -> trlvr/configs/toy.yaml,
    `qwen3-4b-deepscaler` -> the recipe). `recipes/NAME.yaml`, a clone's path, names the shipped recipe
    where no such file exists here (a pip install has no recipes/ folder)."""
    path = Path(name)
    if path.is_file():
        return path
    shipped = shipped_configs()
    if "/" not in name and name in shipped:
        return shipped[name]
    if len(path.parts) == 2 and path.parts[0] == "recipes" and (RECIPES_DIR / path.name).is_file():
        return RECIPES_DIR / path.name
    raise UserError(f"--config {name}: no such file (shipped configs: {', '.join(sorted(shipped))})")


def _make_parser():
    from trl import GRPOConfig, TrlParser

    class RunParser(TrlParser):
        """TRL's parser with argparse errors as `UserError` and `{arm}` filled into output_dir."""

        def error(self, message):  # argparse: "argument --p: invalid float value: 'high'"
            raise UserError(message)

        def parse_known_args(self, args=None, namespace=None):
            ns, rest = super().parse_known_args(args, namespace)
            if isinstance(getattr(ns, "output_dir", None), str) and isinstance(getattr(ns, "arm", None), str):
                ns.output_dir = ns.output_dir.replace("{arm}", ns.arm)
            return ns, rest

    parser = RunParser((TandemConfig, GRPOConfig, RunOptions), prog="trlvr train", allow_abbrev=False)
    parser.set_defaults_with_config(output_dir=DEFAULT_OUTPUT_DIR, vllm_importance_sampling_mode=IS_MODE)
    return parser


# TRL's script arguments (trl.ScriptArguments, trl.ModelConfig) whose trlvr field has another name
TRL_SCRIPT_NAMES = {
    "model_name_or_path": "senior",
    "dataset_name": "dataset",
    "dataset_train_split": "dataset_split",
}


def _unknown(strings: list[str], where: str) -> UserError:
    """One line naming every unknown key, each with TRL's name mapped to trlvr's or the closest field."""
    keys = [s[2:].split("=")[0] for s in strings if s.startswith("--")] or strings
    hint = (
        " (configs are flat now: drop the tandem:/grpo: sections)" if {"tandem", "grpo"} & set(keys) else ""
    )
    fields = sorted(TANDEM_FIELDS | grpo_field_names())

    def named(key: str) -> str:
        if key in TRL_SCRIPT_NAMES:
            return f"{key} (TRL's script name; trlvr's field is {TRL_SCRIPT_NAMES[key]})"
        close = difflib.get_close_matches(key, fields, n=1)
        return f"{key} (did you mean {close[0]}?)" if close else key

    return UserError(
        f"{where}: unknown key(s) {', '.join(map(named, keys))}: not TandemConfig or trl.GRPOConfig "
        f"fields{hint}"
    )


# transformers renamed TrainingArguments fields between the releases trlvr runs on (vllm 0.32 pins
# transformers < 5.20): a config written with either name runs on both
RENAMED = {
    "activation_checkpointing": "gradient_checkpointing",
    "gradient_checkpointing": "activation_checkpointing",
}


def _renamed(strings: list[str], grpo, given: list[str] = ()) -> list[str]:
    """Apply `--old value` pairs the installed GRPOConfig knows under the other name (unless `given`, the
    command line, sets that name itself); return the rest."""
    rest, i = [], 0
    while i < len(strings):
        key = strings[i][2:] if strings[i].startswith("--") else None
        other = RENAMED.get(key)
        if other and hasattr(grpo, other) and i + 1 < len(strings):
            if f"--{other}" not in given:
                setattr(grpo, other, str(strings[i + 1]).lower() in ("true", "1", "yes"))
            i += 2
            continue
        rest.append(strings[i])
        i += 1
    return rest


def _check_keys(path: Path) -> set[str]:
    """Unknown YAML keys fail first, before any field's own validation runs."""
    raw = read_yaml(path)
    if not isinstance(raw, dict):
        raise UserError(f"config {path}: expected a mapping of keys to values, got {type(raw).__name__}")
    unknown = [k for k in raw if k not in TANDEM_FIELDS | grpo_field_names() | {"env"} | set(RENAMED)]
    if unknown:
        raise _unknown([f"--{k}" for k in unknown], f"config {path}")
    if set(raw) & OPTION_FIELDS:
        raise UserError(
            f"config {path}: {sorted(set(raw) & OPTION_FIELDS)} are command-line switches, not config keys"
        )
    return set(raw)


def check_json_arguments(argv: list[str], config: Path | None) -> None:
    """Every JSON object given as text for a dict field (`model_init_kwargs`, `generation_kwargs`,
    `lr_scheduler_kwargs`, ...: trl.GRPOConfig's `_VALID_DICT_FIELDS`, which transformers reads with a plain
    `json.loads`, the last of a key written twice winning), on the command line or as a string in the config,
    read first by the one strict loader (`trlvr.data.jsonl.loads_strict`): a key written twice, or text that
    is not JSON, is one line naming the field and the key, as `read_yaml` names a YAML key written twice."""
    from trl import GRPOConfig

    fields = set(getattr(GRPOConfig, "_VALID_DICT_FIELDS", ()))
    given: list[tuple[str, str, object]] = []
    if config is not None:
        raw = read_yaml(config)
        given += (
            [(f"config {config}", k, v) for k, v in raw.items() if k in fields]
            if isinstance(raw, dict)
            else []
        )
    for i, arg in enumerate(argv):
        key, eq, value = arg[2:].partition("=") if arg.startswith("--") else ("", "", "")
        if key in fields:
            given.append(("command line", key, value if eq else argv[i + 1] if i + 1 < len(argv) else None))
    for where, key, value in given:
        if isinstance(value, str) and value.startswith(
            "{"
        ):  # as transformers tells a JSON object from a file path
            try:
                loads_strict(value)
            except DuplicateJsonKey as e:
                raise UserError(f"{where}: {key}: {e}") from None
            except json.JSONDecodeError as e:
                raise UserError(f"{where}: {key}: {not_json(e)}") from None


def parse_run_args(argv: list[str]):
    """`["--config", FILE, "--key", "value", ...]` -> (TandemConfig, trl.GRPOConfig, RunOptions).

    Command-line values win over the YAML's, the YAML's over the dataclass defaults.
    """
    argv = list(argv)
    config = None
    if "--config" in argv:
        i = argv.index("--config")
        if i + 1 >= len(argv):
            raise UserError("--config needs a file path or a shipped config name")
        config = resolve_config_path(argv[i + 1])
        argv[i + 1] = str(config)
        given = _check_keys(config)
    else:
        given = set()
    check_json_arguments(argv, config)
    parser = _make_parser()
    try:
        *configs, from_file, from_args = parser.parse_args_and_config(
            argv, return_remaining_strings=True, separate_remaining_strings=True
        )
    except UserError:
        raise
    except (
        ValueError,
        TypeError,
        ArithmeticError,
    ) as e:  # a dataclass' own validation (GRPOConfig.__post_init__:
        # num_generations 0 divides by zero, save_steps inf overflows), or the YAML's shape
        where = str(config or "command line")
        raise UserError(
            _named_kind_error(argv, config, where) or f"{where}: {' '.join(str(e).split())}"
        ) from e
    tandem, grpo, options = configs
    from_file = _renamed(from_file, grpo, given=argv)  # the command line wins over the file
    from_args = _renamed(from_args, grpo)
    if from_file or from_args:  # before the missing ones: a misspelt --senior is named as such
        raise _unknown(from_file + from_args, "command line")
    tandem.check_model_paths()
    if tandem.junior_device is not None:
        check_device(tandem.junior_device, "junior_device")
    given |= {a[2:].split("=")[0] for a in argv if a.startswith("--")}
    check_backend_settings(tandem, grpo, given, str(config or "command line"))
    try:  # the rollout settings are the engine's: refuse what cannot sample before any model loads
        check_decoding(grpo.temperature, grpo.top_p, grpo.top_k or 0)
    except ValueError as e:
        raise UserError(f"{config or 'command line'}: {e}") from None
    check_trl_kinds(grpo, str(config or "command line"))
    check_report_to(grpo.report_to, str(config or "command line"))
    return tandem, grpo, options


def check_backend_settings(tandem: TandemConfig, grpo, given: set[str], where: str) -> None:
    """TRL's vLLM settings against the run's backend, in one line each. `given`: the keys the config
    file or the command line set (TRL's default for the IS correction is on, and means nothing on hf)."""
    engine = backend(tandem.backend)
    if (
        not engine.sampler_logprobs
        and grpo.vllm_importance_sampling_correction
        and "vllm_importance_sampling_correction" in given
    ):
        raise UserError(
            f"{where}: vllm_importance_sampling_correction needs the sampler's log-probs: backend "
            f"{tandem.backend}'s engine returns the senior's at temperature 1 (use backend: vllm, or set "
            "it false)"
        )
    if grpo.vllm_enable_sleep_mode and not engine.engine_options:  # the vllm_* settings are its engine's
        raise UserError(
            f"{where}: vllm_enable_sleep_mode is backend vllm's (this run's backend is {tandem.backend})"
        )
    if grpo.vllm_enable_sleep_mode and (grpo.use_cpu or not _cuda()):
        raise UserError(f"{where}: vllm_enable_sleep_mode needs a GPU: vLLM's CPU build has no sleep mode")
    if grpo.vllm_tensor_parallel_size != 1 and not engine.engine_options:
        raise UserError(
            f"{where}: vllm_tensor_parallel_size is backend vllm's (this run's backend is {tandem.backend})"
        )


def _cuda() -> bool:
    import torch

    return torch.cuda.is_available()


def override_flags(overrides: dict[str, Any]) -> list[str]:
    """{"max_steps": 3, "use_cpu": True} -> ["--max_steps", "3", "--use_cpu", "true"] (scalars only)."""
    flags = []
    for key, value in overrides.items():
        if isinstance(value, bool):
            text = "true" if value else "false"
        elif isinstance(value, int | float | str | Path):
            text = str(value)
        else:
            raise TypeError(f"override {key}={value!r}: only scalar values (use the YAML for the rest)")
        flags += [f"--{key}", text]
    return flags


def load_run_config(path: str | Path, overrides: dict[str, Any] | None = None):
    """Read a run YAML with `{key: value}` overrides; return (TandemConfig, trl.GRPOConfig)."""
    tandem, grpo, _ = parse_run_args(["--config", str(path), *override_flags(overrides or {})])
    return tandem, grpo

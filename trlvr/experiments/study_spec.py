"""A study file: a grid of training runs (variants x seeds) with one selection and one evaluation rule.

    name: toy-granularity
    base: toy                         # a shipped config name or a config path (relative: to the study file)
    worlds: {spaced: {jargon: spaced}, compact: {jargon: compact}}   # optional: toy worlds in DIR/worlds/
    train: {max_steps: 100, save_steps: 50, holdout: 200}            # overrides for every variant
    seeds: [0, 1, 2]
    selection: {val: split:200, metric: handoff/pass@1, n: 2, max_new_tokens: 160}
    evaluation: {data: test, suite: [solo, handoff], n: 4, k: [1, 2, 4], limit: 200}
    baseline: grpo                    # the variant every other one is paired against
    variants:
      grpo: {arm: grpo}
      tandem: {arm: tandem, schedule: word, max_gap: 32, baseline: grpo}

A variant is any TandemConfig / trl.GRPOConfig field (arm, schedule, p, max_gap, dataset, max_steps,
...) plus six study keys: `config` (its own base config file), `world` (a toy world of `worlds:`;
it sets senior, junior, dataset and the evaluation data), `baseline` (its own baseline variant, e.g.
one per dialect), `label`, `evaluation` (keys of `evaluation:` that differ for this variant, e.g. a
longer suite) and `train: false` (no training: the base senior, the world's or the config's
`senior`, is evaluated as it is, once, under the first seed; only `senior` and `junior` may be set
beside it, and its own `junior` comes before `evaluation.junior`: `self`, a LoRA senior's base, has no
meaning for a plain model). With `worlds:`, `evaluation.data: test` means the world's test split.

    initial: {world: toy, train: false, evaluation: {suite: [solo, handoff, junior]}}   # the starting point

`prepare:` (optional) is the one command that makes the local models and data the study names (e.g.
`make real-models`): `trlvr study plan/run` name it, in one line, when one of them is missing.
`evaluation.jargon_regex` (optional) is the pattern of the real-text jargon rate
(`trlvr.eval.regex_jargon`): a report setting, not a `trlvr eval` flag (it changes no sample).

A study file is a path, or the name of one shipped in the package (trlvr/studies/<name>.yaml,
`resolve_study`): `trlvr study run demo --out runs/demo` is what `trlvr demo` runs.

Validation is strict and happens before anything runs: an unknown key, a missing section, a variant that
names an unknown world or baseline is one line naming the file and the key. The values are then checked
by the commands the stages run (`trlvr study plan/run` read each stage's command line by its command's
parser and check it: trlvr.cli.study_cmd.validate, trlvr.experiments.study_check). The evaluation keys
that are EvalSpec settings are declared on their fields (`trlvr.eval.spec.SETTINGS`). A study is
identified by its parsed content (`Study.sha256`): a comment or the order of keys does not change it.
What this file does not know: how a run is trained, selected or evaluated.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from trlvr.config import (
    CONFIGS_DIR,
    OPTION_FIELDS,
    TANDEM_FIELDS,
    grpo_field_names,
    read_yaml,
    shipped_configs,
)
from trlvr.errors import UserError
from trlvr.eval import defaults as D
from trlvr.eval.regex_jargon import compile_pattern
from trlvr.eval.spec import SETTINGS, graders_problem
from trlvr.rewards import GRADERS

TOP_KEYS = {
    "name",
    "description",
    "base",
    "worlds",
    "train",
    "seeds",
    "selection",
    "evaluation",
    "baseline",
    "variants",
    "launch",
    "prepare",
}
REQUIRED = ("base", "seeds", "selection", "evaluation", "variants")
VARIANT_KEYS = {"config", "world", "baseline", "label", "evaluation", "train"}
UNTRAINED_FIELDS = {"senior", "junior"}  # what a `train: false` variant may set (it only evaluates)
STUDIES_DIR = Path(__file__).resolve().parents[1] / "studies"  # the study files shipped in the package
SELECTION_KEYS = {
    "backend": str,
    "val": str,
    "metric": str,
    "direction": str,
    "n": int,
    "limit": int,
    "max_new_tokens": int,
    "batch_size": int,
    "seed": int,
    "dtype": str,
    "prompt_template": str,
    "grader": str,
}
# the evaluation keys that are not EvalSpec settings: how and on what `trlvr eval` runs
EVALUATION_RUN_KEYS = {
    "backend": str,
    "data": str,
    "split": str,
    "junior": str,
    "limit": int,
    "dtype": str,
    "jargon_regex": str,  # a report setting (the real-text jargon rate), not a `trlvr eval` flag
    "skip_bad_rows": bool,
}
# and the EvalSpec settings a study may set, each declared once on its field (trlvr.eval.spec.SETTINGS)
EVALUATION_KEYS = EVALUATION_RUN_KEYS | {s.study: s.study_type for s in SETTINGS.values() if s.study}
LAUNCH_KEYS = {"train": str, "select": str, "eval": str}
WORLD_KEYS = {"jargon", "seed"}
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]*$")  # variant and world names become folder names


@dataclass(frozen=True)
class Variant:
    name: str
    config: str  # the base config (a shipped name or a path)
    overrides: dict[str, Any]  # TandemConfig / GRPOConfig fields
    world: str | None
    baseline: str | None  # None for a baseline itself
    label: str
    evaluation: dict[str, Any] = field(default_factory=dict)  # the study's evaluation keys that differ for it
    trained: bool = True  # False: the base senior evaluated as it is (no train or select stage)


@dataclass(frozen=True)
class Study:
    path: Path
    sha256: (
        str  # of the parsed content (`meaning_hash`): a study is identified by what it says, not its bytes
    )
    name: str
    seeds: list[int]
    variants: dict[str, Variant]
    selection: dict[str, Any]
    evaluation: dict[str, Any]
    worlds: dict[str, dict[str, Any]] = field(default_factory=dict)
    launch: dict[str, str] = field(default_factory=dict)
    description: str = ""
    prepare: str = ""  # the command that makes the local models and data it names ("": none given)

    def baselines(self) -> list[str]:
        """Every variant some other variant is paired against, in file order."""
        named = {v.baseline for v in self.variants.values() if v.baseline}
        return [n for n in self.variants if n in named]

    def evaluation_of(self, variant: str) -> dict[str, Any]:
        """The evaluation settings of one variant: the study's, with the variant's own keys over them."""
        return {**self.evaluation, **self.variants[variant].evaluation}

    def seeds_of(self, variant: str) -> list[int]:
        """The seeds a variant runs: every seed, or the first alone for a `train: false` variant."""
        return list(self.seeds) if self.variants[variant].trained else self.seeds[:1]


def meaning_hash(raw: dict) -> str:
    """sha256 of a study's parsed content: comments, layout, quoting and key order do not change it."""
    return hashlib.sha256(
        json.dumps(raw, sort_keys=True, separators=(",", ":"), default=str).encode()
    ).hexdigest()


def _fail(path: Path, where: str, msg: str) -> UserError:
    return UserError(f"study {path}: {where}: {msg}")


def _mapping(path: Path, where: str, value) -> dict:
    if not isinstance(value, dict):
        raise _fail(path, where, f"expected a mapping, got {type(value).__name__}")
    return value


def _typed(path: Path, section: str, raw, schema: dict[str, type]) -> dict:
    raw = _mapping(path, section, raw)
    for key, value in raw.items():
        if key not in schema:
            raise _fail(
                path, f"{section}.{key}", f"unknown key (expected one of {', '.join(sorted(schema))})"
            )
        want = schema[key]
        ok = isinstance(value, want) and not (want is int and isinstance(value, bool))
        if not ok:
            raise _fail(path, f"{section}.{key}", f"expected {want.__name__}, got {value!r}")
    return dict(raw)


def resolve_base(path: Path, base: str) -> str:
    """A config named in a study: a shipped name (`toy`), else a path relative to the study file or the cwd.
    A path to a config shipped in the package (a shipped study's `../recipes/NAME.yaml`) becomes its name, so
    the stages' command lines work from any folder and on any machine with trlvr installed."""
    if "/" not in base and not base.endswith((".yaml", ".yml")) and (CONFIGS_DIR / f"{base}.yaml").is_file():
        return base
    for cand in (path.parent / base, Path(base)):
        if cand.is_file():
            return next(
                (name for name, shipped in shipped_configs().items() if shipped.samefile(cand)),
                os.path.normpath(cand),
            )
    raise _fail(
        path,
        "base/config",
        f"{base!r} is neither a shipped config nor a file (relative to the study file or the cwd)",
    )


PACKAGE_DIR = Path(__file__).resolve().parents[1]  # the installed trlvr package


def shipped_model(value):
    """A clone's path to a model shipped in the package (`trlvr/toy/assets/junior-cross`) names the installed
    copy where no such folder is here (outside a clone), so a shipped study plans from any folder."""
    if isinstance(value, str) and value.startswith("trlvr/") and not Path(value).exists():
        packaged = PACKAGE_DIR.parent / value
        if packaged.exists():
            return str(packaged)
    return value


def _models_shipped(mapping: dict) -> dict:
    return {k: shipped_model(v) if k in ("senior", "junior") else v for k, v in mapping.items()}


def _check_fields(path: Path, where: str, overrides: dict) -> None:
    known = TANDEM_FIELDS | grpo_field_names()
    for key, value in overrides.items():
        if key in OPTION_FIELDS or key == "output_dir":
            raise _fail(path, f"{where}.{key}", "set by the study runner, not a study key")
        if key not in known:
            raise _fail(
                path, f"{where}.{key}", "unknown key: not a study key, TandemConfig or trl.GRPOConfig field"
            )
        if not isinstance(value, bool | int | float | str):
            raise _fail(path, f"{where}.{key}", f"expected a scalar value, got {value!r}")


def _trained(path: Path, where: str, value, fields: dict) -> bool:
    """A variant's `train` key: true (the default) or false, and then no field but senior or junior."""
    if not isinstance(value, bool):
        raise _fail(path, f"{where}.train", f"expected true or false, got {value!r}")
    extra = sorted(set(fields) - UNTRAINED_FIELDS)
    if not value and extra:
        raise _fail(
            path,
            f"{where}.{extra[0]}",
            "not used by a variant with train: false (it is evaluated as it is); set only senior or junior",
        )
    return value


def _check_evaluation(path: Path, where: str, evaluation: dict, worlds: dict) -> None:
    """The evaluation settings' own checks (suite names, k <= n, data: test needs worlds)."""
    if evaluation["data"] == "test" and not worlds:
        raise _fail(
            path, f"{where}.data", "'test' means a toy world's test split, and this study defines no worlds"
        )
    bad = sorted(set(evaluation.get("suite", [])) - set(D.SUITE_NAMES))
    if bad:
        raise _fail(path, f"{where}.suite", f"unknown entries {bad}; choose from {', '.join(D.SUITE_NAMES)}")
    shares = evaluation.get("dose_shares", [0.5])
    if not shares or any(
        isinstance(x, bool) or not isinstance(x, int | float) or not 0 <= x <= 1 for x in shares
    ):
        raise _fail(
            path, f"{where}.dose_shares", f"expected a list of junior shares in [0, 1], got {shares!r}"
        )
    if "jargon_regex" in evaluation:
        try:
            compile_pattern(evaluation["jargon_regex"])
        except UserError as e:
            raise _fail(path, f"{where}.jargon_regex", str(e).removeprefix("jargon_regex: ")) from None
    _check_graders(path, f"{where}.grader", evaluation.get("grader", "trlvr"), several=True)
    n = evaluation.get("n", D.N)
    if any(not isinstance(k, int) or not 1 <= k <= n for k in evaluation.get("k", [1])):
        raise _fail(
            path, f"{where}.k", f"every k must be an integer in [1, n = {n}], got {evaluation.get('k')}"
        )


def _check_graders(path: Path, where: str, value: str, *, several: bool) -> None:
    """A grader setting (`trlvr.rewards.GRADERS`): one name, or (`several`: evaluation) a comma-separated list
    whose first grader gives the reported metrics, as `trlvr eval --grader` takes it."""
    if graders_problem(value) is not None or ("," in value and not several):
        what = "one grader, or several comma-separated" if several else "one grader"
        raise _fail(path, where, f"expected {what} of {', '.join(GRADERS)}, got {value!r}")


def resolve_study(name: str | Path) -> Path:
    """A study file: the path given, else the study of that name shipped in the package (`demo` ->
    trlvr/studies/demo.yaml; in a clone the other shipped studies are links to studies/); `studies/NAME.yaml`
    where no such file exists here (a pip install) is the shipped copy; a UserError naming both when
    neither exists."""
    path = Path(name)
    if (
        not path.is_file()
        and len(path.parts) == 2
        and path.parts[0] == "studies"
        and (STUDIES_DIR / path.name).is_file()
    ):  # a clone's path, where there is no clone: the shipped copy
        return STUDIES_DIR / path.name
    if path.is_file() or "/" in str(name) or path.suffix in (".yaml", ".yml"):
        return path
    shipped = STUDIES_DIR / f"{name}.yaml"
    if shipped.is_file():
        return shipped
    known = ", ".join(sorted(p.stem for p in STUDIES_DIR.glob("*.yaml"))) or "none"
    raise UserError(f"study {name}: no such file, and no shipped study of that name (shipped: {known})")


def load_study(path: str | Path) -> Study:
    """The study file at `path` (or the shipped study named so: `resolve_study`), checked."""
    path = resolve_study(path)
    raw = read_yaml(path, "study")
    raw = _mapping(path, "top level", raw)
    for key in raw:
        if key not in TOP_KEYS:
            raise _fail(path, key, f"unknown key (expected one of {', '.join(sorted(TOP_KEYS))})")
    for key in REQUIRED:
        if key not in raw:
            raise _fail(path, key, "missing")
    name = str(raw.get("name") or path.stem)
    seeds = raw["seeds"]
    if (
        not isinstance(seeds, list)
        or not seeds
        or any(not isinstance(s, int) or isinstance(s, bool) for s in seeds)
        or len(set(seeds)) != len(seeds)
    ):
        raise _fail(path, "seeds", f"expected a list of distinct integers, got {seeds!r}")
    worlds = {}
    for w, spec in _mapping(path, "worlds", raw.get("worlds") or {}).items():
        if not _NAME.match(str(w)):
            raise _fail(path, f"worlds.{w}", "a world name is a folder name: letters, digits, _ . -")
        spec = _mapping(path, f"worlds.{w}", spec or {})
        for key in spec:
            if key not in WORLD_KEYS:
                raise _fail(
                    path,
                    f"worlds.{w}.{key}",
                    f"unknown key (expected one of {', '.join(sorted(WORLD_KEYS))})",
                )
        if spec.get("jargon", "spaced") not in ("spaced", "compact"):
            raise _fail(path, f"worlds.{w}.jargon", f"expected spaced or compact, got {spec['jargon']!r}")
        worlds[str(w)] = dict(spec)
    train = _mapping(path, "train", raw.get("train") or {})
    _check_fields(path, "train", train)
    base = resolve_base(path, str(raw["base"]))
    variants: dict[str, Variant] = {}
    for vname, spec in _mapping(path, "variants", raw["variants"]).items():
        vname = str(vname)
        where = f"variants.{vname}"
        if not _NAME.match(vname):
            raise _fail(path, where, "a variant name is a folder name: letters, digits, _ . -")
        spec = dict(_mapping(path, where, spec or {}))
        study_keys = {k: spec.pop(k) for k in list(spec) if k in VARIANT_KEYS}
        _check_fields(path, where, spec)
        spec = _models_shipped(spec)
        trained = _trained(path, where, study_keys.get("train", True), spec)
        world = study_keys.get("world")
        if world is not None and world not in worlds:
            raise _fail(
                path, f"{where}.world", f"{world!r} is not one of worlds: {sorted(worlds) or 'none defined'}"
            )
        if worlds and world is None:
            raise _fail(path, f"{where}.world", f"missing: this study defines worlds {sorted(worlds)}")
        config = resolve_base(path, str(study_keys["config"])) if "config" in study_keys else base
        evaluation = _models_shipped(
            _typed(path, f"{where}.evaluation", study_keys.get("evaluation") or {}, EVALUATION_KEYS)
        )
        variants[vname] = Variant(
            vname,
            config,
            {**train, **spec} if trained else spec,
            world,
            study_keys.get("baseline"),
            str(study_keys.get("label", vname)),
            evaluation,
            trained,
        )
    if not variants:
        raise _fail(path, "variants", "empty")
    default_baseline = raw.get("baseline")
    if default_baseline is not None and default_baseline not in variants:
        raise _fail(path, "baseline", f"{default_baseline!r} is not a variant ({', '.join(variants)})")
    for v in list(variants.values()):
        b = v.baseline
        if b is not None and b not in variants:
            raise _fail(
                path, f"variants.{v.name}.baseline", f"{b!r} is not a variant ({', '.join(variants)})"
            )
        if b is None and default_baseline is not None and v.name != default_baseline and v.trained:
            b = default_baseline  # (an untrained variant is paired only with a baseline it names)
        if b == v.name:
            b = None
        variants[v.name] = replace(v, baseline=b)
    for v in variants.values():
        if v.baseline and variants[v.baseline].baseline:
            raise _fail(
                path, f"variants.{v.name}.baseline", f"{v.baseline!r} is paired against a baseline itself"
            )
    selection = _typed(path, "selection", raw["selection"], SELECTION_KEYS)
    for key in ("val", "metric"):
        if key not in selection:
            raise _fail(path, f"selection.{key}", "missing")
    _check_graders(path, "selection.grader", selection.get("grader", "trlvr"), several=False)
    evaluation = _models_shipped(_typed(path, "evaluation", raw["evaluation"], EVALUATION_KEYS))
    if "data" not in evaluation:
        raise _fail(path, "evaluation.data", "missing")
    _check_evaluation(path, "evaluation", evaluation, worlds)
    for v in variants.values():
        if v.evaluation:
            _check_evaluation(path, f"variants.{v.name}.evaluation", {**evaluation, **v.evaluation}, worlds)
    launch = _typed(path, "launch", raw.get("launch") or {}, LAUNCH_KEYS)
    prepare = raw.get("prepare") or ""
    if not isinstance(prepare, str):
        raise _fail(
            path,
            "prepare",
            f"expected the command (a string) that prepares the study's models and data, got {prepare!r}",
        )
    return Study(
        path=path,
        sha256=meaning_hash(raw),
        name=name,
        seeds=list(seeds),
        variants=variants,
        selection=selection,
        evaluation=evaluation,
        worlds=worlds,
        launch=launch,
        description=str(raw.get("description") or ""),
        prepare=prepare.strip(),
    )

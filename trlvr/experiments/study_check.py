"""A study's stages checked before any of them runs, by the library's own checks, on the typed commands
`trlvr.experiments.study` builds; an error restated as the study file's (file, key, stage).

    check_train_data(tandem, out, checked)           # the train stage's local dataset, golds included
    check_select(args, tandem, out, checked)         # metric, n, decoding, split:N, a validation file
    check_eval(stage.command, spec, sources, out, checked)   # junior, self, data files and golds, --out
    restate(study, stage, error)   # "study FILE: evaluation.n: ... (the eval stage of V seed S)"
    missing_inputs(study, out, data_sources)         # local models and data no stage makes, not there
    check_prepared(study, out, data_sources)         # one of them missing: one line naming `prepare:`

`checked` is a set shared by one validation: a file read once is not read again. A path inside the study
folder is made by an earlier stage, so it is not there to check yet; a hub name is looked up when the stage
runs (a study plans offline).
What this file does not know: a command's command line. `trlvr study plan/run` (trlvr.cli.study_cmd.validate)
reads each stage's recorded line by that command's own parser (kinds, choices, defaults) and hands the
values here.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from trlvr.config import parse_run_args
from trlvr.data.sources import is_local
from trlvr.errors import UserError
from trlvr.eval.spec import EvalSpec
from trlvr.experiments.study import STUDY_SETTINGS, EvalCommand, Stage, units
from trlvr.experiments.study_spec import EVALUATION_KEYS, SELECTION_KEYS, Study
from trlvr.models import locate, looks_like_hub_id
from trlvr.rundir import check_dir_path
from trlvr.team import is_self

CPU_CHECK = ["--use_cpu", "true", "--bf16", "false", "--fp16", "false"]  # a config read on any machine


def inside(path: str, out: Path) -> bool:
    """Whether `path` lies in the study directory (made by an earlier stage: not there to check yet)."""
    return Path(path).resolve().is_relative_to(Path(out).resolve())


def is_local_input(path: str) -> bool:
    """Whether a model or data path the study names is local (not a hub id, `self` or a generated source)."""
    return not is_self(path) and (is_local(path) or not looks_like_hub_id(path))


def _naming(flag: str, fn, *args, **kw):
    """`fn(...)`, a UserError from it prefixed with the flag whose value it was about."""
    try:
        return fn(*args, **kw)
    except UserError as e:
        raise UserError(f"{flag}: {e}") from None


def check_train_data(tandem, out: Path, checked: set) -> None:
    """The train stage's local dataset as training loads it (golds too), once per (file, split, limit)."""
    key = ("train", tandem.dataset, tandem.dataset_split, tandem.dataset_limit)
    if tandem.dataset and is_local(tandem.dataset) and not inside(tandem.dataset, out) and key not in checked:
        from trlvr.training.build import load_training_problems  # (torch)

        load_training_problems(tandem)
        checked.add(key)


def check_select(args, tandem, out: Path, checked: set) -> None:
    """The select stage as `trlvr select` checks it before the first checkpoint (`args`: its parsed flags):
    metric name, n, decoding, split:N against the run's holdout, a validation file and its golds."""
    from trlvr.experiments.select_run import check_split, load_validation, selection_spec  # (torch)

    selection_spec(
        args.metric,
        n=args.n,
        max_new_tokens=args.max_new_tokens,
        seed=args.seed,
        batch_size=args.batch_size,
        prompt_template=args.prompt_template,
        decoding={"temperature": args.temperature, "top_p": args.top_p, "top_k": args.top_k},
    )
    check_split(args.val, tandem.holdout, args.run)
    if not args.val.startswith("split:") and is_local(args.val) and not inside(args.val, out):
        if ("val", args.val, args.limit) not in checked:
            _naming("--val", load_validation, args.val, args.limit)
            checked.add(("val", args.val, args.limit))


def check_eval(command: EvalCommand, spec: EvalSpec, sources: dict, out: Path, checked: set) -> None:
    """The eval stage as `trlvr eval` checks it before loading a model (`spec`: its settings, checked): a
    local junior folder, `self` on a senior that has a base, each local data file with its golds, --out."""
    from trlvr.eval.api import check_self_junior, load_benchmarks  # (torch)

    junior, senior = command.junior, command.senior
    if spec.needs_junior and not is_self(junior) and is_local(junior) and not inside(junior, out):
        locate(junior, "--junior", "model")
    if spec.needs_junior and is_self(junior) and Path(senior).is_dir() and not inside(senior, out):
        check_self_junior(senior)  # an untrained variant's senior is a plain model: `self` has no base to be
    split, limit = command.evaluation.get("split"), command.evaluation.get("limit")
    skip_bad = bool(command.evaluation.get("skip_bad_rows"))  # the stage lists the rows it leaves out
    for name, src in sources.items():
        key = ("eval", src, split, limit, skip_bad)
        if is_local(src) and not inside(src, out) and key not in checked:
            _naming("--data", load_benchmarks, {name: src}, split=split, limit=limit, skip_bad=skip_bad)
            checked.add(key)
    check_dir_path(str(command.out), "--out")


def study_key(stage: Stage, message: str) -> str:
    """The study key a stage's error is about, where its flag names one (--dtype -> evaluation.dtype)."""
    section, keys = {"eval": ("evaluation", EVALUATION_KEYS), "select": ("selection", SELECTION_KEYS)}.get(
        stage.kind, (f"variants.{stage.variant}", {})
    )
    # (where in the message, -len(key), key): the flag named first is the one it is about (a later one is
    # advice: "... pass --skip-bad-rows to use the rest"), the longer key on a tie
    found = []
    for key in keys:
        setting = STUDY_SETTINGS.get(key) if stage.kind == "eval" else None
        flag = setting.flag if setting else "--" + key.replace("_", "-")
        if message.startswith((f"{key} ", f"{key}:")):
            found.append((0, -len(key), key))
        at = [
            i
            for i in (f"{message} ".find(f"{flag} "), message.find(f"{flag}:"), message.find(f"{flag}/"))
            if i >= 0
        ]
        if at:  # "argument --n/--samples: ..." names --n too
            found.append((min(at), -len(key), key))
    if found:
        return f"{section}.{min(found)[2]}"
    if stage.kind == "select" and "split:" in message:
        return "selection.val"
    return section if stage.kind != "train" else f"variants.{stage.variant} (with train:)"


def restate(study: Study, stage: Stage, error: UserError) -> UserError:
    """A stage's UserError as the study file's: file, key, message, stage."""
    msg = " ".join(str(error).split())
    return UserError(
        f"study {study.path}: {study_key(stage, msg)}: {msg} "
        f"(the {stage.kind} stage of {stage.variant} seed {stage.seed})"
    )


def missing_inputs(study: Study, out: Path, data_sources: Callable[[str], dict]) -> list[tuple[str, str]]:
    """(path, what names it) of every local model or data path the study's stages read that is not there
    (what the study's `prepare:` command makes); paths inside the study directory are made by its stages.
    `data_sources`: an eval stage's `--data` as {name: source}."""
    found: dict[str, str] = {}
    for unit in units(study, out):
        *trained, ev = unit
        names = []
        if trained:
            try:
                tandem = parse_run_args([*trained[0].argv[1:], *CPU_CHECK])[0]
            except (Exception, SystemExit):  # the train stage's own check names what is wrong with it
                tandem = None
            if tandem is not None:
                names += [
                    (getattr(tandem, f), f"variants.{ev.variant}.{f}, from its config")
                    for f in ("senior", "junior", "dataset")
                ]
        command = ev.command
        if not trained:
            names.append((command.senior, f"variants.{ev.variant}.senior"))
        names.append((command.junior, f"the evaluation junior of variants.{ev.variant}"))
        names += [(src, "evaluation.data") for src in data_sources(command.data).values()]
        for path, what in names:
            path = str(path) if path else ""
            if (
                path
                and is_local_input(path)
                and not inside(path, out)
                and not Path(path).expanduser().exists()
            ):
                found.setdefault(path, what)
    return list(found.items())


def check_prepared(study: Study, out: Path, data_sources: Callable[[str], dict]) -> None:
    """With a `prepare:` command, a missing local input is one line naming it and that command."""
    if not study.prepare:
        return
    missing = missing_inputs(study, Path(out), data_sources)
    if missing:
        (path, what), more = missing[0], len(missing) - 1
        others = f" (and {more} more input{'s' if more > 1 else ''})" if more else ""
        where = (
            ", from the root of a clone of the repository (a Makefile target)"
            if study.prepare.startswith("make ") and not Path("Makefile").is_file()
            else ""
        )
        raise UserError(
            f"study {study.path}: {path} ({what}) is missing{others}; prepare the study's models and "
            f"data with `{study.prepare}`{where} (its prepare: command; relative paths are read from "
            f"{Path.cwd()})"
        )

"""A study's runs as stages: each (variant, seed) is train -> select -> eval, each one `trlvr` command.

    DIR/study.json                       the study file's hash and name, the code commit of every `run`
    DIR/study.yaml                       a copy of the study file (what `report` reads by default)
    DIR/<path>.yaml                      copies of the config files it names under its folder (`keep_configs`)
    DIR/worlds/<world>/                  toy worlds (`trlvr toy prepare`), when the study has `worlds:`
    DIR/train/<variant>/seed-<s>/        `trlvr train` output_dir (checkpoints, metrics.jsonl, selected.json)
    DIR/eval/<variant>/seed-<s>/         `trlvr eval` of the selected checkpoint (a seed group per variant);
                                         a `train: false` variant: its base senior, under the first seed only
    DIR/logs/...                         each stage's full console output
    DIR/timings.jsonl                    one row per stage run: variant, seed, stage, seconds
    DIR/report/                          `trlvr study report DIR` (trlvr.experiments.study_report)

    DIR/stages/<variant>/seed-<s>-<stage>.json   the settings each stage ran with (its command line,
                                         with those of the stages it depends on); .failed: why it failed

`plan` prints the same commands that `run` executes, so a user can launch each run on their own cluster.
A stage is skipped when its output is complete (`trlvr.artifacts`: train: a complete final/; select:
selected.json naming a complete checkpoint; eval: a finished evaluation, every file whole) and its
recorded settings are the study's (`stage_state`), and resumed when interrupted (train from its newest
checkpoint, select and eval from the samples they wrote). A stage whose settings changed (the study file
was edited) is redone: select and eval start over (`--fresh`); a world or train stage is never thrown
away: `run` refuses, naming it, before anything runs. Stages that depend on a changed stage count as
changed too. A directory from before stage records is taken as it is (complete = done).

A stage that fails, with trlvr's one-line error or any other exception, ends its (variant, seed)
pipeline: the error, with its traceback, goes to the stage's log, and the other pipelines go on
(`run_stage` raises `StageFailed`; the caller collects them).

Each stage holds a typed command (`WorldCommand`, `TrainCommand`, `SelectCommand`, `EvalCommand`); its argv,
rendered from the command, is the study's record (stages/, `plan`), and checks read the command
(trlvr.experiments.study_check). The eval flags come from EvalSpec's settings (`trlvr.eval.spec.SETTINGS`).

What this file does not know: how a stage works. `run_unit` takes an `execute(argv, log)` callable
(the CLI's: trlvr.cli.study_cmd) that runs one command line.
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import shutil
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import trlvr
from trlvr import artifacts, rundir
from trlvr.config import override_flags, read_yaml, resolve_config_path
from trlvr.errors import UserError
from trlvr.eval.spec import SETTINGS, EvalSpec, from_texts
from trlvr.experiments.study_spec import Study, Variant
from trlvr.provenance import git_commit
from trlvr.rundir import FINAL

STUDY_FILE = rundir.STUDY_FILE
STUDY_COPY = "study.yaml"  # the study file itself, kept beside its record (the original may move)
TIMINGS_FILE = "timings.jsonl"
DONE = rundir.STUDY_DONE  # written into an eval folder once its `trlvr eval` returned 0
STAGES_DIR = "stages"
_NOT_SETTINGS = ("--no-progress", "--resume", "--fresh")  # how a stage runs, not what it computes


class StageFailed(UserError):
    """A stage's command failed (its log holds the details); ends that (variant, seed) pipeline."""


@dataclass(frozen=True)
class Stage:
    kind: str  # "world", "train", "select" or "eval"
    variant: str  # the variant (for a world: the world's name)
    seed: int | None
    argv: list[str]  # a `trlvr` command line without the program name
    out: Path  # what the stage writes
    settings: str = ""  # hash of its command line (study dir as $STUDY) and of the stages it depends on
    command: WorldCommand | TrainCommand | SelectCommand | EvalCommand | None = None  # what argv records

    @property
    def name(self) -> str:
        return f"{self.variant}" + (f" seed {self.seed}" if self.seed is not None else "") + f" {self.kind}"


def world_dir(out: Path, world: str) -> Path:
    return Path(out) / "worlds" / world


def train_dir(out: Path, variant: str, seed: int) -> Path:
    return Path(out) / "train" / variant / f"seed-{seed}"


def eval_group(out: Path, variant: str) -> Path:
    return Path(out) / "eval" / variant


def eval_dir(out: Path, variant: str, seed: int) -> Path:
    return eval_group(out, variant) / f"seed-{seed}"


def settings_hash(argv: list[str], out: Path, upstream: str = "") -> str:
    """What a stage computes: its command line without run-only switches, the study directory written
    as $STUDY (a moved study is the same study), and the settings of the stage it builds on."""
    return hashlib.sha256(json.dumps([stage_argv(argv, out), upstream]).encode()).hexdigest()[:16]


def stage_argv(argv: list[str], out: Path) -> list[str]:
    return [a.replace(str(Path(out)), "$STUDY") for a in argv if a not in _NOT_SETTINGS]


def record_path(out: Path, stage: Stage, suffix: str = ".json") -> Path:
    if stage.seed is None:
        return Path(out) / STAGES_DIR / f"{stage.kind}-{stage.variant}{suffix}"
    return Path(out) / STAGES_DIR / stage.variant / f"seed-{stage.seed}-{stage.kind}{suffix}"


def log_path(out: Path, stage: Stage) -> Path:
    if stage.seed is None:
        return Path(out) / "logs" / f"{stage.kind}-{stage.variant}.log"
    return Path(out) / "logs" / stage.variant / f"seed-{stage.seed}-{stage.kind}.log"


# ---- the commands ---------------------------------------------------------------------------------
# Each stage is a typed command the study builds; its argv (the study's record, and what `run` executes)
# is rendered from it, so a check reads the command's fields, never its command line.


@dataclass(frozen=True)
class WorldCommand:
    """`trlvr toy prepare` of one toy world into `out`."""

    out: Path
    jargon: str = "spaced"
    seed: int = 0

    def argv(self) -> list[str]:
        argv = ["toy", "prepare", "--out", str(self.out), "--jargon", self.jargon, "--seed", str(self.seed)]
        argv.append("--no-progress")
        return argv + (["--from-scratch"] if (self.jargon, self.seed) != ("spaced", 0) else [])


@dataclass(frozen=True)
class TrainCommand:
    """`trlvr train --config CONFIG` with the study's TandemConfig / GRPOConfig field overrides."""

    config: str
    overrides: dict

    def argv(self) -> list[str]:
        return ["train", "--config", self.config, *override_flags(self.overrides)]


_SELECT_ORDER = (  # the order of the recorded `trlvr select` flags (their settings hashes keep it)
    "direction",
    "n",
    "limit",
    "max_new_tokens",
    "batch_size",
    "seed",
    "dtype",
    "backend",
    "prompt_template",
    "grader",
)


@dataclass(frozen=True)
class SelectCommand:
    """`trlvr select RUN` with the study's `selection:` keys (val and metric among them)."""

    run: Path
    selection: dict

    def argv(self) -> list[str]:
        s = self.selection
        argv = ["select", str(self.run), "--val", s["val"], "--metric", s["metric"]]
        for key in _SELECT_ORDER:
            if key in s:
                argv += [f"--{key.replace('_', '-')}", str(s[key])]
        return [*argv, "--no-progress"]


@dataclass(frozen=True)
class EvalCommand:
    """`trlvr eval` of `senior` with `junior` on `data` into `out`, with the study's evaluation keys."""

    senior: str
    junior: str
    data: str  # [name=]source,... as `trlvr eval --data` takes it
    out: Path
    evaluation: dict  # the variant's evaluation keys (data, junior and jargon_regex are not flags)

    def argv(self) -> list[str]:
        head = ["eval", "--senior", self.senior, "--junior", self.junior, "--data", self.data]
        return [*head, *eval_flags(self.evaluation), "--out", str(self.out), "--no-progress"]

    def spec(self) -> EvalSpec:
        """Its settings as `trlvr eval` reads its recorded flags (the others: EvalSpec's defaults)."""
        keys = [k for k in STUDY_FIELDS if k in self.evaluation]
        return from_texts({STUDY_FIELDS[k]: STUDY_SETTINGS[k].render(self.evaluation[k]) for k in keys})


def _stage(kind: str, name: str, seed: int | None, command, out: Path, root: Path, after: str = "") -> Stage:
    argv = command.argv()
    return Stage(kind, name, seed, argv, out, settings_hash(argv, root, after), command)


def world_stage(study: Study, out: Path, world: str) -> Stage:
    spec = study.worlds[world]
    command = WorldCommand(world_dir(out, world), spec.get("jargon", "spaced"), int(spec.get("seed", 0)))
    return _stage("world", world, None, command, world_dir(out, world), out)


def train_overrides(study: Study, v: Variant, out: Path, seed: int) -> dict:
    over = {}
    if v.world is not None:
        w = world_dir(out, v.world)
        over |= {
            "senior": str(w / "senior"),
            "junior": str(w / "junior"),
            "dataset": str(w / "data" / "train.jsonl"),
        }
    return over | v.overrides | {"output_dir": str(train_dir(out, v.name, seed)), "seed": seed}


def train_stage(study: Study, v: Variant, out: Path, seed: int) -> Stage:
    command = TrainCommand(v.config, train_overrides(study, v, out, seed))
    world = world_stage(study, out, v.world).settings if v.world is not None else ""
    return _stage("train", v.name, seed, command, train_dir(out, v.name, seed), out, world)


def select_stage(study: Study, v: Variant, out: Path, seed: int, after: str = "") -> Stage:
    run = train_dir(out, v.name, seed)
    return _stage("select", v.name, seed, SelectCommand(run, dict(study.selection)), run, out, after)


def _model_of(study: Study, v: Variant, out: Path, role: str) -> str:
    """The variant's senior or junior folder: evaluation.junior (junior only), the variant's own field,
    its world's model, else the base config's field. A `train: false` variant's own field comes first:
    it sets only what it is evaluated with."""
    own = role in v.overrides and not v.trained
    if role == "junior" and "junior" in study.evaluation_of(v.name) and not own:
        return study.evaluation_of(v.name)["junior"]
    if role in v.overrides:
        return str(v.overrides[role])
    if v.world is not None:
        return str(world_dir(out, v.world) / role)
    model = (read_yaml(resolve_config_path(v.config)) or {}).get(role)
    if not model:
        fix = "set evaluation.junior" if role == "junior" else "set its senior"
        raise UserError(f"study {study.path}: variants.{v.name}: no {role} to evaluate with; {fix}")
    return str(model)


# The order a study has always written `trlvr eval` flags in: its recorded command lines (and so every
# finished stage's settings hash) keep it. A setting added to EvalSpec later follows them.
_EVAL_ORDER = (
    "split",
    "n",
    "limit",
    "max_new_tokens",
    "batch_size",
    "dtype",
    "seed",
    "grading",
    "grader",
    "context_length",
    "backend",
    "prompt_template",
    "skip_bad_rows",
    "dose_shares",
    "k",
    "suite",
)
STUDY_FIELDS = {s.study: name for name, s in SETTINGS.items() if s.study}  # study key -> EvalSpec field
STUDY_SETTINGS = {key: SETTINGS[name] for key, name in STUDY_FIELDS.items()}


def eval_flags(evaluation: dict) -> list[str]:
    """The `trlvr eval` flags of a study's evaluation keys (not data, junior and jargon_regex)."""
    argv = []
    for key in (*_EVAL_ORDER, *(k for k in STUDY_SETTINGS if k not in _EVAL_ORDER)):
        value = evaluation.get(key)
        if key not in evaluation or value is False:  # a switch left off
            continue
        if key in STUDY_SETTINGS:
            argv += [STUDY_SETTINGS[key].flag, STUDY_SETTINGS[key].render(value)]
        else:
            flag = "--" + key.replace("_", "-")
            argv += [flag] if value is True else [flag, str(value)]
    return argv


def eval_stage(study: Study, v: Variant, out: Path, seed: int, after: str = "") -> Stage:
    """`trlvr eval` of the variant's selected checkpoint (a `train: false` variant: of its base senior)."""
    e = study.evaluation_of(v.name)
    data = e["data"]
    if data == "test" and v.world is not None:
        data = f"toy={world_dir(out, v.world) / 'data' / 'test.jsonl'}"
    target = eval_dir(out, v.name, seed)
    senior = f"{train_dir(out, v.name, seed)}@selected" if v.trained else _model_of(study, v, out, "senior")
    command = EvalCommand(senior, _model_of(study, v, out, "junior"), data, target, e)
    return _stage("eval", v.name, seed, command, target, out, after)


def units(study: Study, out: Path, only: list[tuple[str, int | None]] | None = None) -> list[list[Stage]]:
    """[train, select, eval] per (variant, seed), seed-major: every variant of the first seed comes first,
    so a study cut short still has whole seeds. A `train: false` variant is [eval], under the first seed
    only (`Study.seeds_of`). `only`: (variant, seed or None) filters."""
    out = Path(out)
    res = []
    for seed in study.seeds:
        for v in study.variants.values():
            if seed not in study.seeds_of(v.name):
                continue
            if only is not None and not any(v.name == ov and (os is None or os == seed) for ov, os in only):
                continue
            if not v.trained:
                world = world_stage(study, out, v.world).settings if v.world is not None else ""
                res.append([eval_stage(study, v, out, seed, after=world)])
                continue
            train = train_stage(study, v, out, seed)
            select = select_stage(study, v, out, seed, after=train.settings)
            res.append([train, select, eval_stage(study, v, out, seed, after=select.settings)])
    return res


def world_stages(study: Study, out: Path, needed: set[str] | None = None) -> list[Stage]:
    return [world_stage(study, out, w) for w in study.worlds if needed is None or w in needed]


def parse_only(study: Study, specs: list[str]) -> list[tuple[str, int | None]]:
    """["word4-compact:1", "grpo-spaced"] -> [("word4-compact", 1), ("grpo-spaced", None)], checked."""
    out = []
    for spec in specs:
        name, _, seed = spec.partition(":")
        if name not in study.variants:
            raise UserError(
                f"--only {spec}: {name!r} is not a variant of {study.path} ({', '.join(study.variants)})"
            )
        allowed = study.seeds_of(name)
        if seed and (not seed.isdigit() or int(seed) not in allowed):
            whose = (
                "the study's seeds"
                if allowed == study.seeds
                else f"the seeds {name} runs (train: false: the first)"
            )
            raise UserError(f"--only {spec}: seed {seed!r} is not one of {whose} {allowed}")
        out.append((name, int(seed) if seed else None))
    return out


THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")  # what torch's CPU kernels read at start-up


def worker_env(jobs: int, environ: dict[str, str] | None = None, cpus: int | None = None) -> dict[str, str]:
    """The environment of one of `jobs` pipelines run side by side: the machine's cores shared out
    (OMP_NUM_THREADS = cores // jobs, at least 1), unless the caller already chose a thread count."""
    env = dict(os.environ if environ is None else environ)
    threads = str(max(1, (cpus or os.cpu_count() or 1) // max(jobs, 1)))
    for var in THREAD_VARIABLES:
        env.setdefault(var, env.get("OMP_NUM_THREADS", threads))
    return env


def command_line(stage: Stage, launch: dict[str, str]) -> str:
    prefix = launch.get(stage.kind, "trlvr")
    return f"{prefix} {shlex.join(stage.argv)}"


def plan_lines(study: Study, out: Path) -> list[str]:
    """One shell command per stage, worlds first, then (variant, seed) by seed."""
    lines = [
        f"# study {study.name} ({study.path}, sha256 {study.sha256[:12]}): "
        f"{len(study.variants)} variants x {len(study.seeds)} seeds, into {out}"
    ]
    for st in world_stages(study, out):
        lines.append(command_line(st, study.launch))
    for unit in units(study, out):
        lines.append(f"# {unit[0].variant} seed {unit[0].seed}")
        lines += [command_line(st, study.launch) for st in unit]
    lines.append(f"trlvr study report {out}")
    return lines


# ---- state: what is done ----------------------------------------------------------------------------


def stage_done(stage: Stage) -> bool:
    """Whether the stage's output is complete (whatever settings made it: see `stage_state`)."""
    if stage.kind == "world":
        from trlvr.toy.world import is_complete

        return is_complete(stage.out)
    if stage.kind == "train":  # a torn final/ (a kill while it was written) is not done: the stage resumes
        return artifacts.is_complete(stage.out / FINAL, artifacts.FINAL)
    if (
        stage.kind == "select"
    ):  # a complete selection naming a complete checkpoint, as `eval RUN@selected` reads it
        from trlvr.eval.api import resolve_senior

        try:
            resolve_senior(f"{stage.out}@selected")
        except UserError:
            return False
        return True
    return (stage.out / DONE).is_file() and artifacts.is_complete(stage.out, rundir.EVALUATION_ARTIFACT)


def read_stage_record(out: Path, stage: Stage) -> dict | None:
    """What the stage last ran with (None: never recorded); an unreadable record is one line naming it."""
    return rundir.read_record(
        record_path(out, stage), hint="; remove it to have the stage's output taken as it is"
    )


def stage_state(out: Path, stage: Stage) -> str:
    """ "done" (complete, under these settings, or complete with nothing recorded: a directory from
    before stage records), "stale" (run, or started, under other settings) or "todo"."""
    rec = read_stage_record(out, stage)
    if rec is not None and rec.get("settings") != stage.settings:
        return "stale" if stage.out.is_dir() and any(stage.out.iterdir()) else "todo"  # nothing made: start
    return "done" if stage_done(stage) and (rec is None or rec.get("complete", True)) else "todo"


def stale_stages(out: Path, stages: list[Stage]) -> list[str]:
    """One line per world or train stage whose output was made under other settings (never redone
    by `run`: a trained model is not thrown away), naming what changed and what to remove."""
    lines = []
    for st in stages:
        if st.kind in ("world", "train") and stage_state(out, st) == "stale":
            rec = read_stage_record(out, st) or {}
            old, new = _flags(rec.get("argv") or []), _flags(stage_argv(st.argv, out))
            changed = rundir.differences(old, new, show=str) or ["a stage it builds on changed"]
            lines.append(f"{st.name} ({'; '.join(changed)}): remove {st.out} to redo it")
    return lines


def _flags(argv: list[str]) -> dict[str, object]:
    """{"--max_steps": "4", "--no-progress": True, ...} of a `--flag value` command line (what
    `stale_stages` compares: "--max_steps: 4 -> 8")."""
    out, key = {}, None
    for a in argv:
        if a.startswith("--"):
            key = a
            out[key] = True
        elif key is not None:
            out[key] = a if out[key] is True else f"{out[key]} {a}"
    return out


def write_stage_record(out: Path, stage: Stage, complete: bool) -> None:
    record = {"settings": stage.settings, "argv": stage_argv(stage.argv, out), "complete": complete}
    rundir.write_record(record_path(out, stage), record)


def with_resume(stage: Stage) -> Stage:
    """The train stage with --resume when the run has a checkpoint to continue from."""
    if stage.kind != "train":
        return stage
    if rundir.checkpoints(stage.out):
        return replace(stage, argv=[*stage.argv, "--resume"])
    return stage


def code_version() -> dict:
    """The git commit (and whether the checkout is dirty) of the trlvr code that is running, and where it
    is (`trlvr.provenance.git_commit`; commit and dirty None outside a git checkout)."""
    where = Path(trlvr.__file__).resolve().parent
    return {**(git_commit() or {"commit": None, "dirty": None}), "path": str(where)}


def claim_dir(study: Study, out: Path, code: dict | None = None) -> dict:
    """Record the study in OUT/study.json (and its file as OUT/study.yaml); refuse a directory made for
    another study (another name). The same study edited (another meaning: `Study.sha256`) is taken:
    each stage then compares its own settings (`stage_state`), and the edit is kept in `versions`."""
    out = Path(out)
    path = out / STUDY_FILE
    code = code or code_version()
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    if path.is_file():
        rec = check_claim(study, out)
        if rec.get("sha256") != study.sha256:
            rec.setdefault("versions", []).append(
                {"sha256": rec.get("sha256"), "file": rec.get("file"), "replaced": now}
            )
            rec.update(sha256=study.sha256, file=str(study.path))
            shutil.copyfile(study.path, out / STUDY_COPY)
        if not rec["runs"] or rec["runs"][-1].get("commit") != code.get("commit"):
            rec["runs"].append({**code, "started": now})
    else:
        out.mkdir(parents=True, exist_ok=True)
        rec = {
            "name": study.name,
            "file": str(study.path),
            "sha256": study.sha256,
            "created": now,
            "runs": [{**code, "started": now}],
        }
    rundir.write_record(path, rec)
    if not (out / STUDY_COPY).is_file():
        shutil.copyfile(study.path, out / STUDY_COPY)
    keep_configs(study, out)
    return rec


def keep_configs(study: Study, out: Path) -> list[Path]:
    """Copy the config files the study names by a path under its own folder into OUT at the same
    relative path, so that the kept OUT/study.yaml resolves them as the original does (`report` reads
    that copy from any working directory). Shipped names need no copy; a config outside the study's
    folder is left where it is (the copy then finds it relative to the cwd, or `--study` is needed).
    The copies are refreshed on every run: they are the configs that run read."""
    home = Path(study.path).resolve().parent
    kept = []
    for config in sorted({v.config for v in study.variants.values()}):
        src = Path(config).resolve()
        if not src.is_file() or not src.is_relative_to(home):
            continue
        dest = Path(out) / src.relative_to(home)
        if dest.resolve() != src:
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src, dest)
            kept.append(dest)
    return kept


def check_claim(study: Study, out: Path) -> dict:
    """OUT/study.json ({} for a new directory); UserError when OUT was made for a study of another name."""
    rec = rundir.read_record(Path(out) / STUDY_FILE)
    if rec is None:
        return {}
    if rec.get("name") != study.name:
        raise UserError(
            f"{out}: made for another study ({rec.get('name')!r}, from {rec.get('file')}); "
            f"{study.path} is study {study.name!r}: use another --out"
        )
    return rec


def refuse_another_study(study: Study, out: Path, rec: dict, hint: str = "") -> None:
    """UserError unless `study` means what directory `out` last ran (`rec`: its study.json); the hash is
    of the parsed content, so a comment or the order of keys does not matter."""
    if rec.get("sha256") != study.sha256:
        raise UserError(
            f"{out}: made from another study file ({rec.get('file')}, content sha256 "
            f"{str(rec.get('sha256'))[:12]}); {study.path} has {study.sha256[:12]}{hint}"
        )


def study_file(out: Path, given: str | None = None) -> Path:
    """The study file of directory `out`: `given`, else the copy kept in it, else the recorded path."""
    if given:
        return Path(given)
    out = Path(out)
    if (out / STUDY_COPY).is_file():
        return out / STUDY_COPY
    recorded = Path(read_claim(out)["file"])
    if not recorded.is_file():
        raise UserError(
            f"{out}: the study file recorded in {STUDY_FILE} ({recorded}) is gone and the directory "
            f"holds no {STUDY_COPY}; pass the study YAML with --study"
        )
    return recorded


def read_claim(out: Path) -> dict:
    rec = rundir.read_record(Path(out) / STUDY_FILE)
    if rec is None:
        raise UserError(f"{out}: no {STUDY_FILE}; is this a `trlvr study run` directory?")
    return rec


def _say(msg: str) -> None:
    print(f"[study {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def run_stage(out: Path, stage: Stage, execute: Callable[[list[str], Path], None]) -> str:
    """Run one stage unless it is done; 'skipped' or 'ran'. Records its settings (stages/) and time
    (timings.jsonl). A select or eval stage made under other settings starts over (--fresh); a world
    or train one is refused (`stale_stages`). Any failure raises StageFailed, its traceback in the log."""
    state = stage_state(out, stage)
    if state == "done":
        _say(f"{stage.name}: done, skipped")
        return "skipped"
    if state == "stale" and stage.kind in ("world", "train"):
        raise StageFailed(
            f"{stage.name}: made under other settings; " + "; ".join(stale_stages(out, [stage]))
        )
    if state == "stale":
        stage = replace(stage, argv=[*stage.argv, "--fresh"])
    stage = with_resume(stage)
    log = log_path(out, stage)
    log.parent.mkdir(parents=True, exist_ok=True)
    record_path(out, stage, ".failed").unlink(missing_ok=True)
    how = {"stale": " (settings changed: starting over)"}.get(
        state, " (resuming)" if "--resume" in stage.argv else ""
    )
    _say(f"{stage.name}: started{how} (log {log})")
    write_stage_record(out, stage, complete=False)
    t0 = time.perf_counter()
    try:
        execute(stage.argv, log)
    except Exception as e:  # any failure ends this pipeline, never the study
        raise _failed(out, stage, log, e) from e
    seconds = time.perf_counter() - t0
    if stage.kind == "eval":
        (stage.out / DONE).touch()
    write_stage_record(out, stage, complete=True)
    with open(Path(out) / TIMINGS_FILE, "a") as f:
        f.write(
            json.dumps(
                {
                    "variant": stage.variant,
                    "seed": stage.seed,
                    "stage": stage.kind,
                    "seconds": round(seconds, 1),
                    "resumed": "--resume" in stage.argv,
                    "finished": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                }
            )
            + "\n"
        )
    _say(f"{stage.name}: done in {seconds:.0f} s")
    return "ran"


def _failed(out: Path, stage: Stage, log: Path, e: Exception) -> StageFailed:
    """The failure written where a reader looks: the traceback into the stage's log, one line into
    stages/...failed (what `failed_stages` lists), and a StageFailed naming both."""
    what = str(e) if isinstance(e, UserError) else f"{type(e).__name__}: {e}"
    with open(log, "a") as f:
        f.write(f"\n[study] {stage.name} failed: {what}\n")
        if not isinstance(e, UserError):  # trlvr's own errors are one line by design
            f.write("".join(traceback.format_exception(e)))
    line = f"{stage.name}: {what.splitlines()[0] if what else type(e).__name__} (log {log})"
    marker = record_path(out, stage, ".failed")
    marker.parent.mkdir(parents=True, exist_ok=True)
    marker.write_text(line + "\n")
    return StageFailed(line)


def failed_stages(out: Path, stages: list[Stage]) -> list[str]:
    """The one-line failure of each of `stages` that failed on its last attempt (stages/...failed)."""
    lines = []
    for st in stages:
        marker = record_path(out, st, ".failed")
        if marker.is_file():
            lines.append(marker.read_text().strip())
    return lines


def run_unit(out: Path, unit: list[Stage], execute: Callable[[list[str], Path], None]) -> None:
    """The (variant, seed) pipeline in order; the first failure (StageFailed) ends it (the stages after
    it did not run this time: an older failure of theirs is no longer news)."""
    for i, stage in enumerate(unit):
        try:
            run_stage(out, stage, execute)
        except StageFailed:
            for later in unit[i + 1 :]:
                record_path(out, later, ".failed").unlink(missing_ok=True)
            raise

"""A study's runs as stages: each (variant, seed) is train -> select -> eval, each one `trlvr` command.

    DIR/study.json                       the study file's hash and name, the code commit of every `run`
    DIR/study.yaml                       a copy of the study file (what `report` reads by default)
    DIR/worlds/<world>/                  toy worlds (`trlvr toy prepare`), when the study has `worlds:`
    DIR/train/<variant>/seed-<s>/        `trlvr train` output_dir (checkpoints, metrics.jsonl, selected.json)
    DIR/eval/<variant>/seed-<s>/         `trlvr eval` of the selected checkpoint (a seed group per variant)
    DIR/logs/...                         each stage's full console output
    DIR/timings.jsonl                    one row per stage run: variant, seed, stage, seconds
    DIR/report/                          `trlvr study report DIR` (trlvr.experiments.study_report)

`plan` prints the same commands that `run` executes, so a user can launch each run on their own
cluster. A stage is skipped when its output is complete (train: final/; select: selected.json; eval:
results.json written by a finished run) and resumed when interrupted (train from its newest
checkpoint, select and eval from the samples they wrote).

What this file does not know: how a stage works. `run_unit` takes an `execute(argv, log)` callable
(the CLI's: trlvr.cli.study_cmd) that runs one command line.
"""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from trlvr.errors import UserError
from trlvr.experiments.study_spec import Study, Variant

STUDY_FILE = "study.json"
STUDY_COPY = "study.yaml"  # the study file itself, kept beside its record (the original may move)
TIMINGS_FILE = "timings.jsonl"
DONE = ".study-done"  # written into an eval folder once its `trlvr eval` returned 0
STAGES = ("train", "select", "eval")


@dataclass(frozen=True)
class Stage:
    kind: str  # "world", "train", "select" or "eval"
    variant: str  # the variant (for a world: the world's name)
    seed: int | None
    argv: list[str]  # a `trlvr` command line without the program name
    out: Path  # what the stage writes

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


def log_path(out: Path, stage: Stage) -> Path:
    if stage.seed is None:
        return Path(out) / "logs" / f"{stage.kind}-{stage.variant}.log"
    return Path(out) / "logs" / stage.variant / f"seed-{stage.seed}-{stage.kind}.log"


# ---- the commands ---------------------------------------------------------------------------------


def world_stage(study: Study, out: Path, world: str) -> Stage:
    spec = study.worlds[world]
    jargon, seed = spec.get("jargon", "spaced"), int(spec.get("seed", 0))
    argv = ["toy", "prepare", "--out", str(world_dir(out, world)), "--jargon", jargon, "--seed", str(seed),
            "--no-progress"]  # fmt: skip
    if jargon != "spaced" or seed != 0:
        argv.append("--from-scratch")
    return Stage("world", world, None, argv, world_dir(out, world))


def train_overrides(study: Study, v: Variant, out: Path, seed: int) -> dict:
    over = {}
    if v.world is not None:
        w = world_dir(out, v.world)
        over |= {"senior": str(w / "senior"), "junior": str(w / "junior"), "dataset": str(w / "data" / "train.jsonl")}
    return over | v.overrides | {"output_dir": str(train_dir(out, v.name, seed)), "seed": seed}


def train_stage(study: Study, v: Variant, out: Path, seed: int) -> Stage:
    from trlvr.config import override_flags

    argv = ["train", "--config", v.config, *override_flags(train_overrides(study, v, out, seed))]
    return Stage("train", v.name, seed, argv, train_dir(out, v.name, seed))


def select_stage(study: Study, v: Variant, out: Path, seed: int) -> Stage:
    s = study.selection
    run = train_dir(out, v.name, seed)
    argv = ["select", str(run), "--val", s["val"], "--metric", s["metric"]]
    for key in ("direction", "n", "limit", "max_new_tokens", "batch_size", "seed"):
        if key in s:
            argv += [f"--{key.replace('_', '-')}", str(s[key])]
    return Stage("select", v.name, seed, [*argv, "--no-progress"], run)


def _junior_of(study: Study, v: Variant, out: Path) -> str:
    if "junior" in study.evaluation:
        return study.evaluation["junior"]
    if "junior" in v.overrides:
        return str(v.overrides["junior"])
    if v.world is not None:
        return str(world_dir(out, v.world) / "junior")
    import yaml

    from trlvr.config import resolve_config_path

    junior = (yaml.safe_load(resolve_config_path(v.config).read_text()) or {}).get("junior")
    if not junior:
        raise UserError(f"study {study.path}: variants.{v.name}: no junior to evaluate with; set evaluation.junior")
    return str(junior)


def eval_stage(study: Study, v: Variant, out: Path, seed: int) -> Stage:
    e = study.evaluation
    data = e["data"]
    if data == "test" and v.world is not None:
        data = f"toy={world_dir(out, v.world) / 'data' / 'test.jsonl'}"
    target = eval_dir(out, v.name, seed)
    argv = ["eval", "--senior", f"{train_dir(out, v.name, seed)}@selected", "--junior", _junior_of(study, v, out),
            "--data", data]  # fmt: skip
    for key in ("split", "n", "limit", "max_new_tokens", "batch_size", "dtype", "seed", "grading", "context_length"):
        if key in e:
            argv += [f"--{key.replace('_', '-')}", str(e[key])]
    if "k" in e:
        argv += ["--k", ",".join(str(k) for k in e["k"])]
    if "suite" in e:
        argv += ["--suite", ",".join(e["suite"])]
    return Stage("eval", v.name, seed, [*argv, "--out", str(target), "--no-progress"], target)


def units(study: Study, out: Path, only: list[tuple[str, int | None]] | None = None) -> list[list[Stage]]:
    """[train, select, eval] per (variant, seed), seed-major: every variant of the first seed comes first,
    so a study cut short still has whole seeds. `only`: (variant, seed or None) filters."""
    out = Path(out)
    res = []
    for seed in study.seeds:
        for v in study.variants.values():
            if only is not None and not any(v.name == ov and (os is None or os == seed) for ov, os in only):
                continue
            res.append([train_stage(study, v, out, seed), select_stage(study, v, out, seed),
                        eval_stage(study, v, out, seed)])  # fmt: skip
    return res


def world_stages(study: Study, out: Path, needed: set[str] | None = None) -> list[Stage]:
    return [world_stage(study, out, w) for w in study.worlds if needed is None or w in needed]


def parse_only(study: Study, specs: list[str]) -> list[tuple[str, int | None]]:
    """["word4-compact:1", "grpo-spaced"] -> [("word4-compact", 1), ("grpo-spaced", None)], checked."""
    out = []
    for spec in specs:
        name, _, seed = spec.partition(":")
        if name not in study.variants:
            raise UserError(f"--only {spec}: {name!r} is not a variant of {study.path} ({', '.join(study.variants)})")
        if seed and (not seed.isdigit() or int(seed) not in study.seeds):
            raise UserError(f"--only {spec}: seed {seed!r} is not one of the study's seeds {study.seeds}")
        out.append((name, int(seed) if seed else None))
    return out


def command_line(stage: Stage, launch: dict[str, str]) -> str:
    prefix = launch.get(stage.kind, "trlvr")
    return f"{prefix} {shlex.join(stage.argv)}"


def plan_lines(study: Study, out: Path) -> list[str]:
    """One shell command per stage, worlds first, then (variant, seed) by seed."""
    lines = [f"# study {study.name} ({study.path}, sha256 {study.sha256[:12]}): "
             f"{len(study.variants)} variants x {len(study.seeds)} seeds, into {out}"]  # fmt: skip
    for st in world_stages(study, out):
        lines.append(command_line(st, study.launch))
    for unit in units(study, out):
        lines.append(f"# {unit[0].variant} seed {unit[0].seed}")
        lines += [command_line(st, study.launch) for st in unit]
    lines.append(f"trlvr study report {out}")
    return lines


# ---- state: what is done ----------------------------------------------------------------------------


def stage_done(stage: Stage) -> bool:
    if stage.kind == "world":
        from trlvr.toy.world import is_complete

        return is_complete(stage.out)
    if stage.kind == "train":
        final = stage.out / "final"
        return (final / "config.json").is_file() or (final / "adapter_config.json").is_file()
    if stage.kind == "select":
        from trlvr.experiments.selection import SELECTED_FILE

        return (stage.out / SELECTED_FILE).is_file()
    return (stage.out / DONE).is_file() and (stage.out / "results.json").is_file()


def with_resume(stage: Stage) -> Stage:
    """The train stage with --resume when the run has a checkpoint to continue from."""
    if stage.kind != "train":
        return stage
    from trlvr.training.checkpoints import checkpoints

    if stage.out.is_dir() and checkpoints(stage.out):
        return Stage(stage.kind, stage.variant, stage.seed, [*stage.argv, "--resume"], stage.out)
    return stage


def code_version(module_file: str | None = None) -> dict:
    """The git commit (and whether the tree is dirty) of the trlvr code that is running."""
    import trlvr

    where = Path(module_file or trlvr.__file__).resolve().parent
    try:
        commit = subprocess.run(["git", "-C", str(where), "rev-parse", "HEAD"], capture_output=True, text=True,
                                timeout=10, check=True).stdout.strip()  # fmt: skip
        dirty = subprocess.run(["git", "-C", str(where), "status", "--porcelain", "--untracked-files=no", "--", "."],
                               capture_output=True, text=True, timeout=10, check=True).stdout.strip()  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return {"commit": None, "dirty": None, "path": str(where)}
    return {"commit": commit, "dirty": bool(dirty), "path": str(where)}


def claim_dir(study: Study, out: Path, code: dict | None = None) -> dict:
    """Record the study in OUT/study.json; refuse a directory made from another study file."""
    out = Path(out)
    path = out / STUDY_FILE
    code = code or code_version()
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    if path.is_file():
        rec = json.loads(path.read_text())
        refuse_another_study(study, out, rec, hint=": use another --out")
        if not rec["runs"] or rec["runs"][-1].get("commit") != code.get("commit"):
            rec["runs"].append({**code, "started": now})
    else:
        out.mkdir(parents=True, exist_ok=True)
        rec = {"name": study.name, "file": str(study.path), "sha256": study.sha256, "created": now,
               "runs": [{**code, "started": now}]}  # fmt: skip
    path.write_text(json.dumps(rec, indent=1) + "\n")
    if not (out / STUDY_COPY).is_file():
        shutil.copyfile(study.path, out / STUDY_COPY)
    return rec


def refuse_another_study(study: Study, out: Path, rec: dict, hint: str = "") -> None:
    """UserError unless `study` is the file directory `out` was made from (`rec`: its study.json)."""
    if rec.get("sha256") != study.sha256:
        raise UserError(f"{out}: made from another study file ({rec.get('file')}, sha256 {str(rec.get('sha256'))[:12]}); "
                        f"{study.path} has sha256 {study.sha256[:12]}{hint}")  # fmt: skip


def study_file(out: Path, given: str | None = None) -> Path:
    """The study file of directory `out`: `given`, else the copy kept in the directory, else the recorded path."""
    if given:
        return Path(given)
    out = Path(out)
    if (out / STUDY_COPY).is_file():
        return out / STUDY_COPY
    recorded = Path(read_claim(out)["file"])
    if not recorded.is_file():
        raise UserError(f"{out}: the study file recorded in {STUDY_FILE} ({recorded}) is gone and the directory "
                        f"holds no {STUDY_COPY}; pass the study YAML with --study")  # fmt: skip
    return recorded


def read_claim(out: Path) -> dict:
    path = Path(out) / STUDY_FILE
    if not path.is_file():
        raise UserError(f"{out}: no {STUDY_FILE}; is this a `trlvr study run` directory?")
    return json.loads(path.read_text())


def _say(msg: str) -> None:
    print(f"[study {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def run_stage(out: Path, stage: Stage, execute: Callable[[list[str], Path], None]) -> str:
    """Run one stage unless it is done; 'skipped' or 'ran'. Records its time in OUT/timings.jsonl."""
    if stage_done(stage):
        _say(f"{stage.name}: done, skipped")
        return "skipped"
    stage = with_resume(stage)
    log = log_path(out, stage)
    log.parent.mkdir(parents=True, exist_ok=True)
    how = " (resuming)" if "--resume" in stage.argv else ""
    _say(f"{stage.name}: started{how} (log {log})")
    t0 = time.perf_counter()
    execute(stage.argv, log)
    seconds = time.perf_counter() - t0
    if stage.kind == "eval":
        (stage.out / DONE).touch()
    with open(Path(out) / TIMINGS_FILE, "a") as f:
        f.write(json.dumps({"variant": stage.variant, "seed": stage.seed, "stage": stage.kind,
                            "seconds": round(seconds, 1), "resumed": bool(how),
                            "finished": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}) + "\n")  # fmt: skip
    _say(f"{stage.name}: done in {seconds:.0f} s")
    return "ran"


def run_unit(out: Path, unit: list[Stage], execute: Callable[[list[str], Path], None]) -> None:
    for stage in unit:
        run_stage(out, stage, execute)

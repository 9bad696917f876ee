"""`trlvr study run|plan|report`: a grid of runs (variants x seeds) described by one YAML file.

    trlvr study plan toy-granularity                         # one shell command per stage, to launch anywhere
    trlvr study run toy-granularity --out runs/toy-granularity --jobs 2
    trlvr study run toy-granularity --out runs/toy-granularity --only word4-compact:1   # one (variant, seed)
    trlvr study report runs/toy-granularity                  # after `run`: DIR/report/ (table, figure, html)

`plan` and `run` first check the whole study: the file (trlvr.experiments.study_spec), then every
stage's command line by the command's own checks (`validate`: the train config as `trlvr train
--dry-run` checks it, the selection metric, n and split:N against the run's holdout as `trlvr
select` checks them, the evaluation settings, junior and data files as `trlvr eval` checks them,
golds included); nothing runs until all of it passes.

`run` trains, selects and evaluates every (variant, seed), seed by seed; finished stages are
skipped and interrupted ones resumed, so rerunning the same command after a kill continues. DIR
records the study (by its parsed content: a comment does not change it) and refuses another
study; an edited study reuses every stage whose settings did not change (trlvr.experiments.study).
A stage that fails ends its (variant, seed) pipeline only: its log holds the error and traceback,
the others go on, and `run` ends with one line naming the failed stages (exit 1). `--jobs N` runs N
(variant, seed) pipelines side by side as child processes (their logs: DIR/logs/), each with the
cores shared out (OMP_NUM_THREADS = cores // N unless set). STUDY is a file or the name of a study
shipped in the package (`demo`). The study file format: trlvr/experiments/study_spec.py.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import yaml

from trlvr import rundir
from trlvr.cli import main as cli
from trlvr.cli.eval_cmd import parse_sources, settings_from_args
from trlvr.cli.recipes_cmd import shipped
from trlvr.cli.train_cmd import dry_run
from trlvr.config import parse_run_args
from trlvr.data.evalsets import panel_rows
from trlvr.data.sources import is_local, read_local
from trlvr.errors import UserError
from trlvr.eval.suite import parse_protocol, protocols_for
from trlvr.experiments import power as P
from trlvr.experiments import study_check as C
from trlvr.experiments.power import GPU_CHOICES
from trlvr.experiments.study import (
    StageFailed,
    _say,
    check_claim,
    claim_dir,
    failed_stages,
    parse_only,
    plan_lines,
    read_claim,
    refuse_another_study,
    run_stage,
    run_unit,
    stage_state,
    stale_stages,
    study_file,
    units,
    with_resume,
    worker_env,
    world_stages,
)
from trlvr.experiments.study_report import write_study_report
from trlvr.experiments.study_spec import load_study
from trlvr.kinds import COUNT, COUNTS, OUT_DIR, POSITIVE_FLOAT, TEXT, choice
from trlvr.memory import Stack, read_config
from trlvr.team import is_self


def make_parser(subparsers) -> argparse.ArgumentParser:

    p = subparsers.add_parser(
        "study",
        help="a grid of runs from one YAML file: run, plan or report",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = p.add_subparsers(dest="study_command", required=True)
    run = sub.add_parser("run", help="train, select and evaluate every (variant, seed); resumable")
    run.add_argument("study", type=TEXT, help="study YAML")
    run.add_argument("--out", required=True, type=OUT_DIR, help="study directory")
    run.add_argument(
        "--only",
        action="append",
        type=TEXT,
        default=None,
        metavar="VARIANT[:SEED]",
        help="run only this variant (or this variant's one seed); repeatable",
    )
    run.add_argument(
        "--jobs", type=COUNT, default=1, help="(variant, seed) pipelines at once, as child processes"
    )
    run.add_argument("--no-report", action="store_true", help="do not write DIR/report/ at the end")
    plan = sub.add_parser("plan", help="print one shell command per stage (train, select, eval)")
    plan.add_argument("study", type=TEXT, help="study YAML")
    plan.add_argument(
        "--out", type=OUT_DIR, default=None, help="study directory (default: runs/<study name>)"
    )
    plan.add_argument(
        "--power",
        action="store_true",
        help="also print the study's power (minimal detectable effect, seeds needed) and GPU-hours per arm",
    )
    plan.add_argument(
        "--effect",
        type=POSITIVE_FLOAT,
        default=None,
        help="--power: the target paired difference in points (default 2.3: the paper's handoff gain)",
    )
    plan.add_argument(
        "--metric",
        type=TEXT,
        default=None,
        metavar="pass@K",
        help="--power: the pass@k the effect is in (default pass@4: Table 2's metric)",
    )
    plan.add_argument(
        "--problems",
        type=COUNTS,
        default=None,
        help="--power: benchmark sizes, comma-separated (default: the study's own: the paper's panels "
        "have known sizes)",
    )
    plan.add_argument(
        "--components-from",
        type=TEXT,
        default=None,
        metavar="DIR",
        help="--power: estimate the variance components from a `trlvr study run` folder (>= 2 seeds) "
        "instead of the stated defaults",
    )
    plan.add_argument(
        "--gpu",
        type=choice(*GPU_CHOICES),
        default=None,
        help=f"--power: the GPU to cost: {', '.join(GPU_CHOICES)} (default: the config's gpu_memory)",
    )
    rep = sub.add_parser("report", help="DIR/report/: the table, the figure and report.html")
    rep.add_argument("dir", type=TEXT, help="a `trlvr study run` directory")
    rep.add_argument(
        "--study",
        type=TEXT,
        default=None,
        help="the study YAML (default: DIR/study.yaml, the copy kept by `run`)",
    )
    rep.add_argument(
        "--allow-mismatch",
        action="store_true",
        help="pair variants evaluated under differing settings, with a warning (default: refused)",
    )
    return p


def execute(argv: list[str], log: Path) -> None:
    """Run one `trlvr` command line in this process, its console output into `log`.

    The one place where a study stage meets the commands: swap this for a library call (e.g. a
    future trlvr.eval.api) and plan and run stay the same."""
    with open(log, "a") as f, contextlib.redirect_stdout(f), contextlib.redirect_stderr(f):
        print(f"$ trlvr {' '.join(argv)}", flush=True)
        try:
            code = cli.main(argv)  # (looked up at each call: a test swaps it)
        except SystemExit as e:  # argparse
            code = e.code if isinstance(e.code, int) else 2
    if code == 143:  # trlvr.training.preempt.EXIT_PREEMPTED: stopped by SIGTERM after saving a checkpoint
        raise SystemExit(code)
    if code != 0:
        said = [
            ln
            for ln in log.read_text(errors="replace").splitlines()
            if ln.startswith(f"trlvr {argv[0]}: error:")
        ]
        raise UserError(f"`trlvr {argv[0]}` failed (exit {code})" + (f": {said[-1]}" if said else ""))


# ---- the whole study, checked before anything runs ------------------------------------------------


class _Refusing(argparse.ArgumentParser):
    """A parser whose errors are a UserError (not a usage message and exit)."""

    def error(self, message):
        raise UserError(message)


def parse_stage(argv: list[str]) -> argparse.Namespace:
    """A stage's command line parsed by that command's own parser (types, choices), errors as UserError."""
    parser = _Refusing(prog="trlvr")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Refusing)
    importlib.import_module(f"trlvr.cli.{cli.COMMANDS[argv[0]]}").make_parser(sub)
    return parser.parse_args(argv)


def _check_train(stage, out: Path, checked: set):
    """The train stage as `trlvr train --dry-run` checks it (the run's own check list), run as the study runs
    it (`with_resume`), its folder included unless the study skips it (done) or refuses it (made under other
    settings: `stale_stages` says so); its local dataset as training loads it. Returns the TandemConfig."""
    dry_run(with_resume(stage).argv[1:], folder=stage_state(out, stage) == "todo")
    tandem = parse_run_args([*stage.argv[1:], *C.CPU_CHECK])[0]
    C.check_train_data(tandem, out, checked)
    return tandem


def _check_select(stage, tandem, out: Path, checked: set) -> None:
    C.check_select(parse_stage(stage.argv), tandem, out, checked)


def _check_eval(stage, out: Path, checked: set) -> None:
    spec = settings_from_args(parse_stage(stage.argv))  # its flags, as `trlvr eval` reads them
    C.check_eval(stage.command, spec, parse_sources(stage.command.data), out, checked)


def check_out_folder(study, out: Path) -> None:
    """The study's folder (`trlvr.rundir.prepare_output`: a study's, or nothing of trlvr's; never a
    training run or an evaluation) and then every stage (`validate`): what `run` and `plan` check first."""
    rundir.prepare_output(out, rundir.STUDY, flag="--out", checks=[lambda: validate(study, out)])


def validate(study, out: Path) -> None:
    """Every stage's command line read by its command's own parser and checked (trlvr.experiments.study_check)
    before any stage runs: one line naming the study file, the key and the stage for the first that fails. A
    study with a `prepare:` command first checks that the local models and data it names are there."""
    out, checked = Path(out), set()
    C.check_prepared(study, out, parse_sources)
    for unit in units(study, out):  # [train, select, eval], or [eval] for a `train: false` variant
        tandem = None
        for stage in unit:
            try:
                if stage.kind == "train":
                    tandem = _check_train(stage, out, checked)
                elif stage.kind == "select":
                    _check_select(stage, tandem, out, checked)
                else:
                    _check_eval(stage, out, checked)
            except UserError as e:
                raise C.restate(study, stage, e) from None


def _run_children(study_path: str, out: Path, pending: list, jobs: int) -> int:
    """The pending (variant, seed) pipelines dealt round-robin to `jobs` workers (`trlvr study run
    --only V:S ...`, one process each: the imports are paid once per worker). Their stage lines are
    echoed here; their full output is DIR/logs/worker-<i>.log. 0 if every pipeline succeeded."""
    workers = []
    for i in range(min(jobs, len(pending))):
        mine = pending[i::jobs]
        log = out / "logs" / f"worker-{i}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        cmd = [
            sys.executable,
            "-m",
            "trlvr.cli.main",
            "study",
            "run",
            study_path,
            "--out",
            str(out),
            "--no-report",
        ]
        for unit in mine:
            cmd += ["--only", f"{unit[0].variant}:{unit[0].seed}"]
        f = open(log, "a")
        offset = log.stat().st_size
        proc = subprocess.Popen(
            cmd, stdout=f, stderr=subprocess.STDOUT, env={**worker_env(jobs), WORKER_OF: str(out)}
        )
        workers.append([proc, f, log, offset, None])  # None: the stage it last started
        _say(f"worker {i}: {', '.join(f'{u[0].variant}:{u[0].seed}' for u in mine)} (log {log})")

    def stop(signum, frame):  # a killed parent takes its workers along (no orphan trains on)
        raise SystemExit(128 + signum)

    def echo(w) -> None:
        with open(w[2]) as r:
            r.seek(w[3])
            text = r.read()
        done = text.rpartition("\n")[0]
        w[3] += len(done.encode()) + (1 if done else 0)
        for line in done.splitlines():
            if line.startswith("[study "):
                print(line, flush=True)
                if line.endswith(")") and ": started (log " in line:
                    w[4] = line.split("] ", 1)[1].split(": started", 1)[0]

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        while any(w[0].poll() is None for w in workers):
            time.sleep(2)
            for w in workers:
                echo(w)
        for w in workers:
            echo(w)
    finally:
        signal.signal(signal.SIGTERM, previous)
        for w in workers:
            if w[0].poll() is None:
                w[0].terminate()  # training saves a checkpoint and stops (trlvr.training.preempt)
        for w in workers:
            try:
                w[0].wait(timeout=120)
            except subprocess.TimeoutExpired:
                w[0].kill()
            w[1].close()
    for i, w in enumerate(workers):
        if w[0].returncode is not None and w[0].returncode < 0:
            _say(worker_killed_line(i, -w[0].returncode, w[4]))
    failed = [i for i, w in enumerate(workers) if w[0].returncode != 0]
    if failed:
        _say(f"workers {failed} reported failures (see their logs); rerun the same command to retry")
    return 1 if failed else 0


def worker_killed_line(i: int, signum: int, stage: str | None) -> str:
    """What to say of a worker a signal ended: its log cannot say it (SIGKILL leaves no last words)."""
    try:
        name = signal.Signals(signum).name
    except ValueError:
        name = f"signal {signum}"
    why = (
        " (sent by the OOM killer when memory runs out: try fewer --jobs)" if signum == signal.SIGKILL else ""
    )
    where = f" during {stage}" if stage else ""
    return f"worker {i} was killed by {name}{why}{where}; its unfinished stages did not run"


WORKER_OF = (
    "TRLVR_STUDY_WORKER_OF"  # set by `_run_children` for its workers: the study folder their parent holds
)


def run(args) -> int:
    """`trlvr study run`: the study folder's lock held throughout (a second `study run` into it is refused at
    once naming the first's pid; the workers of `--jobs` run under their parent's)."""
    out = Path(args.out).resolve()
    worker = os.environ.get(WORKER_OF) == str(out)
    if not worker:
        rundir.check_dir_path(out, "--out")
        rundir.check_unlocked(out, "trlvr study run", "--out")  # a second study run into it: refused at once
    with contextlib.ExitStack() as held:  # the lock, from the first write on (every check passed)
        return _run(
            args, lambda: None if worker else held.enter_context(rundir.lock(out, by="trlvr study run"))
        )


def _run(args, take_lock) -> int:
    from trlvr.training.console import quiet_libraries

    if args.jobs < 1:
        raise UserError(f"--jobs must be >= 1, got {args.jobs}")
    quiet_libraries()
    study = load_study(args.study)
    out = Path(args.out).resolve()  # the stages' commands and fingerprints hold the same paths from any cwd
    only = parse_only(study, args.only) if args.only else None
    check_out_folder(study, out)  # the folder's kind and the whole study, before any stage runs
    todo = units(study, out, only)
    needed = {study.variants[u[0].variant].world for u in todo} - {None}
    worlds = world_stages(study, out, needed)
    every = worlds + [st for u in todo for st in u]
    check_claim(study, out)
    stale = stale_stages(out, every)
    if stale:
        raise UserError(
            f"{out}: {len(stale)} stage(s) ran under other settings and are not redone by `run`: "
            + " | ".join(stale)
            + " (or choose another --out)"
        )
    take_lock()
    claim_dir(study, out)
    broken = set()
    for st in worlds:
        try:
            run_stage(out, st, execute)
        except StageFailed as e:
            _say(f"world {st.variant}: FAILED: {e}")
            broken.add(st.variant)
    runnable = [u for u in todo if study.variants[u[0].variant].world not in broken]
    pending = [u for u in runnable if not all(stage_state(out, st) == "done" for st in u)]
    code = 0
    if args.jobs > 1 and len(pending) > 1:
        code = _run_children(args.study, out, pending, args.jobs)
    else:
        for unit in pending:  # one failed pipeline does not stop the others
            try:
                run_unit(out, unit, execute)
            except UserError as e:
                _say(f"{unit[0].variant} seed {unit[0].seed}: FAILED: {e}")
    failures = failed_stages(out, every)
    if failures:
        print(
            f"trlvr study: {len(failures)} stage(s) failed (their pipelines stopped, the others ran; "
            f"rerun the same command to retry): " + " | ".join(failures),
            file=sys.stderr,
            flush=True,
        )
        return 1
    if code:
        return code
    if not args.no_report and only is None:
        return report(argparse.Namespace(dir=str(out), study=args.study, allow_mismatch=False))
    return 0


def plan(args) -> int:

    study = load_study(args.study)
    out = Path(args.out) if args.out else Path("runs") / study.name
    check_out_folder(study, out.resolve())  # what `run` checks before its first stage
    print("\n".join(plan_lines(study, out)))
    print(benchmarks_line(study))
    if args.power or any(
        getattr(args, k) is not None for k in ("effect", "metric", "problems", "components_from", "gpu")
    ):
        print("\n".join(power_plan(study, out, args)))  # a power option alone asks for the power block too
    return 0


def study_benchmarks(study) -> list[tuple[str, str, int | None]]:
    """(name, source, problems or None when unknown before it is read) of the benchmarks the study evaluates
    (the first variant's evaluation: the macro is over these); `paper:NAME` panels have registered sizes."""
    data = study.evaluation_of(next(iter(study.variants)))["data"]
    if data == "test":  # a toy world's test split: made by a stage
        return [("toy", "test", None)]
    return [(name, src, panel_rows(src)) for name, src in parse_sources(data).items()]


def benchmarks_line(study) -> str:
    """`# benchmarks (macro = their mean): amc23_25 121, ...`: what the study's macro averages."""
    benches = study_benchmarks(study)
    sizes = [n for _, _, n in benches]
    total = f"; {sum(sizes)} problems" if None not in sizes else ""
    return (
        f"# benchmarks (the macro is their mean, each weighs 1/{len(benches)}): "
        + ", ".join(f"{name} {n if n is not None else '?'} ({src})" for name, src, n in benches)
        + total
    )


def launch_gpus(study) -> int:
    """Processes (GPUs) per training run: the launcher config's num_processes (`--config_file PATH` or the
    shipped `"$(trlvr recipes --path NAME)"`), 1 without one."""
    launch = (study.launch or {}).get("train", "")
    if "--config_file" not in launch:
        return 1
    words = shlex.split(launch.split("--config_file", 1)[1])
    if not words:
        return 1
    ref = words[0]
    if ref.startswith("$(trlvr recipes --path ") and ref.endswith(")"):
        cfg = shipped().get(ref[len("$(trlvr recipes --path ") : -1].strip(), (None, None))[1]
    else:
        cfg = Path(ref) if Path(ref).is_file() else study.path.parent / ".." / ref
    if cfg is None or not Path(cfg).is_file():
        return 1
    return int((yaml.safe_load(Path(cfg).read_text()) or {}).get("num_processes", 1))


def _local_rows(source: str) -> int | None:
    """Rows of a local data file (read: cheap), None for a source read later (a hub dataset)."""
    if not is_local(source):
        return None
    try:
        return len(read_local(source))
    except UserError:
        return None


def power_plan(study, out: Path, args) -> list[str]:
    """`plan --power`: the power of the study's own benchmarks and macro for the metric its effect is in
    (pass@4: Table 2), then the cost of every trained variant: training, selection and evaluation."""
    benches = study_benchmarks(study)
    if args.problems:
        problems = list(args.problems)
    elif None in (n for _, _, n in benches) and not all(n or _local_rows(src) for _, src, n in benches):
        unknown = ", ".join(f"{name}={src}" for name, src, n in benches if n is None)
        raise UserError(
            f"--power: the sizes of {unknown} are not known before the data is read; pass --problems "
            "with every benchmark's size, comma-separated"
        )
    else:
        problems = [n or _local_rows(src) for _, src, n in benches]
    effect = args.effect if args.effect is not None else P.TARGET_EFFECT
    n_eval = units(study, out)[0][-1].command.spec().n
    # Table 2's pass@4, or pass@n where the study draws fewer samples
    target = args.metric or f"pass@{min(P.metric_k(P.TARGET_METRIC), n_eval)}"
    k = P.metric_k(target)
    if k is None or "/" in target or k > n_eval:
        raise UserError(
            f"--metric {target}: expected pass@K with K in [1, evaluation.n = {n_eval}], e.g. pass@4"
        )
    headline = [f"handoff/{target}", f"solo/{target}"]
    lines = [
        f"# power of {headline[0]} (the metric of the {effect:g}-point effect"
        f"{', Table 2' if target == P.TARGET_METRIC else ''}"
        f") and {headline[1]}, on the study's {len(problems)} benchmarks, the macro their mean"
    ]
    if args.components_from:
        pair = next(((v.baseline, v.name) for v in study.variants.values() if v.baseline and v.trained), None)
        if pair is None:
            raise UserError(
                f"--components-from {args.components_from}: study {study.name} pairs no trained variant "
                "with a baseline"
            )
        try:
            comps = [(m, P.components_from_study(args.components_from, *pair, m)) for m in headline]
        except ValueError as e:
            raise UserError(f"--components-from {args.components_from}: {e}") from None
        for m, c in comps:
            lines += P.power_lines(c, len(study.seeds), problems, effect, [m])
    else:
        try:
            c = P.components_for(headline[0], n_eval)
        except ValueError as e:
            raise UserError(f"--power: {e} (evaluation.n)") from None
        lines += P.power_lines(c, len(study.seeds), problems, effect, headline)
    gpus = launch_gpus(study)
    models, steps, gpu, skipped = {}, 0, args.gpu, []
    select_h, eval_h, what = {}, {}, ("", "")
    for unit in units(study, out):
        train = next((st for st in unit if st.kind == "train"), None)
        if train is None or train.seed != study.seeds[0]:
            continue
        tandem, grpo, _ = parse_run_args(
            [*train.argv[1:], "--use_cpu", "true", "--bf16", "false", "--fp16", "false"]
        )
        try:
            senior = Stack.from_config("senior", read_config(tandem.senior), "bfloat16")
            junior = None
            if tandem.arm == "tandem":
                junior = (
                    senior
                    if is_self(tandem.junior)
                    else Stack.from_config("junior", read_config(tandem.junior), "bfloat16")
                )
            sel = parse_stage(unit[1].argv)  # select's flags with their defaults
            eval_junior, ev = unit[-1].command.junior, unit[-1].command.spec()
            ev_junior = (
                Stack.from_config("junior", read_config(eval_junior), "bfloat16") if eval_junior else None
            )
        except UserError:  # a model an earlier stage makes (a toy world): no config to cost yet
            skipped.append(train.variant)
            continue
        per_gen = grpo.steps_per_generation or grpo.gradient_accumulation_steps
        steps = max(steps, int(grpo.max_steps * grpo.gradient_accumulation_steps / per_gen))
        gpu = gpu or tandem.gpu_memory
        models[train.variant] = P.StepModel(
            senior.params,
            senior.kv_bytes_per_token,
            junior.params if junior else 0,
            junior.kv_bytes_per_token if junior else 0,
            rows=grpo.per_device_train_batch_size * per_gen,
            completion=min(P.MEAN_COMPLETION[tandem.arm], grpo.max_completion_length),
            cap=grpo.max_completion_length,
        )
        s_kv, j_kv = (
            (senior.params, senior.kv_bytes_per_token),
            ((ev_junior.params, ev_junior.kv_bytes_per_token) if ev_junior else None),
        )
        mean = P.MEAN_COMPLETION[tandem.arm]
        checkpoints = grpo.max_steps // grpo.save_steps if grpo.save_steps else 1
        val = int(sel.val.split(":", 1)[1]) if sel.val.startswith("split:") else _local_rows(sel.val) or 0
        val = min(val, sel.limit or val)
        proto = sel.metric.split("/", 1)[0]
        select_h[train.variant] = (
            len(study.seeds)
            * checkpoints
            * P.generation_hours(
                s_kv,
                j_kv if proto not in ("solo",) else None,
                val * sel.n,
                sel.batch_size,
                min(mean, sel.max_new_tokens),
                sel.max_new_tokens,
                P.gpu_name(gpu),
            )
        )

        eval_rows = 0.0
        for name in protocols_for(list(ev.suite), ev.dose_shares):
            pr = parse_protocol(name)
            eval_rows += P.generation_hours(
                s_kv,
                j_kv if pr.needs_junior else None,
                sum(problems) * pr.samples(ev.n),
                ev.batch_size,
                min(mean, ev.max_new_tokens),
                ev.max_new_tokens,
                P.gpu_name(gpu),
                senior_decodes=pr.entry != "junior",
            )
        eval_h[train.variant] = len(study.seeds) * eval_rows
        what = (
            f"selection: {checkpoints} checkpoints x {val} problems x {sel.n} samples of {proto}",
            f"evaluation: {sum(problems)} problems x {ev.n} samples x the suite {','.join(ev.suite)}'s "
            "generation protocols; "
            "teacher-forced scoring not counted",
        )
    try:
        gpu = P.gpu_name(gpu)
    except ValueError as e:
        raise UserError(f"--gpu: {e}") from None
    paper = Stack.from_config("senior", read_config("Qwen/Qwen3-4B-Instruct-2507"), "bfloat16")
    calibration = P.paper_calibration(paper.params, paper.kv_bytes_per_token)
    lines += P.cost_lines(models, gpu, steps, gpus, len(study.seeds), calibration)
    train_h = {
        name: P.gpu_hours(m.step_s(gpu) * calibration[m.kind], steps, gpus, len(study.seeds))
        for name, m in models.items()
    }
    if models:
        lines += P.stage_cost_lines(select_h, eval_h, train_h, len(study.seeds), what)
    return lines + [f"#   {v}: not costed (its models are made by an earlier stage)" for v in skipped]


def report(args) -> int:

    out = Path(args.dir)
    claim = read_claim(out)
    study = load_study(study_file(out, args.study))
    refuse_another_study(study, out, claim)
    paths = write_study_report(study, out, allow_mismatch=getattr(args, "allow_mismatch", False))
    for p in paths:
        print(f"wrote {p}")
    return 0


def main(args) -> int:
    return {"run": run, "plan": plan, "report": report}[args.study_command](args)

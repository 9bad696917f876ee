"""`trlvr study run|plan|report`: a grid of runs (variants x seeds) described by one YAML file.

    trlvr study plan studies/toy-granularity.yaml              # one shell command per stage, to launch anywhere
    trlvr study run studies/toy-granularity.yaml --out runs/toy-granularity [--jobs 2]
    trlvr study run STUDY --out DIR --only word4-compact:1     # one (variant, seed), or every seed of a variant
    trlvr study report runs/toy-granularity                    # DIR/report/: table.md, figure.png, report.html

`run` trains, selects and evaluates every (variant, seed), seed by seed; finished stages are
skipped and interrupted ones resumed, so rerunning the same command after a kill continues. DIR
records the study file's hash and refuses another study's file. `--jobs N` runs N (variant, seed)
pipelines side by side as child processes (their logs: DIR/logs/). The study file format:
trlvr/experiments/study_spec.py.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def make_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser("study", help="a grid of runs from one YAML file: run, plan or report",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    sub = p.add_subparsers(dest="study_command", required=True)
    run = sub.add_parser("run", help="train, select and evaluate every (variant, seed); resumable")
    run.add_argument("study", help="study YAML")
    run.add_argument("--out", required=True, help="study directory")
    run.add_argument("--only", action="append", default=None, metavar="VARIANT[:SEED]",
                     help="run only this variant (or this variant's one seed); repeatable")  # fmt: skip
    run.add_argument("--jobs", type=int, default=1, help="(variant, seed) pipelines at once, as child processes")
    run.add_argument("--no-report", action="store_true", help="do not write DIR/report/ at the end")
    plan = sub.add_parser("plan", help="print one shell command per stage (train, select, eval)")
    plan.add_argument("study", help="study YAML")
    plan.add_argument("--out", default=None, help="study directory (default: runs/<study name>)")
    rep = sub.add_parser("report", help="DIR/report/: the table, the figure and report.html")
    rep.add_argument("dir", help="a `trlvr study run` directory")
    rep.add_argument("--study", default=None, help="the study YAML (default: DIR/study.yaml, the copy kept by `run`)")
    return p


def execute(argv: list[str], log: Path) -> None:
    """Run one `trlvr` command line in this process, its console output into `log`.

    The one place where a study stage meets the commands: swap this for a library call (e.g. a
    future trlvr.eval.api) and plan and run stay the same."""
    import contextlib

    from trlvr.cli.main import main as cli
    from trlvr.errors import UserError

    with open(log, "a") as f, contextlib.redirect_stdout(f), contextlib.redirect_stderr(f):
        print(f"$ trlvr {' '.join(argv)}", flush=True)
        try:
            code = cli(argv)
        except SystemExit as e:  # argparse
            code = e.code if isinstance(e.code, int) else 2
    if code == 143:  # trlvr.training.preempt.EXIT_PREEMPTED: stopped by SIGTERM after saving a checkpoint
        raise SystemExit(code)
    if code != 0:
        raise UserError(f"`trlvr {argv[0]}` failed (exit {code}); see {log}")


def _run_children(study_path: str, out: Path, pending: list, jobs: int) -> int:
    """The pending (variant, seed) pipelines dealt round-robin to `jobs` workers (`trlvr study run
    --only V:S ...`, one process each: the imports are paid once per worker). Their stage lines are
    echoed here; their full output is DIR/logs/worker-<i>.log. 0 if every pipeline succeeded."""
    import signal
    import subprocess
    import time

    from trlvr.experiments.study import _say

    workers = []
    for i in range(min(jobs, len(pending))):
        mine = pending[i::jobs]
        log = out / "logs" / f"worker-{i}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        cmd = [sys.executable, "-m", "trlvr.cli.main", "study", "run", study_path, "--out", str(out), "--no-report"]
        for unit in mine:
            cmd += ["--only", f"{unit[0].variant}:{unit[0].seed}"]
        f = open(log, "a")
        offset = log.stat().st_size
        workers.append([subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT), f, log, offset])
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
    failed = [i for i, w in enumerate(workers) if w[0].returncode != 0]
    if failed:
        _say(f"workers {failed} reported failures (see their logs); rerun the same command to retry")
    return 1 if failed else 0


def run(args) -> int:
    from trlvr.errors import UserError
    from trlvr.experiments.study import (
        _say,
        claim_dir,
        parse_only,
        run_stage,
        run_unit,
        stage_done,
        units,
        world_stages,
    )
    from trlvr.experiments.study_spec import load_study
    from trlvr.training.console import quiet_libraries

    if args.jobs < 1:
        raise UserError(f"--jobs must be >= 1, got {args.jobs}")
    quiet_libraries()
    study = load_study(args.study)
    out = Path(args.out).resolve()  # the stages' commands and fingerprints hold the same paths from any cwd
    claim_dir(study, out)
    only = parse_only(study, args.only) if args.only else None
    todo = units(study, out, only)
    needed = {study.variants[u[0].variant].world for u in todo} - {None}
    for st in world_stages(study, out, needed):
        run_stage(out, st, execute)
    pending = [u for u in todo if not all(stage_done(st) for st in u)]
    if args.jobs > 1 and len(pending) > 1:
        code = _run_children(args.study, out, pending, args.jobs)
    else:
        code = 0
        for unit in pending:  # one failed pipeline does not stop the others
            try:
                run_unit(out, unit, execute)
            except UserError as e:
                _say(f"{unit[0].variant} seed {unit[0].seed}: FAILED: {e}")
                code = 1
    if code == 0 and not args.no_report and only is None:
        return report(argparse.Namespace(dir=str(out), study=args.study))
    return code


def plan(args) -> int:
    from trlvr.experiments.study import plan_lines
    from trlvr.experiments.study_spec import load_study

    study = load_study(args.study)
    out = Path(args.out) if args.out else Path("runs") / study.name
    print("\n".join(plan_lines(study, out)))
    return 0


def report(args) -> int:
    from trlvr.experiments.study import read_claim, refuse_another_study, study_file
    from trlvr.experiments.study_report import write_study_report
    from trlvr.experiments.study_spec import load_study

    out = Path(args.dir)
    claim = read_claim(out)
    study = load_study(study_file(out, args.study))
    refuse_another_study(study, out, claim)
    paths = write_study_report(study, out)
    for p in paths:
        print(f"wrote {p}")
    return 0


def main(args) -> int:
    return {"run": run, "plan": plan, "report": report}[args.study_command](args)

"""`trlvr demo --out DIR [--fresh] [--seeds 0,1,2]`: the whole pipeline on the embedded toy world, on a CPU.

trlvr demo --out runs/demo                          # one seed; re-running skips finished stages
trlvr demo --out runs/demo-seeds --seeds 0,1,2      # the seed study, across-seed CIs
trlvr demo --out runs/demo --fresh                  # start over (earlier demo: runs/demo/replaced-<time>/)
trlvr demo --out runs/demo-compact --jargon compact # spaceless GSM8K-like jargon (the world is retrained)
trlvr demo --out runs/demo-lora --lora              # LoRA seniors instead of full fine-tuning

The demo is the study shipped as trlvr/studies/demo.yaml (`trlvr study run demo`), with these
options as overrides of it (the study run is kept as DIR/demo.yaml); its report is published as
DIR/summary.md, DIR/summary.png and DIR/report.html (trlvr.demo).
"""

from __future__ import annotations

import argparse
import shutil


def make_parser(subparsers) -> argparse.ArgumentParser:
    from trlvr.eval.defaults import MAX_N
    from trlvr.kinds import COUNT, OUT_DIR, SEEDS, count

    p = subparsers.add_parser(
        "demo",
        help="toy world -> grpo and tandem seniors -> evaluation -> report (CPU, minutes)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--out", type=OUT_DIR, default="runs/demo", help="output directory (default: runs/demo)")
    p.add_argument(
        "--fresh",
        action="store_true",
        help="start over: move what DIR holds into DIR/replaced-<time>/ (nothing is deleted)",
    )
    p.add_argument(
        "--steps", type=COUNT, default=None, help="training steps per arm (default: the study's, 100)"
    )
    p.add_argument(
        "--limit", type=COUNT, default=None, help="test problems to evaluate (default: the study's, 200)"
    )
    p.add_argument(
        "--n",
        type=count(MAX_N),
        default=None,
        help="samples per problem and protocol (default: the study's, 4)",
    )
    p.add_argument(
        "--seeds", type=SEEDS, default=None, help="comma-separated training seeds (default: one run, seed 0)"
    )
    p.add_argument(
        "--jargon",
        choices=("spaced", "compact"),
        default="spaced",
        help=(
            "the toy world's jargon: spaced <<7 +5 =12>> (shipped) or compact <<7+5=12>> (retrains the world)"
        ),
    )
    p.add_argument("--lora", action="store_true", help="train LoRA adapters (rank 16) instead of all weights")
    p.add_argument(
        "--jobs",
        type=COUNT,
        default=2,
        help="(arm, seed) pipelines side by side, the cores shared out among them (default: 2)",
    )
    return p


def main(args) -> int:
    import tempfile
    import time
    from pathlib import Path

    from trlvr import demo, rundir
    from trlvr.cli import study_cmd
    from trlvr.experiments.study_spec import load_study

    t0 = time.perf_counter()
    seeds = args.seeds  # distinct seeds, and every count >= 1: the parser's kinds (trlvr.kinds)
    out = Path(args.out).resolve()
    raw, changed = demo.demo_study(seeds, args.steps, args.limit, args.n, args.jargon, args.lora)
    with tempfile.TemporaryDirectory() as tmp:  # the study this demo runs, checked before DIR is touched
        candidate = demo.write_demo_study(Path(tmp) / demo.DEMO_FILE, raw, changed)
        study = load_study(candidate)

        def check() -> (
            None
        ):  # what `study run` checks first; an earlier demo made otherwise is --fresh's to set aside
            if not args.fresh:
                demo.refuse_old_layout(out)
                demo.refuse_other_options(study, out)
            # with --fresh the stages start in an empty DIR: checked as such, not against what is set aside
            study_cmd.validate(study, Path(tmp) / "fresh" if args.fresh else out)

        # every check first; only then (--fresh) the earlier demo moves into OUT/replaced-<time>/
        # (nothing is deleted)
        rundir.prepare_output(out, rundir.STUDY, flag="--out", checks=[check], start_over=args.fresh)
        out.mkdir(parents=True, exist_ok=True)
        path = Path(shutil.copyfile(candidate, out / demo.DEMO_FILE))  # DIR/demo.yaml: what this demo runs
    print(f"[demo] the study {path} ({', '.join(changed) or 'as shipped'}), {args.jobs} job(s)", flush=True)
    run = argparse.Namespace(study=str(path), out=str(out), only=None, jobs=args.jobs, no_report=False)
    code = study_cmd.run(run)
    if code != 0:
        return code
    published = demo.publish(out)
    print((out / "summary.md").read_text())
    print(
        f"[demo] done in {time.perf_counter() - t0:.0f} s: " + ", ".join(str(p) for p in published),
        flush=True,
    )
    return 0

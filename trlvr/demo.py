"""The embedded CPU demo: toy world -> grpo and tandem seniors -> held-out selection -> evaluation -> report.

    trlvr demo --out runs/demo                  # one seed (~11 min on 2 cores); resumes: finished stages are skipped
    trlvr demo --out runs/demo-seeds --seeds 0,1,2   # the seed study: across-seed CIs (two-level bootstrap)
    trlvr demo --out runs/demo --fresh          # start over (the earlier demo moves into runs/demo/replaced-<time>/)
    trlvr demo --out runs/demo-compact --jargon compact   # the GSM8K-like spaceless jargon (world retrained, ~5 min more)
    trlvr demo --out runs/demo-lora --lora      # LoRA seniors (rank 16, lr LORA_LR) instead of full fine-tuning

Stages, each skipped when its output exists (and resumed from its last checkpoint or its last
written samples when interrupted):
    1. toy/                        the toy world (shipped checkpoints copied, card measured)
    2. train-<arm>[/seed-<s>]/     trlvr/configs/toy.yaml with --arm grpo|tandem; 200 training problems
                                   held out (`holdout`), DEMO_STEPS (100) steps, a checkpoint every 50
    3. selection                   every checkpoint on the held-out slice by handoff/pass@1
                                   (`trlvr select RUN --val split:200`); test data is never read here
    4. eval/<name>[/seed-<s>]/     the full suite on the toy test split for the initial senior (with the
                                   junior floor) and each arm's selected checkpoint
    5. summary.md, summary.png, report.html   the comparison table, picture and HTML report

What this file does not know: how any stage works. It only wires library calls together.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from trlvr.config import CONFIGS_DIR

ARMS = ("grpo", "tandem")
HOLDOUT = 200
SELECT_METRIC = "handoff/pass@1"
SAVE_STEPS = 50
# Training steps per arm unless --steps: 100, not the toy config's 150. The seed studies (150 steps,
# checkpoints at 50 / 100 / 150, selected on held-out data) never selected step 150, and the
# granularity study's 100-step runs selected step 50 or 100 (README, "Studies").
DEMO_STEPS = 100
LORA_LR = 2e-3  # LoRA on the tiny toy models needs ~10x the full fine-tuning lr of the toy config


def _say(msg: str) -> None:
    print(f"[demo {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def train_arm(arm: str, run_dir: Path, toy: Path, steps: int | None, seed: int = 0, lora: bool = False) -> Path:
    """Train one arm from the shipped toy config with the demo's paths; return the run folder."""
    from trlvr.config import load_run_config
    from trlvr.training.checkpoints import checkpoints
    from trlvr.training.run import train_and_save

    if (run_dir / "final" / "config.json").exists():
        _say(f"{run_dir.name}: done, reusing")
        return run_dir
    over = {
        "arm": arm, "senior": str(toy / "senior"), "junior": str(toy / "junior"),
        "dataset": str(toy / "data" / "train.jsonl"), "output_dir": str(run_dir), "seed": seed,
        "holdout": HOLDOUT, "save_steps": SAVE_STEPS, "save_total_limit": 10,
    }  # fmt: skip
    if steps is not None:
        over["max_steps"] = steps
    if lora:
        over |= {"use_peft": True, "lora_r": 16, "learning_rate": LORA_LR}
    tandem, args = load_run_config(CONFIGS_DIR / "toy.yaml", over)
    resume = bool(checkpoints(run_dir))
    train_and_save(tandem, args, resume=resume, desc=f"train {arm} seed {seed}")
    return run_dir


def select(run_dir: Path, n: int) -> dict:
    from trlvr.eval.api import ModelSpec
    from trlvr.experiments.select_run import SelectSpec, run_selection, selection_spec
    from trlvr.experiments.selection import SELECTED_FILE

    if (run_dir / SELECTED_FILE).exists():
        return json.loads((run_dir / SELECTED_FILE).read_text())
    spec = selection_spec(SELECT_METRIC, n=n, max_new_tokens=160, batch_size=400)
    sel = run_selection(run_dir, SelectSpec(f"split:{HOLDOUT}", SELECT_METRIC), spec, ModelSpec("", dtype="float32"),
                        progress=False)  # fmt: skip
    name = run_dir.name if not run_dir.name.startswith("seed-") else f"{run_dir.parent.name}/{run_dir.name}"
    _say(f"{name}: selected step {sel.step} ({SELECT_METRIC} {sel.value:.3f} on {HOLDOUT} held-out problems)")
    return json.loads((run_dir / SELECTED_FILE).read_text())


def evaluate_senior(senior_spec: str, toy: Path, run_dir: Path, suite: list[str], eval_kw: dict) -> dict:
    """The full suite on the toy test split through `trlvr.eval.api` (what `trlvr eval` runs)."""
    from trlvr.eval.api import EvalSpec, ModelSpec, evaluate_specs, load_benchmarks
    from trlvr.eval.format import format_summary

    if (run_dir / "results.json").exists() and (run_dir / ".done").exists():
        return json.loads((run_dir / "results.json").read_text())
    _say(f"eval {senior_spec} -> {run_dir} (details: {run_dir / 'eval.log'})")
    sources = {"toy": str(toy / "data" / "test.jsonl")}
    benchmarks, identities = load_benchmarks(sources, limit=eval_kw["limit"])
    n = eval_kw["n"]
    spec = EvalSpec(suite=tuple(suite), n=n, ks=tuple(k for k in (1, 2, 4, 8) if k <= n), max_new_tokens=160,
                    batch_size=200)  # fmt: skip
    res = evaluate_specs(ModelSpec(senior_spec, str(toy / "junior"), dtype="float32"), benchmarks, spec, run_dir,
                         data_identities=identities, data_sources=sources, progress=False)  # fmt: skip
    (run_dir / "eval.log").write_text(format_summary(res) + "\n")  # the full table; the console keeps one line
    (run_dir / ".done").touch()
    return res


def _check_options(out: Path, options: dict) -> None:
    """Record the demo's options in OUT/demo.json; refuse to continue a directory made with others."""
    from trlvr.errors import UserError

    path = out / "demo.json"
    if path.exists():
        before = json.loads(path.read_text())
        diffs = [f"{k}: {before.get(k)!r} -> {v!r}" for k, v in options.items() if before.get(k) != v]
        if diffs:
            raise UserError(f"{path}: this demo directory was made with other options ({'; '.join(diffs)}); "
                            "use another --out or --fresh")  # fmt: skip
    else:
        path.write_text(json.dumps(options, indent=1) + "\n")


def run_demo(out_dir: str | Path, fresh: bool = False, steps: int | None = None, limit: int = 200, n: int = 4,
             seeds: list[int] | None = None, jargon: str = "spaced", lora: bool = False) -> Path:  # fmt: skip
    """Run every stage into `out_dir`; return the path of summary.md.

    jargon: the toy world's jargon spelling ("spaced", shipped; "compact" retrains the world from
    scratch, see trlvr.toy.dialects). lora: train LoRA adapters (rank 16) instead of full weights.
    """
    from trlvr.rundir import check_dir_path, set_aside
    from trlvr.toy import prepare_world
    from trlvr.toy.world import WorldConfig
    from trlvr.training.console import quiet_libraries

    quiet_libraries()
    out = Path(out_dir)
    check_dir_path(out, "--out")
    if fresh:  # start over: the earlier demo moves into OUT/replaced-<time>/ (nothing is deleted)
        set_aside(out)
    out.mkdir(parents=True, exist_ok=True)
    steps = DEMO_STEPS if steps is None else steps
    _check_options(out, {"jargon": jargon, "lora": lora, "steps": steps, "limit": limit, "n": n,
                         "seeds": seeds})  # fmt: skip
    t0 = time.perf_counter()
    seed_list = seeds or [0]
    grouped = seeds is not None and len(seeds) > 1

    _say("stage 1/5: toy world")
    toy = out / "toy"
    config = WorldConfig(jargon=jargon)
    card = prepare_world(toy, config=config, from_scratch=config != WorldConfig())
    _say(f"toy world: senior solo acc {card['senior_solo_acc']:.2f}, junior {card['junior_solo_acc']:.2f}, "
         f"senior jargon rate {card['senior_jargon_rate']:.2f}")  # fmt: skip

    def run_dir(arm: str, s: int) -> Path:
        return out / f"train-{arm}" / f"seed-{s}" if grouped else out / f"train-{arm}"

    _say(f"stage 2/5: training grpo and tandem, seeds {seed_list}")
    for s in seed_list:
        for arm in ARMS:
            train_arm(arm, run_dir(arm, s), toy, steps, seed=s, lora=lora)

    _say(f"stage 3/5: checkpoint selection on {HOLDOUT} held-out training problems ({SELECT_METRIC})")
    for s in seed_list:
        for arm in ARMS:
            select(run_dir(arm, s), n=2)

    _say("stage 4/5: evaluation on the test split (solo, handoff, dose, legibility, drift; junior floor once)")
    kw = {"limit": limit, "n": n}
    base = ["solo", "handoff", "dose", "legibility", "drift"]
    evaluate_senior(str(toy / "senior"), toy, out / "eval" / "initial", base + ["junior"], kw)
    for s in seed_list:
        for arm in ARMS:
            target = out / "eval" / arm / f"seed-{s}" if grouped else out / "eval" / arm
            evaluate_senior(f"{run_dir(arm, s)}@selected", toy, target, base, kw)

    _say("stage 5/5: comparison, report and summary")
    if grouped:
        from trlvr.experiments.summary import write_seed_summary

        summary = write_seed_summary(out, ARMS)
    else:
        from trlvr.experiments.summary import write_summary

        summary = write_summary(out, ["initial", *ARMS])
    _say(f"done in {time.perf_counter() - t0:.0f} s: {summary} and {out / 'report.html'}")
    return summary

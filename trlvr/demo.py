"""The embedded CPU demo: toy world -> grpo and tandem seniors -> full evaluation -> report.

    trlvr demo --out runs/demo            # resumes: finished stages are skipped
    trlvr demo --out runs/demo --fresh    # start over

Stages, each skipped when its output exists (and resumed from its last checkpoint or its last
written samples when interrupted):
    1. toy/            the toy world (shipped checkpoints copied, card measured)
    2. train-grpo/, train-tandem/   configs/toy-{grpo,tandem}.yaml, equal steps and rollouts
    3. eval/{initial,grpo,tandem}/  the full suite on the toy test split (junior floor included once)
    4. summary.md, summary.png, report.html   the comparison table and picture

What this file does not know: how any stage works. It only wires library calls together.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

CONFIGS_DIR = Path(__file__).resolve().parents[1] / "configs"
ARMS = ("grpo", "tandem")


def _say(msg: str) -> None:
    print(f"[demo {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def train_arm(arm: str, out: Path, toy: Path, steps: int | None, overrides: dict | None = None) -> Path:
    """Train one arm from configs/toy-{arm}.yaml with the demo's paths; return the final model dir."""
    from transformers.trainer_utils import get_last_checkpoint

    from trlvr.config import load_run_config
    from trlvr.training import build_trainer

    run_dir = out / f"train-{arm}"
    final = run_dir / "final"
    if (final / "config.json").exists():
        _say(f"train-{arm}: done, reusing {final}")
        return final
    paths = {
        "senior": str(toy / "senior"),
        "junior": str(toy / "junior"),
        "dataset": str(toy / "data" / "train.jsonl"),
        "output_dir": str(run_dir),
    }
    if steps is not None:
        paths["max_steps"] = steps
    tandem, grpo = load_run_config(str(CONFIGS_DIR / f"toy-{arm}.yaml"), {**paths, **(overrides or {})})
    trainer = build_trainer(tandem, grpo)
    last = get_last_checkpoint(str(run_dir)) if run_dir.is_dir() else None
    _say(f"train-{arm}: {grpo['max_steps']} steps" + (f", resuming from {last}" if last else ""))
    trainer.train(resume_from_checkpoint=last)
    trainer.save_model(str(final))
    trainer.processing_class.save_pretrained(str(final))
    return final


def evaluate_senior(
    name: str, senior_path: Path, toy: Path, out: Path, suite: list[str], eval_kw: dict
) -> dict:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from trlvr.data import load_problems
    from trlvr.eval import evaluate

    run_dir = out / "eval" / name
    if (run_dir / "results.json").exists() and (run_dir / ".done").exists():
        _say(f"eval/{name}: done, reusing")
        return json.loads((run_dir / "results.json").read_text())
    _say(f"eval/{name}: {', '.join(suite)}")
    tok = AutoTokenizer.from_pretrained(toy / "junior")
    senior = AutoModelForCausalLM.from_pretrained(senior_path, dtype=torch.float32).eval()
    junior = AutoModelForCausalLM.from_pretrained(toy / "junior", dtype=torch.float32).eval()
    problems = load_problems(str(toy / "data" / "test.jsonl"), limit=eval_kw.pop("limit"))
    results = evaluate(
        senior, junior, tok, {"toy": problems}, run_dir, suite=suite,
        model_paths={"senior": str(senior_path), "junior": str(toy / "junior")}, **eval_kw,
    )  # fmt: skip
    (run_dir / ".done").touch()
    return results


def run_demo(
    out_dir: str | Path,
    fresh: bool = False,
    steps: int | None = None,
    limit: int = 200,
    n: int = 4,
    batch_size: int = 200,
) -> Path:
    """Run every stage into `out_dir`; return the path of summary.md."""
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    from trlvr.demo_summary import write_summary
    from trlvr.toy import prepare_world

    out = Path(out_dir)
    if fresh and out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()

    _say("stage 1/4: toy world")
    toy = out / "toy"
    card = prepare_world(toy)
    _say(
        f"toy world: senior solo acc {card['senior_solo_acc']:.2f}, junior {card['junior_solo_acc']:.2f}, "
        f"senior jargon rate {card['senior_jargon_rate']:.2f}"
    )

    _say("stage 2/4: training the grpo and tandem seniors")
    finals = {arm: train_arm(arm, out, toy, steps) for arm in ARMS}

    _say("stage 3/4: evaluation (solo, handoff, dose, legibility, drift; junior floor once)")
    eval_kw = dict(n=n, ks=[k for k in (1, 2, 4, 8) if k <= n], max_new_tokens=160, batch_size=batch_size)
    base_suite = ["solo", "handoff", "dose", "legibility", "drift"]
    seniors = {"initial": toy / "senior", **finals}
    for name, path in seniors.items():
        suite = base_suite + (["junior"] if name == "initial" else [])
        evaluate_senior(name, path, toy, out, suite, {**eval_kw, "limit": limit})

    _say("stage 4/4: comparison, report and summary")
    summary = write_summary(out, list(seniors))
    _say(f"done in {time.perf_counter() - t0:.0f} s: {summary} and {out / 'report.html'}")
    return summary

"""Training step time on the toy world, variants measured side by side in one run.

    .venv/bin/python bench/bench_train_step.py [--toy runs/toy] [--rounds 3] [--steps 4]
    .venv/bin/python bench/bench_train_step.py --variants lora-copy,lora-self   # issue 15: one copy vs two
    .venv/bin/python bench/bench_train_step.py --config studies/configs/smollm2-135m-lora-self-cpu.yaml \
        --rounds 1 --steps 3                      # grpo vs tandem on another run config (issue 28: SmolLM2-135M)

Variants (all from the shipped toy config, 16 prompts x 8 rollouts): grpo, tandem (the toy
junior), lora-copy (LoRA senior, junior = a separate copy of the senior's base), lora-self (LoRA
senior, `junior: self` = its base with adapters off: one copy of the weights). Each round builds a
fresh trainer per variant and trains `--steps` steps; variants alternate so machine noise hits all
alike. The first step of each run (warm-up) is dropped; ratios are of medians of the remaining
step times, split into generation and update. Bar: tandem <= 1.8 x grpo (the paper's GPU ratio).
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")


VARIANTS = {
    "grpo": {"arm": "grpo"},
    "tandem": {"arm": "tandem"},
    "lora-copy": {"arm": "tandem", "use_peft": True, "junior": "{toy}/senior"},
    "lora-self": {"arm": "tandem", "use_peft": True, "junior": "self"},
}


def run_arm(
    variant: str, toy: str, steps: int, out_dir: str, config: str | None = None
) -> dict[str, list[float]]:
    """Train `steps` steps of one variant; with `config`, that run config (models, data, batch) instead of the toy's."""
    from transformers.trainer_callback import PrinterCallback

    from trlvr.config import CONFIGS_DIR, load_run_config
    from trlvr.training import build_trainer

    over = {"output_dir": out_dir, "max_steps": steps, "save_steps": 10_000, "seed": 0}
    if config is None:
        over |= {"senior": f"{toy}/senior", "junior": f"{toy}/junior", "dataset": f"{toy}/data/train.jsonl"}
    over |= {k: v.format(toy=toy) if isinstance(v, str) else v for k, v in VARIANTS[variant].items()}
    tandem, grpo = load_run_config(config or CONFIGS_DIR / "toy.yaml", over)
    trainer = build_trainer(tandem, grpo)
    trainer.remove_callback(PrinterCallback)
    trainer.train()
    logs = [h for h in trainer.state.log_history if "timing/step_s" in h][1:]  # drop the warm-up step
    return {k: [h[f"timing/{k}"] for h in logs] for k in ("step_s", "generation_s", "update_s")}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--toy", default="runs/toy")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--variants", default="grpo,tandem", help=f"comma-separated, from {list(VARIANTS)}")
    ap.add_argument(
        "--config", help="a run config to time instead of the toy's (variants grpo and tandem only)"
    )
    args = ap.parse_args()
    variants = args.variants.split(",")
    if args.config and set(variants) - {"grpo", "tandem"}:
        ap.error("--config times the arms grpo and tandem only")
    if not args.config and not os.path.isdir(f"{args.toy}/senior"):
        from trlvr.toy import prepare_world

        prepare_world(args.toy)
    times = {v: {"step_s": [], "generation_s": [], "update_s": []} for v in variants}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            for arm in variants:
                got = run_arm(arm, args.toy, args.steps, f"{tmp}/{arm}-{r}", args.config)
                for k, v in got.items():
                    times[arm][k] += v
    med = {arm: {k: statistics.median(v) for k, v in t.items()} for arm, t in times.items()}
    for arm, m in med.items():
        print(
            f"{arm:7s} step {m['step_s']:.2f} s = generation {m['generation_s']:.2f} s + update {m['update_s']:.2f} s "
            f"(median of {len(times[arm]['step_s'])} steps)"
        )
    base = variants[0]
    for v in variants[1:]:
        print(
            f"{v} / {base}: step time {med[v]['step_s'] / med[base]['step_s']:.2f}, generation time "
            f"{med[v]['generation_s'] / med[base]['generation_s']:.2f}"
            + ("   (bar <= 1.8)" if (base, v) == ("grpo", "tandem") else "")
        )


if __name__ == "__main__":
    main()

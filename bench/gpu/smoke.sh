#!/usr/bin/env bash
# `trlvr smoke` on one GPU with backend hf (the lent GPU machine has no vLLM and no network): the toy world
# (real rewards), then a random-weight pair of Qwen3-0.6B's shapes (bench/gpu/random_pair.py) at GPU batch
# and lengths, then the decode bench at 0.6B. Each stage is independent; logs and smoke.json files go to $OUT.
#   GPU: OUT=/some/dir bash bench/gpu/smoke.sh          (wheels from .whl when trl is missing)
#   CPU check of the same commands at tiny sizes: SMALL=1 OUT=/tmp/x TOY=/tmp/toyw bash bench/gpu/smoke.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:?set OUT}
TOY=${TOY:-.gpu/toy}
PY=${PY:-$( [ -x .venv/bin/python ] && echo .venv/bin/python || echo python3 )}
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
if ! "$PY" -c "import trl" 2>/dev/null && [ -d .whl ]; then
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl && export PYTHONPATH=$PYTHONPATH:/tmp/site
fi
TRLVR=("$PY" -m trlvr.cli.main)
"$PY" - <<'PY' 2>&1 | tee "$OUT/versions.txt"
import importlib, torch
print("torch", torch.__version__, "cuda", torch.cuda.is_available(), torch.cuda.get_device_name() if torch.cuda.is_available() else "")
for m in ("transformers", "trl", "peft", "accelerate", "datasets", "pyarrow", "math_verify"):
    try: print(m, importlib.import_module(m).__version__)
    except Exception as e: print(m, "MISSING", e)
PY
if [ -n "${SMALL:-}" ]; then B=8; C=8; Q=(--steps 1 --problems 2); CPU=true; DT=float32; BF=false
else B=64; C=${C:-384}; Q=(--steps ${STEPS:-3} --problems 8); CPU=false; DT=bfloat16; BF=true; fi
echo "== toy world, cuda: $( [ $CPU = true ] && echo no || echo yes )"
timeout ${T_TOY:-200} "${TRLVR[@]}" smoke --config toy --out "$OUT/smoke-toy" "${Q[@]}" --set senior=$TOY/senior --set junior=$TOY/junior \
  --set dataset=$TOY/data/train.jsonl --set use_cpu=$CPU --set per_device_train_batch_size=$((B * 2)) 2>&1 | grep -v "it/s]" | tail -40
cp "$OUT/smoke-toy/smoke.json" "$OUT/smoke-toy.json" 2>/dev/null
echo "== random pair of Qwen3-0.6B shapes, bf16=$BF, $B rows x $C tokens"
"$PY" bench/gpu/random_pair.py --shape Qwen/Qwen3-0.6B --tokenizer $TOY/senior --out /tmp/q06 --dtype $DT 2>&1 | grep -v "it/s]"
timeout ${T_Q06:-300} "${TRLVR[@]}" smoke --config toy --out "$OUT/smoke-q06" "${Q[@]}" --set senior=/tmp/q06/senior --set junior=/tmp/q06/junior \
  --set dataset=$TOY/data/train.jsonl --set use_cpu=$CPU --set bf16=$BF --set per_device_train_batch_size=$B \
  --set max_completion_length=$C --set learning_rate=1e-6 2>&1 | grep -v "it/s]" | tail -40
cp "$OUT/smoke-q06/smoke.json" "$OUT/smoke-q06.json" 2>/dev/null
if [ -z "${SMALL:-}" ] && [ -n "${BENCH:-}" ]; then
  echo "== decode bench, 0.6B"
  timeout 200 "$PY" bench/gpu/bench_gpu.py --size 0.6B --budget ${BENCH} 2>&1 | grep -v "it/s]" | tail -30
  cp bench/out/gpu-0.6B.* "$OUT/" 2>/dev/null
fi
ls -la "$OUT"

#!/usr/bin/env bash
# The GPU check a developer runs in one call on a lent GPU machine (torch, transformers, accelerate, peft; no
# vLLM, no TRL, no network), backend hf. Prepare on any machine first: `make gpu-bundle` (.gpu/: the toy world,
# the random pair's recipe, the wheels the image lacks; <= 60 MiB), then carry .gpu:
#   OUT=/some/dir bash bench/gpu/run.sh
# Stages, each logged to $OUT/<stage>.log, its outcome in $OUT/run.json:
#   install  the wheels from .gpu/wheels (pip --no-index --no-deps --target), then every module trlvr needs
#            imports: a missing one is exit 2 and one line naming it
#   pair     a random-weight senior/junior of Qwen3-0.6B's shapes (bench/gpu/random_pair.py), built here
#   train    `trlvr train`, one optimizer step on the pair with the author-mask check, then the run's own
#            metrics: both authors wrote (0 < tandem/senior_share < 1) and the loss is finite; the pair is
#            float32 (fp32 master weights, bf16 autocast), and the run stops if its first step moved no weight
#   smoke    `trlvr smoke` on the pair (both arms, selection, evaluation)
#   bench    the decode bench (bench/gpu/bench_gpu.py)
# Exit: 0 when every stage passed, 1 when any failed (all stages still run), 2 on a missing wheel or module.
# A CPU rehearsal (torch's CPU build standing in): SMALL=1 OUT=/tmp/gpu-out PY=/tmp/venv/bin/python bash bench/gpu/run.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:?set OUT to the folder for the logs and JSON}
GPU=${GPU:-.gpu}
PY=${PY:-python3}
SITE=${SITE:-/tmp/trlvr-gpu-site}
mkdir -p "$OUT"
export PYTHONPATH=$PWD:$SITE PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
say() { echo "bench/gpu/run.sh: $*" >&2; }

# --- install: nothing else starts unless every wheel installs and every module imports -------------------------
[ -f "$GPU/wheels.txt" ] && [ -d "$GPU/toy/senior" ] || { say "no $GPU/wheels.txt or $GPU/toy: run make gpu-bundle first"; exit 2; }
if ls "$GPU"/wheels/*.whl >/dev/null 2>&1; then
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" \
    "$GPU"/wheels/*.whl >"$OUT/install.log" 2>&1 || { say "pip could not install $GPU/wheels (see $OUT/install.log)"; exit 2; }
fi
"$PY" - "$GPU/wheels.txt" <<'PY' | tee "$OUT/versions.txt"
import importlib, sys
from importlib.metadata import PackageNotFoundError, version
missing = []
for line in open(sys.argv[1]):
    name, _, want = line.strip().partition("==")
    try:
        if name and version(name) != want:
            missing.append(f"wheel {name}=={want} (found {version(name)})")
    except PackageNotFoundError:
        missing.append(f"wheel {name}=={want}")
for module in ("torch", "transformers", "accelerate", "peft", "trl", "datasets", "pyarrow", "math_verify",
               "yaml", "jinja2", "matplotlib", "filelock", "tqdm", "trlvr.cli.main"):
    try:
        m = importlib.import_module(module)
        print(module, getattr(m, "__version__", ""))
    except Exception as e:  # noqa: BLE001
        missing.append(f"module {module} ({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''})")
import torch
print("cuda", torch.cuda.is_available(), torch.cuda.get_device_name() if torch.cuda.is_available() else "")
if missing:
    print(f"bench/gpu/run.sh: missing {missing[0]}" + (f" and {len(missing) - 1} more" if len(missing) > 1 else "")
          + ": not on this machine and not in the bundle (make gpu-bundle)", file=sys.stderr)
    sys.exit(2)
PY
[ "${PIPESTATUS[0]}" = 0 ] || exit 2

# --- the stages: each runs whatever the others did; the exit code collects them ------------------------------
TRLVR=("$PY" -m trlvr.cli.main)
declare -A STATUS
stage() {  # stage NAME SECONDS COMMAND...: run it under a time limit, log it, record its outcome
  local name=$1 limit=$2; shift 2
  local t0=$SECONDS
  echo "== $name"
  timeout "$limit" "$@" >"$OUT/$name.log" 2>&1
  local rc=$?
  STATUS[$name]=$rc
  grep -v "it/s]" "$OUT/$name.log" | tail -15
  echo "== $name: $([ $rc = 0 ] && echo ok || echo "FAILED (exit $rc)") in $((SECONDS - t0)) s"
}
if [ -n "${SMALL:-}" ]; then  # CPU rehearsal: a 2-layer model of 0.6B's kind, tiny batches
  SHAPE=(--set num_hidden_layers=2 --set hidden_size=64 --set intermediate_size=128 --set num_attention_heads=2
         --set num_key_value_heads=1 --set head_dim=32)
  B=8; C=8; DT=float32; CPU=true; BF=false; SM=(--steps 1 --problems 2); BENCH=(--tiny)
else
  # float32 weights, bf16 autocast: fp32 master weights for AdamW in one process (bf16 weights without ZeRO are refused)
  SHAPE=(); B=${B:-64}; C=${C:-384}; DT=float32; CPU=false; BF=true; SM=(--steps ${STEPS:-2} --problems 8)
  BENCH=(--size 0.6B --budget ${BENCH_BUDGET:-150})
fi
PAIR=$OUT/pair
COMMON=(--set dataset=$GPU/toy/data/train.jsonl --set use_cpu=$CPU --set bf16=$BF)
stage pair 300 "$PY" bench/gpu/random_pair.py --shape Qwen/Qwen3-0.6B --tokenizer "$GPU/toy/senior" --out "$PAIR" \
  --dtype $DT "${SHAPE[@]}"
stage train 400 "${TRLVR[@]}" train --config toy --arm tandem --senior "$PAIR/senior" --junior "$PAIR/junior" \
  --dataset "$GPU/toy/data/train.jsonl" --use_cpu $CPU --bf16 $BF --per_device_train_batch_size $B \
  --num_generations 4 --max_completion_length $C --max_steps 1 --save_steps 1000 --output_dir "$OUT/train"
if [ "${STATUS[train]}" = 0 ]; then  # the run's own record: both authors wrote, a finite loss
  stage train-check 60 "$PY" -c '
import json, math, sys
rows = [json.loads(x) for x in open(sys.argv[1] + "/metrics.jsonl") if x.strip()]
row = next(r for r in rows if "tandem/senior_share" in r)
share, loss = row["tandem/senior_share"], row.get("loss", float("nan"))
junior = row["tandem/junior_tokens/mean"]
moved = next((r["train/weights_moved"] for r in rows if "train/weights_moved" in r), None)
print(f"senior_share {share:.3f}, junior tokens/seq {junior}, loss {loss}, weights moved {moved}")
sys.exit(0 if 0 < share < 1 and junior > 0 and math.isfinite(loss) else 1)' "$OUT/train"
fi
stage smoke 500 "${TRLVR[@]}" smoke --config toy --out "$OUT/smoke" "${SM[@]}" --set senior=$PAIR/senior \
  --set junior=$PAIR/junior "${COMMON[@]}" --set per_device_train_batch_size=$B --set max_completion_length=$C \
  --set learning_rate=1e-6
stage bench 300 "$PY" bench/gpu/bench_gpu.py "${BENCH[@]}" --out "$OUT/bench"

# --- the record ------------------------------------------------------------------------------------------------
FAILED=0
JSON="{"
for name in pair train train-check smoke bench; do
  [ -n "${STATUS[$name]+x}" ] || { STATUS[$name]=skipped; }
  [ "${STATUS[$name]}" = 0 ] || FAILED=1
  JSON+="\"$name\": \"${STATUS[$name]}\", "
done
JSON+="\"small\": \"${SMALL:-}\", \"failed\": $FAILED}"
echo "$JSON" >"$OUT/run.json"
cp "$OUT/smoke/smoke.json" "$OUT/smoke.json" 2>/dev/null
echo "== run.json: $JSON"
exit $FAILED

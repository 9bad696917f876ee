#!/usr/bin/env bash
# One model size per call on one GPU (no network, no weights): bench/out/gpu-<size>.json + .md.
#   bash bench/gpu/run.sh --size 0.6B            # then --size 1.7B, --size 4B, --size 4B+0.6B
#   bash bench/gpu/run.sh --size 1.7B --new 2048 --budget 540
# The script prints its time estimate first and skips what would not fit --budget (default 420 s).
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PY:-$( [ -x .venv/bin/python ] && echo .venv/bin/python || echo python3 )}
PYTHONPATH=. exec timeout 580 "$PY" bench/gpu/bench_gpu.py "$@"

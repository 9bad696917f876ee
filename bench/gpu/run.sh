#!/usr/bin/env bash
# One command on one GPU (H200: about 8 minutes; no network, no weights): bench/out/gpu.json + gpu.md.
#   bash bench/gpu/run.sh                 # all sizes
#   bash bench/gpu/run.sh --sizes qwen3-1.7b --new 512   # a shorter check
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PY:-$( [ -x .venv/bin/python ] && echo .venv/bin/python || echo python3 )}
PYTHONPATH=. exec timeout 480 "$PY" bench/gpu/bench_gpu.py "$@"

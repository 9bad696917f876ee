#!/usr/bin/env bash
# Tandem rollouts on vLLM, one GPU, one command (no network, no weights): bench/out/vllm-gpu.json + .md.
#   bash bench/gpu/vllm.sh                          # pairs A (4B + 4B) and B (1.7B + 0.6B); arms tandem, solo, tandem_eager
#   bash bench/gpu/vllm.sh --pairs B --new 1024     # a shorter run; --help lists every flag
# Needs a Python with vllm==0.31.0 and trlvr (pip install -e '.[vllm]'); PY=/path/to/python picks it.
# Each arm runs in its own process (its own engine); results are written after every arm.
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PY:-$( [ -x .venv/bin/python ] && echo .venv/bin/python || echo python3 )}
PYTHONPATH=. exec "$PY" bench/gpu/bench_vllm_gpu.py "$@"

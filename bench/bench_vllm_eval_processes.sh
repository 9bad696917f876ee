#!/usr/bin/env bash
# backend vllm evaluation in 1 process and in 2 (torchrun: one engine each, a disjoint share of the batches,
# rank 0 writing), side by side on the same command: the toy senior with a random head_dim-32 junior, 16
# problems x 4 samples x (solo, handoff) in batches of 8, 32 new tokens. Prints each run's wall time (the whole
# command: imports, engine starts, generation, scoring), the ratio to 1 process, and whether samples.jsonl is
# byte-identical.   bash bench/bench_vllm_eval_processes.sh      (CPU figures: say so when you quote them)
set -euo pipefail
cd "$(dirname "$0")/.."
W=$(mktemp -d); trap 'rm -rf "$W"' EXIT
export OMP_NUM_THREADS=1 VLLM_ENABLE_V1_MULTIPROCESSING=0 PYTHONPATH=$PWD:$PWD/tests
PY=.venv-vllm/bin/python
"$PY" -c "
from pathlib import Path
from vllm_helpers import save_test_junior
from trlvr.toy.task import make_splits
from trlvr.toy.world import _rows, _write_jsonl
save_test_junior(Path('$W/junior'))
_write_jsonl(Path('$W/test.jsonl'), _rows(make_splits(64, 16, seed=0)[1]))" > "$W/setup.log" 2>&1 || { cat "$W/setup.log"; exit 1; }
A=(eval --senior trlvr/toy/assets/senior --junior "$W/junior" --data "toy=$W/test.jsonl" --samples 4 --k 1
   --suite solo,handoff --batch-size 8 --max-new-tokens 32 --temperature 1 --dtype float32 --backend vllm --no-progress)
t0=$(date +%s.%N); "$PY" -m trlvr.cli.main "${A[@]}" --out "$W/one" > "$W/one.log" 2>&1; t1=$(date +%s.%N)
.venv-vllm/bin/torchrun --nproc_per_node 2 -m trlvr.cli.main "${A[@]}" --out "$W/two" > "$W/two.log" 2>&1; t2=$(date +%s.%N)
cmp -s "$W/one/samples.jsonl" "$W/two/samples.jsonl" && same=identical || same=DIFFERENT
"$PY" -c "
one, two = $t1 - $t0, $t2 - $t1
print(f'1 process: {one:.1f} s wall; 2 processes: {two:.1f} s wall, x{two / one:.2f} of 1 process; samples.jsonl $same')"

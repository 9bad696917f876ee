"""Self-paired junior on one copy of the weights vs a full-copy junior: memory and decode time.

    .venv/bin/python bench/bench_self_pair.py                 # ~10M bench pair, LoRA rank 16
    .venv/bin/python bench/bench_self_pair.py --json bench/out/self_pair.json

Both setups have the same LoRA senior (the ~10M senior of bench_engine.py, rank 16 on every linear
layer, random non-zero adapters) and a junior that is its base model:
  full copy: the junior is a separate base-model copy;
  self:      the junior is `AdapterOffView(senior)`, the same weights with the adapters off.
Measures
  1. resident weight bytes of the pair: distinct parameter/buffer storages summed (data_ptr dedup)
     (bar: self <= 0.55x full copy);
  2. RSS growth of building each pair, each in a fresh subprocess (current RSS, not the peak);
  3. decode time, tandem word schedule (p = 0.5), batch 16, 64 new tokens, no EOS, contenders
     interleaved, median of repeats; both pairs must produce the same tokens;
  4. the cost of switching the adapters off and on once (paid on every junior forward): the view's
     switch vs peft's `disable_adapter()`.
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import subprocess
import sys
import time

import torch
from bench_engine import SIZES, build, prompts, tables_for
from peft import LoraConfig, get_peft_model

from trlvr.engine import Sampling, TandemGenerator, WordSchedule
from trlvr.engine.self_pair import resident_weight_bytes, self_pair

RANK = 16


def lora_senior(base):
    config = LoraConfig(r=RANK, lora_alpha=2 * RANK, lora_dropout=0.0, target_modules="all-linear")
    senior = get_peft_model(base, config)
    g = torch.Generator().manual_seed(3)
    with torch.no_grad():
        for name, p in senior.named_parameters():
            if "lora_B" in name:  # zero at init: give the adapters a real effect
                p.copy_(torch.randn(p.shape, generator=g) * 0.02)
    return senior.eval()


def pairs(size: str = "10M"):
    """{"full_copy": (senior, junior), "self": (senior, junior)}, each senior with the same adapters."""
    vocab, (hidden, layers), _ = SIZES[size]
    full_base = build(vocab, hidden, layers, 0)
    junior_copy = copy.deepcopy(full_base)
    full = (lora_senior(full_base), junior_copy)
    own = self_pair(lora_senior(build(vocab, hidden, layers, 0)))
    return {"full_copy": full, "self": own}


def build_one(size: str, which: str):
    """Only the named pair (for the RSS subprocess)."""
    vocab, (hidden, layers), _ = SIZES[size]
    base = build(vocab, hidden, layers, 0)
    if which == "self":
        return self_pair(lora_senior(base))
    junior = copy.deepcopy(base)
    return lora_senior(base), junior


def rss_growth_mib(size: str, which: str) -> float:
    code = (
        "import gc, sys; sys.path.insert(0, 'bench'); import bench_self_pair as b;"
        "rss = lambda: int(open('/proc/self/statm').read().split()[1]) * 4096;"
        f"b.build_one({size!r}, 'self'); gc.collect(); before = rss();"  # warm up allocator and imports
        f"pair = b.build_one({size!r}, {which!r}); gc.collect(); print((rss() - before) / 2**20)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return float(out.stdout.strip().splitlines()[-1])


def context_us(make_context, n: int = 50) -> float:
    t0 = time.perf_counter()
    for _ in range(n):
        with make_context():
            pass
    return (time.perf_counter() - t0) / n * 1e6


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--size", default="10M")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--new", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--json", help="also write the results here")
    args = ap.parse_args()
    torch.set_num_threads(2)
    vocab = SIZES[args.size][0]
    built = pairs(args.size)
    ps = prompts(args.batch, vocab)
    gens = {
        k: TandemGenerator(s, j, tables=tables_for(vocab), eos_token_ids=[vocab], pad_token_id=0)
        for k, (s, j) in built.items()
    }
    schedule = WordSchedule(0.5, 32)
    outs = {
        k: g.generate(ps, schedule, Sampling(args.new, seed=0)) for k, g in gens.items()
    }  # also a warm-up
    same_tokens = outs["full_copy"].completion_ids == outs["self"].completion_ids
    times = {k: [] for k in gens}
    for _ in range(args.repeats):
        for k, g in gens.items():  # interleaved: machine drift hits both alike
            t0 = time.perf_counter()
            g.generate(ps, schedule, Sampling(args.new, seed=0))
            times[k].append(time.perf_counter() - t0)
    t = {k: statistics.median(v) for k, v in times.items()}
    weights = {k: resident_weight_bytes(*pair) for k, pair in built.items()}
    senior_self = built["self"][0]
    adapters = sum(p.numel() * p.element_size() for n, p in senior_self.named_parameters() if "lora_" in n)
    base_bytes = resident_weight_bytes(senior_self.get_base_model()) - adapters
    r = {
        "size": args.size,
        "lora_rank": RANK,
        "weight_bytes": weights,
        "base_bytes": base_bytes,
        "adapter_bytes": adapters,
        "self_over_full_weights": weights["self"] / weights["full_copy"],
        "rss_growth_mib": {k: round(rss_growth_mib(args.size, k), 1) for k in built},
        "decode_seconds": {k: round(v, 3) for k, v in t.items()},
        "self_over_full_decode": t["self"] / t["full_copy"],
        "same_tokens": same_tokens,
        "peft_disable_adapter_us": round(context_us(senior_self.disable_adapter), 1),
        "view_switch_us": round(context_us(built["self"][1]._switch.off), 1),
        "decode_steps_us": round(t["self"] / args.new * 1e6, 1),
    }
    mib = 2**20
    print(
        f"== {args.size} bench pair, LoRA rank {RANK} (all linear layers), batch {args.batch}, {args.new} tokens"
    )
    print(
        f"  resident weights: full copy {weights['full_copy'] / mib:.1f} MiB, self {weights['self'] / mib:.1f} MiB "
        f"(base {base_bytes / mib:.1f} MiB + adapters {adapters / mib:.2f} MiB)"
    )
    print(f"  self / full copy weights = {r['self_over_full_weights']:.3f}   (bar <= 0.55)")
    print(f"  RSS growth of building the pair, MiB: {r['rss_growth_mib']}")
    print(f"  decode seconds (median of {args.repeats}): {r['decode_seconds']}")
    print(f"  self / full copy decode time = {r['self_over_full_decode']:.3f};  same tokens: {same_tokens}")
    print(
        f"  adapters off+on per junior forward: view's switch {r['view_switch_us']} us, peft's disable_adapter() "
        f"{r['peft_disable_adapter_us']} us (a tandem step is {r['decode_steps_us']} us)"
    )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(r, f, indent=2)


if __name__ == "__main__":
    main()

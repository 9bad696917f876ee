"""Tandem engine speed, as ratios measured side by side in one run.

    .venv/bin/python bench/bench_engine.py            # tiny and ~10M-parameter models
    .venv/bin/python bench/bench_engine.py --quick    # smaller batch, for a smoke run

For each model size (random Qwen3 senior, smaller junior, query heads 4x KV heads, batch 64,
256 new tokens, no EOS):
  1. tandem (WordSchedule p=0.5) vs solo-senior + solo-junior in the same engine   (bar: <= 1.0)
  2. engine solo-senior vs `model.generate` with the same sampling                  (bar: <= 1.0)
  3. engine tandem vs the naive approach: alternating `model.generate` calls per
     segment, each re-reading the whole prefix (per sequence, tokens/s compared)   (bar: >= 5x)
  4. prompt sharing: prefill of 16 prompts x G = 8 repeats, 256-token prompts, shared
     (each distinct prompt once, KV rows copied) vs unshared                          (bar: >= 4x)
  5. decode="static" (preallocated KV, row buckets, length blocks, attention at the KV head count,
     no host sync per token; no compile) over decode="eager", tandem     (bar: <= 0.8)
  --kv-bound: only (5), at a long context (default batch 64, 960 new tokens: the KV cache is ~84% of
     a static step's bytes, as at the GPU shapes; the default 256-token shape has ~58%)
Timings interleave the contenders and keep the median of several repeats (the machine is noisy).
Peak memory: per contender in a fresh subprocess, the growth of peak RSS (ru_maxrss) during the
call over the process with models built, in MiB.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time

import torch
from transformers import Qwen3Config, Qwen3ForCausalLM, StoppingCriteria, StoppingCriteriaList

from trlvr.engine import DecodeOptions, Sampling, SoloSchedule, TandemGenerator, WordSchedule
from trlvr.engine.generator import kv_cache_bytes
from trlvr.engine.schedules import VocabTables

SIZES = {
    # name: (vocab, senior (hidden, layers), junior (hidden, layers))
    "tiny": (512, (64, 2), (32, 2)),
    "10M": (4096, (256, 10), (128, 6)),
}


def build(vocab: int, hidden: int, layers: int, seed: int):
    torch.manual_seed(seed)
    cfg = Qwen3Config(
        vocab_size=vocab,
        hidden_size=hidden,
        intermediate_size=3 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=max(hidden // 32, 2),
        num_key_value_heads=max(hidden // 128, 1),  # GQA 4:1 (8 / 2 heads at 256), like Qwen3-4B's 32 / 8
        head_dim=32,
        max_position_embeddings=1024,
        tie_word_embeddings=True,
    )
    return Qwen3ForCausalLM(cfg).eval()


def tables_for(vocab: int) -> VocabTables:
    g = torch.Generator().manual_seed(0)
    word_start = torch.rand(vocab, generator=g) < 0.35  # Qwen3: 53k of 151k ids start a word
    false = torch.zeros(vocab, dtype=torch.bool)
    return VocabTables(word_start, false, false, false)


def setup(size: str):
    vocab, (sh, sl), (jh, jl) = SIZES[size]
    senior, junior = build(vocab, sh, sl, 0), build(vocab, jh, jl, 1)
    gen = TandemGenerator(senior, junior, tables=tables_for(vocab), eos_token_ids=[vocab], pad_token_id=0)
    return senior, junior, gen


def prompts(batch: int, vocab: int) -> list[list[int]]:
    g = torch.Generator().manual_seed(1)
    return [
        torch.randint(1, vocab, (int(n),), generator=g).tolist()
        for n in torch.randint(8, 33, (batch,), generator=g)
    ]


def hf_generate(model, ids: list[list[int]], new: int):
    L = max(map(len, ids))
    x = torch.tensor([[0] * (L - len(p)) + p for p in ids])
    m = torch.tensor([[0] * (L - len(p)) + [1] * len(p) for p in ids])
    return model.generate(
        input_ids=x,
        attention_mask=m,
        max_new_tokens=new,
        min_new_tokens=new,
        do_sample=True,
        temperature=1.0,
        top_p=1.0,
        top_k=0,
        pad_token_id=0,
        eos_token_id=None,
    )


class SegmentEnd(StoppingCriteria):
    """Stop after a word-start token or after max_gap new tokens (one schedule segment)."""

    def __init__(self, start: int, word_start: torch.Tensor, max_gap: int):
        self.start, self.word_start, self.max_gap = start, word_start, max_gap

    def __call__(self, input_ids, scores, **kw):
        n = input_ids.shape[1] - self.start
        return (self.word_start[input_ids[:, -1]] | (n >= self.max_gap)).bool()


def naive_tandem(senior, junior, tables, prompt: list[int], new: int, p=0.5, max_gap=32, seed=0):
    """One sequence: the active model re-reads the whole prefix at every handoff."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.tensor([prompt])
    while ids.shape[1] - len(prompt) < new:
        model = senior if torch.rand(1, generator=g).item() < p else junior
        budget = new - (ids.shape[1] - len(prompt))
        stop = StoppingCriteriaList([SegmentEnd(ids.shape[1], tables.word_start, max_gap)])
        ids = model.generate(
            input_ids=ids,
            attention_mask=torch.ones_like(ids),
            max_new_tokens=budget,
            do_sample=True,
            top_k=0,
            pad_token_id=0,
            eos_token_id=None,
            stopping_criteria=stop,
        )
    return ids


def contenders(size: str, batch: int, new: int, naive_seqs: int, compile_static: bool = False):
    senior, junior, gen = setup(size)
    c = compile_static
    vocab = SIZES[size][0]
    ps = prompts(batch, vocab)
    return {
        "tandem": lambda: gen.generate(
            ps, WordSchedule(0.5, 32), Sampling(new, seed=0), options=DecodeOptions(decode="eager")
        ),
        "solo_senior": lambda: gen.generate(
            ps, SoloSchedule("senior"), Sampling(new, seed=0), options=DecodeOptions(decode="eager")
        ),
        "tandem_static": lambda: gen.generate(
            ps,
            WordSchedule(0.5, 32),
            Sampling(new, seed=0),
            options=DecodeOptions(decode="static", compile=c),
        ),
        "solo_senior_static": lambda: gen.generate(
            ps,
            SoloSchedule("senior"),
            Sampling(new, seed=0),
            options=DecodeOptions(decode="static", compile=c),
        ),
        "solo_junior": lambda: gen.generate(
            ps, SoloSchedule("junior"), Sampling(new, seed=0), options=DecodeOptions(decode="eager")
        ),
        "solo_junior_static": lambda: gen.generate(
            ps,
            SoloSchedule("junior"),
            Sampling(new, seed=0),
            options=DecodeOptions(decode="static", compile=c),
        ),
        "hf_generate_senior": lambda: hf_generate(senior, ps, new),
        "naive_tandem": lambda: [
            naive_tandem(senior, junior, gen.tables, p, new, seed=i) for i, p in enumerate(ps[:naive_seqs])
        ],
    }


CLOCKS = {"wall": time.perf_counter, "cpu": time.process_time}


def time_all(fns: dict, repeats: int, clock: str = "wall", warm: tuple = ()) -> dict[str, float]:
    """Median time of each contender over `repeats` interleaved rounds. clock "cpu" = this process's
    CPU time: with one thread it is the work done, whatever else the machine runs (wall time on a
    shared machine counts the other jobs' time slices too). `warm`: contenders run once untimed
    first (the compiled ones compile there, with the timed shapes)."""
    now = CLOCKS[clock]
    with torch.no_grad():
        for k in warm:
            fns[k]()
    times = {k: [] for k in fns}
    for _ in range(repeats):
        for k, fn in fns.items():  # interleaved so drift in machine speed hits everyone alike
            t0 = now()
            with torch.no_grad():
                fn()
            times[k].append(now() - t0)
    return {k: statistics.median(v) for k, v in times.items()}


def peak_mib(size: str, name: str, batch: int, new: int, naive_seqs: int, threads: int = 2) -> float:
    code = (
        "import resource, torch, sys; sys.path.insert(0, 'bench'); import bench_engine as b;"
        f"torch.set_num_threads({threads});"
        f"f = b.contenders({size!r}, {batch}, {new}, {naive_seqs})[{name!r}]; base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss;"
        "f(); print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return int(out.stdout.strip().splitlines()[-1]) / 1024


def sharing(
    size: str, repeats: int, clock: str = "wall", groups: int = 16, g: int = 8, length: int = 256
) -> dict:
    """Prefill time (one new token) of TRL-shaped batches, shared vs unshared prompts."""
    vocab = SIZES[size][0]
    _, _, gen = setup(size)
    gen_ = torch.Generator().manual_seed(2)
    distinct = [torch.randint(1, vocab, (length,), generator=gen_).tolist() for _ in range(groups)]
    batch = [p for p in distinct for _ in range(g)]
    sched = WordSchedule(p=0.5)
    fns = {
        "shared": lambda: gen.generate(batch, sched, Sampling(1), options=DecodeOptions(share_prompts=True)),
        "unshared": lambda: gen.generate(
            batch, sched, Sampling(1), options=DecodeOptions(share_prompts=False)
        ),
    }
    t = time_all(fns, repeats, clock)
    return {
        "prefill_speedup": t["unshared"] / t["shared"],
        "seconds": {k: round(v, 3) for k, v in t.items()},
        "shape": f"{groups} prompts x G={g}, {length} tokens",
    }


def kv_bound(size: str, batch: int, new: int, repeats: int, clock: str, compile_static: bool) -> dict:
    """Tandem eager vs static at a long context, where the KV cache outweighs the weights in bytes
    (near the regime of the GPU shapes: ~84% at 64 x 960), with the share of the bytes a static step reads."""
    senior, junior, gen = setup(size)
    ps = prompts(batch, SIZES[size][0])
    sched = WordSchedule(0.5, 32)
    fns = {
        "tandem": lambda: gen.generate(
            ps, sched, Sampling(new, seed=0), options=DecodeOptions(decode="eager")
        ),
        "tandem_static": lambda: gen.generate(
            ps, sched, Sampling(new, seed=0), options=DecodeOptions(decode="static")
        ),
    }
    if compile_static:
        fns["tandem_static_compiled"] = lambda: gen.generate(
            ps, sched, Sampling(new, seed=0), options=DecodeOptions(decode="static", compile=True)
        )
    t = time_all(fns, repeats, clock, warm=[k for k in fns if k.endswith("compiled")])
    mean_len = sum(map(len, ps)) / len(ps) + new / 2  # valid positions per row, averaged over the steps
    weights = sum(p.numel() * p.element_size() for m in (senior, junior) for p in m.parameters())
    kv = sum(kv_cache_bytes(m, batch, mean_len) for m in (senior, junior))  # at the KV head count
    return {
        "shape": f"batch {batch}, {new} new tokens",
        "static_over_eager_tandem": t["tandem_static"] / t["tandem"],
        **(
            {"compiled_static_over_eager_tandem": t["tandem_static_compiled"] / t["tandem"]}
            if compile_static
            else {}
        ),
        "kv_share_of_step_bytes": kv / (kv + weights),  # static reads: weights + valid KV, once
        "seconds": {k: round(v, 3) for k, v in t.items()},
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--sizes", default="tiny,10M")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json", help="also write the results here")
    ap.add_argument("--threads", type=int, default=2, help="torch threads (1 when another job holds a core)")
    ap.add_argument(
        "--clock",
        choices=sorted(CLOCKS),
        default="wall",
        help="cpu: process CPU time (use with --threads 1 on a shared machine)",
    )
    ap.add_argument(
        "--compile", action="store_true", help="static contenders torch.compile their step (warmed up first)"
    )
    ap.add_argument(
        "--kv-bound",
        action="store_true",
        help="only tandem eager vs static at --kv-batch x --kv-new (KV ~84%% of a step's bytes at 64 x 960)",
    )
    ap.add_argument("--kv-batch", type=int, default=64)
    ap.add_argument("--kv-new", type=int, default=960, help="at most 990 (the bench models' 1024 positions)")
    args = ap.parse_args()
    if args.kv_bound and not (1 <= args.kv_new <= 990 and args.kv_batch >= 1):
        ap.error(
            f"--kv-new must be in [1, 990] (prompts of up to 32 + new tokens within the models' 1024 "
            f"positions) and --kv-batch >= 1, got {args.kv_new} and {args.kv_batch}"
        )
    if args.clock == "cpu" and args.threads != 1:
        ap.error("--clock cpu needs --threads 1 (CPU time sums over threads)")
    torch.set_num_threads(args.threads)
    batch, new, naive_seqs = (16, 64, 2) if args.quick else (64, 256, 4)
    results = {}
    if args.kv_bound:
        for size in args.sizes.split(","):
            r = results[size] = kv_bound(
                size, args.kv_batch, args.kv_new, args.repeats, args.clock, args.compile
            )
            how = f"{args.clock} clock, {args.threads} thread(s), medians of {args.repeats}"
            print(
                f"== {size} KV-bound: {r['shape']} ({how}); KV {r['kv_share_of_step_bytes']:.0%} of the bytes per step"
            )
            print(
                f"  decode static / eager (time), tandem = {r['static_over_eager_tandem']:.3f}   (bar <= 0.80)"
            )
            if args.compile:
                print(
                    f"  compiled static / eager, tandem      = {r['compiled_static_over_eager_tandem']:.3f}"
                )
        if args.json:
            with open(args.json, "w") as f:
                json.dump(results, f, indent=2)
        return
    for size in args.sizes.split(","):
        fns = contenders(size, batch, new, naive_seqs, compile_static=args.compile)
        warm = [k for k in fns if k.endswith("_static")] if args.compile else []
        t = time_all(fns, args.repeats, args.clock, warm=warm)
        tps = {k: (naive_seqs if k == "naive_tandem" else batch) * new / v for k, v in t.items()}
        r = {
            "tandem_over_solo_sum": t["tandem"] / (t["solo_senior"] + t["solo_junior"]),
            "engine_solo_over_hf_generate": t["solo_senior"] / t["hf_generate_senior"],
            "tandem_speedup_over_naive": tps["tandem"] / tps["naive_tandem"],
            "static_over_eager_tandem": t["tandem_static"] / t["tandem"],
            "static_tandem_over_solo_sum": t["tandem_static"]
            / (t["solo_senior_static"] + t["solo_junior_static"]),
            "static_solo_over_hf_generate": t["solo_senior_static"] / t["hf_generate_senior"],
            "static_over_eager_solo": t["solo_senior_static"] / t["solo_senior"],
            "tokens_per_s": {k: round(v) for k, v in tps.items()},
            "seconds": {k: round(v, 3) for k, v in t.items()},
            "peak_rss_mib": {
                k: round(peak_mib(size, k, batch, new, naive_seqs, args.threads))
                for k in ("tandem", "solo_senior", "hf_generate_senior")
            },
        }
        results[size] = r
        how = f"{args.clock} clock, {args.threads} thread(s), static {'compiled' if args.compile else 'not compiled'}"
        print(f"== {size}: batch {batch}, {new} new tokens, medians of {args.repeats} ({how})")
        print(f"  tandem / (solo senior + solo junior) = {r['tandem_over_solo_sum']:.3f}   (bar <= 1.00)")
        print(
            f"  engine solo / model.generate         = {r['engine_solo_over_hf_generate']:.3f}   (bar <= 1.00)"
        )
        print(
            f"  tandem speed-up over naive per-segment generate = {r['tandem_speedup_over_naive']:.1f}x  (bar >= 5x)"
        )
        print(
            f"  decode static / eager (time)          = tandem {r['static_over_eager_tandem']:.3f}, "
            f"solo senior {r['static_over_eager_solo']:.3f}   (> 1: static slower)"
        )
        print(
            f"  static path: tandem / (solo S + solo J) = {r['static_tandem_over_solo_sum']:.3f}, "
            f"solo / model.generate = {r['static_solo_over_hf_generate']:.3f}"
        )
        print(f"  tokens/s: {r['tokens_per_s']}")
        print(f"  peak RSS growth during the call, MiB: {r['peak_rss_mib']}")
        r["settings"] = {
            "clock": args.clock,
            "threads": args.threads,
            "compile_static": args.compile,
            "batch": batch,
            "new_tokens": new,
            "repeats": args.repeats,
        }
        r["prompt_sharing"] = sh = sharing(size, args.repeats, args.clock)
        print(f"  prompt sharing ({sh['shape']}): prefill {sh['prefill_speedup']:.1f}x faster   (bar >= 4x)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()

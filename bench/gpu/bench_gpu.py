"""Tandem decoding on a GPU against `model.generate` and the memory-bandwidth roofline. No network, no weights.

    python bench/gpu/bench_gpu.py --size 0.6B   # one model size per call (then 1.7B, 4B, 4B+0.6B; run.sh runs 0.6B)
    python bench/gpu/bench_gpu.py --predict     # bytes per decode step per GPU shape (no GPU needed)
    python bench/gpu/bench_gpu.py --tiny        # tiny configs on CPU, seconds (run by the test suite)

Random-initialised Qwen3 architectures from bench/gpu/configs/ (0.6B, 1.7B, 4B), bf16, batch 128,
512-token prompts, 1,024 new tokens (EOS ignored, except in the ragged row). Contenders, tokens/s:
    generate                  `model.generate` with the dynamic cache
    generate_static           `model.generate(cache_implementation="static")` (transformers compiles on CUDA)
    engine_solo / _junior     TandemGenerator, SoloSchedule, decode="eager" (DynamicCache)
    engine_tandem             WordSchedule(p=0.5), decode="eager" (junior = senior's size; 4B+0.6B pair)
    engine_static_nocompile_solo / _tandem   decode="static", compile=False
    engine_static_solo / _tandem             decode="static", compile=True (CUDA graphs on CUDA)
    engine_static_tandem_ragged              the same with ~1 in (new / 2) ids an EOS: rows end at
                              different times, so compaction and the shrinking buckets run
Every contender is warmed up with exactly its timed shapes (batch, prompt, new tokens), then timed
once; the compiled ones record how many graphs dynamo compiled inside the timed region (the CPU
test asserts 0). A time estimate is printed first (from the roofline at a pessimistic fraction,
plus compile time) and contenders that would not fit `--budget` seconds are skipped, named. The
results (json + md) are written after every contender, so a run cut short keeps what it measured.
Roofline: tokens/s = bandwidth / bytes read per decode step, where a step reads every running
model's weights once plus its valid KV cache at the KV head count (mean context over the decode).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
SIZES = {
    "0.6B": ("qwen3-0.6b",),
    "1.7B": ("qwen3-1.7b",),
    "4B": ("qwen3-4b",),
    "4B+0.6B": ("qwen3-4b", "qwen3-0.6b"),
}
TINY = {
    "architectures": ["Qwen3ForCausalLM"],
    "model_type": "qwen3",
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 8,
    "num_key_value_heads": 2,
    "head_dim": 8,
    "vocab_size": 512,
    "tie_word_embeddings": True,
    "max_position_embeddings": 512,
}
FRACTION_GUESS = {"generate": 0.10, "engine": 0.15, "static": 0.25}  # pessimistic, for the time estimate only
COMPILE_GUESS_S = 90.0  # per compiled contender (dynamo + inductor + CUDA graph capture), a guess


def config(name: str) -> dict:
    return TINY if name == "tiny" else json.loads((HERE / "configs" / f"{name}.json").read_text())


def build(cfg: dict, device: str, dtype, seed: int):
    from transformers import Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(seed)
    c = Qwen3Config(
        **{k: v for k, v in cfg.items() if k not in ("architectures", "model_type", "torch_dtype")}
    )
    with torch.device(device):
        model = Qwen3ForCausalLM(c).to(dtype)
    return model.eval()


def param_count(cfg: dict) -> int:
    """Parameters of a Qwen3 config, counted from its shapes (tied embeddings once)."""
    H, inter, V, D = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"], cfg["head_dim"]
    hq, hkv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    layer = (
        H * hq * D + 2 * H * hkv * D + hq * D * H + 3 * H * inter + 2 * H + 2 * D
    )  # q, k, v, o, mlp, 2 norms, q/k norms
    embed = V * H * (1 if cfg.get("tie_word_embeddings", True) else 2)
    return cfg["num_hidden_layers"] * layer + embed + H


def kv_bytes(cfg: dict, batch: int, tokens: int, dtype_bytes: int = 2, heads: str = "kv") -> int:
    """K and V of `tokens` positions for `batch` rows, at the KV head count ("kv") or expanded to the query heads ("q")."""
    h = cfg["num_key_value_heads"] if heads == "kv" else cfg["num_attention_heads"]
    return cfg["num_hidden_layers"] * 2 * h * cfg["head_dim"] * dtype_bytes * batch * tokens


def step_bytes(cfgs: list[dict], batch: int, prompt: int, new: int, dtype_bytes: int = 2) -> int:
    """Bytes one decode step reads, every running model: weights once + valid KV at the mean context."""
    ctx = prompt + new // 2
    return sum(param_count(c) * dtype_bytes + kv_bytes(c, batch, ctx, dtype_bytes) for c in cfgs)


def predict(batch: int = 128, prompt: int = 512, news=(2048, 3000), bandwidth: float = 4.8e12) -> str:
    """Markdown: predicted bytes per decode step and the roofline, per GPU shape (no GPU needed)."""
    lines = [
        "| shape | new tokens | weights GB | valid KV GB (KV heads) | KV share | KV GB if expanded to query heads "
        "| bytes/step GB | roofline tokens/s (H200 4.8 TB/s) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for size, names in SIZES.items():
        cfgs = [config(n) for n in names]
        for new in news:
            ctx = prompt + new // 2
            w = sum(param_count(c) * 2 for c in cfgs)
            kv = sum(kv_bytes(c, batch, ctx) for c in cfgs)
            kq = sum(kv_bytes(c, batch, ctx, heads="q") for c in cfgs)
            lines.append(
                f"| {size}{' tandem' if len(cfgs) > 1 else ''} | {new} | {w / 1e9:.2f} | {kv / 1e9:.2f} | "
                f"{kv / (w + kv):.0%} | {kq / 1e9:.2f} | {(w + kv) / 1e9:.2f} | "
                f"{bandwidth / (w + kv) * batch:,.0f} |"
            )
    return "\n".join(lines) + "\n"


def timed(fn, device: str) -> float:
    if device == "cuda":
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    with torch.no_grad():
        fn()
    if device == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - t0


def write(results: dict, out: Path, name: str) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{name}.json").write_text(json.dumps(results, indent=2))
    (out / f"{name}.md").write_text(markdown(results))


def plan(contenders: list[tuple], budget: float) -> tuple[list, list, float]:
    """(kept, skipped, estimated seconds): contenders in order while the estimate fits the budget."""
    kept, skipped, total = [], [], 0.0
    for c in contenders:
        est = c[-1]
        if total + est <= budget:
            kept.append(c)
            total += est
        else:
            skipped.append(c[0])
    return kept, skipped, total


def run(args, save=lambda results: None) -> dict:
    from torch._dynamo.utils import counters

    from trlvr.engine import DecodeOptions, Sampling, SoloSchedule, TandemGenerator, VocabTables, WordSchedule

    device = "cuda" if torch.cuda.is_available() and not args.tiny else "cpu"
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    batch, prompt, new = (4, 16, 16) if args.tiny else (args.batch, args.prompt, args.new)
    names = ("tiny",) if args.tiny else SIZES[args.size]
    cfgs = [config(n) for n in names]
    size = "tiny" if args.tiny else args.size
    vocab = cfgs[0]["vocab_size"]
    g = torch.Generator().manual_seed(0)
    prompts = torch.randint(1, vocab - 1, (batch, prompt), generator=g).tolist()
    word_start = torch.rand(vocab, generator=g) < 0.35
    false = torch.zeros(vocab, dtype=torch.bool)
    tables = VocabTables(word_start, false, false, false)
    no_eos = [vocab + 1]  # an id no model emits: EOS ignored
    ragged_eos = torch.randperm(vocab, generator=g)[
        : max(1, round(vocab * 2 / new))
    ].tolist()  # ~ half the budget
    results = {
        "device": torch.cuda.get_device_name() if device == "cuda" else "cpu",
        "batch": batch,
        "prompt_tokens": prompt,
        "new_tokens": new,
        "dtype": str(dtype),
        "bandwidth": args.bandwidth,
        "predicted_bytes_per_step": step_bytes(cfgs, batch, prompt, new, 2 if device == "cuda" else 4),
        "sizes": {size: {}},
    }
    row = results["sizes"][size]

    senior = build(cfgs[0], device, dtype, seed=0)
    junior = build(cfgs[-1], device, dtype, seed=100)
    gen = TandemGenerator(senior, junior, tables=tables, eos_token_ids=no_eos, pad_token_id=0)
    ragged = TandemGenerator(senior, junior, tables=tables, eos_token_ids=ragged_eos, pad_token_id=0)
    if args.tiny:  # CPU: count dynamo's graphs without waiting minutes for inductor
        gen.compile_backend = ragged.compile_backend = "eager"
        gen.static_block = ragged.static_block = 8
    x = torch.tensor(prompts, device=device)
    common = dict(do_sample=True, top_k=0, top_p=1.0, pad_token_id=0, eos_token_id=None)
    solo_s, solo_j, pair = [cfgs[0]], [cfgs[-1]], [cfgs[0], cfgs[-1]]

    def hf(**kw):
        return lambda: senior.generate(x, max_new_tokens=new, min_new_tokens=new, **common, **kw)

    def engine(sched, decode, compile=False, g=gen):
        return lambda: g.generate(
            prompts, sched, Sampling(new), options=DecodeOptions(decode=decode, compile=compile)
        )

    def est(kind, cfg_list, compiled=False):
        roof = args.bandwidth / step_bytes(cfg_list, batch, prompt, new) * batch
        return 2 * batch * new / (roof * FRACTION_GUESS[kind]) + (COMPILE_GUESS_S if compiled else 0.0)

    tandem_only = len(names) > 1  # the 4B + 0.6B pair: tandem rows only
    contenders = (
        []
        if tandem_only
        else [
            ("generate", hf(), solo_s, False, est("generate", solo_s)),
            ("engine_solo", engine(SoloSchedule("senior"), "eager"), solo_s, False, est("engine", solo_s)),
            (
                "engine_solo_junior",
                engine(SoloSchedule("junior"), "eager"),
                solo_j,
                False,
                est("engine", solo_j),
            ),
            (
                "engine_static_nocompile_solo",
                engine(SoloSchedule("senior"), "static"),
                solo_s,
                False,
                est("static", solo_s),
            ),
            (
                "engine_static_solo",
                engine(SoloSchedule("senior"), "static", True),
                solo_s,
                True,
                est("static", solo_s, True),
            ),
        ]
    )
    contenders += [
        ("engine_tandem", engine(WordSchedule(p=0.5), "eager"), pair, False, est("engine", pair)),
        (
            "engine_static_nocompile_tandem",
            engine(WordSchedule(p=0.5), "static"),
            pair,
            False,
            est("static", pair),
        ),
        (
            "engine_static_tandem",
            engine(WordSchedule(p=0.5), "static", True),
            pair,
            True,
            est("static", pair, True),
        ),
        (
            "engine_static_tandem_ragged",
            engine(WordSchedule(p=0.5), "static", True, ragged),
            pair,
            True,
            est("static", pair, True),
        ),
    ]
    if not tandem_only and not args.skip_hf_static:
        contenders.append(
            ("generate_static", hf(cache_implementation="static"), solo_s, True, est("static", solo_s, True))
        )
    kept, skipped, total = plan(contenders, args.budget)
    print(
        f"== {size} on {results['device']}: batch {batch}, {prompt}-token prompts, {new} new tokens; "
        f"{results['predicted_bytes_per_step'] / 1e9:.3f} GB read per step (predicted)",
        flush=True,
    )
    print(
        f"   estimate {total:.0f} s for {len(kept)} contenders (budget {args.budget:.0f} s)"
        + (f"; skipped, would not fit: {', '.join(skipped)}" if skipped else ""),
        flush=True,
    )
    results["estimate_s"], results["skipped"] = round(total), skipped
    save(results)

    for name, fn, cfg_list, compiled, _ in kept:
        if device == "cuda":
            torch.cuda.reset_peak_memory_stats()
        timed(
            fn, device
        )  # warm-up with exactly the timed shapes: compiles and CUDA-graph captures happen here
        graphs = counters["stats"]["unique_graphs"]
        sec = timed(fn, device)
        tps = batch * new / sec
        roof = args.bandwidth / step_bytes(cfg_list, batch, prompt, new, 2 if device == "cuda" else 4) * batch
        row[name] = {
            "tokens_per_s": round(tps, 1),
            "seconds": round(sec, 3),
            "roofline_tokens_per_s": round(roof, 1),
            "fraction_of_roofline": tps / roof,
            "compiled": compiled,
            "compiles_in_timed_region": counters["stats"]["unique_graphs"] - graphs,
            "peak_mib": round(torch.cuda.max_memory_allocated() / 2**20) if device == "cuda" else None,
        }
        print(
            f"  {name:32s} {tps:10.1f} tok/s  ({tps / roof:.1%} of roofline {roof:.0f}; {sec:.1f} s)",
            flush=True,
        )
        ratios(row)
        save(results)
    return results


def ratios(row: dict) -> None:
    def t(name):
        return row[name]["seconds"] if name in row else None

    pairs = {
        "tandem_over_solo_sum": ("engine_tandem", ("engine_solo", "engine_solo_junior")),
        "static_tandem_over_solo_sum": ("engine_static_tandem", ("engine_static_solo",)),
        "static_over_eager_tandem": ("engine_static_tandem", ("engine_tandem",)),
        "static_nocompile_over_eager_tandem": ("engine_static_nocompile_tandem", ("engine_tandem",)),
        "engine_static_solo_over_generate": ("engine_static_solo", ("generate",)),
        "engine_solo_over_generate": ("engine_solo", ("generate",)),
    }  # time ratios: < 1 = the first is faster
    for key, (num, dens) in pairs.items():
        if t(num) is not None and all(t(d) is not None for d in dens):
            den = sum(t(d) for d in dens) * (
                2 if key == "static_tandem_over_solo_sum" else 1
            )  # same-size pair
            row[key] = round(t(num) / den, 3)


def markdown(results: dict) -> str:
    lines = [
        f"Device {results['device']}, batch {results['batch']}, {results['prompt_tokens']}-token prompts, "
        f"{results['new_tokens']} new tokens, {results['dtype']}; roofline at {results['bandwidth']:.3g} B/s; "
        f"predicted {results['predicted_bytes_per_step'] / 1e9:.3f} GB per step.",
        "",
        "| size | contender | tokens/s | fraction of roofline | compiles in timed region | peak MiB |",
        "|---|---|---|---|---|---|",
    ]
    for size, row in results["sizes"].items():
        for name, e in row.items():
            if isinstance(e, dict):
                lines.append(
                    f"| {size} | {name} | {e['tokens_per_s']} | {e['fraction_of_roofline']:.1%} | "
                    f"{e['compiles_in_timed_region']} | {e['peak_mib']} |"
                )
            else:
                lines.append(f"| {size} | {name} (time ratio) | {e} | | | |")
    if results.get("skipped"):
        lines.append(f"\nSkipped (would not fit the budget): {', '.join(results['skipped'])}")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument(
        "--tiny", action="store_true", help="tiny config on CPU (seconds): keeps the script from rotting"
    )
    ap.add_argument(
        "--predict", action="store_true", help="print predicted bytes per step per GPU shape and exit"
    )
    ap.add_argument("--size", default="0.6B", choices=sorted(SIZES))
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--prompt", type=int, default=512)
    ap.add_argument("--new", type=int, default=1024)
    ap.add_argument(
        "--bandwidth", type=float, default=4.8e12, help="device memory bandwidth, bytes/s (H200: 4.8e12)"
    )
    ap.add_argument("--budget", type=float, default=420.0, help="seconds the contenders may take (estimate)")
    ap.add_argument(
        "--skip-hf-static", action="store_true", help="leave out model.generate with a static cache"
    )
    ap.add_argument("--out", default=str(HERE.parent / "out"))
    args = ap.parse_args(argv)
    if args.predict:
        print(predict(args.batch, args.prompt, bandwidth=args.bandwidth), end="")
        return 0
    out, name = Path(args.out), "gpu-tiny" if args.tiny else f"gpu-{args.size}"
    results = run(args, save=lambda r: write(r, out, name))
    write(results, out, name)
    print(f"wrote {out / name}.json and .md")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Tandem decoding on a GPU against `model.generate` and the memory-bandwidth roofline. No network, no weights.

    bash bench/gpu/run.sh                       # one H200: meant to fit run.sh's 480 s (an estimate: never run)
    python bench/gpu/bench_gpu.py --tiny        # tiny configs on CPU, seconds (run by the test suite)

Random-initialised Qwen3 architectures from bench/gpu/configs/ (0.6B, 1.7B, 4B), bf16, batch 128,
512-token prompts, 1,024 new tokens with EOS ignored. Per size, tokens/s of:
    generate              `model.generate` with the dynamic cache
    generate_static       `model.generate(cache_implementation="static")` (transformers compiles the step on CUDA)
    engine_solo           TandemGenerator, SoloSchedule("senior"), decode="eager" (DynamicCache)
    engine_solo_junior    the same with the junior
    engine_tandem         TandemGenerator, WordSchedule(p=0.5), decode="eager", senior = junior size (and 4B + 0.6B)
    engine_static_solo    SoloSchedule("senior"), decode="static", compile=True on CUDA (CUDA graphs)
    engine_static_tandem  WordSchedule(p=0.5), decode="static", compile=True on CUDA (and 4B + 0.6B)
                          (the engine's auto default stays eager, no compile, until these rows are measured)
Time budget: every contender is timed once, after a short warm-up (a few tokens; for the compiled
engine enough tokens to cross two length blocks, so its compiles happen there and the timed run
only records CUDA graphs for new blocks). Results are written after every contender, so a run cut
short by run.sh's timeout still leaves what it measured.
and the roofline: tokens/s = bandwidth / bytes read per decode step, where a step reads every
running model's weights once plus the valid KV cache (mean context over the decode), and each
contender's fraction of it. Peak memory is `torch.cuda.max_memory_allocated`. Ratios come from one
run; nothing here has been run on a GPU by this project yet (see bench/RESULTS.md).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
SIZES = ("qwen3-0.6b", "qwen3-1.7b", "qwen3-4b")
TINY = {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": 64, "intermediate_size": 128,
        "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
        "vocab_size": 512, "tie_word_embeddings": True, "max_position_embeddings": 512}  # fmt: skip


def build(config: dict, device: str, dtype, seed: int):
    from transformers import Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(seed)
    cfg = Qwen3Config(**{k: v for k, v in config.items() if k not in ("architectures", "model_type", "torch_dtype")})
    with torch.device(device):
        model = Qwen3ForCausalLM(cfg).to(dtype)
    return model.eval()


def weight_bytes(model) -> int:
    seen, total = set(), 0
    for p in model.parameters():
        if p.data_ptr() not in seen:
            seen.add(p.data_ptr())
            total += p.numel() * p.element_size()
    return total


def roofline_tokens_per_s(models, batch: int, prompt: int, new: int, bandwidth: float) -> float:
    """Upper bound on decode tokens/s: each step reads all weights once and the valid KV (mean context)."""
    from trlvr.engine.generator import kv_cache_bytes

    mean_ctx = prompt + new / 2
    per_step = sum(weight_bytes(m) + kv_cache_bytes(m, batch, int(mean_ctx)) for m in models)
    return bandwidth / per_step * batch


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


def run(args, save=lambda results: None) -> dict:
    from trlvr.engine import SoloSchedule, TandemGenerator, VocabTables, WordSchedule

    device = "cuda" if torch.cuda.is_available() and not args.tiny else "cpu"
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    batch, prompt, new = (4, 16, 8) if args.tiny else (args.batch, args.prompt, args.new)
    configs = {"tiny": TINY} if args.tiny else {n: json.loads((HERE / "configs" / f"{n}.json").read_text())
                                                 for n in args.sizes.split(",")}  # fmt: skip
    vocab = next(iter(configs.values()))["vocab_size"]
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(1, vocab - 1, (batch, prompt), generator=g)
    prompts = ids.tolist()
    word_start = torch.rand(vocab, generator=g) < 0.35
    false = torch.zeros(vocab, dtype=torch.bool)
    tables = VocabTables(word_start, false, false, false)
    no_eos = [vocab + 1]  # an id no model emits: EOS ignored
    results = {"device": torch.cuda.get_device_name() if device == "cuda" else "cpu", "batch": batch,
               "prompt_tokens": prompt, "new_tokens": new, "dtype": str(dtype), "bandwidth": args.bandwidth,
               "sizes": {}}  # fmt: skip

    def measure(name, fn, models, row, warm_new: int):
        """Warm up with `warm_new` new tokens (compiles where it compiles), then time one full run."""
        if device == "cuda":
            torch.cuda.reset_peak_memory_stats()
        fn(warm_new)
        sec = timed(lambda: fn(new), device)
        tps = batch * new / sec
        roof = roofline_tokens_per_s(models, batch, prompt, new, args.bandwidth)
        row[name] = {"tokens_per_s": round(tps, 1), "roofline_tokens_per_s": round(roof, 1),
                     "fraction_of_roofline": tps / roof,
                     "peak_mib": round(torch.cuda.max_memory_allocated() / 2**20) if device == "cuda" else None}  # fmt: skip
        print(f"  {name:22s} {tps:10.1f} tok/s  ({tps / roof:.1%} of roofline {roof:.0f})", flush=True)
        save(results)

    warm = min(new, 8)  # eager contenders: CUDA context, cuBLAS handles, allocator
    # compiled engine: prompt + this many tokens crosses two length blocks (dynamo's dynamic recompile)
    warm_static = min(new, 2 * TandemGenerator.static_block + 1)

    common = dict(do_sample=True, top_k=0, top_p=1.0, pad_token_id=0, eos_token_id=None)
    models = {n: build(c, device, dtype, seed=i) for i, (n, c) in enumerate(configs.items())}
    x = ids.to(device)
    for name, model in models.items():
        print(f"== {name}", flush=True)
        row = results["sizes"].setdefault(name, {})
        junior = build(configs[name], device, dtype, seed=100)
        gen = TandemGenerator(model, junior, tables=tables, eos_token_ids=no_eos, pad_token_id=0)

        def hf(n, m=model, **kw):
            return m.generate(x, max_new_tokens=n, min_new_tokens=n, **common, **kw)

        def engine(sched, decode, gen=gen):
            return lambda n: gen.generate(prompts, sched, n, decode=decode, compile=decode == "static" and device == "cuda")

        measure("generate", hf, [model], row, warm)
        if not args.skip_static:
            # a static cache makes transformers compile the decoding forward (torch.compile) on CUDA; its
            # cache is sized by max_new_tokens, so the warm-up must use the full length
            measure("generate_static", lambda n: hf(n, cache_implementation="static"), [model], row, new)
        measure("engine_solo", engine(SoloSchedule("senior"), "eager"), [model], row, warm)
        measure("engine_solo_junior", engine(SoloSchedule("junior"), "eager"), [junior], row, warm)
        measure("engine_tandem", engine(WordSchedule(p=0.5), "eager"), [model, junior], row, warm)
        measure("engine_static_solo", engine(SoloSchedule("senior"), "static"), [model], row, warm_static)
        measure("engine_static_tandem", engine(WordSchedule(p=0.5), "static"), [model, junior], row, warm_static)
        solo_sum = batch * new / row["engine_solo"]["tokens_per_s"] + batch * new / row["engine_solo_junior"]["tokens_per_s"]
        row["tandem_over_solo_sum"] = round((batch * new / row["engine_tandem"]["tokens_per_s"]) / solo_sum, 3)
        row["engine_solo_over_generate_speed"] = round(row["engine_solo"]["tokens_per_s"] / row["generate"]["tokens_per_s"], 3)
        row["static_over_eager_tandem_speed"] = round(
            row["engine_static_tandem"]["tokens_per_s"] / row["engine_tandem"]["tokens_per_s"], 3)
        save(results)
        del junior, gen
        if device == "cuda":
            torch.cuda.empty_cache()
    if "qwen3-4b" in models and "qwen3-0.6b" in models:
        print("== qwen3-4b senior + qwen3-0.6b junior", flush=True)
        row = results["sizes"].setdefault("qwen3-4b+0.6b", {})
        gen = TandemGenerator(models["qwen3-4b"], models["qwen3-0.6b"], tables=tables, eos_token_ids=no_eos,
                              pad_token_id=0)  # fmt: skip
        pair = [models["qwen3-4b"], models["qwen3-0.6b"]]
        measure("engine_tandem", lambda n: gen.generate(prompts, WordSchedule(p=0.5), n, decode="eager"), pair, row,
                warm)  # fmt: skip
        measure("engine_static_tandem", lambda n: gen.generate(prompts, WordSchedule(p=0.5), n, decode="static",
                                                               compile=device == "cuda"), pair, row, warm_static)  # fmt: skip
    return results


def markdown(results: dict) -> str:
    lines = [f"Device {results['device']}, batch {results['batch']}, {results['prompt_tokens']}-token prompts, "
             f"{results['new_tokens']} new tokens, {results['dtype']}; roofline at {results['bandwidth']:.3g} B/s.", "",
             "| size | contender | tokens/s | fraction of roofline | peak MiB |", "|---|---|---|---|---|"]  # fmt: skip
    for size, row in results["sizes"].items():
        for name, e in row.items():
            if isinstance(e, dict):
                lines.append(f"| {size} | {name} | {e['tokens_per_s']} | {e['fraction_of_roofline']:.1%} | {e['peak_mib']} |")
        for k in ("tandem_over_solo_sum", "engine_solo_over_generate_speed", "static_over_eager_tandem_speed"):
            if k in row:
                lines.append(f"| {size} | {k} | {row[k]} | | |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tiny", action="store_true", help="tiny configs on CPU (seconds): keeps the script from rotting")
    ap.add_argument("--sizes", default=",".join(SIZES))
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--prompt", type=int, default=512)
    ap.add_argument("--new", type=int, default=1024)
    ap.add_argument("--bandwidth", type=float, default=4.8e12, help="device memory bandwidth, bytes/s (H200: 4.8e12)")
    ap.add_argument("--skip-static", action="store_true")
    ap.add_argument("--out", default=str(HERE.parent / "out"))
    args = ap.parse_args(argv)
    out, name = Path(args.out), "gpu-tiny" if args.tiny else "gpu"
    results = run(args, save=lambda r: write(r, out, name))
    write(results, out, name)
    print(f"wrote {out / name}.json and .md")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

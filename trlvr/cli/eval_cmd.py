"""`trlvr eval`: evaluate a senior with its junior (solo, handoff, dose, legibility, drift, junior).

    trlvr eval --senior runs/toy/senior --junior runs/toy/junior --data runs/toy/data/test.jsonl \\
        --n 8 --k 1,2,4,8 --out runs/toy/eval

`--data` takes comma-separated sources for `trlvr.data.load_problems`, each optionally named
`name=source` (the name keys the benchmark in results.json; default: the source string).
Interrupted runs resume from DIR/samples.jsonl when rerun with the same settings.
"""

from __future__ import annotations

import argparse

SUITE_DEFAULT = "solo,handoff,dose,legibility,drift,junior"


def _ints(s: str) -> list[int]:
    try:
        return [int(x) for x in s.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {s!r}") from None


def make_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "eval", help="evaluate a senior/junior pair; writes results.json and samples.jsonl"
    )
    p.add_argument("--senior", required=True, help="senior model folder (or hub-style path already cached)")
    p.add_argument("--junior", required=True, help="junior model folder")
    p.add_argument("--tokenizer", default=None, help="tokenizer folder (default: the senior's)")
    p.add_argument("--data", required=True, help="comma-separated benchmark sources, each [name=]source")
    p.add_argument("--split", default=None, help="dataset split passed to load_problems")
    p.add_argument("--limit", type=int, default=None, help="first N problems of each benchmark")
    p.add_argument("--n", type=int, default=8, help="samples per problem and protocol")
    p.add_argument("--k", type=_ints, default=[1, 2, 4, 8], help="pass@k values, comma-separated (each <= n)")
    p.add_argument("--suite", default=SUITE_DEFAULT, help=f"comma-separated subset of {SUITE_DEFAULT}")
    p.add_argument("--max-new-tokens", type=int, default=3000, help="shared token budget per completion")
    p.add_argument("--temperature", type=float, default=0.7)
    p.add_argument("--top-p", type=float, default=0.8)
    p.add_argument("--top-k", type=int, default=20)
    p.add_argument("--handoff-max-rounds", type=int, default=150, help="round cap of the handoff protocol")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--batch-size", type=int, default=64, help="sequences per generation batch")
    p.add_argument(
        "--score-batch-size", type=int, default=8, help="sequences per teacher-forced scoring pass"
    )
    p.add_argument("--dtype", default="auto", choices=["auto", "bfloat16", "float16", "float32"])
    p.add_argument("--device", default=None, help="default: cuda if available, else cpu")
    p.add_argument("--no-progress", action="store_true", help="hide progress bars")
    p.add_argument("--out", required=True, help="output directory (resumed when it already has samples)")
    return p


def parse_sources(spec: str) -> dict[str, str]:
    out = {}
    for part in (s.strip() for s in spec.split(",")):
        if not part:
            continue
        name, _, source = part.rpartition("=") if "=" in part else ("", "", part)
        name = name or source
        if name in out:
            raise ValueError(f"--data names benchmark {name!r} twice")
        out[name] = source
    if not out:
        raise ValueError("--data is empty")
    return out


def main(args) -> int:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from trlvr.data import load_problems
    from trlvr.eval.runner import evaluate

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    dtype = {"auto": "auto", "bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}[
        args.dtype
    ]

    def load(path: str):
        try:
            return AutoModelForCausalLM.from_pretrained(path, dtype=dtype).to(device).eval()
        except OSError as e:
            raise SystemExit(f"trlvr eval: cannot load model from {path}: {e}") from e

    sources = parse_sources(args.data)
    benchmarks = {
        name: load_problems(src, split=args.split, limit=args.limit) for name, src in sources.items()
    }
    tokenizer = AutoTokenizer.from_pretrained(args.tokenizer or args.senior)
    senior, junior = load(args.senior), load(args.junior)
    res = evaluate(
        senior,
        junior,
        tokenizer,
        benchmarks,
        args.out,
        suite=[s.strip() for s in args.suite.split(",") if s.strip()],
        n=args.n,
        ks=args.k,
        decoding={"temperature": args.temperature, "top_p": args.top_p, "top_k": args.top_k},
        seed=args.seed,
        max_new_tokens=args.max_new_tokens,
        batch_size=args.batch_size,
        progress=not args.no_progress,
        handoff_max_rounds=args.handoff_max_rounds,
        score_batch_size=args.score_batch_size,
        model_paths={"senior": args.senior, "junior": args.junior, "data": sources},
    )
    print(format_summary(res))
    print(f"wrote {args.out}/results.json and {args.out}/samples.jsonl")
    return 0


def format_summary(res: dict) -> str:
    """Macro metrics as an aligned terminal table."""
    lines = [f"{'metric':32s} {'macro':>10s} {'95% CI':>22s}"]
    for name, e in res["macro"]["metrics"].items():
        s = 100.0 if ("pass@" in name or name.endswith("share")) else 1.0
        lines.append(f"{name:32s} {e['value'] * s:10.3f} [{e['ci_low'] * s:9.3f}, {e['ci_high'] * s:9.3f}]")
    return "\n".join(lines)

"""`trlvr eval`: evaluate a senior with its junior (solo, handoff, dose, legibility, drift, junior).

    trlvr eval --senior runs/toy/senior --junior runs/toy/junior --data runs/toy/data/test.jsonl \\
        --n 8 --k 1,2,4,8 --out runs/toy/eval

`--data` takes comma-separated sources for `trlvr.data.load_problems`, each optionally named
`name=source` (the name keys the benchmark in results.json; default: the source string).
An interrupted run resumes from DIR/samples.jsonl when rerun with the same settings; other
settings are refused with the list of differences (`--fresh` starts over). A larger `--limit`
or `--n` extends the directory, a smaller one reports exactly what it asks for.
Every setting is checked before a model is loaded.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from trlvr.errors import UserError
from trlvr.eval import defaults as D

SUITE_DEFAULT = ",".join(D.SUITE_NAMES)
_NAME = re.compile(r"^[A-Za-z0-9_.\-]+$")  # a benchmark name before "=" (sources may contain "=")


def _ints(s: str) -> list[int]:
    try:
        return [int(x) for x in s.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {s!r}") from None


def _context(s: str) -> int | str | None:
    if s == "auto":
        return "auto"
    try:
        n = int(s)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer or 'auto', got {s!r}") from None
    return n if n > 0 else None


def make_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "eval", help="evaluate a senior/junior pair; writes results.json and samples.jsonl"
    )
    p.add_argument(
        "--senior", required=True,
        help="senior model folder (or a cached hub id); RUN@selected = the checkpoint `trlvr select` chose; "
        "with --seeds, {seed} in the path is replaced by each seed",
    )  # fmt: skip
    p.add_argument(
        "--seeds", type=_ints, default=None,
        help="evaluate one senior per training seed (comma-separated) into OUT/seed-<s>/, then OUT/group.json "
        "with across-seed CIs (two-level bootstrap)",
    )  # fmt: skip
    p.add_argument(
        "--junior", required=True,
        help="junior model folder; 'self' = a LoRA senior's base model with its adapters off (one copy of the weights)",
    )  # fmt: skip
    p.add_argument("--tokenizer", default=None, help="tokenizer folder (default: the senior's)")
    p.add_argument("--data", required=True, help="comma-separated benchmark sources, each [name=]source")
    p.add_argument("--split", default=None, help="dataset split passed to load_problems")
    p.add_argument("--limit", type=int, default=None, help="first N problems of each benchmark")
    p.add_argument("--n", type=int, default=D.N, help="samples per problem and protocol")
    p.add_argument("--k", type=_ints, default=list(D.KS), help="pass@k values, comma-separated (each <= n)")
    p.add_argument("--suite", default=SUITE_DEFAULT, help=f"comma-separated subset of {SUITE_DEFAULT}")
    p.add_argument(
        "--max-new-tokens", type=int, default=D.MAX_NEW_TOKENS,
        help="completion budget cap; with a known context the budget is min(cap, context - prompt - 8)",
    )  # fmt: skip
    p.add_argument(
        "--context-length", type=_context, default="auto",
        help="model context for the budget rule (default: the models' max_position_embeddings; 0 = flat budget)",
    )  # fmt: skip
    p.add_argument(
        "--max-prompt-tokens", type=int, default=None,
        help="drop longer prompts up front, listed in results.json (default: what the context leaves room for)",
    )  # fmt: skip
    p.add_argument("--temperature", type=float, default=D.DEFAULT_DECODING["temperature"])
    p.add_argument("--top-p", type=float, default=D.DEFAULT_DECODING["top_p"])
    p.add_argument("--top-k", type=int, default=D.DEFAULT_DECODING["top_k"])
    p.add_argument(
        "--handoff-max-rounds", type=int, default=D.HANDOFF_MAX_ROUNDS,
        help="round cap of the handoff protocol (a round = one senior step + one junior step)",
    )  # fmt: skip
    p.add_argument("--include-eos", action="store_true", help="legibility and drift also score the final EOS")
    p.add_argument("--seed", type=int, default=D.SEED)
    p.add_argument("--batch-size", type=int, default=D.BATCH_SIZE, help="sequences per generation batch")
    p.add_argument(
        "--score-batch-size",
        type=int,
        default=D.SCORE_BATCH_SIZE,
        help="sequences per teacher-forced scoring pass",
    )
    p.add_argument("--dtype", default="auto", choices=["auto", "bfloat16", "float16", "float32"])
    p.add_argument("--device", default=None, help="default: cuda if available, else cpu")
    p.add_argument("--junior-device", default=None,
                   help="put the junior on its own device (e.g. cuda:1); default: --device")
    p.add_argument("--grading", default="boxed", choices=["boxed", "boxed_or_tail"],
                   help="boxed (the paper's: no \\boxed{} scores 0) or boxed_or_tail (a box-less answer is "
                        "graded from the text's tail); named in results.json")
    # trlvr.engine.DECODE_MODES, spelled out so that building the parser does not import torch (tested equal)
    p.add_argument("--decode", default="auto", choices=["auto", "eager", "static"],
                   help="KV caches: eager (grown per step; the auto default until measured on a GPU) or static (allocated once)")
    p.add_argument("--no-progress", action="store_true", help="hide progress bars")
    p.add_argument("--out", required=True, help="output directory (resumed when it already has samples)")
    p.add_argument("--fresh", action="store_true", help="delete the samples already in --out and start over")
    return p


def parse_sources(spec: str) -> dict[str, str]:
    """`[name=]source,...` -> {name: source}; a source may itself contain "=" (reasoning-gym specs)."""
    out = {}
    for part in (s.strip() for s in spec.split(",")):
        if not part:
            continue
        head, eq, tail = part.partition("=")
        if eq and (not head or _NAME.match(head)):
            name, source = head, tail
        else:
            name, source = part, part
        if not name or not source:
            raise UserError(f"--data: {part!r} is not [name=]source (e.g. gsm8k=data/gsm8k-test.jsonl)")
        if name in out:
            raise UserError(f"--data names benchmark {name!r} twice")
        out[name] = source
    if not out:
        raise UserError("--data is empty; expected comma-separated [name=]source entries")
    return out


def check_settings(args) -> None:
    """Everything that can be checked without loading a model; raises UserError naming the flag."""
    from trlvr.engine import check_decoding

    try:
        check_decoding(args.temperature, args.top_p, args.top_k)
    except ValueError as e:
        raise UserError(f"decoding: {e}") from None
    from trlvr.models import check_device

    for flag, name in (("--device", args.device), ("--junior-device", args.junior_device)):
        if name:
            check_device(name, flag)
    if args.junior_device and args.junior == "self":
        raise UserError("--junior-device: --junior self shares the senior's weights, so it runs on the senior's device")
    suite = [s.strip() for s in args.suite.split(",") if s.strip()]
    unknown = sorted(set(suite) - set(D.SUITE_NAMES))
    if unknown or not suite:
        raise UserError(f"--suite: unknown entries {unknown}; choose from {SUITE_DEFAULT}")
    for flag, v, lo in (
        ("--n", args.n, 1),
        ("--max-new-tokens", args.max_new_tokens, 1),
        ("--batch-size", args.batch_size, 1),
    ):
        if v < lo:
            raise UserError(f"{flag} must be >= {lo}, got {v}")
    if not args.k or min(args.k) < 1 or max(args.k) > args.n:
        raise UserError(f"--k: every k must be in [1, --n {args.n}], got {args.k}")
    if args.limit is not None and args.limit < 1:
        raise UserError(f"--limit must be >= 1, got {args.limit}")
    from trlvr.models import locate

    for flag, path in (("--senior", args.senior), ("--junior", args.junior)):
        if path != "self":
            locate(path, flag, "model")
    if args.tokenizer:
        locate(args.tokenizer, "--tokenizer", "tokenizer")


def data_identity(source: str, split: str | None) -> dict:
    from trlvr.eval.fingerprint import file_digest

    p = Path(source)
    if p.is_file():
        return {"source": str(p.resolve()), "sha256": file_digest(p)}
    return {"source": source, "split": split}


def config_context_length(*paths: str) -> int | None:
    """The smallest `max_position_embeddings` of the models' configs (read without the weights)."""
    from transformers import AutoConfig

    from trlvr.models import locate
    from trlvr.training.peft_setup import adapter_base, is_adapter_dir

    found = []
    for path in paths:
        if path == "self":
            continue
        where, extra = locate(adapter_base(path) if is_adapter_dir(path) else path, "model", "model")
        found.append(getattr(AutoConfig.from_pretrained(where, **extra), "max_position_embeddings", None))
    found = [int(c) for c in found if isinstance(c, int) and c > 0]
    return min(found) if found else None


def main(args) -> int:
    sources = parse_sources(args.data)
    if not args.seeds:
        return evaluate_one(args, sources, args.senior, args.out)
    if "{seed}" not in args.senior:
        raise UserError("--seeds: put {seed} in --senior, e.g. --senior 'runs/toy-tandem/seed-{seed}@selected'")
    if len(set(args.seeds)) < 2:
        raise UserError(f"--seeds: a seed group needs at least 2 distinct seeds, got {args.seeds}")
    from trlvr.eval.groups import write_group_summary

    template, group_dir = args.senior, args.out
    for s in args.seeds:
        print(f"== seed {s}")
        evaluate_one(args, sources, template.replace("{seed}", str(s)), str(Path(group_dir) / f"seed-{s}"))
    summary = write_group_summary(group_dir)
    print(format_group(summary))
    print(f"wrote {group_dir}/group.json")
    return 0


def format_group(summary: dict) -> str:
    """Across-seed macro metrics: value [two-level CI] and each seed's value."""
    from trlvr.eval.format import entry_text, number, unit

    lines = [f"{'metric':36s} seeds {summary['seeds']}: mean [95% CI over seeds and problems]   per seed"]
    for name, e in summary["metrics"].items():
        per = " ".join(number(v, name, 3) for v in e["per_seed"].values())
        lines.append(f"{name + unit(name):36s} {entry_text(e, name, digits=3):34s} {per}")
    return "\n".join(lines)


def selection_note(spec: str, record: dict | None, benchmarks: dict) -> dict | None:
    """How a RUN@selected senior was chosen, with its overlap with the data evaluated here (a
    checkpoint chosen on its own test data is flagged in the report)."""
    from trlvr.data import problem_key

    if record is None:
        return None
    val_keys = set(record["val"].get("keys", []))
    overlap = {b: sum(problem_key(p) in val_keys for p in ps) / len(ps) for b, ps in benchmarks.items() if ps}
    return {"run": spec.removesuffix("@selected"), "step": record["step"], "metric": record["metric"],
            "val": {k: v for k, v in record["val"].items() if k != "keys"}, "val_overlap": overlap}  # fmt: skip


def evaluate_one(args, sources: dict, senior_spec: str, out: str) -> int:
    from trlvr.data import load_problems
    from trlvr.experiments.selection import resolve_senior

    args.senior, record = resolve_senior(senior_spec)  # RUN@selected -> the chosen checkpoint
    args.out = out
    check_settings(args)
    benchmarks = {
        name: load_problems(src, split=args.split, limit=args.limit) for name, src in sources.items()
    }
    selection = selection_note(senior_spec, record, benchmarks)

    import torch

    from trlvr.eval.runner import evaluate
    from trlvr.models import load_causal_lm, load_tokenizer, model_fingerprint
    from trlvr.rewards import MathReward

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    dtype = {"auto": "auto", "bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}
    tokenizer = load_tokenizer(
        args.tokenizer or args.senior, role="--tokenizer" if args.tokenizer else "--senior"
    )
    context = (
        config_context_length(args.senior, args.junior)
        if args.context_length == "auto"
        else args.context_length
    )

    from trlvr.training.peft_setup import is_adapter_dir, load_pair

    loaded = {}

    def pair():  # both models, loaded once --out is known to be resumable; adapters load onto their base
        if not loaded:
            if is_adapter_dir(args.senior) or args.junior == "self":
                s, j = load_pair(args.senior, args.junior, dtype=dtype[args.dtype])
            else:
                s = load_causal_lm(args.senior, role="--senior", dtype=dtype[args.dtype])
                j = load_causal_lm(args.junior, role="--junior", dtype=dtype[args.dtype])
            loaded["senior"] = s.to(device).eval()
            loaded["junior"] = j if args.junior == "self" else j.to(args.junior_device or device).eval()
        return loaded

    senior_fp = model_fingerprint(args.senior, "--senior")
    junior_fp = {"self_of": senior_fp} if args.junior == "self" else model_fingerprint(args.junior, "--junior")
    res = evaluate(
        lambda: pair()["senior"], lambda: pair()["junior"], tokenizer, benchmarks, args.out,
        suite=[s.strip() for s in args.suite.split(",") if s.strip()], n=args.n, ks=args.k,
        decoding={"temperature": args.temperature, "top_p": args.top_p, "top_k": args.top_k},
        seed=args.seed, max_new_tokens=args.max_new_tokens, batch_size=args.batch_size,
        progress=not args.no_progress, handoff_max_rounds=args.handoff_max_rounds,
        score_batch_size=args.score_batch_size,
        model_paths={"senior": args.senior, "junior": args.junior, "data": sources,
                     **({"senior_selection": selection} if selection else {})},
        identities={
            "senior": senior_fp, "junior": junior_fp,
            "data": {name: data_identity(src, args.split) for name, src in sources.items()},
        },
        context_length=context,
        max_prompt_tokens="auto" if args.max_prompt_tokens is None else args.max_prompt_tokens,
        include_eos=args.include_eos, fresh=args.fresh,
        score_fn=MathReward(require_box=False) if args.grading == "boxed_or_tail" else None,
        engine_options={"decode": args.decode,
                        **({"junior_device": args.junior_device} if args.junior_device else {})},
    )  # fmt: skip
    print(format_summary(res))
    if selection and any(selection["val_overlap"].values()):
        print(f"WARNING: the senior's checkpoint was selected on data evaluated here: {selection['val_overlap']}")
    dropped = {b: len(v) for b, v in res["config"]["dropped_problems"].items() if v}
    if dropped:
        print(f"dropped over-long prompts (listed in results.json): {dropped}")
    print(f"wrote {args.out}/results.json and {args.out}/samples.jsonl")
    return 0


def format_summary(res: dict) -> str:
    """Macro metrics as an aligned terminal table."""
    from trlvr.eval.format import entry_text, unit

    lines = [f"{'metric':36s} macro [95% CI]"]
    for name, e in res["macro"]["metrics"].items():
        lines.append(f"{name + unit(name):36s} {entry_text(e, name, digits=3)}")
    return "\n".join(lines)

"""`trlvr eval`: evaluate a senior with its junior (solo, handoff, dose, legibility, drift, junior).

    trlvr eval --senior runs/toy/senior --junior runs/toy/junior --data runs/toy/data/test.jsonl \\
        --n 8 --k 1,2,4,8 --out runs/toy/eval

`--data` takes comma-separated sources for `trlvr.data.load_problems`, each optionally named
`name=source` (the name keys the benchmark in results.json; default: the source string).
An interrupted run resumes from DIR/samples.jsonl when rerun with the same settings; other
settings are refused with the list of differences (`--fresh` starts over). A larger `--limit`
or `--n` extends the directory (whole batches are kept; the samples of a batch whose batch-mates
changed are made again, said in one line: `trlvr.eval.plan`), a smaller one reports exactly what
it asks for.
Every setting is checked before a model is loaded.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from trlvr import rundir
from trlvr.cli.formatting import DefaultsFormatter
from trlvr.engine.backends import BACKENDS, backend
from trlvr.engine.capabilities import check_capabilities
from trlvr.errors import UserError
from trlvr.eval.spec import SETTINGS, EvalSpec, from_flags
from trlvr.kinds import COUNT, OUT_DIR, SEEDS, TEXT
from trlvr.memory import GPU_BYTES
from trlvr.models import DEVICE
from trlvr.ranks import Ranks
from trlvr.team import AUTO, PAIRINGS, Team, is_text

_NAME = re.compile(r"^[A-Za-z0-9_.\-]+$")  # a benchmark name before "=" (sources may contain "=")


def make_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "eval",
        help="evaluate a senior/junior pair; writes results.json and samples.jsonl",
        formatter_class=DefaultsFormatter,
    )
    p.add_argument(
        "--senior",
        required=True,
        type=TEXT,
        help="senior model folder (or a cached hub id); RUN@selected = the checkpoint `trlvr select` chose; "
        "with --seeds, {seed} in the path is replaced by each seed",
    )
    p.add_argument(
        "--seeds",
        type=SEEDS,
        default=None,
        help="evaluate one senior per training seed (comma-separated) into OUT/seed-<s>/, then "
        "OUT/group.json with across-seed CIs (two-level bootstrap)",
    )
    p.add_argument(
        "--junior",
        required=True,
        type=TEXT,
        help="junior model folder; 'self' = a LoRA senior's base model with its adapters off "
        "(one copy of the weights)",
    )
    p.add_argument("--tokenizer", type=TEXT, default=None, help="tokenizer folder (default: the senior's)")
    p.add_argument(
        "--data", required=True, type=TEXT, help="comma-separated benchmark sources, each [name=]source"
    )
    p.add_argument("--split", type=TEXT, default=None, help="dataset split passed to load_problems")
    p.add_argument("--limit", type=COUNT, default=None, help="first N problems of each benchmark")
    add_settings(p, "sampling")  # --n ... --score-batch-size: declared on EvalSpec
    p.add_argument("--dtype", default="auto", choices=["auto", "bfloat16", "float16", "float32"])
    p.add_argument("--device", type=DEVICE, default=None, help="default: cuda if available, else cpu")
    p.add_argument(
        "--junior-device",
        type=DEVICE,
        default=None,
        help="put the junior on its own device (e.g. cuda:1); default: --device",
    )
    add_settings(p, "grading")
    p.add_argument(
        "--skip-bad-rows",
        action="store_true",
        help="evaluate the usable rows of a --data source that has unusable ones (no gold, a gold the grader "
        "cannot read, ...), listing the others (file, row, reason) in results.json (default: refuse the run)",
    )
    add_settings(p, "engine")
    p.add_argument(
        "--pairing",
        default=AUTO,
        choices=list(PAIRINGS),
        help="auto: lockstep when the two tokenizers are identical, text pairing otherwise "
        "(each model on its own tokens of one shared text); lockstep refuses different vocabularies",
    )
    p.add_argument(
        "--backend",
        default="hf",
        choices=tuple(BACKENDS),
        help="the engine that generates: hf (trlvr's, on the HF models) or vllm (one vLLM engine with "
        "both models; needs vLLM: pip install 'trlvr[vllm]'); recorded in results.json, and two "
        "backends' samples never share a directory",
    )
    p.add_argument(
        "--refuse-lossy-prompts",
        action="store_true",
        help="refuse problems whose text the tokenizer cannot spell (default: list and warn)",
    )
    p.add_argument("--no-progress", action="store_true", help="hide progress bars")
    p.add_argument(
        "--out", required=True, type=OUT_DIR, help="output directory (resumed when it already has samples)"
    )
    p.add_argument(
        "--fresh",
        action="store_true",
        help="start over: what --out holds moves into --out/replaced-<time>/ (nothing is deleted)",
    )
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="check every setting and print the engine's memory plan, then exit "
        "(nothing loads or is written)",
    )
    p.add_argument(
        "--gpu-memory",
        type=GPU_BYTES,
        default=None,
        help="with --dry-run: plan for this GPU (a size such as 80GB, or a name such as H200); "
        "default: the local machine's",
    )
    return p


# The order `trlvr eval --help` has always listed the settings' flags in; a setting added later follows
# the others of its section.
_HELP_ORDER = (
    "n",
    "ks",
    "suite",
    "dose_shares",
    "prefix_ks",
    "max_new_tokens",
    "context_length",
    "max_prompt_tokens",
    "temperature",
    "top_p",
    "top_k",
    "handoff_max_rounds",
    "include_eos",
    "seed",
    "batch_size",
    "score_batch_size",
    "grading",
    "prompt_template",
    "graders",
    "decode",
)


def add_settings(p: argparse.ArgumentParser, section: str) -> None:
    """The flags of the EvalSpec settings of one section (`trlvr.eval.spec.SETTINGS`)."""
    names = [*(n for n in _HELP_ORDER if n in SETTINGS), *(n for n in SETTINGS if n not in _HELP_ORDER)]
    for s in (SETTINGS[n] for n in names):
        if s.section != section:
            continue
        if s.switch:
            p.add_argument(*s.flags, action="store_true", help=s.help)
            continue
        how = {"type": s.kind} if s.kind is not None else {"choices": list(s.choices)}
        p.add_argument(*s.flags, dest=s.dest, default=s.default, help=s.help, **how)


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
            head, colon, tail = part.partition(":")  # toy:data/test.jsonl, a colon for the "="
            if colon and _NAME.match(head) and Path(tail).expanduser().is_file() and not Path(part).exists():
                raise UserError(f"--data: {part}: no such file; did you mean {head}={tail}? (name=source)")
        if not name or not source:
            raise UserError(f"--data: {part!r} is not [name=]source (e.g. gsm8k=data/gsm8k-test.jsonl)")
        if name in out:
            raise UserError(f"--data names benchmark {name!r} twice")
        out[name] = source
    if not out:
        raise UserError("--data is empty; expected comma-separated [name=]source entries")
    return out


def spec_from_args(args) -> EvalSpec:
    """The evaluation's settings from the flags; every check that needs no model, naming the flag."""
    spec = settings_from_args(args)
    from trlvr.models import locate

    team = Team.declared(args.senior, args.junior, names=("--senior", "--junior"))
    folders = {"--senior": args.senior}
    if spec.needs_junior and not team.is_self:  # `self` is the senior's base: no folder of its own
        folders["--junior"] = args.junior
    for flag, path in folders.items():
        locate(path, flag, "model")
    if args.tokenizer:
        locate(args.tokenizer, "--tokenizer", "tokenizer")
    check_out(args.out)
    return spec


def settings_from_args(args) -> EvalSpec:
    """The checks of `spec_from_args` that need no file (what `trlvr study plan` checks of an eval stage
    whose models are not trained yet)."""
    for flag, name in (("--device", args.device), ("--junior-device", args.junior_device)):
        if name:
            from trlvr.models import check_device

            check_device(name, flag)
    if args.limit is not None and args.limit < 1:
        raise UserError(f"--limit must be >= 1, got {args.limit}")
    # what the capability rules can judge before any file is read: the junior and its device (`self` has none)
    declared = Team.declared(args.senior, args.junior, names=("--senior", "--junior"))
    check_capabilities(declared.plan("eval", junior_device=bool(args.junior_device)))
    return from_flags(args)


def check_out(out: str) -> None:
    """--out must be a directory or a path that can become one (not a file, nor under a file)."""
    from trlvr.rundir import check_dir_path

    check_dir_path(out, "--out")


def check_out_folder(args) -> None:
    """--out as `trlvr eval` writes it (`trlvr.rundir.prepare_output`, what --dry-run checks too): a folder
    that holds an evaluation, a seed group of them, or nothing of trlvr's (never a training run, a study, a
    smoke or a model, --fresh or not); and a group and a single evaluation never share it (`refuse_mixing`,
    unless --fresh sets the other aside, which the evaluation does once every check passed)."""
    from trlvr.eval.groups import refuse_mixing

    checks = [] if args.fresh else [lambda: refuse_mixing(args.out, group=bool(args.seeds))]
    rundir.prepare_output(args.out, (rundir.EVALUATION, rundir.EVALUATION_SEEDS), flag="--out", checks=checks)


def check_group(args) -> None:
    """--seeds: the senior names {seed}, the group has two seeds or more (the run and --dry-run check it)."""
    if "{seed}" not in args.senior:
        raise UserError(
            "--seeds: put {seed} in --senior, e.g. --senior 'runs/toy-tandem/seed-{seed}@selected'"
        )
    if len(set(args.seeds)) < 2:
        raise UserError(f"--seeds: a seed group needs at least 2 distinct seeds, got {args.seeds}")


def dry_run(args, sources: dict) -> int:
    """Every check `trlvr eval` makes before a model loads, then the engine's `memory plan` (refused in one
    line when it cannot start on backend vllm); nothing is loaded or written. Planned for this machine (no
    --gpu-memory), backend vllm must be installed here; for another GPU (--gpu-memory) it need not be."""
    from trlvr.eval.api import eval_plan, evaluate_specs
    from trlvr.training.memory_plan import device_memory

    check_out_folder(args)
    if args.seeds:
        check_group(args)
    senior = args.senior.replace("{seed}", str(args.seeds[0])) if args.seeds else args.senior
    out = str(Path(args.out) / f"seed-{args.seeds[0]}") if args.seeds else args.out
    one, spec, senior_spec = checked(args, senior, out)
    benchmarks, identities = _benchmarks(one, sources)
    models = model_spec(one, spec, senior_spec)
    # the run's own checks up to its first weight load, the folder's samples included; nothing is written
    evaluate_specs(
        models,
        benchmarks,
        spec,
        out,
        data_identities=identities,
        data_sources=sources,
        fresh=args.fresh,
        refuse_lossy=args.refuse_lossy_prompts,
        check_only=True,
    )
    if args.gpu_memory is None:  # a plan for this machine: its engine must be here
        from trlvr.engine import pair_class

        pair_class(args.backend)  # one line when it is not installed (as the run itself says it)
    plan = eval_plan(
        models, benchmarks, spec, args.gpu_memory if args.gpu_memory is not None else device_memory()
    )
    if backend(args.backend).gpu_share:
        plan.check(f"--backend {args.backend}")
    print(
        f"config ok: senior {senior_spec}, junior {args.junior}, "
        f"{sum(map(len, benchmarks.values()))} problems, "
        f"suite {','.join(spec.suite)}, backend {args.backend}, out {args.out}"
    )
    print(plan.render())
    return 0


def main(args) -> int:
    sources = parse_sources(args.data)
    if args.dry_run:
        return dry_run(args, sources)
    check_out_folder(args)  # a group and a single evaluation never share a folder, nor another command's
    if not args.seeds:
        return evaluate_one(*checked(args, args.senior, args.out), sources)
    check_group(args)
    from trlvr.eval.api import check_eval
    from trlvr.eval.format import format_group
    from trlvr.eval.groups import start_group, write_group_summary

    template, group_dir = args.senior, args.out
    check_out(group_dir)
    runs = {
        s: checked(args, template.replace("{seed}", str(s)), str(Path(group_dir) / f"seed-{s}"))
        for s in args.seeds
    }
    benchmarks = _benchmarks(args, sources)  # every seed's senior and settings, and the data, checked first
    for one, spec, senior_spec in runs.values():  # and what each seed's pair can run
        check_eval(model_spec(one, spec, senior_spec), benchmarks[0], spec, sources)
    writer = Ranks.current().writer  # several processes of a launch: rank 0 alone writes the group's files
    # every check passed: start over (--fresh) with the whole group, so no seed folder of an earlier one stays
    rundir.prepare_output(
        group_dir,
        (rundir.EVALUATION_SEEDS, rundir.EVALUATION),
        flag="--out",
        start_over=args.fresh and writer,
    )
    if writer:
        start_group(group_dir, args.seeds, template)  # the group is these seeds, whatever else OUT holds
    for s, run in runs.items():
        if writer:
            print(f"== seed {s}")
        evaluate_one(*run, sources, benchmarks)
    if not writer:
        return 0
    summary = write_group_summary(group_dir, args.seeds)
    print(format_group(summary))
    print(f"wrote {group_dir}/group.json")
    return 0


def checked(args, senior_spec: str, out: str) -> tuple:
    """(args for one evaluation, its EvalSpec, the senior spec): RUN@selected resolved to the chosen
    checkpoint and every setting checked (`spec_from_args`), before anything is loaded or written."""
    import copy

    from trlvr.eval.api import resolve_senior

    one = copy.copy(args)
    one.senior, _ = resolve_senior(senior_spec)
    one.out = out
    return one, spec_from_args(one), senior_spec


def _benchmarks(args, sources: dict) -> tuple[dict, dict]:
    from trlvr.eval.api import load_benchmarks

    # golds checked as `data check` does; --skip-bad-rows: the usable rows, the others listed in results.json
    return load_benchmarks(
        sources, split=args.split, limit=args.limit, skip_bad=getattr(args, "skip_bad_rows", False)
    )


def evaluate_one(
    args, spec: EvalSpec, senior_spec: str, sources: dict, benchmarks: tuple | None = None
) -> int:
    from trlvr.eval.api import evaluate_specs
    from trlvr.eval.format import format_summary

    if benchmarks is None:  # a seed group loaded them, and checked every seed's run, before its first
        benchmarks = _benchmarks(args, sources)  # the capabilities: evaluate_specs checks them first
    benchmarks, identities = benchmarks
    res = evaluate_specs(
        model_spec(args, spec, senior_spec),
        benchmarks,
        spec,
        args.out,
        data_identities=identities,
        data_sources=sources,
        progress=not args.no_progress,
        fresh=args.fresh,
        refuse_lossy=args.refuse_lossy_prompts,
    )
    if not Ranks.current().writer:  # another process of a launch: rank 0 reports what it wrote
        return 0
    print(format_summary(res))
    print_notes(res)
    print(f"wrote {args.out}/{rundir.RESULTS} and {args.out}/{rundir.SAMPLES}")
    return 0


def model_spec(args, spec: EvalSpec, senior_spec: str):
    """The models of one evaluation as its flags name them (`trlvr.eval.api.ModelSpec`); a suite without a
    junior puts none on a device."""
    from trlvr.eval.api import ModelSpec

    return ModelSpec(
        senior_spec,
        args.junior,
        tokenizer=args.tokenizer,
        dtype=args.dtype,
        device=args.device,
        junior_device=args.junior_device if spec.needs_junior else None,
        pairing=args.pairing,
        backend=args.backend,
    )


def print_notes(res: dict) -> None:
    """One line each for what a reader of the numbers must know: selection overlap, dropped, lossy prompts."""
    selection = res["config"]["models"].get("senior_selection")
    if selection and any(selection["val_overlap"].values()):
        print(
            "WARNING: the senior's checkpoint was selected on data evaluated here: "
            f"{selection['val_overlap']}"
        )
    skipped = {b: len(v) for b, v in (res["config"].get("skipped_rows") or {}).items() if v}
    if skipped:
        print(
            "WARNING: unusable rows left out "
            f"(--skip-bad-rows; each file, row and reason listed in results.json): {skipped}"
        )
    dropped = {b: len(v) for b, v in res["config"]["dropped_problems"].items() if v}
    if dropped:
        print(f"dropped over-long prompts (listed in results.json): {dropped}")
    if is_text(res["config"].get("pairing")):
        print(
            "pairing: text (two tokenizers, one shared text); legibility/junior_bpb is the number comparable "
            "across pairs; " + "; ".join(f"{m}: {why}" for m, why in res.get("undefined", {}).items())
        )
    lossy = {b: len(v) for b, v in res["config"].get("lossy_prompts", {}).items() if v}
    if lossy:
        print(
            f"WARNING: problems the tokenizer cannot spell (decode(encode(text)) differs; listed in "
            f"results.json, evaluated as the model sees them; --refuse-lossy-prompts refuses them): {lossy}"
        )

"""`trlvr select RUN --val DATA --metric M`: pick a run's checkpoint on held-out data.

    trlvr select runs/toy-tandem --val split:200 --metric handoff/pass@1
    trlvr select runs/toy-tandem --val runs/toy/data/val.jsonl --metric solo/pass@1 --n 4
    trlvr eval --senior runs/toy-tandem@selected ...          # evaluate the chosen checkpoint on test

Every checkpoint-N/ (and final/) of RUN is evaluated on the validation problems (one resumable
evaluation folder each, under RUN/select/); RUN/selected.json records the best by --metric
(--direction max, or min for legibility/drift). `--val split:N` uses the N training problems the
run held out (`--holdout N` at training time); training never saw them. Test data is never read.
RUN/selected.json stores the checkpoint's path relative to RUN, so `RUN@selected` names the same
checkpoint from any directory. Every setting (the metric's name, n, split:N against the run's
holdout, the validation golds) is checked before the first checkpoint is evaluated.
"""

from __future__ import annotations

import argparse

from trlvr import rundir
from trlvr.cli.formatting import DefaultsFormatter
from trlvr.engine.backends import BACKENDS
from trlvr.ranks import Ranks


def make_parser(subparsers) -> argparse.ArgumentParser:
    from trlvr.data.prompts import PROMPT_TEMPLATES
    from trlvr.eval import defaults as D
    from trlvr.kinds import COUNT, NONNEG, NONNEG_FLOAT, SEED, TEXT, UNIT, count
    from trlvr.models import DEVICE
    from trlvr.rewards import GRADERS

    p = subparsers.add_parser(
        "select",
        help="choose a run's checkpoint on held-out validation data",
        formatter_class=DefaultsFormatter,
    )
    p.add_argument("run", type=TEXT, help="training run folder (output_dir)")
    p.add_argument(
        "--val",
        required=True,
        type=TEXT,
        help="validation data: a problems file, or split:N (the run's holdout)",
    )
    p.add_argument(
        "--metric", type=TEXT, default="handoff/pass@1", help="a results.json metric, e.g. solo/pass@1"
    )
    p.add_argument(
        "--direction", choices=["max", "min"], default=None, help="default: min for legibility/drift"
    )
    p.add_argument("--junior", type=TEXT, default=None, help="junior folder (default: the run's junior)")
    p.add_argument("--limit", type=COUNT, default=None, help="first N validation problems")
    p.add_argument(
        "--n",
        "--samples",
        dest="n",
        type=count(D.MAX_N),
        default=4,
        help="samples per problem (--samples: the same, for a launcher whose own flags take --n)",
    )
    p.add_argument("--max-new-tokens", type=COUNT, default=D.MAX_NEW_TOKENS)
    p.add_argument("--temperature", type=NONNEG_FLOAT, default=D.DEFAULT_DECODING["temperature"])
    p.add_argument("--top-p", type=UNIT, default=D.DEFAULT_DECODING["top_p"])
    p.add_argument("--top-k", type=NONNEG, default=D.DEFAULT_DECODING["top_k"])
    p.add_argument("--seed", type=SEED, default=D.SEED)
    p.add_argument(
        "--prompt-template",
        default="trlvr",
        choices=list(PROMPT_TEMPLATES),
        help="the instruction after each problem (see trlvr eval): the one the run trained with",
    )
    p.add_argument("--batch-size", type=COUNT, default=D.BATCH_SIZE)
    p.add_argument("--dtype", default="auto", choices=["auto", "bfloat16", "float16", "float32"])
    p.add_argument("--device", type=DEVICE, default=None, help="default: cuda if available, else cpu")
    p.add_argument(
        "--junior-device", type=DEVICE, default=None, help="put the junior on its own device (e.g. cuda:1)"
    )
    p.add_argument(
        "--backend", default="hf", choices=tuple(BACKENDS), help="the engine that generates (see trlvr eval)"
    )
    p.add_argument(
        "--grader",
        default="trlvr",
        choices=GRADERS,
        help=(
            "the grader the metric is computed with (see trlvr eval --grader): trlvr, authors or "
            "authors-paper"
        ),
    )
    p.add_argument(
        "--include-initial", action="store_true", help="also evaluate the run's starting senior (step 0)"
    )
    p.add_argument(
        "--fresh",
        action="store_true",
        help=(
            "start every checkpoint's validation evaluation over (RUN/select/<val>/step-N/ made under "
            "other settings)"
        ),
    )
    p.add_argument("--no-progress", action="store_true")
    return p


def main(args) -> int:
    from trlvr.eval.api import ModelSpec
    from trlvr.experiments.select_run import SelectSpec, run_selection, selection_spec

    # RUN is a training run (select writes RUN/select/ and RUN/selected.json into it), before any other check
    rundir.prepare_output(args.run, rundir.TRAINING, flag="RUN")
    rundir.check_unlocked(
        args.run, "trlvr train", "RUN"
    )  # a run being trained (or selected): refused at once
    how = SelectSpec(args.val, args.metric, args.direction, args.limit, args.include_initial)
    spec = selection_spec(
        args.metric,
        n=args.n,
        max_new_tokens=args.max_new_tokens,
        seed=args.seed,
        decoding={"temperature": args.temperature, "top_p": args.top_p, "top_k": args.top_k},
        batch_size=args.batch_size,
        prompt_template=args.prompt_template,
        grader=args.grader,
    )
    models = ModelSpec(
        "",
        args.junior,
        dtype=args.dtype,
        device=args.device,
        junior_device=args.junior_device,
        backend=args.backend,
    )
    check_run(args, spec)
    sel = run_selection(args.run, how, spec, models, progress=not args.no_progress, fresh=args.fresh)
    if not Ranks.current().writer:  # another process of a launch: rank 0 reports what it wrote
        return 0
    print(
        f"selected step {sel.step} ({sel.path}): {sel.metric} = {sel.value:.4f} "
        f"[{sel.ci_low:.4f}, {sel.ci_high:.4f}] on {sel.val['size']} validation problems, grader {sel.grader}"
    )
    print(
        f"wrote {args.run}/{rundir.SELECTED_FILE} and {args.run}/select/{sel.val['name']}/table.md, curve.png"
    )
    return 0


def check_run(args, spec) -> None:
    """The selection's capabilities (`trlvr.engine.capabilities`, the one place), before the first checkpoint
    is evaluated: --metric and its protocols against the pairing the run's checkpoints and junior give (and
    the run's own pairing setting) and --backend, the validation data's chat prompts against the
    tokenizers' templates, the toy worlds of the run, the junior and the validation data. What is missing
    (no run record, no junior, no checkpoint, no validation file) is left to `run_selection`'s own line."""
    from pathlib import Path

    from trlvr.data import load_problems
    from trlvr.data.sources import is_local
    from trlvr.engine.capabilities import (
        chat_prompt_of,
        check_capabilities,
        has_chat_template,
        worlds_of,
    )
    from trlvr.eval.suite import parse_protocol, protocols_for
    from trlvr.experiments.select_run import read_run, split_size
    from trlvr.experiments.selection import list_checkpoints
    from trlvr.models import is_adapter_dir, load_tokenizer_for
    from trlvr.team import AUTO, Team

    tandem = read_run(args.run).get("tandem", {})
    junior = args.junior or tandem.get("junior")
    if not junior:
        return
    senior = list_checkpoints(args.run)[0].path  # every checkpoint has the run's tokenizer
    needs_junior = bool(set(spec.suite) - {"solo"})
    tok = load_tokenizer_for(senior, "--senior")
    team = Team.resolve(
        senior,
        junior if needs_junior else None,
        pairing=tandem.get("pairing", AUTO),
        backend=args.backend,
        senior_tok=tok,
        names=(senior, "--junior"),
        check_rows=False,
    )
    val = Path(args.run) / rundir.HOLDOUT_FILE if split_size(args.val) is not None else Path(args.val)
    problems = list(load_problems(str(val), limit=args.limit)) if is_local(str(val)) and val.is_file() else []
    chat = chat_prompt_of(problems)
    templates = ((f"the run's checkpoint {senior}", has_chat_template(tok)),) if chat else ()
    if chat and team.is_text:
        templates += ((f"--junior {junior}", has_chat_template(team.junior_tok)),)
    schedules = tuple(
        parse_protocol(name).schedule(spec.handoff_max_rounds)
        for name in protocols_for(spec.suite, spec.dose_shares, spec.prefix_ks)
    )
    paths = {
        f"{args.run} (its checkpoints)": senior,
        "--junior": team.junior_model,
        "--val": str(val),
    }
    check_capabilities(
        team.plan(
            "select",
            schedules=schedules,
            suite=spec.suite,
            metrics=(args.metric,),
            junior_device=bool(args.junior_device) and needs_junior and not team.is_self,
            senior_adapter=senior if is_adapter_dir(senior) else None,
            chat_prompt=chat,
            templates=templates,
            worlds=worlds_of(paths),
        )
    )

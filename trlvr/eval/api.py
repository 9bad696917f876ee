"""One path from a checkpoint to a number: specs in, an evaluation directory out.

    from trlvr.eval.api import EvalSpec, ModelSpec, evaluate_specs, load_benchmarks
    benchmarks, data_ids = load_benchmarks({"toy": "runs/toy/data/test.jsonl"}, limit=200)
    res = evaluate_specs(ModelSpec("runs/toy-tandem@selected", "runs/toy/junior"), benchmarks,
                         EvalSpec(n=4, ks=(1, 2, 4)), "runs/eval-tandem", data_identities=data_ids)

`trlvr eval`, `trlvr select` and the demo all call `evaluate_specs`, so a number means the same
thing whichever of them produced it. It does, in order: resolve the senior spec (a model folder,
a LoRA adapter folder, or `RUN@selected`) and the junior spec (a folder, or `self` = the LoRA
senior's base, adapters off); load the senior's tokenizer (prompts are always rendered with it);
choose the pair's mode from their vocabularies (`trlvr.team.choose_pairing`, as training does:
identical token by token -> lockstep; different -> text pairing, or an error under `pairing:
lockstep`; `--suite solo` alone needs no junior and loads none); identify both models by their
files; and hand `trlvr.eval.runner.evaluate` the `Partners`, whose Pair loads only once the output
directory is known to be resumable.

What this file does not know: command-line flags, training, how a protocol runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from trlvr import artifacts
from trlvr.data import load_problems, problem_key
from trlvr.engine.backends import Backend, backend
from trlvr.engine.capabilities import chat_prompt_of, check_capabilities, has_chat_template, worlds_of
from trlvr.engine.release import free_memory
from trlvr.engine.schedules import JUNIOR, SoloSchedule
from trlvr.engine.self_pair import self_pair
from trlvr.errors import UserError
from trlvr.eval.fingerprint import file_digest
from trlvr.eval.plan import completion_budget, default_max_prompt_tokens, split_by_prompt_length
from trlvr.eval.prepare import prompt_ids_for
from trlvr.eval.spec import EvalSpec
from trlvr.eval.suite import parse_protocol, protocols_for
from trlvr.gpu import free_memory_check
from trlvr.memory import MemoryPlan, Stack, read_config
from trlvr.models import (
    adapter_base,
    context_length,
    is_adapter_dir,
    load_model_or_adapter,
    load_tokenizer,
    load_tokenizer_for,
    model_fingerprint,
    model_folder,
)
from trlvr.provenance import path_for_record, path_from_record
from trlvr.ranks import Ranks
from trlvr.rewards import check_golds
from trlvr.rundir import (
    FINAL,
    SELECTED_FILE,
    SELECTION_ARTIFACT,
    check_unlocked,
    checkpoint_step,
    newest_step,
    read_record,
)
from trlvr.team import LOCKSTEP, TEXT, Team, choose_pairing, is_lockstep, is_self, is_text

__all__ = [
    "EvalSpec",
    "ModelSpec",
    "check_eval",
    "evaluate_specs",
    "load_benchmarks",
    "load_pair",
    "read_selection",
    "resolve_senior",
    "SELECTED_FILE",
]


def read_selection(run_dir: str | Path) -> dict:
    """RUN/selected.json, as `trlvr select` wrote it: a complete selection (`trlvr.artifacts`) naming a path."""
    path = Path(run_dir) / SELECTED_FILE
    if not path.is_file():
        raise UserError(f"{path}: no selection recorded; run `trlvr select {run_dir} --val ...` first")
    fix = f"; run `trlvr select {run_dir} --val ...` again"
    if why := artifacts.problem(run_dir, SELECTION_ARTIFACT):
        raise UserError(f"{path}: {why}{fix}")
    record = read_record(path, hint=fix)
    if not isinstance(record.get("path"), str) or not record["path"]:
        raise UserError(f"{path}: names no selected checkpoint (no 'path'){fix}")
    return record


def resolve_senior(spec: str) -> tuple[str, dict | None]:
    """ "RUN@selected" -> (the selected checkpoint's path, the selection record); any other path -> (path, None).
    A selected checkpoint that is not complete (`trlvr.artifacts.WEIGHTS`: a save cut short, a file
    truncated since) is refused in one line, never loaded; so is a checkpoint or final/ named as a path
    (one holding trlvr's manifest, or named as a run's checkpoint-N/ or final/, its manifest lost to a kill
    before it was written: other model folders are the loader's to judge)."""
    if not spec.endswith("@selected"):
        folder = Path(spec)
        ours = (folder / artifacts.MANIFEST).is_file() or (
            folder.is_dir() and (checkpoint_step(folder) is not None or folder.name == FINAL)
        )
        if ours and (
            why := artifacts.problem(spec, artifacts.WEIGHTS, deep=True)
        ):  # hashed just before the load
            raise UserError(
                f"--senior {spec}: not complete ({why}); a save cut short, or a file changed since"
            )
        return spec, None
    run = spec.removesuffix("@selected")
    check_unlocked(
        run, "trlvr train", f"--senior {spec}"
    )  # a run being trained (or selected) is read when it stands still
    sel = read_selection(run)
    path = path_from_record(sel["path"], run)
    if path == sel["path"] and not Path(path).is_absolute() and sel.get("step"):
        path = str(
            Path(run) / Path(path).name
        )  # an older record (relative to its writer's cwd): the run's checkpoint
    if not Path(path).is_dir():
        raise UserError(f"{run}/{SELECTED_FILE}: selected checkpoint {sel['path']} no longer exists")
    if why := artifacts.problem(
        path, artifacts.WEIGHTS, deep=True
    ):  # every file the load reads, hashed just before it
        raise UserError(
            f"{run}/{SELECTED_FILE}: selected checkpoint {path} is not complete ({why}); "
            "resume the run or select again"
        )
    check_selection_current(run, sel)
    return path, sel


def check_selection_current(run: str | Path, sel: dict) -> None:
    """A selection covers the checkpoints the run had when it was made: one made before the run trained on
    (a resume saved newer checkpoints) is refused in one line. Its newest step is `newest_step` (a record
    from before that field: its table's newest candidate)."""
    covered = sel.get("newest_step")
    if covered is None:
        covered = max((r.get("step", 0) for r in sel.get("table") or () if isinstance(r, dict)), default=None)
    now = newest_step(run)
    if covered is not None and now is not None and now > covered:
        raise UserError(
            f"{run}/{SELECTED_FILE}: the selection covers the run's checkpoints up to step {covered}, "
            f"but the run has trained on to step {now}; select again (trlvr select {run} --val ...)"
        )


def check_self_junior(senior_path: str) -> None:
    """`--junior self` is the LoRA senior's base with its adapters off: refused for a plain model folder."""
    if not is_adapter_dir(senior_path):
        raise UserError(
            f"--junior self: {senior_path} has no adapter_config.json; 'self' needs a LoRA senior "
            "(a run trained with use_peft: true, e.g. RUN/final)"
        )


def load_pair(senior_path: str, junior: str | None, *, dtype="auto"):
    """(senior, junior) models for evaluation; junior None -> (senior, None).

    junior "self": the LoRA senior's base with its adapters off, sharing the senior's weights
    (`trlvr.engine.self_pair`).
    """
    senior = load_model_or_adapter(senior_path, "--senior", dtype=dtype)
    if junior is None:
        return senior, None
    if not is_self(junior):
        return senior, load_model_or_adapter(junior, "--junior", dtype=dtype)
    check_self_junior(senior_path)
    return self_pair(senior)


def load_benchmarks(
    sources: dict[str, str], split: str | None = None, limit: int | None = None, skip_bad: bool = False
):
    """({name: problems}, {name: data identity}) for `--data` sources (files are hashed, not trusted by name).
    A source with an unusable row is refused in one line naming it and `--skip-bad-rows`; with `skip_bad`
    its usable rows are evaluated, and each benchmark's problems (a `trlvr.data.ProblemList`) carry the
    others in `.skipped`, which `evaluate_specs` lists in results.json (`skipped_rows`)."""
    benchmarks, identities = {}, {}
    for (
        name,
        src,
    ) in sources.items():  # golds the grader cannot parse are refused, as `data check` and training do
        benchmarks[name] = load_problems(
            src,
            split=split,
            limit=limit,
            check_gold=check_golds,
            on_bad="skip" if skip_bad else "raise",
            skip_flag="--skip-bad-rows",
        )
        p = Path(src)
        identities[name] = (
            {"source": str(p.resolve()), "sha256": file_digest(p)}
            if p.is_file()
            else {"source": src, "split": split}
        )
    return benchmarks, identities


def skipped_rows(benchmarks: dict[str, list], sources: dict | None = None) -> dict[str, list[dict]]:
    """{benchmark: [{file, row, field, reason}]}: the unusable rows `load_benchmarks(skip_bad=True)` left out
    (row 1-based, as `trlvr data check` counts them); benchmarks with none are left out."""
    out = {}
    for name, problems in benchmarks.items():
        bad = getattr(problems, "skipped", None) or []
        if bad:
            source = (sources or {}).get(name) or getattr(problems, "source", name)
            out[name] = [{"file": source, "row": b.row, "field": b.field, "reason": b.reason} for b in bad]
    return out


def _check_backend(models: ModelSpec, senior_path: str, junior: str | None, junior_tok) -> None:
    """That the backend is installed (what it cannot run was refused by `check_eval`)."""
    from trlvr.engine import pair_class

    pair_class(models.backend, TEXT if junior_tok is not None else LOCKSTEP)  # installed; one vocabulary


EVAL_ENGINE_SHARE = 0.9  # evaluation's vLLM engine: the GPU is its alone while it generates


def _engine_pair(
    spec: Backend,
    senior_path: str,
    junior: str | None,
    tok,
    dtype: str,
    seed: int,
    max_model_len: int | None = None,
    eos_token_ids: list[int] | None = None,
    max_num_seqs: int = 256,
):
    """An evaluation engine, its context the plan's longest prompt + budget (never the model's own limit), its
    `max_num_seqs` the rows one generate call sends (the evaluation's batch size, as `eval_plan` counts them)."""
    from trlvr.engine import make_pair

    engine = spec.load("engine").for_machine(
        dtype, seed, max_model_len, EVAL_ENGINE_SHARE, max_num_seqs=max_num_seqs
    )
    return make_pair(senior_path, junior, tok, backend=spec.name, engine=engine, eos_token_ids=eos_token_ids)


def hf_eos_ids(senior_path: str, tokenizer) -> list[int]:
    """What ends a row in the HF engine (`trlvr.engine.generator`): the tokenizer's EOS and the senior's
    generation config's, so every engine of an evaluation stops where the HF engine would."""
    from transformers import GenerationConfig

    ids = {tokenizer.eos_token_id} if tokenizer.eos_token_id is not None else set()
    base = adapter_base(senior_path) if is_adapter_dir(senior_path) else model_folder(senior_path)
    try:
        gen = GenerationConfig.from_pretrained(base).eos_token_id
    except OSError:  # no generation_config.json: the tokenizer's EOS alone, as the HF engine
        gen = None
    ids.update([gen] if isinstance(gen, int) else (gen or []))
    return sorted(ids)


class JuniorAlone:
    """The junior-alone protocol on an engine that holds only the junior (as its `senior`): it runs the
    engine's solo schedule and reports every token as the junior's."""

    def __init__(self, engine):
        self.engine = engine

    def __getattr__(self, name):
        return getattr(self.engine, name)

    def generate(self, prompts, schedule, sampling, row_keys=None):
        if schedule.writers != frozenset({JUNIOR}):
            raise ValueError(f"this engine holds the junior alone; it cannot run {schedule!r}")
        out = self.engine.generate(prompts, SoloSchedule(), sampling, row_keys)
        out.senior_authored = out.senior_authored & False
        out.junior_logprob = out.senior_logprob  # the author's, i.e. the junior's
        return out


def _dtype(name):
    table = {"auto": "auto", "bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}
    if name not in table:
        raise UserError(f"dtype: {name!r}; choose from {', '.join(table)}")
    return table[name]


def context_length_of(*paths: str) -> int | None:
    """The smallest context of the models (`trlvr.models.context_length`, read without the weights)."""
    found = [context_length(p) for p in paths if p is not None and not is_self(p)]
    found = [c for c in found if c is not None]
    return min(found) if found else None


def eval_contexts(spec: EvalSpec, problems: list, models: list[tuple[str, str, object]]) -> tuple:
    """`Plan.contexts` of an evaluation: for each (name, model path, tokenizer) whose config states its
    context, the longest prompt (in that tokenizer's tokens) plus its completion budget among the prompts
    the runner keeps, under the runner's budget rule (`--context-length`, `--max-prompt-tokens`). A
    context of "auto" is the models' own: nothing can pass it."""
    if spec.context_length == "auto" or not problems:
        return ()
    context = spec.context_length or None
    cap = default_max_prompt_tokens(context) if spec.max_prompt_tokens == "auto" else spec.max_prompt_tokens
    senior_tok = models[0][2]
    lens = {id(senior_tok): [len(prompt_ids_for(p, senior_tok, spec.prompt_template)) for p in problems]}
    first = lens[id(senior_tok)]
    kept, _ = split_by_prompt_length(
        first, cap, spec.max_new_tokens, context
    )  # the runner keeps by the senior's
    budget = {j: completion_budget(first[j], spec.max_new_tokens, context) for j in kept}
    out = []
    for name, path, tok in models if kept else ():  # nothing kept: the runner says so in its own line
        positions = context_length(path, name)
        if positions is None:
            continue
        if id(tok) not in lens:
            lens[id(tok)] = [len(prompt_ids_for(p, tok, spec.prompt_template)) for p in problems]
        i = max(kept, key=lambda j: lens[id(tok)][j] + budget[j])
        out.append((f"{name} {path}", positions, lens[id(tok)][i], budget[i]))
    return tuple(out)


def eval_plan(models: ModelSpec, benchmarks: dict[str, list], spec: EvalSpec, gpu_memory: int | None = None):
    """The memory plan of the evaluation's engine (`trlvr.memory`): the senior, and the junior when the suite
    needs one; its context the longest prompt plus `--max-new-tokens`. backend vllm checks it against
    `gpu_memory` (the engine takes 0.9 of it; the HF scorers load after it is closed, so they are not
    counted beside it); backend hf: the shapes and lengths only."""
    senior_path, _ = resolve_senior(models.senior)
    base = adapter_base(senior_path) if is_adapter_dir(senior_path) else model_folder(senior_path)
    dtype = None if models.dtype == "auto" else models.dtype
    stacks = [Stack.from_config("senior", read_config(base), dtype)]
    if spec.needs_junior and models.junior is not None:
        stacks.append(
            Stack.from_config("junior", read_config(base if is_self(models.junior) else models.junior), dtype)
        )
    tok = (
        load_tokenizer(models.tokenizer, "--tokenizer")
        if models.tokenizer
        else load_tokenizer_for(senior_path, "--senior")
    )
    prompts = [len(prompt_ids_for(p, tok, spec.prompt_template)) for ps in benchmarks.values() for p in ps]
    context = (
        context_length_of(senior_path, models.junior)
        if spec.context_length == "auto"
        else spec.context_length
    )
    longest = max(
        (p + completion_budget(p, spec.max_new_tokens, context) for p in prompts), default=0
    )  # the runner's
    return MemoryPlan(
        stacks=tuple(stacks),
        prompt_len=max(prompts, default=0),
        completion_len=spec.max_new_tokens,
        max_num_seqs=spec.batch_size,
        share=EVAL_ENGINE_SHARE,
        gpu_memory=gpu_memory if backend(models.backend).gpu_share else None,
        max_model_len=longest or None,
        share_setting="the engine's gpu_memory_utilization",
        length_setting="--max-new-tokens",
        lengths_hint="--max-new-tokens",
    )


def selection_note(spec: str, record: dict | None, benchmarks: dict) -> dict | None:
    """How a RUN@selected senior was chosen, with its overlap with the data evaluated here (a
    checkpoint chosen on its own test data is flagged in the report)."""
    if record is None:
        return None
    val_keys = set(record["val"].get("keys", []))
    overlap = {b: sum(problem_key(p) in val_keys for p in ps) / len(ps) for b, ps in benchmarks.items() if ps}
    return {
        "run": spec.removesuffix("@selected"),
        "step": record["step"],
        "metric": record["metric"],
        "val": {k: v for k, v in record["val"].items() if k != "keys"},
        "val_overlap": overlap,
    }


@dataclass(frozen=True)
class ModelSpec:
    """Which models an evaluation loads, and how: as `trlvr eval` takes them.

    senior: a model folder, a LoRA adapter folder or `RUN@selected`; junior: a folder, `self` (the
    LoRA senior's base, adapters off) or None (solo only); tokenizer: the one prompts are rendered
    with (default: the senior's); pairing: auto | lockstep | text (`trlvr.team.choose_pairing`);
    backend: hf | vllm (`trlvr.engine.pair_class`).
    """

    senior: str
    junior: str | None = None
    tokenizer: str | None = None
    dtype: str = "auto"
    device: str | None = None
    junior_device: str | None = None
    pairing: str = "auto"
    backend: str = "hf"


def check_eval(
    models: ModelSpec,
    benchmarks: dict[str, list],
    spec: EvalSpec,
    sources: dict | None = None,
    backend_here: bool = True,
) -> dict:
    """The evaluation's capabilities (`trlvr.engine.capabilities`, the one place), before any model loads:
    the suite's protocols and metrics against the pairing the tokenizers give (lockstep, text, self, or
    none for `--suite solo`) and the backend, the chat prompts against the tokenizers' templates, the toy
    worlds of the models and the data (`sources`: benchmark -> file). One line naming the flag; returns
    {metric: why undefined}. backend_here: also that the backend is installed on this machine (not for a dry run,
    which asks it itself: a plan for another machine's GPU needs no engine here)."""
    senior, record = resolve_senior(models.senior)
    junior = models.junior if spec.needs_junior else None
    if is_self(junior) and not is_adapter_dir(senior) and record is not None and record["step"] == 0:
        junior = senior  # a `junior: self` run's starting senior (the base itself) was selected: it pairs with itself
    if is_self(junior):
        check_self_junior(senior)
    tok_flag = f"--tokenizer {models.tokenizer}" if models.tokenizer else f"--senior {senior}"
    tok = (
        load_tokenizer(models.tokenizer, "--tokenizer")
        if models.tokenizer
        else load_tokenizer_for(senior, "--senior")
    )
    junior_tok = (
        load_tokenizer_for(junior, "--junior") if junior is not None and not is_self(junior) else None
    )
    team = Team.resolve(
        senior,
        junior,
        pairing=models.pairing,
        backend=models.backend,
        senior_tok=tok,
        junior_tok=junior_tok,
        names=("--senior", "--junior"),
    )
    pairing = team.kind
    problems = [p for ps in benchmarks.values() for p in ps]
    chat = chat_prompt_of(problems)
    templates = ((tok_flag, has_chat_template(tok)),) if chat else ()
    if chat and is_text(pairing):  # the junior renders the same messages with its own template
        templates += ((f"--junior {junior}", has_chat_template(junior_tok)),)
    schedules = tuple(
        parse_protocol(name).schedule(spec.handoff_max_rounds)
        for name in protocols_for(spec.suite, spec.dose_shares, spec.prefix_ks)
    )
    paths = {
        "--senior": senior,
        "--junior": None if (junior is None or is_self(junior)) else junior,
        **{f"--data {name}": source for name, source in (sources or {}).items()},
    }
    readers = [("--senior", senior, tok)] + (
        [("--junior", junior, junior_tok or tok)] if paths["--junior"] else []
    )
    contexts = eval_contexts(spec, problems, readers) if all(ok for _, ok in templates) else ()
    for flag, path in (
        ("--senior", senior),
        ("--junior", paths["--junior"]),
    ):  # before --fresh sets anything aside
        if path and Path(path).is_dir() and (why := artifacts.weights_problem(path)):
            raise UserError(
                f"{flag} {path}: its weights do not load ({why}); nothing was loaded, written or set aside"
            )
    undefined = check_capabilities(
        team.plan(
            "eval",
            schedules=schedules,
            suite=spec.suite,
            junior_device=bool(models.junior_device) and junior is not None,
            senior_adapter=senior if is_adapter_dir(senior) else None,
            chat_prompt=chat,
            templates=templates,
            worlds=worlds_of(paths),
            contexts=contexts,
        )
    )
    if backend_here:  # installed: before a group.json
        _check_backend(models, senior, junior, junior_tok if is_text(pairing) else None)
    return undefined


def evaluate_specs(
    models: ModelSpec,
    benchmarks: dict[str, list],
    spec: EvalSpec,
    out: str | Path,
    *,
    data_identities: dict | None = None,
    data_sources: dict | None = None,
    progress: bool = True,
    fresh: bool = False,
    refuse_lossy: bool = False,
    extra_paths: dict | None = None,
    check_only: bool = False,
) -> dict | None:
    """Evaluate `models` on `benchmarks` under `spec` into `out`.

    Returns results.json's dict; its config records the resolved models (and, for `RUN@selected`,
    how the checkpoint was chosen and its overlap with the data evaluated here), the pairing and
    the backend. What the pairing and backend cannot run is refused first (`check_eval`), before any
    model loads. check_only (`trlvr eval --dry-run`): every check the evaluation makes before its first
    weight load, the folder's samples included (`trlvr.eval.runner.check_samples`), then None.
    """
    if Ranks.current().writer:  # a folder another evaluation writes: refused at once, before any load (rank 0
        check_unlocked(out, "trlvr eval", "--out")  # alone locks it: the launch's other ranks never probe it)
    check_eval(models, benchmarks, spec, data_sources, backend_here=not check_only)
    skipped = skipped_rows(benchmarks, data_sources)
    engine = backend(models.backend)
    senior, junior, tokenizer, pairing = models.senior, models.junior, models.tokenizer, models.pairing
    dtype, device, junior_device = models.dtype, models.device, models.junior_device
    senior_path, record = resolve_senior(senior)
    if is_self(junior) and not is_adapter_dir(senior_path) and record is not None and record["step"] == 0:
        junior = senior_path  # a `junior: self` run whose starting senior (the base itself) was selected
    if is_self(junior):
        check_self_junior(senior_path)
    if not spec.needs_junior:
        junior = None  # solo alone: no partner, no scorer, nothing to load
    elif junior is None:
        raise UserError(f"suite {','.join(spec.suite)} needs a junior (only solo runs without one)")
    if is_self(junior) and junior_device:
        raise UserError(
            "--junior-device: --junior self shares the senior's weights, so it runs on the senior's device"
        )
    tok = (
        load_tokenizer(tokenizer, "--tokenizer") if tokenizer else load_tokenizer_for(senior_path, "--senior")
    )
    junior_tok = None
    if not (junior is None or is_self(junior)):
        junior_tok = load_tokenizer_for(junior, "--junior")
        if is_lockstep(choose_pairing(tok, junior_tok, pairing, names=("--senior", "--junior"))):
            junior_tok = None  # one vocabulary: the lockstep engine
    elif is_self(junior) and is_text(pairing):
        raise UserError(
            "--pairing text: --junior self shares the senior's tokenizer and weights; it is lockstep"
        )
    context = context_length_of(senior_path, junior) if spec.context_length == "auto" else spec.context_length
    selection = selection_note(senior, record, benchmarks)
    senior_fp = model_fingerprint(senior_path, "--senior")
    junior_fp = (
        None
        if junior is None
        else {"self_of": senior_fp}
        if is_self(junior)
        else model_fingerprint(junior, "--junior")
    )
    identities = {"senior": senior_fp, "data": data_identities or {}}
    if junior_fp is not None:
        identities["junior"] = junior_fp

    def stored(
        path,
    ):  # as results.json keeps it: resolvable from any cwd (`trlvr.provenance.path_for_record`)
        return path if (path is None or is_self(path)) else path_for_record(path, out)

    paths = {
        "senior": stored(senior_path),
        "junior": stored(junior),
        "data": {k: stored(v) for k, v in (data_sources or {}).items()},
        **({"senior_selection": selection} if selection else {}),
        **(extra_paths or {}),
    }

    def hf_models():  # adapters load onto their base
        dev = device or ("cuda" if torch.cuda.is_available() else "cpu")
        s, j = load_pair(senior_path, junior, dtype=_dtype(dtype))
        s = s.to(dev).eval()
        return s, None if j is None else j if is_self(junior) else j.to(junior_device or dev).eval()

    engines = []  # every vLLM engine `build` made: closed when the evaluation ends, however it ends

    def build(
        junior_prompts=None, max_model_len=None, stacks=("senior", "junior")
    ):  # once `out` is resumable
        from trlvr.engine import make_pair

        if engine.own_engine:  # an engine of the models `stacks` names; HF scorers load after it is closed
            if engine.gpu_share:  # the one before it closed: its memory is free, or this names it
                free_memory()
                free_memory_check(
                    f"eval: the {'+'.join(stacks)} engine",
                    "this evaluation's previous engine" if engines else None,
                    EVAL_ENGINE_SHARE,
                )
            first = senior_path if "senior" in stacks else (senior_path if is_self(junior) else junior)
            second = (senior_path if is_self(junior) else junior) if len(stacks) == 2 else None
            pair = _engine_pair(
                engine,
                first,
                second,
                tok,
                dtype,
                spec.seed,
                max_model_len,
                hf_eos_ids(senior_path, tok),
                max_num_seqs=spec.batch_size,
            )
            engines.append(pair)
            pair = pair if "senior" in stacks else JuniorAlone(pair)
            pair.senior = pair.junior = None
            return pair
        s, j = hf_models()
        if junior_tok is not None:
            return make_pair(s, j, tok, junior_tokenizer=junior_tok, junior_prompts=junior_prompts)
        return make_pair(
            s, j, tok, decode=spec.decode, **({"junior_device": junior_device} if junior_device else {})
        )

    from trlvr.eval.runner import Partners, evaluate

    scores = bool({"legibility", "drift"} & set(spec.suite))
    if (
        not check_only
    ):  # the dry run asks it itself: a plan for another GPU (--gpu-memory) needs no engine here
        _check_backend(models, senior_path, junior, junior_tok)
    partners = Partners(
        tok,
        build,
        junior is not None,
        identities,
        junior_tok,
        paths,
        context,
        models.backend,
        scorers=hf_models if engine.own_engine and scores else None,
    )
    try:
        return evaluate(
            partners,
            benchmarks,
            spec,
            out,
            progress=progress,
            fresh=fresh,
            refuse_lossy=refuse_lossy,
            check_only=check_only,
            skipped_rows=skipped,
        )
    finally:  # the next stage in this process (selection's next checkpoint, smoke's next step) starts with the memory free
        for pair in engines:
            pair.close()  # idempotent: the runner closed most of them already
        free_memory()

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
lockstep`; `--suite solo` alone needs no junior and loads none), all of it one `trlvr.team.Team`;
identify both models by their files; and hand `trlvr.eval.runner.evaluate` the `Partners` of an
`EngineBuilder` (`trlvr.eval.partners`), whose Pair loads only once the output directory is known
to be resumable.

What this file does not know: command-line flags, training, how a protocol runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from trlvr import artifacts
from trlvr.data import load_problems, problem_key
from trlvr.engine.backends import backend
from trlvr.engine.capabilities import chat_prompt_of, check_capabilities, has_chat_template, worlds_of
from trlvr.errors import UserError
from trlvr.eval.fingerprint import file_digest
from trlvr.eval.partners import EVAL_ENGINE_SHARE, EngineBuilder, check_self_junior
from trlvr.eval.plan import completion_budget, default_max_prompt_tokens, split_by_prompt_length
from trlvr.eval.prepare import prompt_ids_for
from trlvr.eval.spec import EvalSpec
from trlvr.eval.suite import parse_protocol, protocols_for
from trlvr.memory import MemoryPlan, Stack, read_config
from trlvr.models import (
    adapter_base,
    context_length,
    is_adapter_dir,
    load_tokenizer,
    load_tokenizer_for,
    model_fingerprint,
    model_folder,
)
from trlvr.provenance import path_for_record, path_from_record
from trlvr.ranks import Ranks
from trlvr.rewards import check_golds, require_grader
from trlvr.rundir import (
    FINAL,
    SELECTED_FILE,
    SELECTION_ARTIFACT,
    check_unlocked,
    checkpoint_step,
    newest_step,
    read_record,
)
from trlvr.team import LOCKSTEP, TEXT, Team, is_self, junior_model

__all__ = [
    "EVAL_ENGINE_SHARE",
    "EvalSpec",
    "ModelSpec",
    "check_eval",
    "check_self_junior",
    "evaluate_specs",
    "load_benchmarks",
    "read_selection",
    "resolve_senior",
    "SELECTED_FILE",
]


def read_selection(run_dir: str | Path) -> dict:
    """RUN/selected.json as `trlvr select` wrote it: a complete selection (`trlvr.artifacts`) of a path."""
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
    """ "RUN@selected" -> (the selected checkpoint's path, the selection record); any other path -> (path,
    None). A selected checkpoint that is not complete (`trlvr.artifacts.WEIGHTS`: a save cut short, a file
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


def context_length_of(*paths: str | None) -> int | None:
    """The smallest context of the model folders (`trlvr.models.context_length`, read without the weights)."""
    found = [context_length(p) for p in paths if p is not None]
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
        stacks.append(Stack.from_config("junior", read_config(junior_model(models.junior) or base), dtype))
    tok = (
        load_tokenizer(models.tokenizer, "--tokenizer")
        if models.tokenizer
        else load_tokenizer_for(senior_path, "--senior")
    )
    prompts = [len(prompt_ids_for(p, tok, spec.prompt_template)) for ps in benchmarks.values() for p in ps]
    context = (
        context_length_of(senior_path, junior_model(models.junior))
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
    {metric: why undefined}. backend_here: also that the backend is installed on this machine (not for a dry
    run, which asks it itself: a plan for another machine's GPU needs no engine here)."""
    return _checked(models, benchmarks, spec, sources, backend_here)[2]


def eval_team(models: ModelSpec, spec: EvalSpec, senior: str, record: dict | None) -> Team:
    """The evaluation's `Team` (tokenizers read, no weights): the resolved senior; the junior the suite needs
    (None for solo alone); the prompt tokenizer (`--tokenizer`, default the senior's) as the senior's."""
    junior = models.junior
    if is_self(junior) and not is_adapter_dir(senior) and record is not None and record["step"] == 0:
        # a `junior: self` run's starting senior (the base itself) was selected: it pairs with itself
        junior = senior
    if is_self(junior):  # refused even for solo alone, which then loads no junior
        check_self_junior(senior)
    junior = junior if spec.needs_junior else None
    tok = (
        load_tokenizer(models.tokenizer, "--tokenizer")
        if models.tokenizer
        else load_tokenizer_for(senior, "--senior")
    )
    return Team.resolve(
        senior,
        junior,
        pairing=models.pairing,
        backend=models.backend,
        senior_tok=tok,  # the junior's tokenizer: `Team.resolve` reads it from its folder
        names=("--senior", "--junior"),
    )


def _checked(models, benchmarks, spec, sources, backend_here) -> tuple[Team, dict | None, dict]:
    """`check_eval`, returning (the team, the senior's selection record, {metric: why undefined})."""
    for grader in spec.graders:  # here, not at the flag: a study's plan names graders its machine may lack
        try:
            require_grader(grader)
        except UserError as e:
            raise UserError(f"--grader: {e}; nothing was loaded or written") from None
    senior, record = resolve_senior(models.senior)
    team = eval_team(models, spec, senior, record)
    tok_flag = f"--tokenizer {models.tokenizer}" if models.tokenizer else f"--senior {senior}"
    problems = [p for ps in benchmarks.values() for p in ps]
    chat = chat_prompt_of(problems)
    templates = ((tok_flag, has_chat_template(team.senior_tok)),) if chat else ()
    if chat and team.is_text:  # the junior renders the same messages with its own template
        templates += ((f"--junior {team.junior}", has_chat_template(team.junior_tok)),)
    schedules = tuple(
        parse_protocol(name).schedule(spec.handoff_max_rounds)
        for name in protocols_for(spec.suite, spec.dose_shares, spec.prefix_ks)
    )
    paths = {
        "--senior": senior,
        "--junior": team.junior_model,
        **{f"--data {name}": source for name, source in (sources or {}).items()},
    }
    readers = [("--senior", senior, team.senior_tok)]
    if team.junior_model:
        readers.append(("--junior", team.junior_model, team.junior_tok))
    contexts = eval_contexts(spec, problems, readers) if all(ok for _, ok in templates) else ()
    for flag in ("--senior", "--junior"):  # before --fresh sets anything aside
        path = paths[flag]
        if path and Path(path).is_dir() and (why := artifacts.weights_problem(path)):
            raise UserError(
                f"{flag} {path}: its weights do not load ({why}); nothing was loaded, written or set aside"
            )
    undefined = check_capabilities(
        team.plan(
            "eval",
            schedules=schedules,
            suite=spec.suite,
            junior_device=bool(models.junior_device) and team.writes,
            senior_adapter=senior if is_adapter_dir(senior) else None,
            chat_prompt=chat,
            templates=templates,
            worlds=worlds_of(paths),
            contexts=contexts,
        )
    )
    if backend_here:  # installed: before a group.json
        from trlvr.engine import pair_class

        pair_class(team.backend, TEXT if team.is_text else LOCKSTEP)
    return team, record, undefined


def _identities(team: Team, data: dict | None) -> dict:
    """{"senior", "data", "junior"} as fingerprint.json identifies them: the models by their files; a self
    junior as the view of its senior."""
    senior = model_fingerprint(team.senior, "--senior")
    out = {"senior": senior, "data": data or {}}
    if team.is_self:
        out["junior"] = {"self_of": senior}
    elif team.junior_model:
        out["junior"] = model_fingerprint(team.junior_model, "--junior")
    return out


def _stored_paths(team: Team, out, sources: dict | None, selection: dict | None, extra: dict | None) -> dict:
    """config.json's "models": each path resolvable from any cwd (`trlvr.provenance.path_for_record`)."""
    return {
        "senior": path_for_record(team.senior, out),
        "junior": path_for_record(team.junior_model, out) if team.junior_model else team.junior,
        "data": {k: path_for_record(v, out) for k, v in (sources or {}).items()},
        **({"senior_selection": selection} if selection else {}),
        **(extra or {}),
    }


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
    from trlvr.eval.runner import evaluate

    # a folder another evaluation writes is refused before any load (rank 0 alone locks it)
    if Ranks.current().writer:
        check_unlocked(out, "trlvr eval", "--out")
    team, record, _ = _checked(models, benchmarks, spec, data_sources, backend_here=not check_only)
    builder = EngineBuilder.of(team, spec, models.dtype, models.device, models.junior_device)
    context = (
        context_length_of(team.senior, team.junior_model)
        if spec.context_length == "auto"
        else spec.context_length
    )
    partners = builder.partners(
        _identities(team, data_identities),
        _stored_paths(
            team, out, data_sources, selection_note(models.senior, record, benchmarks), extra_paths
        ),
        context,
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
            skipped_rows=skipped_rows(benchmarks, data_sources),
        )
    finally:
        # the next stage in this process (the next checkpoint, smoke's next step) starts with memory free
        builder.close()

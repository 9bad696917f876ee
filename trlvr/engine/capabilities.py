"""What a run needs of its pairing and backend, checked once, before any model loads or any sample is drawn.

    plan = Plan("train", pairing="text", schedules=(BoundarySchedule(0.5),))
    check_capabilities(plan)   # UserError: "schedule: schedule 'boundary' needs one shared vocabulary ..."
    check_capabilities(Plan("eval", pairing="text", suite=("solo", "drift")))  # {"drift/kl": "..."}

A `Plan` is the facts of one run, gathered by its command (`trlvr.training.build.check_pairing` for
training and `trlvr train --dry-run`, `trlvr.eval.api.check_eval` for every evaluation, the first step of
`evaluate_specs`, `trlvr.cli.select_cmd.check_run` for `trlvr select`); `check_capabilities` is the one
place they are judged. It is pure: no file, no model.

Pairings: lockstep (one vocabulary, token by token), text (two vocabularies, `trlvr.engine.text_pair`),
self (a LoRA senior's base with its adapters off: lockstep on one copy of the weights), none (a senior
alone: arm grpo, `--suite solo`). Backends: hf (every pairing), vllm (one engine holding both models:
one vocabulary and full model folders). A run is refused, in one line naming its setting, when
  - the backend cannot hold the pair: vllm with a text pair, a junior device, or a LoRA adapter folder
    as the senior it evaluates; vllm under a training sharding its weight sync cannot read (ZeRO-3, FSDP1);
  - the pairing contradicts the one asked for (text with junior self) or a device (junior self on its own);
  - a schedule needs what the pairing lacks: a token-id schedule (boundary) on a text pair, a schedule the
    junior writes in with no junior;
  - a metric needs what the pairing lacks: a suite entry that runs the junior with no junior; KL to the
    junior (training's kl_ref: junior), a drift metric chosen to select on, or the prefix-continuation
    protocols (the junior continues the senior's token ids), from a text pair;
  - a prompt that is chat messages meets a tokenizer without a chat template (it cannot be rendered);
  - the longest prompt plus the completion budget is more than a model reads (its config's
    max_position_embeddings): refused before the rollout would pass it mid-run;
  - its models and data come from toy worlds (`trlvr toy prepare`: DIR/card.json) made with other seeds or
    settings: a world draws its problems and trains its models with its seed, so another world's models
    may have trained on these problems.
What a suite may ask for that a text pair cannot define (drift/kl; the loophole report of the dose
protocols) is not refused: it is returned, and results.json records it as undefined, never as a number.

What this file does not know: how tokenizers, models or problems load (the commands pass the facts).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from trlvr.engine.backends import BACKENDS, backend
from trlvr.engine.schedules import JUNIOR, SCHEDULES, Schedule
from trlvr.errors import UserError
from trlvr.provenance import path_from_record
from trlvr.rundir import RUN_FILE, read_record

TEAM_KINDS = (
    "lockstep",
    "text",
    "self",
    "none",
)  # who writes with the senior: `trlvr.team.KINDS` is this table
# training shardings whose gathered parameters TRL's weight sync hands over only inside the gather (ZeRO-3:
# one parameter at a time; FSDP1: one wrapped module at a time), while vLLM's layerwise reload keeps
# references until a whole layer (q, k and v for qkv_proj) has arrived; FSDP2 hands over full_tensor()
# copies (kept alive)
SYNC_UNSAFE_SHARDING = {"zero3": "DeepSpeed ZeRO-3", "fsdp1": "FSDP1"}
COMMANDS = ("train", "eval", "select")
# how each command names a setting in its one line
NAMES = {
    "train": {
        "backend": "backend",
        "pairing": "pairing",
        "schedule": "schedule",
        "suite": "suite",
        "metric": "kl_ref",
        "junior": "junior",
        "self": "junior: self",
        "junior_device": "junior_device",
        "data": "dataset",
        "length": "max_completion_length",
    },
    "eval": {
        "backend": "--backend",
        "pairing": "--pairing",
        "schedule": "--suite",
        "suite": "--suite",
        "metric": "--suite",
        "junior": "--junior",
        "self": "--junior self",
        "junior_device": "--junior-device",
        "data": "--data",
        "length": "--max-new-tokens",
    },
    "select": {
        "backend": "--backend",
        "pairing": "pairing (the run's)",
        "schedule": "--metric",
        "suite": "--metric",
        "metric": "--metric",
        "junior": "--junior",
        "self": "junior self",
        "junior_device": "--junior-device",
        "data": "--val",
        "length": "--max-new-tokens",
    },
}
# metrics a text pair cannot define: the suite entry that asks for each, and why (results.json records it)
UNDEFINED_FOR_TEXT_PAIRS = {
    "drift/kl": (
        "drift",
        "not defined for a text pair: KL(senior || junior) needs one vocabulary (the two models' "
        "next-token distributions are over different ids)",
    ),
    "loophole": (
        "dose",
        "not computed for a text pair: the detector replays the lockstep word schedule on one vocabulary",
    ),
}
KL_TO_JUNIOR = "kl_to_junior"  # training's KL term against the junior (beta > 0, kl_ref: junior)
WORLD_CARD = "card.json"  # what `trlvr toy prepare` writes last into a complete world (trlvr.toy.world)
WORLD_KEYS = ("seed", "config")  # what makes a world: its seed and its settings


@dataclass(frozen=True)
class Plan:
    """The facts of one run that its pairing and backend must support (see the module docstring).

    command: train | eval | select (how settings are named); pairing: lockstep | text | self | none, or None
    while the tokenizers are not known (a config checked on its own); requested: the pairing setting as
    given (auto | lockstep | text); schedules: what generates (training's schedule, the suite's
    protocols); suite: evaluation suite entries; metrics: metric names the run reads and needs defined
    (select's --metric; training's KL_TO_JUNIOR); junior_device: a device was given for the junior;
    senior_adapter: the senior's path when it is a LoRA adapter folder; chat_prompt: where the first
    prompt made of chat messages is ("FILE row N"), None when every prompt is text; templates: (tokenizer
    named, whether it has a chat template) for every tokenizer that renders the prompts; worlds: (path
    named, world record from `world_of`) for every model and data path that lies in a toy world;
    sharding: how training shards the senior's parameters (the launch's accelerate / DeepSpeed config).
    """

    command: str
    pairing: str | None
    backend: str = "hf"
    requested: str = "auto"
    schedules: tuple[Schedule, ...] = ()
    suite: tuple[str, ...] = ()
    metrics: tuple[str, ...] = ()
    junior_device: bool = False
    senior_adapter: str | None = None
    chat_prompt: str | None = None
    templates: tuple[tuple[str, bool], ...] = ()
    worlds: tuple[tuple[str, dict], ...] = ()
    sharding: str | None = (
        None  # training's parameter sharding: zero1/zero2/zero3 (DeepSpeed), fsdp1/fsdp2, None
    )
    # (model named, the positions its config says it reads, the run's longest prompt in its tokens, the
    # completion budget) of every model that reads the run's sequences (`trlvr.models.context_length`)
    contexts: tuple[tuple[str, int, int, int], ...] = ()


def check_capabilities(plan: Plan) -> dict[str, str]:
    """Refuse (UserError, one line naming the setting) what the plan's pairing and backend cannot run;
    return {metric: why} of what its suite asks for that the pairing cannot define (recorded as undefined)."""
    if plan.command not in COMMANDS:
        raise ValueError(f"command must be one of {COMMANDS}, got {plan.command!r}")
    if plan.pairing not in (*TEAM_KINDS, None):
        raise ValueError(f"pairing must be one of {TEAM_KINDS} or None, got {plan.pairing!r}")
    name = NAMES[plan.command]
    _check_backend(plan, name)
    _check_pairing(plan, name)
    for schedule in plan.schedules:
        _check_schedule(plan, name, schedule)
    _check_metrics(plan, name)
    _check_prompts(plan, name)
    _check_contexts(plan, name)
    _check_worlds(plan.worlds)
    if plan.pairing != "text":
        return {}
    return {m: why for m, (entry, why) in UNDEFINED_FOR_TEXT_PAIRS.items() if entry in plan.suite}


def _text(plan: Plan) -> bool:
    return plan.pairing == "text" or (plan.pairing is None and plan.requested == "text")


def _check_backend(plan: Plan, name: dict) -> None:
    b = name["backend"]
    if plan.backend not in BACKENDS:
        raise UserError(f"{b}: must be one of {', '.join(BACKENDS)}, got {plan.backend!r}")
    spec = backend(plan.backend)
    if spec.one_vocabulary and _text(plan):
        raise UserError(
            f"{b}: {spec.name} runs pairs with one shared vocabulary; this pair is text-paired (two "
            "tokenizers), and text pairing runs on backend hf"
        )
    if not spec.own_engine:
        return
    if plan.junior_device:
        raise UserError(
            f"{b}: {spec.name} holds both models in one engine; {name['junior_device']} is backend hf's"
        )
    if plan.senior_adapter is not None:
        raise UserError(
            f"{b} {spec.name}: {plan.senior_adapter} is a LoRA adapter folder; the engine loads full model "
            "folders (evaluate adapters with --backend hf)"
        )
    if plan.sharding in SYNC_UNSAFE_SHARDING:
        raise UserError(
            f"{b} {spec.name}: this launch shards the senior with {SYNC_UNSAFE_SHARDING[plan.sharding]}, "
            "which releases each gathered parameter before the engine's weight sync has copied it (vLLM "
            "reloads a layer once all its weights arrived); train backend vllm under DeepSpeed ZeRO-1/2, "
            "FSDP2 or DDP, or use backend hf"
        )


def _check_pairing(plan: Plan, name: dict) -> None:
    if plan.pairing != "self":
        return
    if plan.requested == "text":
        raise UserError(
            f"{name['pairing']}: text needs a junior with its own tokenizer; {name['self']} shares the "
            "senior's tokenizer and weights (it is lockstep)"
        )
    if plan.junior_device:
        raise UserError(
            f"{name['junior_device']}: {name['self']} shares the senior's weights, so it runs on the "
            "senior's device"
        )


def text_schedules() -> list[str]:
    """The registered schedules a text pair runs (`Schedule.text_rule`)."""
    return [n for n, cls in SCHEDULES.items() if cls().text_rule() is not None]


def _check_schedule(plan: Plan, name: dict, schedule: Schedule) -> None:
    s = name["schedule"]
    if plan.pairing == "none" and JUNIOR in schedule.writers:
        raise UserError(f"{s}: schedule {schedule.name!r} has the junior write, and this run has no junior")
    if _text(plan) and schedule.text_rule() is None:
        raise UserError(
            f"{s}: schedule {schedule.name!r} needs one shared vocabulary (it reads token ids); this "
            "senior and junior are text-paired (two tokenizers), which runs the schedules "
            f"{', '.join(text_schedules())}"
        )


def _check_contexts(plan: Plan, name: dict) -> None:
    for model, positions, prompt, completion in plan.contexts:
        if prompt + completion > positions:
            raise UserError(
                f"{name['length']}: {model} reads at most {positions} positions (max_position_embeddings "
                f"in its config), and the longest prompt ({prompt} tokens) plus the completion budget "
                f"({completion} tokens) is {prompt + completion}; lower {name['length']} or drop the "
                "longest prompts"
            )


def _check_metrics(plan: Plan, name: dict) -> None:
    if plan.pairing == "none":
        for entry in plan.suite:
            if entry != "solo":
                raise UserError(f"{name['suite']}: {entry} needs a junior (only solo runs without one)")
        for metric in plan.metrics:
            if metric == KL_TO_JUNIOR:
                raise UserError(f"{name['metric']}: junior needs a junior model path")
            if not metric.startswith("solo/"):
                raise UserError(f"{name['metric']}: {metric} needs a junior (only solo runs without one)")
    if not _text(plan):
        return
    if "prefix" in plan.suite:
        raise UserError(
            f"{name['suite']}: prefix hands the junior the senior's own token ids, so it needs one "
            "shared vocabulary; this senior and junior are text-paired (two tokenizers)"
        )
    for metric in plan.metrics:
        if metric == KL_TO_JUNIOR:
            raise UserError(
                f"{name['metric']}: junior needs one shared vocabulary; this pair is text-paired "
                "(set kl_ref: initial)"
            )
        defined = {m: why for m, (entry, why) in UNDEFINED_FOR_TEXT_PAIRS.items()}
        head = metric.split("/", 1)[0]
        why = defined.get(metric) or (defined["drift/kl"] if head == "drift" else None)
        if why is not None:
            raise UserError(
                f"{name['metric']} {metric}: {why}; choose another metric (legibility/junior_bpb is "
                "the one comparable across pairs)"
            )


def _check_prompts(plan: Plan, name: dict) -> None:
    if plan.chat_prompt is None:
        return
    for tokenizer, has_template in plan.templates:
        if not has_template:
            raise UserError(
                f"{name['data']}: {plan.chat_prompt} is a prompt of chat messages, and the tokenizer of "
                f"{tokenizer} has no chat template to render it (give a tokenizer with one, or text "
                "prompts)"
            )


def _check_worlds(worlds: tuple[tuple[str, dict], ...]) -> None:
    if not worlds:
        return
    first_label, first = worlds[0]
    for label, world in worlds[1:]:
        differ = [k for k in WORLD_KEYS if world.get(k) != first.get(k)]
        if differ:
            raise UserError(
                f"{label} is from toy world {world['dir']} ({_describe(world, first)}), {first_label} "
                f"from toy world {first['dir']} ({_describe(first, world)}): a world draws its problems "
                "and trains its models with its seed and settings, so one world's models may have "
                "trained on another's problems; use one world's models and data"
            )


def _describe(world: dict, other: dict) -> str:
    """What sets `world` apart from `other`: "seed 1", "jargon compact, n_train 400"."""
    parts = [] if world.get("seed") == other.get("seed") else [f"seed {world.get('seed')}"]
    mine, theirs = world.get("config") or {}, other.get("config") or {}
    parts += [f"{k} {mine.get(k)}" for k in sorted(set(mine) | set(theirs)) if mine.get(k) != theirs.get(k)][
        :3
    ]
    return ", ".join(parts) or "its settings"


# ---- the facts a plan holds, read without a model --------------------------------------------------------


def has_chat_template(tokenizer) -> bool:
    return bool(getattr(tokenizer, "chat_template", None))


def chat_prompt_of(problems) -> str | None:
    """Where the first problem whose ready-made prompt is chat messages is ("FILE row N"), or None."""
    for p in problems:
        if isinstance(p.prompt, list):
            return f"{p.source} row {p.row}" if p.row is not None else f"problem {p.id}"
    return None


def world_of(path: str | None, depth: int = 3) -> dict | None:
    """The toy world a model or data path comes from: {"dir", "seed", "config"} of the world's card for a
    world's model folder (DIR/senior) or data file (DIR/data/train.jsonl); for a training run's checkpoint
    (RUN/checkpoint-N, RUN/final) or held-out file (RUN/holdout.jsonl), the world of the run's own start
    senior or dataset (its record), `depth` runs back. None for a path in no world (a hub id, your own)."""
    if not path:
        return None
    p = Path(path).expanduser()
    if not p.exists():
        return None
    for world_dir in (p.parent, p.parent.parent):
        if (world_dir / WORLD_CARD).is_file() and (world_dir == p.parent or p.parent.name == "data"):
            card = _record(world_dir / WORLD_CARD)
            return None if card is None else {"dir": str(world_dir), **{k: card.get(k) for k in WORLD_KEYS}}
    run = p.parent
    if depth > 0 and (run / RUN_FILE).is_file():
        tandem = (_record(run / RUN_FILE) or {}).get("tandem") or {}
        start = tandem.get("senior") if p.is_dir() else tandem.get("dataset")
        if isinstance(start, str) and start:
            return world_of(path_from_record(start, run), depth - 1)
    return None


def _record(path: Path) -> dict | None:
    """A JSON record, or None where it does not read (no world to compare then, not an error here)."""
    try:
        return read_record(path)
    except UserError:
        return None


def worlds_of(paths: dict[str, str | None]) -> tuple[tuple[str, dict], ...]:
    """(name, world) for each named path that lies in a toy world (see `world_of`)."""
    found = ((label, world_of(path)) for label, path in paths.items())
    return tuple((label, world) for label, world in found if world is not None)

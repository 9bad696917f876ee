"""Build a `TandemGRPOTrainer` from a run config: models, tokenizer, dataset, reward, callbacks.

The dataset TRL sees has a "prompt" column (a string, or a list of chat messages) and an "answer"
column for the reward. Problems come from `trlvr.data.load_problems` (the one path from a file to
problems, with its validation), prompts from `trlvr.data.prompt_for` (a row's own `prompt`
verbatim, else the problem in the model's chat template), and ids from `trlvr.data.encode_prompt`
(here for the length filter, in `TandemRollout` for generation).

With `holdout: N` the N problems `trlvr.data.holdout_split` picks are removed before training and
written to `output_dir/holdout.jsonl`, which `trlvr select RUN --val split:N` reads.
"""

from __future__ import annotations

import importlib
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from accelerate import PartialState
from trl import GRPOConfig

from trlvr.config import TandemConfig
from trlvr.data import encode_prompt, holdout_split, load_problems, prompt_for
from trlvr.engine import Schedule, pair_class
from trlvr.engine.backends import backend
from trlvr.engine.capabilities import chat_prompt_of, check_capabilities, has_chat_template, worlds_of
from trlvr.errors import UserError
from trlvr.models import (
    context_length,
    load_tokenizer_for,
)
from trlvr.rewards import MathReward, check_golds, math_reward, require_grader
from trlvr.rundir import HOLDOUT_FILE
from trlvr.team import Team
from trlvr.training.learning import check_updates_land, launch_sharding
from trlvr.training.peft_setup import check_lora_run, continues_adapter, describe_adapter, peft_config_for
from trlvr.training.trainer import TandemGRPOTrainer

if TYPE_CHECKING:  # annotations only
    from datasets import Dataset

    from trlvr.data import Problem


def resolve_reward(name: str, grader: str = "trlvr"):
    """ "math" -> trlvr.rewards.math_reward (grader "trlvr") or `MathReward(grader=grader)` (the authors'
    graders: their dependencies are refused in one line when missing, `trlvr.rewards.require_grader`);
    "pkg.module:function" -> that function."""
    if name == "math":
        try:
            require_grader(grader)
        except UserError as e:
            raise UserError(f"grader: {e}") from None
        return math_reward if grader == "trlvr" else MathReward(grader=grader)
    module, sep, attr = name.partition(":")
    if not sep:
        raise UserError(f"reward: expected 'math' or 'package.module:function', got {name!r}")
    try:
        return getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError) as e:
        raise UserError(f"reward: cannot import {name!r} ({e})") from None


def load_training_problems(tandem: TandemConfig) -> tuple[list, list]:
    """(problems to train on, held-out problems) of the configured dataset, validated."""
    if not tandem.dataset:
        raise UserError("dataset: a training data source is required")
    problems = list(
        load_problems(
            tandem.dataset, split=tandem.dataset_split, limit=tandem.dataset_limit, check_gold=check_golds
        )
    )
    return holdout_split(problems, tandem.holdout, tandem.holdout_seed)


def check_steps_per_epoch(n_train: int, tandem: TandemConfig, args, *, after: str = "") -> None:
    """UserError when an epoch of `n_train` training problems holds no step. TRL's sampler
    (`RepeatSampler`) draws generation_batch_size / num_generations distinct prompts per generation
    batch and drops an incomplete batch, so fewer problems than that give an empty epoch: max_steps -1
    then fails inside TRL with a traceback, and max_steps N trains 0 steps. `after`: what already cut
    the problems (", after max_prompt_length 512"). Checked before any model loads."""
    per_batch = args.generation_batch_size // args.num_generations
    if n_train >= per_batch:
        return
    spg = args.steps_per_generation
    processes = args.generation_batch_size // (args.per_device_train_batch_size * spg)
    held = f", after holding out {tandem.holdout}" if tandem.holdout else ""
    raise UserError(
        f"dataset {tandem.dataset}: {n_train} training problem(s){held}{after}, fewer than the {per_batch} "
        "distinct prompts one generation batch draws (--per_device_train_batch_size "
        f"{args.per_device_train_batch_size} x {processes} process(es) x --steps_per_generation {spg} / "
        f"--num_generations {args.num_generations}), so an epoch holds no step: add problems, or lower "
        "--per_device_train_batch_size or --steps_per_generation"
    )


def write_holdout(output_dir: str | Path, held: list) -> None:
    """The held-out problems as a JSONL that `load_problems` reads back (problem, answer, prompt).

    Main process only: every rank computes the same split, one writes it.
    """
    if not PartialState().is_main_process:
        return
    path = Path(output_dir) / HOLDOUT_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    rows = [
        {"problem": p.problem, "answer": p.answer, **({"prompt": p.prompt} if p.prompt is not None else {})}
        for p in held
    ]
    tmp = path.with_suffix(".tmp")
    tmp.write_text("".join(json.dumps(r) + "\n" for r in rows))
    tmp.replace(path)


def build_dataset(
    problems: list[Problem], tokenizer: Any, max_prompt_length: int | None = None, template: str = "trlvr"
) -> Dataset:
    """The dataset `trlvr train` gives TRL: one row per problem, `prompt` (the row's own prompt verbatim,
    text or chat messages, else one built from the problem: `trlvr.data.prompt_for`) and `answer` (the gold,
    for the reward). `max_prompt_length`: drop the problems whose prompt is longer in tokens; `template`: the
    instruction (`trlvr.data.prompts.PROMPT_TEMPLATES`, the run's `prompt_template`)."""
    from datasets import Dataset

    from trlvr.training.console import log

    rows = [{"prompt": prompt_for(p, tokenizer, template), "answer": str(p.answer)} for p in problems]
    if max_prompt_length is not None:
        kept = [r for r in rows if len(encode_prompt(r["prompt"], tokenizer)) <= max_prompt_length]
        log(f"max_prompt_length={max_prompt_length}: kept {len(kept)} of {len(rows)} problems")
        rows = kept
    if not rows:
        raise UserError(NONE_LEFT)
    return Dataset.from_list(rows)


NONE_LEFT = "dataset: no usable training problems left (check dataset, holdout and max_prompt_length)"


def problems_within(problems: list[Problem], tokenizer: Any, max_prompt_length: int) -> int:
    """How many of `problems` `build_dataset` keeps under `max_prompt_length` (their prompts in `tokenizer`'s
    tokens): the preflight's count, before anything is set aside or loaded."""
    return sum(len(encode_prompt(prompt_for(p, tokenizer), tokenizer)) <= max_prompt_length for p in problems)


def run_contexts(
    tandem: TandemConfig, team: Team, problems: list, completion: int, senior_tok
) -> tuple[tuple[str, int, int, int], ...]:
    """`Plan.contexts` of a training run: for the senior, and the junior when it reads the rollouts, the
    positions its config says it reads (`trlvr.models.context_length`), the longest prompt in its tokens (a
    text pair's junior: its own tokenizer's; over max_prompt_length: dropped, as `build_dataset` does) and the
    completion budget. Prompts are tokenized only when max_prompt_length alone does not already fit."""
    models = [("senior", tandem.senior, senior_tok)]
    if team.writes and team.junior_model:
        models.append(("junior", team.junior_model, team.junior_tok if team.is_text else senior_tok))
    bound, longest, out = tandem.max_prompt_length, {}, []
    for role, path, tok in models:
        positions = context_length(path, role)
        if positions is None or (bound is not None and bound + completion <= positions):
            continue
        if id(tok) not in longest:
            lens = (len(encode_prompt(prompt_for(p, tok, tandem.prompt_template), tok)) for p in problems)
            longest[id(tok)] = max((n for n in lens if bound is None or n <= bound), default=0)
        out.append((f"{role} {path}", positions, longest[id(tok)], completion))
    return tuple(out)


def check_pairing(
    tandem: TandemConfig,
    senior_tok=None,
    junior_tok=None,
    *,
    beta: float = 0.0,
    problems: list | None = None,
    sharding: str | None = None,
    max_completion_length: int | None = None,
) -> str | None:
    """The run's pairing ("lockstep", "text"; None without a junior), after its capabilities are checked
    (`trlvr.engine.capabilities`, the one place: the schedule, the KL reference and the chat prompts
    against the pairing and the backend, the toy worlds of its models and data) and the backend is found
    installed, in one line each. A run config is checked before any model loads (`trlvr train --dry-run`
    too). Tokenizers load from the config's paths when not given (cheap: no weights); `beta` is the run's
    KL coefficient (trl.GRPOConfig's), `problems` its training problems (None: not read yet). An
    adapter-folder senior that cannot be continued is refused first
    (`trlvr.training.peft_setup.check_lora_run`). Given `max_completion_length` and `problems`, the models'
    context lengths are checked against the longest prompt plus it (`run_contexts`)."""
    return check_team(
        tandem,
        senior_tok,
        junior_tok,
        beta=beta,
        problems=problems,
        sharding=sharding,
        max_completion_length=max_completion_length,
    ).pairing


def check_team(
    tandem: TandemConfig,
    senior_tok=None,
    junior_tok=None,
    *,
    beta: float = 0.0,
    problems: list | None = None,
    sharding: str | None = None,
    max_completion_length: int | None = None,
) -> Team:
    """`check_pairing`'s checks; the run's `trlvr.team.Team` (its tokenizers loaded, no weights)."""
    team = Team.of(tandem, beta)
    check_lora_run(tandem, team)
    team = team.with_tokenizers(senior_tok, junior_tok)
    senior_tok, junior_tok, uses_junior = team.senior_tok, team.junior_tok, team.writes
    name, settings = tandem.schedule_kwargs()
    templates = ()
    if problems is not None and chat_prompt_of(problems) is not None:
        senior_tok = senior_tok or load_tokenizer_for(tandem.senior, "senior")
        templates = ((f"senior {tandem.senior}", has_chat_template(senior_tok)),)
        if team.is_text and uses_junior:  # the junior renders the same messages with its own template
            templates += ((f"junior {tandem.junior}", has_chat_template(junior_tok)),)
    paths = {
        "senior": tandem.senior,
        "junior": team.junior_model if uses_junior else None,
        "dataset": tandem.dataset,
    }
    contexts = ()
    if problems and max_completion_length and all(ok for _, ok in templates):  # (no template: refused below)
        senior_tok = senior_tok or load_tokenizer_for(tandem.senior, "senior")
        contexts = run_contexts(tandem, team, problems, max_completion_length, senior_tok)
    check_capabilities(
        team.plan(
            "train",
            schedules=(Schedule.from_config(name, **settings),),
            junior_device=tandem.junior_device is not None,
            chat_prompt=None if problems is None else chat_prompt_of(problems),
            templates=templates,
            worlds=worlds_of(paths),
            sharding=sharding or launch_sharding(),
            contexts=contexts,
        )
    )
    pair_class(tandem.backend)  # installed? (one line when not)
    return team


def load_models(tandem: TandemConfig, args, problems: list | None = None, n_train: int | None = None):
    """(senior, junior or None, tokenizer, team): the ONE place a run loads its models (`Team.load`), after
    its capabilities are checked (`check_team`, with `problems`: the run's training problems) and, given
    `n_train` (the training problems' count), that an epoch holds a step (`check_steps_per_epoch`).
    An adapter-folder senior (`use_peft`) loads with its adapter trainable: RL continues it."""
    from trlvr.training.console import log

    tokenizer = load_tokenizer_for(tandem.senior, "senior")
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    team = check_team(
        tandem,
        tokenizer,
        beta=args.beta,
        problems=problems,
        sharding=launch_sharding(args),
        max_completion_length=args.max_completion_length,
    )
    if n_train is not None:  # after the paths and capabilities (what is wrong first), before any weights load
        check_steps_per_epoch(n_train, tandem, args)
    check_updates_land(tandem, args, launch_sharding(args), where=f"senior {tandem.senior}")
    if continues_adapter(tandem):
        log(describe_adapter(tandem.senior))
    if team.junior_model and tandem.arm == "tandem":
        how = "two tokenizers, one shared text" if team.is_text else "one shared vocabulary, token by token"
        log(f"pairing: {team.pairing} ({how})")
    senior, junior = team.load(trainable=continues_adapter(tandem), **dict(args.model_init_kwargs or {}))
    return senior, junior, tokenizer, team


def build_trainer(tandem: TandemConfig, args, callbacks=None, *, desc: str | None = None):
    """TandemConfig + trl.GRPOConfig -> TandemGRPOTrainer (not yet trained), with trlvr's callbacks."""
    from trlvr.training.console import MetricsFile, ProgressBar
    from trlvr.training.guard import NonFiniteGuard
    from trlvr.training.manifest import ManifestCallback

    if isinstance(args, dict):  # a plain dict of GRPOConfig fields (library callers)
        args = GRPOConfig(**args)
    train, held = load_training_problems(tandem)
    senior, junior, tokenizer, team = load_models(tandem, args, problems=train + held, n_train=len(train))
    dataset = build_dataset(train, tokenizer, tandem.max_prompt_length, tandem.prompt_template)
    if len(dataset) < len(train):
        check_steps_per_epoch(
            len(dataset), tandem, args, after=f", after max_prompt_length {tandem.max_prompt_length}"
        )
    if tandem.holdout:
        write_holdout(args.output_dir, held)
    longest = None
    if backend(tandem.backend).needs_context_length and not (
        tandem.max_prompt_length or args.vllm_max_model_length
    ):
        # the engine (built inside the trainer) takes the longest prompt + the completion budget as its
        # context
        longest = max(len(encode_prompt(p, tokenizer)) for p in dataset["prompt"])
    own = [
        NonFiniteGuard(tandem.nonfinite_patience),
        MetricsFile(args.output_dir),
        ProgressBar(desc or f"train {tandem.arm}"),
        ManifestCallback(),
    ]
    trainer = TandemGRPOTrainer(
        senior,
        junior,
        tandem=tandem,
        team=team,
        args=args,
        reward_funcs=resolve_reward(tandem.reward, tandem.grader),
        train_dataset=dataset,
        processing_class=tokenizer,
        callbacks=own + list(callbacks or []),
        peft_config=peft_config_for(tandem),
        longest_prompt=longest,
    )
    return trainer

"""`TandemGRPOTrainer`: TRL's GRPOTrainer with rollouts from the tandem engine.

It is TRL's trainer, configured, not a second trainer: rollouts come through the public
`rollout_func` hook (`TandemRollout`), the author mask through `env_mask`, extra metrics through
TRL's metric lists and a callback. The GRPO loss, advantages, clipping and optimiser are TRL's.

Arms (TandemConfig.arm):
- tandem: senior + frozen junior co-write each rollout (word schedule by default); the loss sees
  senior tokens only (env_mask = 1 on senior tokens).
- grpo: the senior alone, through the same engine and code path (env_mask all ones): the matched
  baseline. With `beta > 0` and `kl_ref: junior`, TRL's KL reference model is the junior; any
  `num_generations` (16 = the compute-matched control).

Loss: TRL `loss_type="dapo"` (set in every config). It is the paper's loss: per-token clipped
surrogate (eps 0.2), summed over loss-mask tokens and divided by `num_items_in_batch`, the number of
loss-mask tokens (= senior tokens) in the generation batch over all processes, rescaled to one
optimizer step -- a token-mean over senior tokens. "bnpo" normalises per process and micro-batch
(depends on the per-device batch size); "grpo" averages per sequence first (length-biased).
Where TRL departs from the paper's numbers:
1. advantage = (r - mean) / (std + 1e-4), hard-coded in TRL; the paper has 1e-6. With binary rewards
   and 8 rollouts a non-zero std is >= 0.35, so the difference is < 0.03%; zero-std groups get 0 either way.
2. TRL's std is the unbiased (n - 1) one, as in verl.
3. backend hf: the engine's per-token log-probs are the senior's at temperature 1, not the sampler's,
   so TRL's importance-sampling (IS) correction cannot use them (`use_vllm` stays off: the correction
   is off). backend vllm: the log-probs are the sampler's (vLLM's processed log-probs) and TRL's own
   vLLM machinery runs (`_attach_engine`): its weight sync before each rollout and, with
   `vllm_importance_sampling_correction` (TRL's default: on), its IS correction and
   `sampling/importance_sampling_ratio/*` metrics over senior tokens, in the mode the config chose
   (trlvr's parser default: per-token truncation, `trlvr.config.IS_MODE`, the same for both arms);
   `ISCorrectionMeter` logs the share of loss tokens and rows it zeroed or clipped (`tandem/is/*`).

Its own checks that the run learns (`trlvr.training.learning`): a senior whose optimizer updates would
round away (bf16 weights, full fine-tuning, no ZeRO) is refused at construction; `WeightsMoved` stops the
run before its first update when the optimizer the Trainer built updates bf16 tensors with no fp32 master
(read through accelerate's and DeepSpeed's wrappers: DeepSpeed's bf16 masters too), and when its first
optimizer step with a gradient changed no trainable weight.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import inspect
import os
import warnings
from pathlib import Path
from typing import Any

from accelerate.utils import is_peft_model
from transformers import PreTrainedModel
from trl import GRPOConfig, GRPOTrainer
from trl.trainer.grpo_trainer import RewardFunc
from trl.trainer.utils import create_model_from_path

from trlvr.algos import AuthorMaskError, junior_tokens_in_loss
from trlvr.config import TandemConfig, check_report_to
from trlvr.engine.backends import Backend, backend
from trlvr.engine.schedules import Schedule
from trlvr.engine.self_pair import AdapterOffView
from trlvr.errors import UserError
from trlvr.rewards.length import with_length_penalty
from trlvr.rewards.math_reward import MathReward, math_reward
from trlvr.rundir import MODEL_CARD
from trlvr.team import Team
from trlvr.training.learning import FIXES, WeightsMoved, launch_sharding, low_precision_problem
from trlvr.training.metrics import ISCorrectionMeter, StepTimeCallback, with_share_split
from trlvr.training.model_card import tandem_model_card
from trlvr.training.peft_setup import use_base_as_reference
from trlvr.training.rollout import TandemRollout


@contextlib.contextmanager
def _reference_is(model, path: str):
    """While GRPOTrainer.__init__ runs, make TRL build its KL reference model from `path`.

    TRL 1.16 creates the reference with `create_model_from_path(get_config_model_id(model.config))`,
    i.e. from `model.config._name_or_path`, then disables dropout, adds the fused log-prob head at the
    sampling temperature and prepares it for DDP/DeepSpeed. Pointing that id at the junior for the
    duration of `__init__` reuses all of that; the senior's id is restored afterwards.
    """
    original = model.config._name_or_path
    model.config._name_or_path = path
    try:
        yield
    finally:
        model.config._name_or_path = original


def _with_model_ids(tandem: TandemConfig, senior, junior) -> TandemConfig:
    """`tandem` with the senior's and junior's ids filled in from model id strings (or local paths) passed
    to the trainer, as TRL takes `model="Qwen/..."`; fields already set are kept."""
    ids = {
        name: value
        for name, value in (("senior", senior), ("junior", junior))
        if isinstance(value, str) and not getattr(tandem, name)
    }
    return dataclasses.replace(tandem, **ids) if ids else tandem


def _plain_callable(f) -> bool:
    return callable(f) and not hasattr(f, "forward") and not inspect.iscoroutinefunction(f)


def check_reward_grader(funcs: list, grader: str) -> None:
    """A math reward among `funcs` grades with the config's `grader` (`TandemConfig.grader`): the run record
    names it, so a `MathReward` with another grader is refused (ValueError naming both)."""
    for f in funcs:
        used = "trlvr" if f is math_reward else f.grader if isinstance(f, MathReward) else None
        if used is not None and used != grader:
            raise ValueError(
                f"reward_funcs grade with grader {used!r} but tandem.grader is {grader!r}: pass "
                f"MathReward(grader={grader!r}), or TandemConfig(grader={used!r})"
            )


# what transformers 5 says when TRL uses its gradient_checkpointing names (renamed activation_checkpointing)
DEPRECATED_CHECKPOINTING = r"`(is_)?gradient_checkpointing(_enable|_disable)?` is deprecated"


def _without_rollout_func_notice(init):
    """TRL tells whoever passes a rollout_func that it is experimental: trlvr passes it, on the TRL it pins,
    so the notice is no user's (the CLI sets TRL_EXPERIMENTAL_SILENCE for the same reason)."""

    @functools.wraps(init)
    def quiet(*args, **kwargs):
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", "You are using 'rollout_func'", UserWarning)
            return init(*args, **kwargs)

    return quiet


class TandemGRPOTrainer(GRPOTrainer):
    """GRPOTrainer whose rollouts come from `TandemGenerator`: the senior and the frozen junior co-write
    every rollout, and the loss covers the senior's tokens only.

    Everything but the rollout is TRL's: pass what `GRPOTrainer` takes (a `GRPOConfig`, reward functions
    with TRL's signature, a dataset with a `prompt` column, text or chat messages, a tokenizer,
    optionally a `peft_config`). A runnable script on the shipped toy pair: examples/tandem_grpo.py and
    docs/guides/trl-integration.md; `trlvr train` loads its models in `trlvr.training.build.load_models`.

    Args:
        model: The trainable senior: a `PreTrainedModel` (with `peft_config`, a LoRA senior; a
            `peft.PeftModel` continues its adapter) or, as in TRL, a hub id or local folder that
            GRPOTrainer loads with `args.model_init_kwargs`.
        junior: The frozen junior: a `PreTrainedModel`, or a hub id or folder (loaded at the senior's
            dtype). None for arm grpo, when it is TRL's KL reference (`kl_ref: junior`, reused), or with
            `TandemConfig(junior="self")` and a LoRA senior (its base with the adapters off).
        tandem: The schedule, p, arm and backend (`trlvr.config.TandemConfig`; fields in
            docs/reference/configuration.md). None is `TandemConfig()`: arm tandem, word schedule,
            p = 0.5. Model paths are needed only by backend vllm and `kl_ref: junior` (they load from
            paths); ids passed as strings fill its `senior` / `junior` when unset.
        args: TRL's `GRPOConfig`. None is, as in GRPOTrainer, `GRPOConfig("<model>-GRPO")`.
            `use_vllm`, `use_transformers_continuous_batching` (use `TandemConfig(backend="vllm")`) and
            `off_policy_mask_threshold` are refused with a `ValueError`.
        reward_funcs: TRL's reward functions (callables with TRL's signature, reward models or their
            ids). Each plain synchronous function also logs the reward by junior share; the first carries
            the length penalty (`TandemConfig.length_penalty`). None gives TRL's "No reward source
            provided".
        longest_prompt: Backend vllm only: the longest prompt in tokens, so the engine's context is
            this + `max_completion_length`.
        team: The run's `trlvr.team.Team` (`trlvr train` passes the one it resolved, of this `tandem` and
            `args.beta`). None: the one `tandem` and `args.beta` declare (`Team.of`, no file read).
        **kwargs: The rest of GRPOTrainer's arguments (`train_dataset`, `eval_dataset`,
            `processing_class`, `peft_config`, `callbacks`, ...). `tools` and `environment_factory` are
            refused in one line: TRL's tool loop would replace the author mask and train the junior's
            tokens as the senior's.

    Example:
        ```python
        trainer = TandemGRPOTrainer(senior, junior, tandem=TandemConfig(p=0.5),
                                    args=GRPOConfig(...), reward_funcs=math_reward,
                                    train_dataset=ds, processing_class=tokenizer)
        trainer.train()
        ```
    """

    @_without_rollout_func_notice
    def __init__(
        self,
        model: str | PreTrainedModel,
        junior: str | PreTrainedModel | None = None,
        *,
        tandem: TandemConfig | None = None,
        args: GRPOConfig | None = None,
        reward_funcs: RewardFunc | list[RewardFunc] | None = None,
        longest_prompt: int | None = None,
        team: Team | None = None,
        **kwargs: Any,
    ) -> None:
        if args is None:  # as GRPOTrainer: the default GRPOConfig, its output_dir named after the model
            name = model if isinstance(model, str) else model.config._name_or_path
            args = GRPOConfig(f"{str(name).split('/')[-1]}-GRPO")
        tandem = _with_model_ids(tandem or TandemConfig(), model, junior)
        if args.use_vllm or args.use_transformers_continuous_batching:
            raise ValueError(
                "TandemGRPOTrainer generates with the tandem engine: use_vllm and "
                "use_transformers_continuous_batching must be off (backend: vllm is how to generate with "
                "vLLM)"
            )
        if args.off_policy_mask_threshold is not None:
            raise ValueError(
                "off_policy_mask_threshold must be off: the tandem engine's log-probs are not TRL's"
            )
        if kwargs.get("tools") or kwargs.get("environment_factory"):
            raise UserError(
                "TandemGRPOTrainer does not take tools or environment_factory: TRL's tool loop replaces the "
                "author mask and continues rollouts with the senior alone, so junior tokens would be "
                "trained as the senior's"
            )
        check_report_to(args.report_to, "GRPOConfig")  # before TRL loads a model given by its id
        self.tandem = tandem
        self.longest_prompt = longest_prompt  # backend vllm: the engine's context is this + the completion
        self.team = team = team or Team.of(tandem, args.beta)
        engine = backend(tandem.backend)
        if engine.own_engine:  # the engine loads the models from their paths
            tandem.check_model_paths()
        passed_peft = not isinstance(model, str) and is_peft_model(model)  # an adapter the run continues
        if team.is_self and kwargs.get("peft_config") is None and not passed_peft:
            raise ValueError(
                "junior: 'self' needs a LoRA senior (use_peft: true, peft_config, or a peft.PeftModel)"
            )
        if team.kl_to_junior and not team.junior:  # TRL builds its reference model from a path
            raise ValueError("kl_ref: junior needs TandemConfig(junior=<the junior's path or hub id>)")
        name, schedule_kwargs = tandem.schedule_kwargs()
        self.rollout = TandemRollout(
            Schedule.from_config(name, **schedule_kwargs),
            check_junior_p=tandem.p if tandem.expects_junior_tokens else None,
            decode=tandem.decode,
            junior_device=tandem.junior_device,
            backend=tandem.backend,
        )
        funcs = self._reward_funcs(reward_funcs, tandem, args)
        # TRL builds its KL reference from the model's id: pointed at the junior while it does (with PEFT,
        # TRL's reference is the senior's base, adapters off: for `self` that is the junior already)
        to_junior = team.kl_to_junior and not team.is_self
        if isinstance(model, str) and to_junior:
            model = create_model_from_path(model, **dict(args.model_init_kwargs or {}))
        with _reference_is(model, tandem.junior) if to_junior else contextlib.nullcontext():
            super().__init__(model=model, reward_funcs=funcs, args=args, rollout_func=self.rollout, **kwargs)
        self._check_learns(model, args, passed_peft or kwargs.get("peft_config") is not None)
        if team.kl_to_junior and team.is_self and passed_peft:  # its frozen adapter copy is not the junior
            use_base_as_reference(self.accelerator.unwrap_model(self.model))
        if tandem.arm == "tandem" and not engine.own_engine:  # backend vllm: the engine holds the junior
            self.rollout.junior = self._junior(junior, tandem)
        if engine.own_engine:  # training syncs the senior's weights into it: TRL's vLLM machinery
            self._attach_engine(args, engine)
        self.add_callback(StepTimeCallback(self, self.rollout))
        self.is_meter = ISCorrectionMeter(self)  # tandem/is/*: what TRL's IS correction zeroed or clipped
        self.add_callback(self.is_meter)
        self.add_callback(WeightsMoved(self))  # the first step's postcondition: the trainable weights moved

    def _reward_funcs(self, reward_funcs, tandem: TandemConfig, args) -> list | None:
        """TRL's reward functions, each plain one logging the reward by junior share and the first carrying
        the length penalty (`trlvr.rewards.length`); None: TRL's refusal ("no reward source")."""
        funcs = (
            [] if reward_funcs is None else reward_funcs if isinstance(reward_funcs, list) else [reward_funcs]
        )
        check_reward_grader(funcs, tandem.grader)
        funcs = [
            with_share_split(f, lambda: self.rollout.last_senior_share) if _plain_callable(f) else f
            for f in funcs
        ]
        if funcs and not _plain_callable(funcs[0]) and tandem.length_penalty != "none":
            raise ValueError(
                "length_penalty needs a plain reward function first in reward_funcs (not a model)"
            )
        if funcs and _plain_callable(funcs[0]):
            funcs[0] = with_length_penalty(
                funcs[0], tandem.length_penalty, tandem.length_penalty_weight, args.max_completion_length
            )
        return funcs or None

    def _check_learns(self, model, args, use_peft: bool) -> None:
        """The loaded senior's own dtype (after TRL loaded a model given by its id) lets updates land
        (`trlvr.training.learning`; `load_models` checked its config's before any weights loaded)."""
        trainable = next((p for p in self.model.parameters() if p.requires_grad), None)
        problem = low_precision_problem(
            dtype=None if trainable is None else trainable.dtype,
            use_peft=use_peft,
            sharding=launch_sharding(args),
            optim=args.optim,
            optim_args=args.optim_args,
            learning_rate=args.learning_rate,
        )
        if problem:
            raise UserError(f"senior {self.tandem.senior or type(model).__name__}: {problem}; {FIXES}")

    def _junior(self, junior, tandem: TandemConfig):
        """The frozen junior the rollouts pair with the senior, on its device: the LoRA senior's adapters-off
        view for `self`, TRL's reference when that is the junior, else the one passed (a path loads here)."""
        senior = self.accelerator.unwrap_model(self.model)
        if self.team.is_self:
            junior = AdapterOffView(senior)  # shares the base weights
        elif (junior is None or isinstance(junior, str)) and self.team.kl_to_junior:
            junior = self.accelerator.unwrap_model(self.ref_model)  # already the junior: reuse, don't reload
        elif junior is None:
            raise ValueError("arm=tandem needs the junior model (trlvr.training.build.load_models loads it)")
        elif isinstance(junior, str):  # a hub id or folder, beside the senior TRL loaded from its own
            self.team = Team.resolve(
                tandem.senior,
                junior,
                pairing=tandem.pairing,
                backend=tandem.backend,
                kl_ref=tandem.kl_ref,
                beta=self.args.beta,
                arm=tandem.arm,
                senior_tok=self._tokenizer,
                check_rows=False,
            )
            junior = self.team.load_junior(senior.dtype)
        junior.to(tandem.junior_device or self.accelerator.device)
        junior.eval()
        junior.requires_grad_(False)
        return junior

    @property
    def pairing(self) -> str | None:
        """The pair's mechanism (lockstep | text; None without a junior): trlvr_run.json's "pairing"."""
        return self.team.pairing

    def _attach_engine(self, args, engine: Backend) -> None:
        """backend vllm: TRL's own vLLM machinery around the tandem engine (`trlvr.vllm.trl_backend`).

        Why setting `use_vllm` after `GRPOTrainer.__init__` is right, at every place TRL 1.16 reads it
        (grpo_trainer.py): 811 (copied from args at init: False, so TRL built no LLM of its own) and
        936 (vespo's IS-mode check, at init: trlvr trains loss_type dapo) are passed; 1105 (TRL
        builds its LLM) is this method; 1767 and 2049 (`_generate_single_turn`, its tool loop) are
        never reached with a `rollout_func`; 2202 (`_generate`: `vllm_generation.sync_weights()`
        when the step changed, before `rollout_func`) is the weight sync we want, tracked by
        `_last_loaded_step` as TRL does; 2644 / 2660 (the IS ratio from the rollout's `logprobs`,
        masked by completion_mask * tool_mask, i.e. senior tokens), 2860 (its metrics), 2908
        (into the batch) and 3146 (into the loss) are TRL's correction on the sampler's log-probs.
        `vllm_mode` "colocate" is read at 1143 (server check, init), 2049 (not reached).
        """
        generation = engine.load("trl_generation")  # the optional backend's, loaded now

        senior = self.accelerator.unwrap_model(self.model)
        tokenizer = getattr(self.processing_class, "tokenizer", self.processing_class)
        self.vllm_generation = generation(
            lambda: self.rollout.engine_pair(senior, tokenizer, self),
            model=self.model,
            accelerator=self.accelerator,
            processing_class=self.processing_class,
            enable_sleep_mode=args.vllm_enable_sleep_mode,
            tensor_parallel_size=args.vllm_tensor_parallel_size,  # several processes: TRL's TP groups
            temperature=self.temperature,
            top_p=self.top_p,
            top_k=self.top_k or 0,
            max_completion_length=self.max_completion_length,
        )
        self.use_vllm, self.vllm_mode, self._last_loaded_step = True, "colocate", -1

    def _get_train_sampler(self, dataset=None):
        # TRL's RepeatSampler draws each epoch's permutation from one generator seeded at creation, and
        # that state is not checkpointed: a resumed run would replay epoch 0's order. Reseeding it per
        # epoch (Trainer/accelerate call `set_epoch` before each epoch) makes the order a function of
        # (seed, epoch), so a resumed run sees the same prompts as an uninterrupted one.
        sampler = super()._get_train_sampler(dataset)
        if getattr(sampler, "shuffle", False) and getattr(sampler, "seed", None) is not None:
            base = sampler.seed

            def set_epoch(epoch: int) -> None:
                sampler.generator.manual_seed(base + epoch)

            sampler.set_epoch = set_epoch
        return sampler

    @property
    def junior(self):
        return self.rollout.junior

    def _model_card(self, model_name: str | None = None, dataset_name: str | None = None, tags=None):
        tandem, args = self.tandem, self.args
        if model_name is None:  # as TRL names it on a checkpoint
            model_name = args.hub_model_id.split("/")[-1] if args.hub_model_id else Path(args.output_dir).name
        senior = tandem.senior or getattr(
            self.accelerator.unwrap_model(self.model).config, "_name_or_path", None
        )
        junior = tandem.junior or getattr(getattr(self.junior, "config", None), "_name_or_path", None)
        if self.team.is_self:
            junior = f"{junior}: the senior's base model with its LoRA adapters off"
        name, settings = tandem.schedule_kwargs()
        schedule = f"{name} ({', '.join(f'{k}={v}' for k, v in settings.items())})" if settings else name
        return tandem_model_card(
            model_name=model_name,
            senior=senior,
            junior=junior,
            arm=tandem.arm,
            schedule=schedule,
            data=dataset_name or tandem.dataset or None,
            steps=self.state.global_step,
            hub_model_id=args.hub_model_id,
            tags=[tags] if isinstance(tags, str) else tags,
            grader=tandem.grader,
        )

    def create_model_card(self, model_name: str | None = None, dataset_name: str | None = None, tags=None):
        """TRL's hook (each checkpoint, `push_to_hub`): the tandem card (`trlvr.training.model_card`) in
        output_dir/README.md, in place of GRPOTrainer's generic one."""
        if self.is_world_process_zero():
            self._model_card(model_name, dataset_name, tags).save(
                os.path.join(self.args.output_dir, MODEL_CARD)
            )

    def save_model(self, output_dir: str | None = None, _internal_call: bool = False):
        """Trainer's save_model (each checkpoint-N, final/), with the tandem card beside the weights."""
        super().save_model(output_dir, _internal_call)
        if self.is_world_process_zero():
            self._model_card().save(os.path.join(output_dir or self.args.output_dir, MODEL_CARD))

    def train(self, *args, **kwargs):
        """Trainer's train. At each generation and scoring TRL reads and calls transformers' deprecated
        `is_gradient_checkpointing` and `gradient_checkpointing_disable` / `_enable` (trlvr's rollout unwraps
        the senior through TRL); those FutureWarnings are no user's to fix, so a run does not print them."""
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", DEPRECATED_CHECKPOINTING, FutureWarning)
            return super().train(*args, **kwargs)

    def _generate_and_score_completions(self, inputs):
        # Loud failure on what reaches the loss: TRL multiplies completion_mask * tool_mask (the rollout's
        # env_mask, unless e.g. TRL's tool loop replaced it) into it, and any junior token left in that
        # product would be trained as the senior's: plain GRPO on someone else's text.
        output = super()._generate_and_score_completions(inputs)
        if self.tandem.arm == "tandem":
            mask = output.get("tool_mask")
            if mask is None:
                raise AuthorMaskError(
                    "tandem batch reached the loss without an author mask (inputs['tool_mask'] from "
                    "env_mask); refusing to train it as plain GRPO"
                )
            junior = junior_tokens_in_loss(self.rollout.last_authors, output["completion_mask"] * mask)
            if junior:
                raise AuthorMaskError(
                    f"{junior} junior tokens reached the loss (the mask TRL applies is not the author mask); "
                    "refusing to train them as the senior's"
                )
        return output

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        # the author mask was checked where TRL builds the batch (`_generate_and_score_completions`)
        self.is_meter.add(inputs)
        return super().compute_loss(model, inputs, return_outputs, num_items_in_batch)

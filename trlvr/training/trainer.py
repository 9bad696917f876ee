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
   `sampling/importance_sampling_ratio/*` metrics over senior tokens.
"""

from __future__ import annotations

import contextlib
import inspect

from accelerate.utils import is_peft_model
from trl import GRPOTrainer

from trlvr.algos import AuthorMaskError
from trlvr.config import TandemConfig
from trlvr.engine.backends import Backend, backend
from trlvr.engine.schedules import Schedule
from trlvr.engine.self_pair import AdapterOffView
from trlvr.rewards.length import with_length_penalty
from trlvr.training.metrics import StepTimeCallback, with_share_split
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


def _is_peft_model(model) -> bool:
    return is_peft_model(model)


def _plain_callable(f) -> bool:
    return callable(f) and not hasattr(f, "forward") and not inspect.iscoroutinefunction(f)


class TandemGRPOTrainer(GRPOTrainer):
    """GRPOTrainer whose rollouts come from `TandemGenerator`.

    model: the senior (a PreTrainedModel). junior: the frozen junior (a PreTrainedModel), or None when
    rollouts do not need one, when it is TRL's KL reference (`kl_ref: junior`, reused), or when
    `junior: self` (the LoRA senior's base with its adapters off: `trlvr.engine.self_pair`).
    Models are loaded in one place, `trlvr.training.build.load_models`. `reward_funcs` follow TRL's
    signature; all other arguments (including `peft_config`) are GRPOTrainer's.

    `tandem` needs no model paths when model objects are passed (`TandemConfig(schedule="word", p=0.5)`);
    backend vllm and `kl_ref: junior` load from paths, so they need `senior` / `junior` set. A runnable
    script on the shipped toy pair: docs/guides/trl-integration.md.

    >>> trainer = TandemGRPOTrainer(senior, junior, tandem=TandemConfig(p=0.5),
    ...     args=GRPOConfig(...), reward_funcs=math_reward, train_dataset=ds,
    ...     processing_class=tokenizer)                                         # doctest: +SKIP
    >>> trainer.train()                                                         # doctest: +SKIP
    """

    def __init__(self, model, junior=None, *, tandem: TandemConfig, args, reward_funcs, longest_prompt: int | None = None,
                 **kwargs):  # fmt: skip
        if args.use_vllm or args.use_transformers_continuous_batching:
            raise ValueError(
                "TandemGRPOTrainer generates with the tandem engine: use_vllm and use_transformers_continuous_batching "
                "must be off (backend: vllm is how to generate with vLLM)"
            )
        if args.off_policy_mask_threshold is not None:
            raise ValueError("off_policy_mask_threshold must be off: the tandem engine's log-probs are not TRL's")
        self.tandem = tandem
        self.longest_prompt = longest_prompt  # backend vllm: the engine's context is this + max_completion_length
        self_paired = tandem.junior == "self"
        engine = backend(tandem.backend)
        if engine.own_engine:  # the engine loads the models from their paths
            tandem.check_model_paths()
        passed_peft = _is_peft_model(model)  # an adapter folder the run continues (trlvr.training.peft_setup)
        if self_paired and kwargs.get("peft_config") is None and not passed_peft:
            raise ValueError("junior: 'self' needs a LoRA senior (use_peft: true, peft_config, or a peft.PeftModel)")
        check_p = tandem.p if tandem.expects_junior_tokens else None
        name, schedule_kwargs = tandem.schedule_kwargs()
        self.rollout = TandemRollout(Schedule.from_config(name, **schedule_kwargs), check_junior_p=check_p,
                                     decode=tandem.decode, junior_device=tandem.junior_device,
                                     backend=tandem.backend)  # fmt: skip
        # kl_ref=junior always has a junior path: TandemConfig refuses it without one. With PEFT, TRL's
        # reference is the senior with adapters disabled: for `junior: self` that IS the junior. A passed
        # PeftModel (a continued adapter) gets a frozen copy of its adapter as TRL's reference instead:
        # removed below for kl_ref=junior, kept (= the starting senior) for kl_ref=initial.
        kl_to_junior = args.beta > 0 and tandem.kl_ref == "junior"
        if kl_to_junior and not tandem.junior:  # TRL builds its reference model from a path
            raise ValueError("kl_ref: junior needs TandemConfig(junior=<the junior's path or hub id>)")
        funcs = reward_funcs if isinstance(reward_funcs, list) else [reward_funcs]
        # Plain (sync) reward callables get the reward-by-junior-share metric; models and async ones pass as is.
        funcs = [with_share_split(f) if _plain_callable(f) else f for f in funcs]
        # the length penalty (both arms alike, trlvr.rewards.length) rides on the first reward function
        if not _plain_callable(funcs[0]) and tandem.length_penalty != "none":
            raise ValueError("length_penalty needs a plain reward function first in reward_funcs (not a model)")
        if _plain_callable(funcs[0]):
            funcs[0] = with_length_penalty(funcs[0], tandem.length_penalty, tandem.length_penalty_weight,
                                           args.max_completion_length)  # fmt: skip

        with _reference_is(model, tandem.junior) if kl_to_junior and not self_paired else contextlib.nullcontext():
            super().__init__(model=model, reward_funcs=funcs, args=args, rollout_func=self.rollout, **kwargs)
        if kl_to_junior and self_paired and passed_peft:
            use_base_as_reference(self.accelerator.unwrap_model(self.model))

        if tandem.arm == "tandem" and not engine.own_engine:  # backend vllm: the engine holds the junior
            if self_paired:
                junior = AdapterOffView(self.accelerator.unwrap_model(self.model))  # shares the base weights
            elif junior is None and kl_to_junior:
                junior = self.accelerator.unwrap_model(self.ref_model)  # already the junior: reuse, don't reload
            elif junior is None:
                raise ValueError("arm=tandem needs the junior model (trlvr.training.build.load_models loads it)")
            junior.to(tandem.junior_device or self.accelerator.device)
            junior.eval()
            junior.requires_grad_(False)
            self.rollout.junior = junior
        if engine.own_engine:  # training syncs the senior's weights into it: TRL's vLLM machinery
            self._attach_engine(args, engine)
        self.add_callback(StepTimeCallback(self, self.rollout))

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

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        # Loud failure: a tandem batch without its author mask would train every junior token as the
        # senior's -- plain GRPO on someone else's text. TRL names the mask `tool_mask` once inside.
        if self.tandem.arm == "tandem" and inputs.get("tool_mask") is None:
            raise AuthorMaskError(
                "tandem batch reached the loss without an author mask (inputs['tool_mask'] from env_mask); "
                "refusing to train it as plain GRPO"
            )
        return super().compute_loss(model, inputs, return_outputs, num_items_in_batch)

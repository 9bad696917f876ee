"""`TandemRollout`: TRL's `rollout_func`, backed by the tandem engine.

TRL 1.16 calls `rollout_func(prompts, trainer)` once per generation batch, on every process, from
`GRPOTrainer._generate`. What it receives (verified in tests/test_training.py, against the source
of `_get_train_sampler` / `RepeatSampler` and `_generate_and_score_completions`): this process's
slice of the generation batch, in which every prompt is ALREADY repeated `num_generations` times
(RepeatSampler's `mini_repeat_count`), so we return exactly one completion per entry. (TRL's
docstring says "no duplication"; the sampler says otherwise, and the trainer then slices the
rewards per process assuming one completion per entry.)

What TRL does with our return value:
- `prompt_ids`, `completion_ids`: padded into the training batch; TRL recomputes the senior's
  per-token log-probs itself (at the sampling temperature) for the ratio.
- `logprobs`: the engine's log-prob of each token. backend hf: the senior's at temperature 1
  (`trlvr.engine`), informational (TRL's importance-sampling correction is off there). backend vllm:
  the sampler's (at senior positions the senior's at the sampling temperature), which TRL's
  importance-sampling correction compares with its own over senior tokens (`TandemGRPOTrainer`).
- `env_mask` (1 = senior token): becomes `tool_mask`; TRL multiplies it into `completion_mask`, so
  junior tokens leave both the loss and the token-mean normaliser (`num_items_in_batch`).
- nothing else: TRL writes any further key into the caller's input rows (one value per row, in place), so
  the per-completion senior share is kept here (`last_senior_share`) for the reward-split metric instead.

Seeding: every row's randomness is a function of (args.seed, row key), the row key being
(global step, mode, prompt index, generation index) with indices counted over the whole generation
batch (`rollout_row_keys`), so a run resumed from a checkpoint regenerates exactly the rollouts the
uninterrupted run would have, and the rollouts do not depend on the number of processes, the
sub-batching or a row's batch-mates (`trlvr.engine.sampling.RowStreams`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from contextlib import contextmanager

import torch
from trl.models import unwrap_model_for_generation

from trlvr.algos import author_stats, check_author_mask, check_has_junior_tokens
from trlvr.data import encode_prompt
from trlvr.engine import Pair, Sampling, make_pair
from trlvr.engine.backends import Backend, backend
from trlvr.engine.capabilities import UNDEFINED_FOR_TEXT_PAIRS
from trlvr.engine.loophole import COUNT_KEYS, loophole_counts, summarize
from trlvr.engine.sampling import row_key
from trlvr.engine.schedules import Schedule, vocab_tables
from trlvr.models import model_folder
from trlvr.team import is_text
from trlvr.training.memory_plan import device_memory, engine_kv_tokens, run_plan, write_memory_record


def rollout_row_keys(
    global_step: int, train: bool, process_index: int, local_rows: int, num_generations: int
) -> list[int]:
    """Row keys of this process's rows: (step, mode, prompt index, generation index) over the global batch.

    TRL hands process p the p-th contiguous slice of the generation batch (it slices the gathered
    rewards the same way), each prompt repeated `num_generations` times in a row.
    """
    start = process_index * local_rows
    mode = "train" if train else "eval"
    return [
        row_key(global_step, mode, j // num_generations, j % num_generations)
        for j in range(start, start + local_rows)
    ]


def run_engine(spec: Backend, plan, args, dtype: str, distribution: dict | None = None):
    """The `EngineOptions` of a training run's engine, from its memory plan (`run_plan`: one plan for both):
    its context, its share of the GPU, `max_num_seqs` = the rows one generate call sends (TRL's rule:
    per-device batch x steps_per_generation x TP), `max_num_batched_tokens` = the plan's
    (`trlvr.memory.BATCHED_TOKENS`, EngineOptions' default); sleep mode as the run asks
    (`vllm_enable_sleep_mode`); distribution: `trl_backend.engine_distribution`'s fields (default: the
    run's seed, one process); spec: the run's backend (`Backend.engine`: its options class). `trlvr smoke`'s
    parity check builds the same engine."""
    engine = spec.load("engine").for_machine(
        dtype, args.seed, plan.context, plan.share, max_num_seqs=plan.max_num_seqs
    )
    return dataclasses.replace(
        engine, enable_sleep_mode=bool(args.vllm_enable_sleep_mode), **(distribution or {"seed": args.seed})
    )


class TandemRollout:
    """Callable passed to `GRPOTrainer(rollout_func=...)`.

    schedule: who writes each token (a SoloSchedule for the GRPO arm).
    junior: the frozen junior (None for solo); set by the trainer once it knows the device.
    check_junior_p: the schedule's senior probability p, for the "no junior tokens" check (None: no check).
    decode, junior_device, compile: the engine's options (`TandemGenerator`); `compile` is read from
    the run config (`trainer.tandem.compile`) when the trainer has one.
    """

    def __init__(
        self,
        schedule: Schedule,
        junior=None,
        check_junior_p: float | None = None,
        decode: str = "auto",
        junior_device: str | None = None,
        compile: bool | str = "auto",
        backend: str = "hf",
    ):
        self.schedule, self.backend = schedule, backend
        self.engine_options = {"decode": decode, "junior_device": junior_device, "compile": compile}
        self.junior = junior
        self.check_junior_p = check_junior_p
        self.generation_seconds = 0.0  # accumulated since the last `take_generation_seconds`
        self._tables = None
        self.pair: Pair | None = None  # built on the first rollout, kept for the run
        self._synced_step: int | None = None  # the optimizer step whose weights the pair generates with
        self._junior_ids: dict = {}  # text pairs: this call's senior prompt ids -> the junior's prompt ids
        self.senior_tokens: list[int] = []  # senior tokens of each training rollout (all processes together)

    def _engine_options(self, trainer) -> dict:
        """The engine's decode / compile / junior_device; `compile` from the run config when it sets it."""
        options = dict(self.engine_options)
        tandem = getattr(trainer, "tandem", None)
        if getattr(tandem, "compile", None) is not None:
            options["compile"] = tandem.compile
        if self.junior is None:
            options.pop("junior_device")
        return options

    def take_generation_seconds(self) -> float:
        seconds, self.generation_seconds = self.generation_seconds, 0.0
        return seconds

    @contextmanager
    def _generating_senior(self, trainer, tokenizer):
        """The senior as TRL unwraps it for generation (DeepSpeed / gradient checkpointing), with the
        vocabulary tables built once per run on its first use."""
        args = trainer.args
        with unwrap_model_for_generation(
            trainer.model_wrapped,
            trainer.accelerator,
            gather_deepspeed3_params=args.ds3_gather_for_generation,
            gradient_checkpointing_kwargs=args.gradient_checkpointing_kwargs,
        ) as senior:
            if self._tables is None:  # decoding the vocabulary once per run, not per step
                self._tables = vocab_tables(tokenizer, senior.get_output_embeddings().weight.shape[0])
            yield senior

    def _tokenize(self, prompts: list, tokenizer) -> list[list[int]]:
        # The one prompt -> ids function, shared with evaluation and the toy world.
        return [encode_prompt(p, tokenizer) for p in prompts]

    def __call__(self, prompts: list, trainer) -> dict:
        args, acc = trainer.args, trainer.accelerator
        tokenizer = getattr(trainer.processing_class, "tokenizer", trainer.processing_class)
        train = trainer.model.training
        prompt_ids = self._tokenize(prompts, tokenizer)
        num_generations = getattr(trainer, "num_generations" if train else "num_generations_eval", None)
        row_keys = rollout_row_keys(
            trainer.state.global_step,
            train,
            acc.process_index,
            len(prompt_ids),
            num_generations or args.num_generations,
        )
        sampling = Sampling(
            args.max_completion_length,
            temperature=args.temperature,
            top_p=args.top_p,
            top_k=args.top_k or 0,
            seed=args.seed,
        )
        start = time.perf_counter()
        with self._generating_senior(trainer, tokenizer) as senior, self._awake(trainer):
            pair = self._pair(senior, tokenizer, trainer)
            if is_text(pair.pairing):
                self._junior_ids = {
                    tuple(ids): encode_prompt(p, pair.junior_tokenizer)
                    for ids, p in zip(prompt_ids, prompts, strict=True)
                }
            if backend(self.backend).own_engine:  # one engine per process; with TP, over its group's rows
                out = trainer.vllm_generation.generate_rows(prompt_ids, self.schedule, sampling, row_keys)
            else:
                out = pair.generate(prompt_ids, self.schedule, sampling, row_keys)
        seconds = time.perf_counter() - start
        self.generation_seconds += seconds

        completion_ids, env_mask = out.completion_ids, out.authors
        check_author_mask(env_mask, completion_ids)
        self.last_authors = env_mask  # the trainer checks it against what reaches the loss
        stats = author_stats(out.senior_authored, out.completion_mask)  # each (B,)
        self.last_senior_share = stats["senior_share"].tolist()  # this process's rows, for `with_share_split`
        mode = "train" if train else "eval"
        self._log(trainer, stats, out, seconds, mode, pair.pairing)
        if is_text(pair.pairing):
            self._log_text(trainer, pair.last, mode)
        return {
            "prompt_ids": prompt_ids,
            "completion_ids": completion_ids,
            "logprobs": out.senior_logprobs,
            "env_mask": env_mask,
        }

    last_authors: list[list[int]] | None = None  # the last rollout's env_mask (1 = senior token)
    last_senior_share: list[float] | None = None  # the last rollout's senior share per completion
    junior_tokenizer = None  # text pairing: the junior's own tokenizer (library callers may set it)

    def _pair(self, senior, tokenizer, trainer) -> Pair:
        """The run's Pair, built on the first rollout (the senior as TRL unwraps it) and kept; after an
        optimizer step it is brought up to the trained weights (`Pair.sync_senior`). A text pair when the
        junior has its own tokenizer (`trlvr.training.build.load_models` gave it one: `choose_pairing`
        decided); backend vllm: the trainer's engine (`engine_pair`), synced by TRL."""
        step = trainer.state.global_step
        if backend(self.backend).own_engine:  # TRL's own vLLM machinery built the pair and syncs its weights
            generation = getattr(trainer, "vllm_generation", None)
            if getattr(generation, "pair", None) is None:
                raise ValueError(
                    "backend vllm rollouts need TandemGRPOTrainer (its TRL vLLM generation holds the engine)"
                )
            generation.pair.check(self.schedule)
            return generation.pair
        if self.pair is None:
            if self.junior is not None and self.junior_tokenizer is None:
                self.junior_tokenizer = getattr(self.junior, "text_pair_tokenizer", None)
            eos = list(trainer.eos_token_ids)
            if self.junior is not None and self.junior_tokenizer is not None:
                options = {"eos_token_ids": eos, "junior_prompts": lambda ids: self._junior_ids[tuple(ids)]}
            else:
                options = {
                    "eos_token_ids": eos,
                    "pad_token_id": tokenizer.pad_token_id,
                    "tables": self._tables,
                    **self._engine_options(trainer),
                }
            self.pair = make_pair(
                senior, self.junior, tokenizer, junior_tokenizer=self.junior_tokenizer, **options
            )
            self.pair.check(self.schedule)
            self._synced_step = step  # an HF pair generates with `senior` itself
        if step != self._synced_step:  # the weights changed since the engine last saw them
            self.pair.sync_senior(senior)
            self._synced_step = step
        return self.pair

    @staticmethod
    def _awake(trainer):
        """backend vllm with sleep mode: the engine awake for this rollout (`TandemVLLMGeneration.awake`)."""
        generation = getattr(trainer, "vllm_generation", None)
        return generation.awake() if hasattr(generation, "awake") else contextlib.nullcontext()

    def engine_pair(self, senior, tokenizer, trainer) -> Pair:
        """backend vllm: one engine from the run's model folders (the junior only when the schedule lets
        it write: the grpo arm runs the senior alone), sized for this machine. Built by the trainer's
        `TandemVLLMGeneration`, whose (TRL's) `sync_weights` brings its senior to the trained weights
        before the first rollout (a resumed run's are not the folder's) and after every optimizer step.
        Several processes: one engine in each, TRL's colocate executor (external_launcher) and TP groups
        (`trlvr.vllm.trl_backend.engine_distribution`); the row keys stay global (`rollout_row_keys`)."""
        tandem, args = trainer.tandem, trainer.args
        spec = backend(tandem.backend)
        # a LoRA senior's base is the senior's folder: TRL's sync pushes merged weights to the senior only
        senior_dir = model_folder(tandem.senior)
        junior = None
        if "junior" in self.schedule.writers:
            junior = senior_dir if trainer.team.is_self else tandem.junior
        plan = run_plan(
            tandem, args, gpu_memory=device_memory(), longest_prompt=getattr(trainer, "longest_prompt", None)
        )
        plan.check("backend vllm")  # before vLLM allocates anything: one line naming the setting to change
        trainer.memory_plan = plan
        engine = run_engine(
            spec,
            plan,
            args,
            str(senior.dtype).removeprefix("torch."),
            spec.load("distribution")(trainer.accelerator, args.vllm_tensor_parallel_size, args.seed),
        )
        pair = make_pair(
            senior_dir,
            junior,
            tokenizer,
            backend=tandem.backend,
            eos_token_ids=list(trainer.eos_token_ids),
            pad_token_id=tokenizer.pad_token_id,
            engine=engine,
        )
        write_memory_record(
            args.output_dir, plan, engine_kv_tokens(pair.llm), trainer.accelerator.is_main_process
        )
        return pair

    def _log_text(self, trainer, text, mode: str) -> None:
        """Text pairs: tokens withdrawn before a partner's word, catch-up tokens, the senior's text share."""
        n = max(len(text), 1)
        metrics = trainer._metrics[mode]
        metrics["tandem/text/withdrawn_per_seq"].append(sum(text.withdrawn) / n)
        metrics["tandem/text/catch_up_tokens_per_seq"].append(
            sum(map(sum, text.catch_up_tokens.values())) / n
        )
        metrics["tandem/text/senior_char_share"].append(sum(text.senior_char_share) / n)

    def _log(self, trainer, stats: dict, out, seconds: float, mode: str, pairing: str | None = None) -> None:
        """Gather batch sums over processes, run the junior-token check, append TRL-style metrics."""
        acc = trainer.accelerator
        ends_eos = torch.tensor([r == "eos" for r in out.finish_reasons], dtype=torch.bool)
        last = (out.lengths - 1).clamp(min=0)
        last_by_junior = (
            ~out.senior_authored.gather(1, last[:, None].to(out.senior_authored.device)).squeeze(1).cpu()
        )
        local = torch.tensor(
            [
                len(stats["length"]),
                stats["length"].sum().item(),
                stats["senior_tokens"].sum().item(),
                stats["junior_tokens"].sum().item(),
                stats["senior_share"].sum().item(),
                stats["switches"].sum().item(),
                (ends_eos & last_by_junior).sum().item(),
                ends_eos.sum().item(),
            ],
            dtype=torch.float64,
            device=acc.device,
        )
        n, tokens, senior, junior, share, switches, eos_junior, eos = acc.gather(local[None]).sum(0).tolist()
        if mode == "train":  # for the run's postcondition (`trlvr.training.run.check_trained`)
            self.senior_tokens.append(int(senior))
        if self.check_junior_p is not None and mode == "train":
            check_has_junior_tokens(
                int(junior), int(tokens), self.check_junior_p, writers=self.schedule.writers
            )
        speed = acc.gather(
            torch.tensor([stats["length"].sum().item() / max(seconds, 1e-9)], device=acc.device)
        )
        metrics = trainer._metrics[mode]  # the dict GRPOTrainer.log averages and writes to log_history
        metrics["tandem/senior_share"].append(share / n)
        metrics["tandem/switches_per_seq"].append(switches / n)
        # the rollout lengths are logged once, by _log_team_and_loophole (tandem/team_length/*,
        # senior_tokens/*, junior_tokens/mean): one name per quantity (docs/reference/logged-metrics.md)
        metrics["tandem/eos_by_junior"].append(eos_junior / max(eos, 1.0))
        metrics["timing/rollout_tokens_per_s"].append(speed.sum().item())  # all processes together
        preempted = (getattr(out, "plan", None) or {}).get("preemptions")
        if preempted is not None:  # backend vllm: requests the engine pre-empted during this rollout
            metrics["tandem/preemptions"].append(
                float(acc.gather(torch.tensor([float(preempted)], device=acc.device)).sum())
            )
        self._log_team_and_loophole(trainer, stats, out, mode, pairing)

    def _log_team_and_loophole(
        self, trainer, stats: dict, out, mode: str, pairing: str | None = None
    ) -> None:
        """Rollout lengths of the team beside TRL's senior-only `completions/*_length` (with env_mask TRL
        counts senior tokens only), and the loophole statistics (`trlvr.engine.loophole`) of tandem batches.

        tandem/team_length/{mean,min,max}: completion tokens written by both authors (the rollout's length);
        tandem/senior_tokens/{mean,min,max}, tandem/junior_tokens/mean: each author's share of them;
        tandem/loophole/<stat>: backstop_share, longest_run_p50 / _p95, redraws_per_100,
        senior_share_spaceless, spaceless_per_100 (only when both authors can write, and never for a text
        pair: the detector replays the lockstep schedule on one vocabulary, so it is undefined there, as
        evaluation says: `trlvr.engine.capabilities.UNDEFINED_FOR_TEXT_PAIRS`).
        """
        acc = trainer.accelerator
        length, senior = stats["length"], stats["senior_tokens"]
        undefined = is_text(pairing) and "loophole" in UNDEFINED_FOR_TEXT_PAIRS
        tandem = len(self.schedule.writers) == 2 and not undefined
        counts, runs = (
            loophole_counts(self.schedule, out.tokens, out.senior_authored, out.completion_mask, self._tables)
            if tandem
            else ({k: 0.0 for k in COUNT_KEYS}, None)
        )
        local = torch.tensor(
            [
                [
                    len(length),
                    length.sum(),
                    length.min(),
                    length.max(),
                    senior.sum(),
                    senior.min(),
                    senior.max(),
                    *(counts[k] for k in COUNT_KEYS),
                ]
            ],
            dtype=torch.float64,
            device=acc.device,
        )
        g = acc.gather(local)  # (processes, 7 + len(COUNT_KEYS))
        n, total, sen = g[:, 0].sum().item(), g[:, 1].sum().item(), g[:, 4].sum().item()
        metrics = trainer._metrics[mode]
        metrics["tandem/team_length/mean"].append(total / n)
        metrics["tandem/team_length/min"].append(g[:, 2].min().item())
        metrics["tandem/team_length/max"].append(g[:, 3].max().item())
        metrics["tandem/senior_tokens/mean"].append(sen / n)
        metrics["tandem/senior_tokens/min"].append(g[:, 5].min().item())
        metrics["tandem/senior_tokens/max"].append(g[:, 6].max().item())
        metrics["tandem/junior_tokens/mean"].append((total - sen) / n)
        if not tandem:
            return
        summed = dict(zip(COUNT_KEYS, g[:, 7:].sum(0).tolist(), strict=True))
        runs = acc.pad_across_processes(runs.to(acc.device), pad_index=-1)
        runs = acc.gather(runs)
        for key, value in summarize(summed, runs[runs >= 0]).items():
            metrics[f"tandem/loophole/{key}"].append(value)

"""`VLLMPair`: the `trlvr.engine.Pair` whose rollouts run in one vLLM engine (see `trlvr/vllm/__init__.py`).

    pair = VLLMPair("runs/x/senior", "models/junior", tokenizer, engine=EngineOptions(dtype="bfloat16"))
    out = pair.generate(prompt_ids, WordSchedule(0.5), Sampling(512, temperature=0.6), row_keys)
    pair.sync_senior(trained_model)                 # after an optimizer step

The engine is built once. Every row is one request with its own `SamplingParams`: the author's
temperature / top-p / top-k, the row's key in `extra_args` (its schedule draws) and as the request
seed (its token draws), EOS ids as stop ids, and one log-prob: the sampler's own log-prob of the
token (vLLM's `processed_logprobs`: of the author's logits after temperature and top-k / top-p), so
at senior positions the senior's at the sampling temperature, as TRL's importance-sampling
correction needs, and at junior positions the junior's (`EngineOptions.logprobs_mode`). Authors are
folded again from the returned tokens (`core.authors_from_tokens`), the same pure function the
processor ran.

What differs from the HF engine: the tokens a key draws (vLLM's sampler and per-request generator,
not `trlvr.engine.sampling`; the authors are the same function of the tokens), float summation order
(greedy runs can part at near-ties), `senior_logprob` is the sampler's (above; the HF engine's is the
senior's at temperature 1 at every position), no junior log-probs (`junior_logprob` is None). Without a junior
the engine is the plain senior (no junior forward) and runs senior-only schedules.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

import torch
from transformers import AutoConfig, AutoTokenizer, GenerationConfig

from trlvr.engine.options import Sampling
from trlvr.engine.output import FINISH_REASONS, TandemOutput
from trlvr.engine.pair import Pair
from trlvr.engine.release import free_memory
from trlvr.engine.schedules import JUNIOR, Schedule, vocab_tables
from trlvr.engine.vocab import check_vocab_rows
from trlvr.errors import UserError
from trlvr.memory import BATCHED_TOKENS
from trlvr.models import locate
from trlvr.vllm.core import authors_from_tokens, engine_keys, tables_digest, tandem_args
from trlvr.vllm.plugin import ARCHITECTURE, register

_LENGTH, _EOS, _ROUNDS = (FINISH_REASONS.index(r) for r in ("length", "eos", "rounds"))
CPU_KV_CACHE_BYTES = 2 << 30  # vLLM's CPU build takes its KV budget in bytes: 2 GiB for both models
# The parity engines (`EngineOptions.parity_variants`): at most PARITY_SEQS rows at once and
# PARITY_BATCHED_TOKENS tokens a step, so prompts are prefilled in chunks beside running decodes (mixed steps)
# and every step fits under the CUDA-graph capture ceiling (`capture_ceiling`): vLLM runs each mixed step as
# PIECEWISE graphs and each uniform decode as a FULL graph, none eager
PARITY_SEQS = 16
PARITY_BATCHED_TOKENS = 32


@dataclass(frozen=True)
class EngineOptions:
    """How the one vLLM engine is built (`vllm.LLM` keywords; `extra` passes any other one through)."""

    dtype: str = "auto"
    max_model_len: int | None = None
    max_num_seqs: int = (
        256  # the rows one generate call sends (training: TRL's per-device batch x steps_per_generation)
    )
    # tokens one engine step may hold; the memory plan's profiling forward assumes the same (trlvr.memory)
    max_num_batched_tokens: int = BATCHED_TOKENS
    gpu_memory_utilization: float = 0.9
    kv_cache_memory_bytes: int | None = None  # set on CPU: vLLM's CPU KV budget
    block_size: int | None = None  # CPU attention needs a multiple of 32
    enforce_eager: bool = False
    enable_prefix_caching: bool = True
    # vLLM's sleep mode (its CuMem pool): `LLM.sleep` frees device memory only in an engine built with it
    # (TRL's vllm_enable_sleep_mode); vLLM has it on CUDA/ROCm/XPU only
    enable_sleep_mode: bool = False
    seed: int = 0
    # the log-prob returned per token: the sampler's ("processed_logprobs", the default: what TRL's
    # importance-sampling correction compares with) or the senior's at temperature 1 ("raw_logprobs":
    # the engine's logits before the author swap are the senior's); nothing in trlvr reads the latter
    logprobs_mode: str = "processed_logprobs"
    # several training processes (torchrun / accelerate): "external_launcher", TRL's colocate executor (one
    # engine per process, in that process, over the launcher's process group); None: vLLM's own choice
    distributed_executor_backend: str | None = None
    tensor_parallel_size: int = 1  # > 1: both stacks sharded over that many processes (external_launcher)
    extra: dict = field(default_factory=dict)

    @classmethod
    def for_machine(
        cls,
        dtype: str = "auto",
        seed: int = 0,
        max_model_len: int | None = None,
        gpu_memory_utilization: float = 0.9,
        max_num_seqs: int = 256,
    ) -> EngineOptions:
        """What training and evaluation build on this machine: on a GPU, vLLM's own defaults (CUDA graphs,
        `gpu_memory_utilization` of the device); without one, the CPU build's needs (a fixed KV budget,
        CPU_KV_CACHE_BYTES; blocks of 32 positions; eager)."""
        cpu = (
            {}
            if torch.cuda.is_available()
            else {"kv_cache_memory_bytes": CPU_KV_CACHE_BYTES, "block_size": 32, "enforce_eager": True}
        )
        return cls(
            dtype=dtype,
            seed=seed,
            max_model_len=max_model_len,
            gpu_memory_utilization=gpu_memory_utilization,
            max_num_seqs=max_num_seqs,
            **cpu,
        )

    def parity_variants(self) -> dict[str, EngineOptions]:
        """This engine three ways, sized for the smoke's parity check (PARITY_SEQS rows, PARITY_BATCHED_TOKENS
        a step): "graphs", as the run builds it (compiled, CUDA graphs); "no_graphs", compiled without CUDA
        graphs (`compilation_config.cudagraph_mode` NONE); "eager" (`enforce_eager`: no compile, no graphs).
        "graphs" vs "no_graphs" isolates the graphs, "no_graphs" vs "eager" the compilation."""
        sized = replace(self, max_num_seqs=PARITY_SEQS, max_num_batched_tokens=PARITY_BATCHED_TOKENS)
        compilation = {**self.extra.get("compilation_config", {}), "cudagraph_mode": "NONE"}
        return {
            "graphs": sized,
            "no_graphs": replace(sized, extra={**self.extra, "compilation_config": compilation}),
            "eager": replace(sized, enforce_eager=True),
        }

    def llm_kwargs(self) -> dict:
        kw = dict(
            dtype=self.dtype,
            max_model_len=self.max_model_len,
            max_num_seqs=self.max_num_seqs,
            max_num_batched_tokens=self.max_num_batched_tokens,
            gpu_memory_utilization=self.gpu_memory_utilization,
            enforce_eager=self.enforce_eager,
            enable_prefix_caching=self.enable_prefix_caching,
            seed=self.seed,
            disable_log_stats=False,
            generation_config="vllm",
            logprobs_mode=self.logprobs_mode,
        )
        if self.enable_sleep_mode:
            kw["enable_sleep_mode"] = True
        if self.kv_cache_memory_bytes is not None:
            kw["kv_cache_memory_bytes"] = self.kv_cache_memory_bytes
        if self.block_size is not None:
            kw["block_size"] = self.block_size
        if self.distributed_executor_backend is not None:
            kw["distributed_executor_backend"] = self.distributed_executor_backend
        if self.tensor_parallel_size != 1:
            kw["tensor_parallel_size"] = self.tensor_parallel_size
        return {**kw, **self.extra}


def capture_ceiling(max_num_seqs: int, max_num_batched_tokens: int, platform_max: int = 512) -> int:
    """The most tokens one engine step may hold and still replay a CUDA graph: vLLM 0.31's default
    `max_cudagraph_capture_size` (`VllmConfig._set_cudagraph_sizes`: min(max_num_seqs x 2, 512), 1024 on
    Blackwell; no speculative decoding), cut to `max_num_batched_tokens`. A larger step runs eager."""
    return min(max_num_batched_tokens, 2 * max_num_seqs, platform_max)


def model_dir(model, weights: bool = True) -> str:
    """A model directory: a folder or a hub id (its snapshot folder in the Hugging Face cache, downloaded when
    online and not cached: `trlvr.models.locate`), or an HF model's `name_or_path`, one of those. `weights`
    False: its config.json suffices (an engine with load_format "dummy" draws random weights)."""
    path = model if isinstance(model, str | Path) else getattr(model, "name_or_path", None)
    where = locate(path, "backend vllm", "model" if weights else "config", fetch=True)[0] if path else None
    if where is None or not (Path(where) / "config.json").is_file():
        raise UserError(f"backend vllm loads models from a directory with config.json; got {path or model!r}")
    return where


def check_cpu_head_dims(configs: dict) -> None:
    """vLLM's CPU attention runs only some head sizes: refuse the others before the first forward fails."""
    from vllm.platforms import current_platform

    if not current_platform.is_cpu():
        return
    from vllm.v1.attention.backends.cpu_attn import CPUAttentionBackend

    sizes = CPUAttentionBackend.get_supported_head_sizes()
    for name, cfg in configs.items():
        head = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
        if head not in sizes:
            raise UserError(
                f"{name}: head_dim {head} does not run on vLLM's CPU attention (head sizes "
                f"{', '.join(map(str, sizes))}); use backend hf for this pair on a CPU"
            )


def check_same_tokenizer(senior_dir: str, junior_dir: str, tokenizer) -> None:
    """Backend vllm pairs over one tokenizer (the embedding row counts may differ: `trlvr.engine.vocab`)."""
    if any(Path(junior_dir).glob("tokenizer*")):
        junior_tok = AutoTokenizer.from_pretrained(junior_dir)
        if junior_tok.get_vocab() != tokenizer.get_vocab():
            raise UserError(
                f"junior {junior_dir}: its tokenizer is not the senior's ({senior_dir}); backend "
                "vllm needs one vocabulary: use text pairing on backend hf"
            )


class VLLMPair(Pair):
    """A senior and a junior (or a senior alone) in one vLLM engine; see the module docstring.

    senior, junior: model directories (or HF models whose `name_or_path` is one); tokenizer: the
    senior's (default: loaded from its directory); eos_token_ids: what ends a row (default: the
    tokenizer's EOS and the senior's generation config's); engine: how vLLM is built.
    """

    backend, pairing = "vllm", "lockstep"

    def __init__(
        self,
        senior,
        junior=None,
        tokenizer=None,
        *,
        eos_token_ids: list[int] | None = None,
        pad_token_id: int | None = None,
        engine: EngineOptions | None = None,
    ):
        self.options = engine or EngineOptions()
        weights = self.options.extra.get("load_format", "auto") != "dummy"  # dummy: vLLM draws random weights
        self.senior_dir = model_dir(senior, weights)
        self.junior_dir = None if junior is None else model_dir(junior, weights)
        self.tokenizer = (
            tokenizer if tokenizer is not None else AutoTokenizer.from_pretrained(self.senior_dir)
        )
        senior_cfg = AutoConfig.from_pretrained(self.senior_dir)
        configs = {f"senior {self.senior_dir}": senior_cfg}
        if self.junior_dir is not None:
            check_same_tokenizer(self.senior_dir, self.junior_dir, self.tokenizer)
            configs[f"junior {self.junior_dir}"] = AutoConfig.from_pretrained(self.junior_dir)
        # from the configs, before any weight loads: a row per token in each model (more rows are padding,
        # which the engine's composite masks: `trlvr.vllm.model`)
        self.n_ids = check_vocab_rows(len(self.tokenizer), configs)
        check_cpu_head_dims(configs)
        # the engine's logit width: a tandem engine's is the shared ids (`_build`), a plain one's the senior's
        # rows
        self.vocab_size = self.n_ids if self.junior_dir is not None else senior_cfg.vocab_size
        self.tables = vocab_tables(self.tokenizer, self.vocab_size)
        self.eos_token_ids = _eos_ids(eos_token_ids, self.tokenizer, self.senior_dir, senior_cfg)
        pad = pad_token_id if pad_token_id is not None else self.tokenizer.pad_token_id
        self._pad = self.eos_token_ids[0] if pad is None else pad
        self.llm = self._build(senior_cfg)

    def _build(self, senior_cfg):
        from vllm import LLM, envs
        from vllm.platforms import current_platform

        kw = self.options.llm_kwargs()
        if kw.get("enable_sleep_mode") and not current_platform.is_sleep_mode_available():
            raise UserError(
                f"vllm_enable_sleep_mode: vLLM has no sleep mode on this machine's platform "
                f"({current_platform.device_type}; CUDA, ROCm and XPU only): set it to false"
            )
        # read by vLLM when the engine starts: with it on (vLLM's default), the engine core is another
        # process; external_launcher (a UniProc executor) always runs it in this one (vLLM turns the variable
        # off for it); any other executor with TP > 1 (mp, ray) runs the model in worker processes
        executor = kw.get("distributed_executor_backend")
        if executor == "external_launcher":
            self.in_process = True
        else:
            self.in_process = (
                not envs.VLLM_ENABLE_V1_MULTIPROCESSING and kw.get("tensor_parallel_size", 1) == 1
            )
        if self.junior_dir is not None:
            from trlvr.vllm.logits import TandemLogitsProcessor

            register()
            spec = {
                "junior": self.junior_dir,
                "senior_architectures": list(senior_cfg.architectures or []),
                "tables": tables_digest(self.tables),
                "ids": self.n_ids,
                "senior_rows": senior_cfg.vocab_size,
            }
            # the engine's vocabulary is the shared ids, not the senior's rows: vLLM's sampler draws one noise
            # value per logit column from each request's generator (v1/sample/ops/topk_topp_sampler.py,
            # `q[i].exponential_(generator=...)`), so only an engine of that width samples what an unpadded
            # pair samples; the composite builds the senior stack with its real rows (`trlvr.vllm.model`)
            kw.update(
                hf_overrides={"architectures": [ARCHITECTURE], "tandem": spec, "vocab_size": self.n_ids},
                logits_processors=[TandemLogitsProcessor],
            )
        return LLM(model=self.senior_dir, **kw)

    @property
    def pad_token_id(self) -> int:
        return self._pad

    def _params(self, sampling: Sampling, key: int, schedule: Schedule, top_logprobs: int = 0):
        from vllm import SamplingParams

        extra = tandem_args(key, schedule, self.eos_token_ids[0]) if self.junior_dir is not None else None
        return SamplingParams(
            n=1,
            temperature=sampling.temperature,
            top_p=sampling.top_p,
            top_k=sampling.top_k,
            max_tokens=sampling.max_new_tokens,
            seed=key,
            stop_token_ids=self.eos_token_ids,
            logprobs=top_logprobs,
            detokenize=False,
            skip_special_tokens=False,
            extra_args=extra,
        )

    def preemptions(self) -> int:
        """Requests vLLM has pre-empted since the engine started (its own counter)."""
        return int(
            sum(getattr(m, "value", 0) for m in self.llm.get_metrics() if m.name == "vllm:num_preemptions")
        )

    def generate(self, prompts, schedule, sampling, row_keys=None, *, top_logprobs: int = 0) -> TandemOutput:
        """`Pair.generate`; top_logprobs k > 0: also the k highest log-probs (the sampler's, as the token's
        own) at every position of every row, descending, in `plan["top_logprobs"]` (rows x positions x k)."""
        self.check(schedule)
        if JUNIOR in schedule.writers and self.junior_dir is None:
            raise UserError(f"schedule {schedule!r} needs a junior; this vllm pair holds the senior only")
        if sampling.temperature > 2.0:
            raise UserError(
                f"temperature: backend vllm samples at temperatures up to 2 (vLLM's limit), "
                f"got {sampling.temperature}"
            )
        if not prompts or any(len(p) == 0 for p in prompts):
            raise ValueError("every prompt needs at least one token")
        row_keys = list(range(len(prompts))) if row_keys is None else [int(k) for k in row_keys]
        if len(row_keys) != len(prompts):
            raise ValueError(f"row_keys has {len(row_keys)} keys for {len(prompts)} prompts")
        keys = engine_keys(row_keys, sampling.seed)
        before = self.preemptions()
        outs = self.llm.generate(
            [{"prompt_token_ids": list(p)} for p in prompts],
            [self._params(sampling, k, schedule, top_logprobs) for k in keys],
            use_tqdm=False,
        )
        rows = [o.outputs[0] for o in outs]
        out = self._output(rows, row_keys, schedule, sampling.seed)
        out.plan = {"backend": "vllm", "preemptions": self.preemptions() - before}
        if top_logprobs:
            lengths = out.lengths.tolist()
            out.plan["top_logprobs"] = [
                [_top(step, top_logprobs) for step in r.logprobs[:n]]
                for r, n in zip(rows, lengths, strict=True)
            ]
        return out

    def _output(self, rows, row_keys: list[int], schedule: Schedule, seed: int) -> TandemOutput:
        """TandemOutput from vLLM's completions: authors folded from the tokens, rows cut where the
        schedule ended them (the processor's forced EOS is not theirs), senior log-probs per token."""
        tokens = [list(r.token_ids) for r in rows]
        folded = authors_from_tokens(tokens, row_keys, schedule, self.tables, seed)
        eos = set(self.eos_token_ids)
        B, T = len(rows), max([len(t) for t in tokens] + [1])
        out_tok = torch.full((B, T), self._pad, dtype=torch.long)
        lp = torch.zeros(B, T)
        mask = torch.zeros(B, T, dtype=torch.bool)
        finish = torch.full((B,), _LENGTH, dtype=torch.long)
        for i, (r, toks) in enumerate(zip(rows, tokens, strict=True)):
            stop = int(folded.stop_at[i])
            n = stop if 0 < stop <= len(toks) else len(toks)
            if n and toks[n - 1] in eos:
                finish[i] = _EOS
            elif stop == n > 0:  # the schedule ended the row (its forced EOS, if any, is cut off)
                finish[i] = _ROUNDS
            out_tok[i, :n] = torch.tensor(toks[:n], dtype=torch.long)
            lp[i, :n] = torch.tensor(
                [step[t].logprob for step, t in zip(r.logprobs[:n], toks[:n], strict=True)]
            )
            mask[i, :n] = True
        return TandemOutput(
            tokens=out_tok,
            senior_authored=folded.authors[:, :T] & mask,
            completion_mask=mask,
            senior_logprob=lp,
            junior_logprob=None,
            finish_codes=finish,
        )

    def close(self) -> None:
        """Shut the engine down now and give its memory back (collected, the CUDA cache emptied), so the next
        engine's free-memory check finds it free. Whoever else holds this pair's `llm` must drop it too."""
        llm, self.llm = self.llm, None
        if llm is not None:
            llm.llm_engine.engine_core.shutdown()
            del llm
            free_memory()

    def _check_in_process(self, what: str) -> None:
        """Weight syncs run functions on the engine's model (`LLM.apply_model`); vLLM's multiprocess engine
        core refuses them (its msgpack transport sends no functions unless
        VLLM_ALLOW_INSECURE_SERIALIZATION)."""
        if not self.in_process:
            raise UserError(
                f"{what}: this vllm pair's engine runs in its own process (vLLM's multiprocess engine "
                "core); weight sync needs it in this one: build the pair with "
                "VLLM_ENABLE_V1_MULTIPROCESSING=0 (or distributed_executor_backend external_launcher)"
            )

    def begin_sync(self) -> None:
        """Open a weight sync: the engine model's `load_weights` may now be called with HF-named senior
        weights, any number at a time (`trlvr.vllm.model.begin_senior_reload`); `end_sync` closes it."""
        from trlvr.vllm.model import begin_senior_reload

        self._check_in_process("begin_sync")
        self.llm.apply_model(begin_senior_reload)

    def end_sync(self) -> None:
        from trlvr.vllm.model import end_senior_reload

        model_config = self.llm.llm_engine.model_config
        self.llm.apply_model(lambda m: end_senior_reload(m, model_config))

    def sync_senior(self, model) -> None:
        """Load `model`'s weights (an HF model, or (name, tensor) pairs with HF names) into the engine's
        senior, then drop the prefix cache (its KV was the old senior's). The junior is untouched.
        (Training syncs through TRL's own `sync_weights` instead: `trlvr.vllm.trl_backend`.)"""
        from trlvr.vllm.model import reload_senior

        self._check_in_process("sync_senior")
        pairs = model.named_parameters() if hasattr(model, "named_parameters") else model
        weights = [(name, t.detach()) for name, t in pairs]
        model_config = self.llm.llm_engine.model_config
        self.llm.apply_model(lambda m: reload_senior(m, weights, model_config))
        self.llm.reset_prefix_cache()


def _top(step: dict, k: int) -> list[float]:
    """The k highest log-probs of one position (vLLM's {token: Logprob} holds the sampled one and top k)."""
    return sorted((lp.logprob for lp in step.values() if lp.rank is not None and lp.rank <= k), reverse=True)[
        :k
    ]


def _eos_ids(eos_token_ids, tokenizer, senior_dir: str, config) -> list[int]:
    """What ends a row: the ids given, else the HF engine's set (`trlvr.engine.generator`): the tokenizer's
    EOS and the senior's generation config's, read as transformers reads it for a loaded model (the
    directory's generation_config.json, else one derived from config.json). For Qwen3-Instruct that
    adds <|endoftext|> to <|im_end|>; config.json alone holds only the latter."""
    if eos_token_ids is not None:
        ids = list(eos_token_ids)
    else:
        try:
            generation = GenerationConfig.from_pretrained(senior_dir)
        except OSError:  # no generation_config.json
            generation = GenerationConfig.from_model_config(config)
        found = {tokenizer.eos_token_id} if tokenizer.eos_token_id is not None else set()
        gen_eos = generation.eos_token_id
        found |= {gen_eos} if isinstance(gen_eos, int) else set(gen_eos or [])
        ids = sorted(found)
    if not ids:
        raise UserError("no EOS token id: pass eos_token_ids or a tokenizer with an eos_token_id")
    return ids

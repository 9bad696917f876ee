"""TandemGenerator: batched, lockstep decoding of a senior and a junior causal LM.

Both models read the same shared history and keep their own KV cache (each in a runner,
`trlvr.engine.runners`, on the model's own device). At every step each running model does one
forward pass over the last token, and the active author's distribution (per sequence, from the
schedule) is sampled. Every emitted token records its author and its
log-probability under both models' raw distributions (temperature 1, no truncation), which is
what GRPO's ratio and the drift/legibility metrics need.

What this file does not know: tokenization and prompts (callers pass token ids), which ids start
a word or end a step (`trlvr.engine.schedules.VocabTables`), how a KV cache is stored or a forward
is compiled (`runners.py`, `kv.py`), and training.

Shapes: B = batch, L = longest prompt, T = new tokens so far, V = vocabulary.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch

from trlvr.engine.kv import batch_bucket
from trlvr.engine.options import DecodeOptions, Sampling, check_decode
from trlvr.engine.output import FINISH_REASONS, TandemOutput
from trlvr.engine.runners import EagerRunner, StaticRunner, fp32_logits, no_router_logits
from trlvr.engine.sampling import (
    TOKEN_STREAM,
    RowStreams,
    row_key,
    sample_with_uniforms,
    token_logprob,
)
from trlvr.engine.schedules import JUNIOR, SENIOR, Schedule, VocabTables, vocab_tables
from trlvr.engine.vocab import shared_ids

_LENGTH, _EOS, _ROUNDS = (FINISH_REASONS.index(r) for r in ("length", "eos", "rounds"))


def _vocab_size(model) -> int:
    return model.get_output_embeddings().weight.shape[0]


def _device(model) -> torch.device:
    return next(model.parameters()).device


def _distinct(prompt_ids: list[list[int]]) -> tuple[list[int], list[int] | None]:
    """(first row of each distinct prompt, distinct index of every row), or inverse None when all differ.

    >>> _distinct([[1, 2], [3], [1, 2]])
    ([0, 1], [0, 1, 0])
    """
    index: dict[tuple[int, ...], int] = {}
    first, inverse = [], []
    for i, p in enumerate(prompt_ids):
        key = tuple(p)
        if key not in index:
            index[key] = len(first)
            first.append(i)
        inverse.append(index[key])
    return first, (None if len(first) == len(prompt_ids) else inverse)


def kv_cache_bytes(model, batch: int, tokens: int) -> int:
    """KV cache bytes for `batch` rows x `tokens` positions: layers x 2 x kv_heads x head_dim x dtype."""
    cfg = model.config
    layers = cfg.num_hidden_layers
    kv_heads = getattr(cfg, "num_key_value_heads", None) or cfg.num_attention_heads
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    dtype_bytes = next(model.parameters()).element_size()
    return layers * 2 * kv_heads * head_dim * dtype_bytes * tokens * batch


def transient_bytes_per_row(model, prompt_len: int, static: bool) -> int:
    """Bytes per row a generation allocates beside the KV caches, at their peak.

    fp32 logits and the sampler's copies (about 6 x V x 4 bytes: logits, scaled, softmax, cumsum,
    mixed, log-softmax), the prefill's MLP and attention activations (L x (intermediate + 4 x hidden)
    in the model's dtype), and on the static path the prefill's DynamicCache, alive beside the
    static buffers while it is copied in (one layer at a time is freed, so counted whole).
    """
    cfg = model.config
    dtype_bytes = next(model.parameters()).element_size()
    logits = 6 * _vocab_size(model) * 4
    hidden = getattr(cfg, "intermediate_size", 4 * cfg.hidden_size) + 4 * cfg.hidden_size
    prefill = prompt_len * hidden * dtype_bytes
    return logits + prefill + (kv_cache_bytes(model, 1, prompt_len) if static else 0)


def device_budget(free: int, reserved: int, allocated: int, fraction: float = 0.9) -> int:
    """Bytes a generation may allocate on a CUDA device: `fraction` of what the driver has free plus
    what PyTorch's caching allocator reserved but does not use (large after a backward pass).

    >>> device_budget(free=10, reserved=100, allocated=60, fraction=1.0)
    50
    """
    return int(fraction * (free + max(reserved - allocated, 0)))


def plan_sub_batches(
    models: list, batch: int, tokens: int, budget_bytes: int | None, extra_per_row: int = 0
) -> int:
    """How many equal sub-batches keep both KV caches (and `extra_per_row` transient bytes per row)
    within `budget_bytes` (1 when no budget)."""
    if budget_bytes is None:
        return 1
    per_row = sum(kv_cache_bytes(m, 1, tokens) for m in models) + extra_per_row
    if per_row > budget_bytes:
        raise ValueError(
            f"one row of {tokens} tokens needs {per_row:,} bytes of KV cache for the running models, more "
            f"than the {budget_bytes:,} bytes available (batch {batch}); shorten prompt + max_new_tokens"
        )
    rows_fit = budget_bytes // per_row
    return -(-batch // rows_fit)  # ceil


def plan_per_device(models_by_device: dict, batch: int, tokens: int, budgets: dict) -> int:
    """Sub-batches so that every device's KV caches fit that device's budget: the most any device needs.

    models_by_device: device name -> the running models on it; budgets: device name -> bytes (None: no
    limit). With the junior on its own GPU, each cache is checked against its own device's memory.
    """
    return max(plan_sub_batches(ms, batch, tokens, budgets[d]) for d, ms in models_by_device.items())


def resolve_decode(decode: str, compile, device: torch.device) -> tuple[str, bool]:
    """("eager" | "static", compile?) for the requested modes on `device`.

    "auto" is static on CUDA and eager elsewhere. Why, from the bytes each path moves per token: the
    eager DynamicCache concatenates every layer's K/V each step (it reads and writes the whole cache,
    about 3x the KV bytes that attention itself reads); the static path writes one position in place
    and attention reads each KV byte once, at the KV head count, with no host sync per token. At
    the GPU shapes this project trains (batch 128, 2-3k tokens) KV reads are ~90% of a step's bytes
    (bench/RESULTS.md), so on a GPU the static path is the one near the bandwidth roofline. On this
    project's CPU the two measured within noise (bench/RESULTS.md), and eager is transformers'
    standard path, so it stays the CPU default. compile "auto" is off until `bench/gpu/run.sh` has
    measured a compiled step on a GPU; compile=True needs the static path (decode "auto" then
    means static).

    >>> resolve_decode("auto", "auto", torch.device("cpu"))
    ('eager', False)
    >>> resolve_decode("auto", "auto", torch.device("cuda"))
    ('static', False)
    """
    check_decode(decode, compile)
    if compile == "auto":
        compile = False  # opt-in until measured on a GPU (see the docstring)
    if decode == "auto":
        mode = "static" if torch.device(device).type == "cuda" or compile else "eager"
    else:
        mode = decode
    if compile and mode != "static":
        raise ValueError(
            "compile=True needs decode='static' (the eager cache changes shape every step), got "
            f"decode={decode!r}"
        )
    return mode, bool(compile)


class TandemGenerator:
    """Co-generate with a senior and a junior that share one tokenizer.

    >>> gen = TandemGenerator(senior, junior, tokenizer)              # doctest: +SKIP
    >>> out = gen.generate([[1, 2, 3], [4, 5]], WordSchedule(p=0.5), Sampling(64))  # doctest: +SKIP
    >>> out.completion_ids, out.authors, out.senior_logprobs          # doctest: +SKIP

    junior_device: where the junior runs; None = where its parameters are. The junior may live on
    another device than the senior (e.g. a second GPU): each step then launches both forwards before
    reading either, each device samples its own candidate from the same per-row uniform, and only
    B token ids, B uniforms and B log-probs cross devices. Passing junior_device explicitly takes
    that split path even when it names the senior's device (same results; tests use this on CPU).
    options: how `generate` runs by default (`DecodeOptions`: decode, compile, prompt sharing, memory).
    """

    static_block: int | None = None  # decode="static": attention reads the length rounded up to this
    # (None: 256 on CUDA, 16 elsewhere; `trlvr.engine.runners.static_block_for`)
    sync_every: int = 8  # decode="static": tokens between two reads of the live-row count on the host
    compile_backend: str | None = None  # torch.compile backend of the static step (None = inductor)

    def __init__(
        self,
        senior,
        junior=None,
        tokenizer=None,
        *,
        tables: VocabTables | None = None,
        eos_token_ids: list[int] | None = None,
        pad_token_id: int | None = None,
        word_start_ids: list[int] | None = None,
        step_end_ids: list[int] | None = None,
        junior_device: torch.device | str | None = None,
        options: DecodeOptions | None = None,
    ):
        self.options = options or DecodeOptions()  # the default of `generate`
        self.senior, self.junior = senior, junior
        self.vocab_size = _vocab_size(senior)
        self.split_devices = False
        dims = [self.vocab_size]
        if junior is not None:
            dims.append(_vocab_size(junior))  # may differ: rows beyond the shared tokenizer are padding
            if junior_device is not None:
                junior_device = torch.device(junior_device)
                if not _same_device(junior_device, _device(junior)):
                    raise ValueError(
                        f"junior_device is {junior_device} but the junior's parameters are on "
                        f"{_device(junior)}; move the junior there first (junior.to({str(junior_device)!r}))"
                    )
            self.split_devices = junior_device is not None or _device(junior) != _device(senior)
        elif junior_device is not None:
            raise ValueError("junior_device was given but there is no junior model")
        if tokenizer is not None and len(tokenizer) > min(dims):
            raise ValueError(
                f"tokenizer has {len(tokenizer)} tokens but the models' vocabulary has {min(dims)}"
            )
        # the ids a token can be: the shared tokenizer's (embedding rows past it are padding, e.g.
        # Qwen2.5-7B's 152,064 rows against 0.5B's 151,936 for one 151,665-token tokenizer)
        self.n_ids = shared_ids(len(tokenizer) if tokenizer is not None else None, *dims)
        if tables is None:
            if tokenizer is None:
                raise ValueError(
                    "pass a tokenizer (or explicit VocabTables) so schedules can find word starts"
                )
            tables = vocab_tables(tokenizer, self.vocab_size, word_start_ids, step_end_ids)
        self.tables = tables
        self.eos_token_ids = self._eos_ids(eos_token_ids, tokenizer)
        if pad_token_id is None:
            pad_token_id = getattr(tokenizer, "pad_token_id", None)
        self.pad_token_id = self.eos_token_ids[0] if pad_token_id is None else pad_token_id
        self._kv: dict = {}  # decode="static": each model's KV buffers (`StaticKV`), kept across calls

    def _eos_ids(self, eos_token_ids, tokenizer) -> list[int]:
        if eos_token_ids is None:
            ids = set()
            if tokenizer is not None and tokenizer.eos_token_id is not None:
                ids.add(tokenizer.eos_token_id)
            gen_eos = getattr(getattr(self.senior, "generation_config", None), "eos_token_id", None)
            ids.update([gen_eos] if isinstance(gen_eos, int) else (gen_eos or []))
            eos_token_ids = sorted(ids)
        if not eos_token_ids:
            raise ValueError("no EOS token id: pass eos_token_ids or a tokenizer with eos_token_id")
        return list(eos_token_ids)

    def _sub_batches(
        self,
        models: list,
        batch: int,
        tokens: int,
        requested: int | None | str,
        prompt_len: int = 0,
        static: bool = False,
    ) -> tuple[int, dict | None]:
        """(sub-batches, memory plan): `requested` bytes for all KV caches together, or with "auto" per
        CUDA device `device_budget` (free + reserved-but-unused, 90%), plus the static buffers this
        generator already holds there (reused), against KV + transient bytes per row (no limit on CPU)."""
        if requested != "auto":
            return plan_sub_batches(models, batch, tokens, requested), None
        by_device: dict[str, list] = {}
        for m in models:
            by_device.setdefault(str(_device(m)), []).append(m)
        budgets, plan = {}, {}
        for name, ms in by_device.items():
            device = torch.device(name)
            if device.type != "cuda":
                budgets[name] = None
                continue
            free = torch.cuda.mem_get_info(device)[0]
            reserved, allocated = torch.cuda.memory_reserved(device), torch.cuda.memory_allocated(device)
            held = sum(
                kv.bytes() for kv in self._kv.values() if kv.valid.device == device and kv.fits(batch, tokens)
            )
            extra = sum(transient_bytes_per_row(m, prompt_len, static) for m in ms)
            budgets[name] = device_budget(free, reserved, allocated) + held - batch * extra
            plan[name] = {
                "free": free,
                "reserved_unused": max(reserved - allocated, 0),
                "reused_buffers": held,
                "transient_per_row": extra,
                "kv_per_row": sum(kv_cache_bytes(m, 1, tokens) for m in ms),
                "budget": budgets[name],
            }
            if budgets[name] <= 0:
                raise ValueError(f"{name}: no memory left for generation ({plan[name]})")
        return plan_per_device(by_device, batch, tokens, budgets), (plan or None)

    @property
    def device(self) -> torch.device:
        return _device(self.senior)

    @torch.no_grad()
    def generate(
        self,
        prompt_ids: list[list[int]],
        schedule: Schedule,
        sampling: Sampling,
        row_keys=None,
        *,
        score_both: bool = False,
        options: DecodeOptions | None = None,
    ) -> TandemOutput:
        """Generate one completion per prompt (prompts may differ in length).

        sampling: the token budget, temperature / top_p / top_k and the seed (`Sampling`).
        seed, row_keys: every random draw of row i (its tokens, its schedule's redraws) is a pure
        function of (sampling.seed, row_keys[i], position) (`trlvr.engine.sampling.RowStreams`), so a
        row's completion does not depend on its batch-mates, sub-batches, prompt sharing or devices.
        row_keys: (B,) ints or LongTensor, e.g. `row_key(step, prompt_index, generation_index)`;
        None = the row's index in this call.
        options: how the engine runs (`DecodeOptions`: decode, compile, prompt sharing, memory budget);
        None = the generator's own `options`.

        Only the models that can write under `schedule` run (`schedule.writers`: a SoloSchedule, or
        p = 1 / p = 0, runs one model), unless `score_both` asks for both models' log-probs (it then
        decodes in lockstep, at tandem cost).

        Phases (each a method): plan sub-batches (`_sub_batches`), `_prefill` (pad, one forward per
        distinct prompt per running model), then per token `_decode_one_token` (sample the active
        author's token, record it, advance the schedule, mark finished rows) and one decode forward
        per running model, compacting the batch when it can shrink (`_decode_n_tokens`).
        """
        if not prompt_ids or any(len(p) == 0 for p in prompt_ids):
            raise ValueError("every prompt needs at least one token")
        if row_keys is None:
            row_keys = list(range(len(prompt_ids)))
        elif isinstance(row_keys, torch.Tensor):
            row_keys = row_keys.tolist()
        else:
            row_keys = list(row_keys)
        if len(row_keys) != len(prompt_ids):
            raise ValueError(f"row_keys has {len(row_keys)} keys for {len(prompt_ids)} prompts")
        options = self.options if options is None else options
        mode, compiled = resolve_decode(options.decode, options.compile, self.device)
        writers = set(schedule.writers) | ({SENIOR, JUNIOR} if score_both else set())
        if JUNIOR in writers and self.junior is None:
            raise ValueError(f"{type(schedule).__name__} needs a junior model, but the generator has none")
        models = {name: m for name, m in ((SENIOR, self.senior), (JUNIOR, self.junior)) if name in writers}

        max_new_tokens = sampling.max_new_tokens
        total = max(len(p) for p in prompt_ids) + max_new_tokens
        n_sub, memory = self._sub_batches(
            list(models.values()),
            len(prompt_ids),
            total,
            options.memory_budget_bytes,
            max(len(p) for p in prompt_ids),
            mode == "static",
        )
        if n_sub > 1:
            size = -(-len(prompt_ids) // n_sub)
            whole = replace(options, memory_budget_bytes=None)
            parts = [
                self.generate(
                    prompt_ids[i : i + size],
                    schedule,
                    sampling,
                    row_keys[i : i + size],
                    score_both=score_both,
                    options=whole,
                )
                for i in range(0, len(prompt_ids), size)
            ]
            out = TandemOutput.concat(parts, pad_id=self.pad_token_id)
            out.plan = {"decode": mode, "compile": compiled, "sub_batches": n_sub, "memory": memory}
            return out

        streams = RowStreams(
            torch.tensor([row_key(int(sampling.seed), int(k)) for k in row_keys], device=self.device)
        )
        was_training = {name: m.training for name, m in models.items()}
        for m in models.values():
            m.eval()
        try:
            # log-probs and sampling from fp32 logits, never bf16-rounded; no MoE router loss in generation
            with fp32_logits(models.values()), no_router_logits(models.values()):
                run = self._prefill(
                    prompt_ids,
                    models,
                    mode,
                    compiled,
                    max_new_tokens,
                    options.share_prompts,
                    schedule,
                    streams,
                )
                self._decode_n_tokens(run, schedule, sampling)
        finally:
            for name, training in was_training.items():
                models[name].train(training)
        out = run.output()
        out.plan = {"decode": mode, "compile": compiled, "sub_batches": 1, "memory": memory}
        return out

    # The phases of one (sub-)batch: prefill, then decode_one_token until every row is done.

    def _prefill(
        self,
        prompt_ids,
        models: dict,
        mode: str,
        compiled: bool,
        max_new_tokens: int,
        share_prompts: bool,
        schedule: Schedule,
        streams: RowStreams,
    ) -> _Run:
        """Pad the prompts, build each model's runner, prefill each distinct prompt once; the decode state."""
        device = self.device
        # left padding, once per call (not per token); built on the CPU, each runner copies it once
        B, L = len(prompt_ids), max(len(p) for p in prompt_ids)
        input_ids = torch.full((B, L), self.pad_token_id, dtype=torch.long)
        mask = torch.zeros(B, L + max_new_tokens, dtype=torch.long)
        for i, p in enumerate(prompt_ids):
            input_ids[i, L - len(p) :] = torch.tensor(p, dtype=torch.long)
            mask[i, L - len(p) : L] = 1
        mask[:, L:] = 1  # generated positions are always attended (finished rows are ignored later)
        positions = (mask[:, :L].cumsum(-1) - 1).clamp(min=0)  # (B, L)

        def runner(name, model):
            dev = _device(model)
            if mode == "static":
                return StaticRunner(
                    model,
                    dev,
                    L,
                    max_new_tokens,
                    block=self.static_block,
                    compile=compiled,
                    pool=self._kv,
                    name=name,
                    backend=self.compile_backend,
                )
            return EagerRunner(model, dev, L, max_new_tokens)

        runners = {name: runner(name, m) for name, m in models.items()}
        # prefill: each distinct prompt once, then its KV rows and logits copied to its repeats
        unique, inverse = _distinct(prompt_ids) if share_prompts else (list(range(B)), None)
        first = torch.tensor(unique)  # (U,) one row per distinct prompt
        rows_of = (
            None if inverse is None else torch.tensor(inverse)
        )  # (B,) distinct-prompt index of every row
        logits = {
            name: r.prefill(input_ids, mask, positions, first, rows_of)[:, : self.n_ids]
            for name, r in runners.items()
        }
        # split: each model samples on its own device (see the class docstring)
        split = self.split_devices and JUNIOR in models
        tables = self.tables.to(device)
        return _Run(
            runners=runners,
            logits=logits,
            tables=tables,
            eos=torch.tensor(self.eos_token_ids, device=device),
            pad=self.pad_token_id,
            static=mode == "static",
            lockstep=len(models) == 2,
            split=split,
            tokens=torch.full((B, max_new_tokens), self.pad_token_id, dtype=torch.long, device=device),
            authored=torch.zeros(B, max_new_tokens, dtype=torch.bool, device=device),
            lp={name: torch.zeros(B, max_new_tokens, device=device) for name in models},
            finish=torch.full((B,), _LENGTH, dtype=torch.long, device=device),
            length=torch.full((B,), max_new_tokens, dtype=torch.long, device=device),
            rows=torch.arange(B, device=device),
            done=torch.zeros(B, dtype=torch.bool, device=device),
            state=schedule.start(B, tables, streams.schedule_draws(0)),
            streams=streams,
            split_streams={name: streams.to(_device(m)) for name, m in models.items()} if split else None,
        )

    def _decode_n_tokens(self, run: _Run, schedule: Schedule, sampling: Sampling) -> None:
        """Decode until every row is done or the budget is spent.

        The static path reads the number of live rows every `sync_every` tokens only (on CUDA through
        a non-blocking copy read one check later: no host sync in the token loop); finished rows stay
        in the batch, masked, until the row bucket can shrink. The eager path checks every token and
        drops finished rows once a quarter of the batch is done.
        """
        every = self.sync_every if run.static else 1
        counter = _LiveCount(run.done.device, lag=run.static and run.done.device.type == "cuda")
        max_new_tokens = sampling.max_new_tokens
        for t in range(max_new_tokens):
            tok = self._decode_one_token(run, t, schedule, sampling)
            if t == max_new_tokens - 1:
                break
            if (t + 1) % every == 0:
                n_live = counter.poll(run.done)  # an upper bound: rows only ever finish
                if n_live == 0:
                    break
                keep = None if n_live is None else run.compact(n_live, t)
                if keep is not None:
                    tok = tok[keep]
            # one decode forward per running model on the token just emitted; every model's input is
            # on its device before any forward is launched, so models on two devices run at once
            inputs = {name: tok.to(r.device, non_blocking=True) for name, r in run.runners.items()}
            run.logits = {name: r.step(inputs[name], t)[:, : self.n_ids] for name, r in run.runners.items()}

    def _decode_one_token(self, run: _Run, t: int, schedule: Schedule, params: Sampling) -> torch.Tensor:
        """Sample token t of every running row from its author, record it, advance the schedule.

        Device-side writes only (no host sync): finished rows write pad / False / 0.
        Returns the tokens (R,) the models read next.
        """
        logits, state, done = run.logits, run.state, run.done
        if run.split:
            tok, tok_lp = _sample_split(logits, state.author, params, run.split_streams, t, run.done.device)
        else:
            if run.lockstep:
                active = torch.where(state.author[:, None], logits[SENIOR], logits[JUNIOR])  # (R, V)
            else:
                active = next(iter(logits.values()))
            u = None if params.greedy else run.streams.uniform(t, TOKEN_STREAM)[:, None]  # (R, 1)
            tok = sample_with_uniforms(active, u, params.temperature, params.top_k, params.top_p)  # (R,)
            tok_lp = {name: token_logprob(x, tok) for name, x in logits.items()}  # each (R,)
        tok = torch.where(done, run.pad, tok)
        rows = slice(None) if run.in_order else run.rows  # plain column writes until the first compaction
        run.tokens[rows, t] = tok
        run.authored[rows, t] = state.author & ~done
        for name, x in tok_lp.items():
            run.lp[name][rows, t] = x.masked_fill(done, 0.0)
        run.state = schedule.advance(state, tok, run.tables, run.streams.schedule_draws(t + 1))
        hit_eos = torch.isin(tok, run.eos) & ~done
        hit_cap = run.state.stop & ~done & ~hit_eos
        ended = hit_eos | hit_cap
        run.finish[rows] = torch.where(hit_eos, _EOS, torch.where(hit_cap, _ROUNDS, run.finish[rows]))
        run.length[rows] = torch.where(ended, t + 1, run.length[rows])
        run.done = done | ended
        return tok


class _LiveCount:
    """How many rows are live, read on the host: at once on CPU; on CUDA through a pinned non-blocking
    copy queued at one check and read at the next, so the GPU never waits for the host (the count
    is then one check old: an upper bound, as rows only finish)."""

    def __init__(self, device: torch.device, lag: bool):
        self.lag, self.pending = lag, None

    def poll(self, done: torch.Tensor) -> int | None:
        live = (~done).sum()
        if not self.lag:
            return int(live)
        host = torch.empty((), dtype=torch.long, pin_memory=True)
        host.copy_(live, non_blocking=True)
        event = torch.cuda.Event()
        event.record()
        previous, self.pending = self.pending, (host, event)
        if previous is None:
            return None
        previous[1].synchronize()
        return int(previous[0])


@dataclass
class _Run:
    """The decode state of one (sub-)batch. Output tensors are (B, N); the running batch is R rows
    (`rows`: their original indices), finished ones included until compaction drops them."""

    runners: dict
    logits: dict  # name -> (R, V) next-token logits of every running model
    tables: VocabTables
    eos: torch.Tensor
    pad: int
    static: bool
    lockstep: bool
    split: bool
    tokens: torch.Tensor  # (B, N) long
    authored: torch.Tensor  # (B, N) bool
    lp: dict  # name -> (B, N) float32
    finish: torch.Tensor  # (B,) long
    length: torch.Tensor  # (B,) long
    rows: torch.Tensor  # (R,) long
    done: torch.Tensor  # (R,) bool
    state: object  # ScheduleState of the R rows
    streams: RowStreams  # the R rows' random streams
    split_streams: dict | None
    in_order: bool = True  # rows == arange(B): no compaction yet

    def compact(self, n_live: int, t: int) -> torch.Tensor | None:
        """Drop finished rows before the forward of step t when the batch can shrink; the kept indices (R',)
        or None.

        Static: only when the power-of-two row bucket shrinks (each compaction copies every kept KV
        row); the kept rows are the live ones (in order) then finished ones up to the bucket, chosen
        on the device (a stable argsort), so no host sync. Eager: once a quarter of the rows are done.
        """
        R, full = self.rows.numel(), self.tokens.shape[0]
        # static: buckets of >= 2 rows (a compiled step is specialised at one row)
        target = max(batch_bucket(n_live, full), min(2, full)) if self.static else n_live
        if target >= R or (not self.static and 4 * (R - n_live) < R):
            return None
        keep = torch.argsort(self.done.to(torch.int8), stable=True)[:target]
        self.rows, self.done = self.rows[keep], self.done[keep]
        self.state = type(self.state)(*(f[keep] for f in self.state))
        self.streams = self.streams.select(keep)
        if self.split_streams is not None:
            self.split_streams = {name: s.select(keep) for name, s in self.split_streams.items()}
        for r in self.runners.values():
            r.select(keep, t)
        self.in_order = False
        return keep

    def output(self) -> TandemOutput:
        T = int(self.length.max())
        in_completion = torch.arange(T, device=self.length.device)[None, :] < self.length[:, None]  # (B, T)
        return TandemOutput(
            tokens=self.tokens[:, :T],
            senior_authored=self.authored[:, :T] & in_completion,
            completion_mask=in_completion,
            senior_logprob=self.lp[SENIOR][:, :T] if SENIOR in self.lp else None,
            junior_logprob=self.lp[JUNIOR][:, :T] if JUNIOR in self.lp else None,
            finish_codes=self.finish,
        )


def _same_device(a: torch.device, b: torch.device) -> bool:
    """cuda and cuda:0 name the same device when the current device is 0."""
    if a.type != b.type:
        return False
    if a.type != "cuda":
        return True
    current = torch.cuda.current_device()
    return (a.index if a.index is not None else current) == (b.index if b.index is not None else current)


def _sample_split(logits: dict, author, params: Sampling, streams: dict, t: int, device):
    """Sample with each model's logits on its own device: (tok (b,), {name: log-prob (b,)}) on `device`.

    Each model's device computes the rows' uniforms itself from the row keys (`streams`, one
    `RowStreams` per model, on its device: the same bits the one-device path draws), samples its
    candidate there, and the author mask picks one, which is the token the one-device path samples
    from the mixed logits. Only (b,)-sized tensors cross devices, never (b, V) logits.
    """

    def cand_of(name, x):
        u = None if params.greedy else streams[name].uniform(t, TOKEN_STREAM)[:, None]
        return sample_with_uniforms(x, u, params.temperature, params.top_k, params.top_p).to(device)

    cand = {name: cand_of(name, x) for name, x in logits.items()}
    tok = torch.where(author, cand[SENIOR], cand[JUNIOR]) if len(cand) == 2 else next(iter(cand.values()))
    tok_lp = {name: token_logprob(x, tok.to(x.device)).to(device) for name, x in logits.items()}
    return tok, tok_lp

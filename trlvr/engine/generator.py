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

import torch

from trlvr.engine.output import FINISH_REASONS, TandemOutput
from trlvr.engine.runners import STATIC_BLOCK, EagerRunner, StaticRunner
from trlvr.engine.sampling import (
    check_decoding,
    draw_uniforms,
    sample_tokens,
    sample_with_uniforms,
    token_logprob,
)
from trlvr.engine.schedules import JUNIOR, SENIOR, Schedule, VocabTables, vocab_tables

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
    """Bytes of a full KV cache for `batch` rows of `tokens` positions: layers x 2 x kv_heads x head_dim x dtype."""
    cfg = model.config
    layers = cfg.num_hidden_layers
    kv_heads = getattr(cfg, "num_key_value_heads", None) or cfg.num_attention_heads
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    dtype_bytes = next(model.parameters()).element_size()
    return layers * 2 * kv_heads * head_dim * dtype_bytes * tokens * batch


def plan_sub_batches(models: list, batch: int, tokens: int, budget_bytes: int | None) -> int:
    """How many equal sub-batches keep both KV caches within `budget_bytes` (1 when no budget)."""
    if budget_bytes is None:
        return 1
    per_row = sum(kv_cache_bytes(m, 1, tokens) for m in models)
    if per_row > budget_bytes:
        raise ValueError(
            f"one row of {tokens} tokens needs {per_row:,} bytes of KV cache for the running models, more than "
            f"the {budget_bytes:,} bytes available (batch {batch}); shorten prompt + max_new_tokens"
        )
    rows_fit = budget_bytes // per_row
    return -(-batch // rows_fit)  # ceil


def plan_per_device(models_by_device: dict, batch: int, tokens: int, budgets: dict) -> int:
    """Sub-batches so that every device's KV caches fit that device's budget: the most any device needs.

    models_by_device: device name -> the running models on it; budgets: device name -> bytes (None: no
    limit). With the junior on its own GPU, each cache is checked against its own device's memory.
    """
    return max(plan_sub_batches(ms, batch, tokens, budgets[d]) for d, ms in models_by_device.items())


DECODE_MODES = ("auto", "eager", "static")


def resolve_decode(decode: str, compile, device: torch.device) -> tuple[str, bool]:
    """("eager" | "static", compile?) for the requested modes on `device`.

    "auto" is eager and no compile, on every device, until `bench/gpu/run.sh` has measured the static
    path and the captured step on a GPU: both are tested equal to eager on CPU only, and no default
    should rest on a path that has never run where it is meant to win (on this project's CPU, static
    measured 0.81-0.98x the time of eager at the 10M bench pair, 1.09x once: noise-level, so the
    standard transformers path stays). compile=True needs decode="static".

    >>> resolve_decode("auto", "auto", torch.device("cpu"))
    ('eager', False)
    """
    if decode not in DECODE_MODES:
        raise ValueError(f"decode must be one of {DECODE_MODES}, got {decode!r}")
    if compile not in (True, False, "auto"):
        raise ValueError(f"compile must be True, False or 'auto', got {compile!r}")
    mode = "eager" if decode == "auto" else decode  # `device` is where a measured default will branch
    if compile == "auto":
        compile = False  # opt-in until measured on a GPU (see the docstring)
    if compile and mode != "static":
        raise ValueError(f"compile=True needs decode='static' (the eager cache changes shape every step), got decode={decode!r}")
    return mode, bool(compile)


class TandemGenerator:
    """Co-generate with a senior and a junior that share one tokenizer.

    >>> gen = TandemGenerator(senior, junior, tokenizer)              # doctest: +SKIP
    >>> out = gen.generate([[1, 2, 3], [4, 5]], WordSchedule(p=0.5), max_new_tokens=64)  # doctest: +SKIP
    >>> out.completion_ids, out.authors, out.senior_logprobs          # doctest: +SKIP

    junior_device: where the junior runs; None = where its parameters are. The junior may live on
    another device than the senior (e.g. a second GPU): each step then launches both forwards before
    reading either, each device samples its own candidate from the same per-row uniform, and only
    B token ids, B uniforms and B log-probs cross devices. Passing junior_device explicitly takes
    that split path even when it names the senior's device (same results; tests use this on CPU).
    """

    static_block: int = STATIC_BLOCK  # decode="static": attention reads the length rounded up to this

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
        decode: str = "auto",
        compile: bool | str = "auto",
    ):
        resolve_decode(decode, compile, torch.device("cpu"))  # validates the names now, not at the first call
        self.decode, self.compile = decode, compile  # defaults for `generate`
        self.senior, self.junior = senior, junior
        self.vocab_size = _vocab_size(senior)
        self.split_devices = False
        if junior is not None:
            jv = _vocab_size(junior)
            if jv != self.vocab_size:
                raise ValueError(
                    f"senior and junior vocabularies differ: senior has {self.vocab_size} tokens, "
                    f"junior has {jv}; tandem decoding needs one shared tokenizer"
                )
            if junior_device is not None:
                junior_device = torch.device(junior_device)
                if not _same_device(junior_device, _device(junior)):
                    raise ValueError(
                        f"junior_device is {junior_device} but the junior's parameters are on {_device(junior)}; "
                        f"move the junior there first (junior.to({str(junior_device)!r}))"
                    )
            self.split_devices = junior_device is not None or _device(junior) != _device(senior)
        elif junior_device is not None:
            raise ValueError("junior_device was given but there is no junior model")
        if tokenizer is not None and len(tokenizer) > self.vocab_size:
            raise ValueError(
                f"tokenizer has {len(tokenizer)} tokens but the models' vocabulary has {self.vocab_size}"
            )
        if tables is None:
            if tokenizer is None:
                raise ValueError("pass a tokenizer (or explicit VocabTables) so schedules can find word starts")
            tables = vocab_tables(tokenizer, self.vocab_size, word_start_ids, step_end_ids)
        self.tables = tables
        self.eos_token_ids = self._eos_ids(eos_token_ids, tokenizer)
        if pad_token_id is None:
            pad_token_id = getattr(tokenizer, "pad_token_id", None)
        self.pad_token_id = self.eos_token_ids[0] if pad_token_id is None else pad_token_id

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

    def _sub_batches(self, models: list, batch: int, tokens: int, requested: int | None | str) -> int:
        """How many sub-batches the KV caches need: `requested` bytes for all caches together, or with
        "auto" 90% of each CUDA device's free memory for the caches on that device (no limit on CPU)."""
        if requested != "auto":
            return plan_sub_batches(models, batch, tokens, requested)
        by_device: dict[str, list] = {}
        for m in models:
            by_device.setdefault(str(_device(m)), []).append(m)
        budgets = {}
        for name in by_device:
            device = torch.device(name)
            budgets[name] = int(0.9 * torch.cuda.mem_get_info(device)[0]) if device.type == "cuda" else None
        return plan_per_device(by_device, batch, tokens, budgets)

    @property
    def device(self) -> torch.device:
        return _device(self.senior)

    @torch.no_grad()
    def generate(
        self,
        prompt_ids: list[list[int]],
        schedule: Schedule,
        max_new_tokens: int,
        temperature: float = 1.0,
        top_p: float = 1.0,
        top_k: int = 0,
        seed: int = 0,
        score_both: bool = False,
        share_prompts: bool = True,
        memory_budget_bytes: int | None | str = "auto",
        decode: str | None = None,
        compile: bool | str | None = None,
    ) -> TandemOutput:
        """Generate one completion per prompt (prompts may differ in length).

        share_prompts: prefill each distinct prompt once and copy its KV rows to its repeats (TRL
        hands every prompt `num_generations` times); decoding is unchanged, so the output equals
        the unshared one up to floating-point summation order in the prefill.
        memory_budget_bytes: bytes the KV caches of the running models may take ("auto": 90% of the
        free memory of a CUDA device, no limit on CPU). When the batch needs more, it runs as
        equal sub-batches in turn (sub-batch k seeded seed + k; `out.num_sub_batches` says how
        many); when one row alone needs more, a ValueError names batch, length and bytes.
        decode: "eager" grows a DynamicCache every step; "static" allocates each model's KV cache
        once for prompt + max_new_tokens, writes it in place, attends only the current length rounded
        up to `static_block` positions and moves finished rows out into power-of-two batch buckets;
        "auto" is eager until the static path is measured on a GPU; None = the generator's own setting. Both give the same tokens and authors
        and log-probs equal up to float summation order.
        compile: wrap the static path's per-token forward in torch.compile (mode "reduce-overhead",
        i.e. CUDA graphs, on CUDA; the default mode elsewhere); one graph per batch bucket and
        length block. "auto": off until measured on a GPU; None = the generator's own setting.

        Only the models that can write under `schedule` run (`schedule.writers`: a SoloSchedule, or
        p = 1 / p = 0, runs one model), unless `score_both` asks for both models' log-probs (it then
        decodes in lockstep, at tandem cost).

        Phases: (1) pad the prompts, (2) prefill each running model, then per token (3) sample the
        active author's token and record it, (4) advance the schedule and mark finished rows,
        (5) drop finished rows from the batch and caches, (6) one forward per running model.
        """
        if not prompt_ids or any(len(p) == 0 for p in prompt_ids):
            raise ValueError("every prompt needs at least one token")
        if max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
        check_decoding(temperature, top_p, top_k)
        decode = self.decode if decode is None else decode
        compile = self.compile if compile is None else compile
        mode, compiled = resolve_decode(decode, compile, self.device)
        writers = set(schedule.writers) | ({SENIOR, JUNIOR} if score_both else set())
        if JUNIOR in writers and self.junior is None:
            raise ValueError(f"{type(schedule).__name__} needs a junior model, but the generator has none")
        models = {name: m for name, m in ((SENIOR, self.senior), (JUNIOR, self.junior)) if name in writers}
        lockstep = len(models) == 2  # both models run every step; the active author's logits are sampled

        total = max(len(p) for p in prompt_ids) + max_new_tokens
        n_sub = self._sub_batches(list(models.values()), len(prompt_ids), total, memory_budget_bytes)
        if n_sub > 1:
            size = -(-len(prompt_ids) // n_sub)
            parts = [
                self.generate(prompt_ids[i : i + size], schedule, max_new_tokens, temperature, top_p, top_k,
                              seed + k, score_both, share_prompts, memory_budget_bytes=None, decode=decode,
                              compile=compile)
                for k, i in enumerate(range(0, len(prompt_ids), size))
            ]  # fmt: skip
            return TandemOutput.concat(parts, pad_id=self.pad_token_id)

        device = self.device
        tables = self.tables.to(device)
        eos = torch.tensor(self.eos_token_ids, device=device)
        tok_rng = torch.Generator(device=device).manual_seed(seed)
        # A separate stream for authorship: the same seed gives the same schedule at any temperature.
        author_rng = torch.Generator(device=device).manual_seed(seed + 0x5EED)

        # (1) left padding, once per call (not per token); built on the CPU, each runner copies it once
        B, L = len(prompt_ids), max(len(p) for p in prompt_ids)
        input_ids = torch.full((B, L), self.pad_token_id, dtype=torch.long)
        mask = torch.zeros(B, L + max_new_tokens, dtype=torch.long)  # (B, L + max_new_tokens)
        for i, p in enumerate(prompt_ids):
            input_ids[i, L - len(p) :] = torch.tensor(p, dtype=torch.long)
            mask[i, L - len(p) : L] = 1
        mask[:, L:] = 1  # generated positions are always attended (finished rows are ignored later)
        positions = (mask[:, :L].cumsum(-1) - 1).clamp(min=0)  # (B, L)

        def runner(model):
            dev = _device(model)
            if mode == "static":
                return StaticRunner(model, dev, L, max_new_tokens, block=self.static_block, compile=compiled)
            return EagerRunner(model, dev, L, max_new_tokens)

        runners = {name: runner(m) for name, m in models.items()}
        # split: each model samples on its own device from uniforms drawn here (see the class docstring)
        split = self.split_devices and JUNIOR in models
        was_training = {name: m.training for name, m in models.items()}
        for m in models.values():
            m.eval()
        try:
            # (2) prefill: each distinct prompt once, then its KV rows and logits copied to its repeats
            unique, inverse = _distinct(prompt_ids) if share_prompts else (list(range(B)), None)
            first = torch.tensor(unique)  # (U,) one row per distinct prompt
            rows_of = None if inverse is None else torch.tensor(inverse)  # (B,) distinct-prompt index of every row
            logits = {name: r.prefill(input_ids, mask, positions, first, rows_of) for name, r in runners.items()}

            tokens = torch.full((B, max_new_tokens), self.pad_token_id, dtype=torch.long, device=device)
            senior_authored = torch.zeros(B, max_new_tokens, dtype=torch.bool, device=device)
            lp = {name: torch.zeros(B, max_new_tokens, device=device) for name in models}
            finish = torch.full((B,), _LENGTH, dtype=torch.long, device=device)
            length = torch.full((B,), max_new_tokens, dtype=torch.long, device=device)
            # Live rows only: finished sequences are dropped from the batch (and the KV caches) once
            # a quarter of the live rows are done, so ragged lengths do not cost full-batch steps.
            rows = torch.arange(B, device=device)  # (b,) original index of each live row
            done = torch.zeros(B, dtype=torch.bool, device=device)  # (b,)
            state = schedule.start(B, tables, author_rng)
            n_done = 0

            for t in range(max_new_tokens):
                # (3) sample from the active author, score the token under every running model
                if split:
                    tok, tok_lp = _sample_split(logits, state.author, temperature, top_k, top_p, tok_rng, device)
                else:
                    if lockstep:
                        active = torch.where(state.author[:, None], logits[SENIOR], logits[JUNIOR])  # (b, V)
                    else:
                        active = next(iter(logits.values()))
                    tok = sample_tokens(active, temperature, top_k, top_p, tok_rng)  # (b,)
                    tok_lp = {name: token_logprob(x, tok) for name, x in logits.items()}  # each (b,)
                if n_done == 0:  # common case: every row live, no masking
                    live = slice(None)
                    out_rows = slice(None) if rows.numel() == B else rows  # plain column writes until compaction
                else:
                    live = ~done
                    tok = torch.where(done, self.pad_token_id, tok)
                    out_rows = rows[live]
                tokens[out_rows, t] = tok[live]
                senior_authored[out_rows, t] = state.author[live]
                for name, x in tok_lp.items():
                    lp[name][out_rows, t] = x[live]

                # (4) schedule and finish
                state = schedule.advance(state, tok, tables, author_rng)
                hit_eos = torch.isin(tok, eos) & ~done
                hit_cap = state.stop & ~done & ~hit_eos
                ended = hit_eos | hit_cap
                n_ended = int(ended.sum())  # the loop's one host sync per step
                if n_ended:
                    finish[rows[hit_eos]] = _EOS
                    finish[rows[hit_cap]] = _ROUNDS
                    length[rows[ended]] = t + 1
                    done = done | ended
                    n_done += n_ended
                if t == max_new_tokens - 1 or n_done == done.numel():
                    break

                # (5) compact: drop finished rows from the batch and every cache
                if 4 * n_done >= done.numel():
                    keep = torch.nonzero(~done).squeeze(1)
                    rows, done, tok = rows[keep], done[keep], tok[keep]
                    n_done = 0
                    state = type(state)(*(f[keep] for f in state))
                    for r in runners.values():
                        r.select(keep, t)

                # (6) decode forward of every running model on the token just emitted: all launched
                # before any result is read, so models on two devices run at the same time
                logits = {name: r.step(tok, t) for name, r in runners.items()}
        finally:
            for name, training in was_training.items():
                models[name].train(training)

        T = int(length.max())
        in_completion = torch.arange(T, device=device)[None, :] < length[:, None]  # (B, T)
        return TandemOutput(
            tokens=tokens[:, :T],
            senior_authored=senior_authored[:, :T] & in_completion,
            completion_mask=in_completion,
            senior_logprob=lp[SENIOR][:, :T] if SENIOR in lp else None,
            junior_logprob=lp[JUNIOR][:, :T] if JUNIOR in lp else None,
            finish_codes=finish,
        )


def _same_device(a: torch.device, b: torch.device) -> bool:
    """cuda and cuda:0 name the same device when the current device is 0."""
    if a.type != b.type:
        return False
    if a.type != "cuda":
        return True
    current = torch.cuda.current_device()
    return (a.index if a.index is not None else current) == (b.index if b.index is not None else current)


def _sample_split(logits: dict, author, temperature, top_k, top_p, rng, device):
    """Sample with each model's logits on its own device: (tok (b,), {name: log-prob (b,)}) on `device`.

    One uniform per row is drawn on `device` (the same stream `sample_tokens` draws from) and copied
    to every model's device; each model samples its candidate there and the author mask picks one,
    which is the token the one-device path samples from the mixed logits. Only (b,)-sized tensors
    cross devices, never (b, V) logits.
    """
    b = author.shape[0]  # decoding settings were checked once, at the top of `generate`
    u = None if temperature == 0 else draw_uniforms(b, rng, device)  # (b, 1)
    cand = {name: sample_with_uniforms(x, u, temperature, top_k, top_p).to(device) for name, x in logits.items()}
    tok = torch.where(author, cand[SENIOR], cand[JUNIOR]) if len(cand) == 2 else next(iter(cand.values()))
    tok_lp = {name: token_logprob(x, tok.to(x.device)).to(device) for name, x in logits.items()}
    return tok, tok_lp

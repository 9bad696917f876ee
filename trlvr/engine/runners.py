"""One model's side of a generation: its KV cache, padding mask and positions, on its own device.

A runner is built per model per `generate` call and answers three calls:

    logits = runner.prefill(input_ids, mask, positions, first, rows_of)   # (B, V)
    logits = runner.step(tok, t)          # forward on the token emitted at step t: (b, V)
    runner.select(keep, t)                # drop finished rows (keep: (b',) indices)

`EagerRunner` grows a transformers DynamicCache by concatenation (today's path, best on CPU).
`StaticRunner` decodes into preallocated KV buffers (`trlvr.engine.kv`, owned by the generator and
reused across calls), runs the batch in power-of-two row buckets and attention over length blocks
at the KV head count (`kv_head_attention`), and can wrap its per-token forward in torch.compile
(CUDA graphs on CUDA). Inputs may come from any device: a runner moves
the few values it receives (B token ids, B indices) to its own; masks and positions live here.

What this file does not know: sampling, authors, schedules, EOS.
Shapes: B = batch, L = longest prompt, N = max_new_tokens, V = vocabulary, R = row bucket, K = attended
length.
"""

from __future__ import annotations

import contextlib
import inspect

import torch
from transformers import AttentionInterface

from trlvr.engine.kv import StaticKV, attended_length, batch_bucket

STATIC_BLOCK = 256  # attention reads the current length rounded up to this many positions (CUDA)
# Elsewhere a small block: no graphs are recorded per length, and attention over the rounded-up
# length costs real time (10M pair on CPU, 256 new tokens: block 16 0.90x of eager, block 256 1.02x).
CPU_STATIC_BLOCK = 16


def static_block_for(device) -> int:
    """The default length block of the static path on `device`: 256 on CUDA (each block of a
    CUDA-graph decode is one recorded graph), 16 elsewhere (bench/RESULTS.md, issue 21)."""
    return STATIC_BLOCK if torch.device(device).type == "cuda" else CPU_STATIC_BLOCK


_ATTN_KINDS = ("sdpa", "eager")  # attention implementations whose models the static path decodes
KV_HEAD_ATTENTION = "trlvr_kv_heads"  # the static decode step's attention, registered below


def kv_head_attention(
    module, query, key, value, attention_mask, dropout: float = 0.0, scaling=None, **kwargs
):
    """Decode attention that reads K/V at the KV head count: one query position, grouped query heads.

    query (R, Hq, 1, D); key, value (R, Hkv, K, D); attention_mask (R, 1, 1, K) bool -> ((R, 1, Hq, D), None).
    The G = Hq / Hkv query heads that share a KV head become G query rows of one SDPA call over
    that head (what transformers' `pack_gqa` does outside torch.compile and without a mask), so
    K/V are never expanded to the query head count (`repeat_kv`): each KV byte is read once per step,
    compiled or not, with a mask, on every device.
    """
    if kwargs.get("softcap") is not None or kwargs.get("s_aux") is not None or kwargs.get("sliding_window"):
        raise ValueError(
            "decode='static' attention supports plain full attention only (no softcap, sinks or windows)"
        )
    R, Hq, q, D = query.shape
    Hkv = key.shape[1]
    if q != 1:
        raise ValueError(f"{KV_HEAD_ATTENTION} decodes one position per row, got {q}")
    grouped = query.reshape(R, Hkv, Hq // Hkv, D)  # query head h = kv * G + g, as repeat_kv pairs them
    out = torch.nn.functional.scaled_dot_product_attention(
        grouped, key, value, attn_mask=attention_mask, dropout_p=0.0, scale=scaling
    )  # (R, Hkv, G, D)
    return out.reshape(R, 1, Hq, D), None


AttentionInterface.register(KV_HEAD_ATTENTION, kv_head_attention)


_FP32_HEAD = {"on": False}  # read by the hook below: True only inside TandemGenerator.generate
_HOOKED: set = set()


def _fp32_head_hook(module, inputs, output):
    """The output layer's logits in fp32 from its (bf16) input, during generation only: log-probs and
    sampling then see the logits before any bf16 rounding (the bf16 ones are discarded)."""
    if not _FP32_HEAD["on"]:
        return None
    (hidden,) = inputs
    weight = module.weight
    if hidden.is_cuda:
        flat = torch.mm(hidden.reshape(-1, hidden.shape[-1]), weight.t(), out_dtype=torch.float32)
    else:
        flat = hidden.reshape(-1, hidden.shape[-1]).float() @ weight.float().t()
    if module.bias is not None:
        flat = flat + module.bias.float()
    return flat.reshape(*hidden.shape[:-1], weight.shape[0])


def _text_config(model):
    config = getattr(model, "config", None)
    return config.get_text_config() if hasattr(config, "get_text_config") else config


@contextlib.contextmanager
def no_router_logits(models):
    """Inside this block Mixture-of-Experts models do not return router logits. A model loaded with
    `output_router_logits=True` (TRL's MoE recipes: its load-balancing loss in training) would otherwise add
    that loss to every forward, which no generation needs and which fails on a cached decode step (the router
    sees the new tokens, the attention mask every position). Models without the setting are untouched."""
    configs = [c for c in (_text_config(m) for m in models) if getattr(c, "output_router_logits", False)]
    for c in configs:
        c.output_router_logits = False
    try:
        yield
    finally:
        for c in configs:
            c.output_router_logits = True


@contextlib.contextmanager
def fp32_logits(models):
    """Inside this block the models' output layers return fp32 logits (a hook registered once per
    layer, inert outside the block). Models already in fp32, or whose output layer is not a plain
    Linear (e.g. wrapped by an adapter), are left as they are (their logits are upcast after)."""
    for model in models:
        head = model.get_output_embeddings()
        if type(head) is torch.nn.Linear and head.weight.dtype != torch.float32 and id(head) not in _HOOKED:
            head.register_forward_hook(_fp32_head_hook)
            _HOOKED.add(id(head))
    before, _FP32_HEAD["on"] = _FP32_HEAD["on"], True
    try:
        yield
    finally:
        _FP32_HEAD["on"] = before


@contextlib.contextmanager
def decode_attention(model):
    """The model's attention layers call `kv_head_attention` inside this block (its config names it)."""
    config = model.config
    before = config._attn_implementation
    config._attn_implementation = KV_HEAD_ATTENTION
    try:
        yield
    finally:
        config._attn_implementation = before


def cache_arg(model) -> str:
    """The forward's KV cache argument name (transformers 5.x renamed `past_key_values` to `cache`)."""
    # A PEFT model's forward takes **kwargs only: read the base model's signature.
    target = model.get_base_model() if hasattr(model, "get_base_model") else model
    return "cache" if "cache" in inspect.signature(target.forward).parameters else "past_key_values"


def forward(model, arg: str, cache, **inputs):
    """One forward pass with a KV cache. Returns (cache, last-position logits (B, V))."""
    out = model(**inputs, **{arg: cache}, use_cache=True)
    new_cache = out.cache if arg == "cache" else out.past_key_values
    return new_cache, out.logits[:, -1]


def attention_kind(model) -> str:
    """The model's attention implementation ('sdpa', 'eager', ...): the static path builds its mask by it."""
    return getattr(model.config, "_attn_implementation", None) or "eager"


def decode_step(model, arg: str, cache, tok, pos, valid, slot):
    """One cached forward of the static path. tok (R,), pos (R, 1), valid (R, K) bool, slot (1,) -> logits (R,
    V).

    Position k is attended when valid[:, k] (not prompt padding) and k <= slot (already written).
    The bool mask is built here (inside a compiled region when compiled); the caller runs this under
    `decode_attention(model)`, so attention reads K/V at the KV head count.
    """
    K = valid.shape[1]
    attend = valid & (torch.arange(K, device=valid.device) <= slot)  # (R, K)
    mask = attend[:, None, None, :]  # (R, 1, 1, K)
    out = model(input_ids=tok[:, None], position_ids=pos, attention_mask=mask, **{arg: cache}, use_cache=True)
    return out.logits[:, -1]


_COMPILED = {}
RECOMPILE_LIMIT = 512


def compiled_step(device: torch.device, backend: str | None = None):
    """`decode_step` under torch.compile: "reduce-overhead" (CUDA graphs) on CUDA, the default mode elsewhere.

    The runner marks the row count R and the attended length K dynamic (tensor sizes, never Python
    constants) and keeps the KV buffers across calls, so a model's step compiles once, plus once
    for a batch of one row (dynamo specialises size 1); with CUDA graphs each (R, K) pair is
    recorded once. Both models share this one compiled function. `backend` (None = inductor) lets
    tests count dynamo's compiles cheaply with "eager".
    """
    mode = "reduce-overhead" if device.type == "cuda" else "default"
    key = (mode, backend)
    if key not in _COMPILED:
        kw = {"mode": mode} if backend is None else {"backend": backend}
        step = torch.compile(decode_step, dynamic=None, **kw)
        # Both models' entries share one code object: lift dynamo's default limit of 8 (past it, dynamo
        # silently runs the step uncompiled), in case guards split more than the few entries expected.
        _COMPILED[key] = torch._dynamo.config.patch(recompile_limit=RECOMPILE_LIMIT)(step)
    return _COMPILED[key]


class EagerRunner:
    """A model decoding with a transformers DynamicCache (grown by concatenation every step)."""

    def __init__(self, model, device: torch.device, prompt_len: int, max_new_tokens: int):
        self.model, self.device, self.L, self.N = model, device, prompt_len, max_new_tokens
        self.arg = cache_arg(model)
        self.cache = self.mask = self.pos = None

    def prefill(self, input_ids, mask, positions, first, rows_of):
        """Forward the distinct prompts, copy KV rows to repeats. input_ids (B, L), mask (B, L + N) long,
        positions (B, L), first (U,), rows_of (B,) or None -> logits (B, V) on this runner's device."""
        d, L = self.device, self.L
        input_ids, mask, positions, first = (x.to(d) for x in (input_ids, mask, positions, first))
        # logits: (U, V)
        cache, logits = forward(
            self.model,
            self.arg,
            None,
            input_ids=input_ids[first],
            attention_mask=mask[first, :L],
            position_ids=positions[first],
            logits_to_keep=1,
        )
        if rows_of is not None:
            rows_of = rows_of.to(d)
            cache.batch_select_indices(rows_of)
            logits = logits[rows_of]  # (B, V)
        self.cache, self.mask, self.pos = cache, mask, positions[:, -1:]  # pos: (B, 1)
        return logits

    def step(self, tok: torch.Tensor, t: int) -> torch.Tensor:
        """Forward the token emitted at step t (b,) -> next logits (b, V)."""
        self.pos = self.pos + 1
        self.cache, logits = forward(
            self.model,
            self.arg,
            self.cache,
            input_ids=tok.to(self.device)[:, None],
            attention_mask=self.mask[:, : self.L + t + 1],
            position_ids=self.pos,
        )
        return logits

    def select(self, keep: torch.Tensor, t: int) -> None:
        """Keep rows `keep` (b',) of the batch, before the forward of step t."""
        keep = keep.to(self.device)
        self.mask, self.pos = self.mask[keep], self.pos[keep]
        self.cache.batch_select_indices(keep)


class StaticRunner(EagerRunner):
    """A model decoding into preallocated KV buffers (`trlvr.engine.kv.StaticKV`), reused across calls.

    Prefill runs as in `EagerRunner` (same numerics) and is copied into the buffers, which come from
    `pool[name]` (the generator's) when they fit and are allocated there (larger) when not. Each
    step then runs R rows (the loop keeps R a power-of-two bucket or the full batch) and attends K
    positions (the length rounded up to `block`; None = `static_block_for(device)`), optionally
    compiled, with R and K as dynamic sizes, so calls with other batch sizes and prompt lengths reuse the
    compiled step.
    """

    def __init__(
        self,
        model,
        device,
        prompt_len: int,
        max_new_tokens: int,
        block: int | None = None,
        compile: bool = False,
        pool: dict | None = None,
        name: str = "model",
        backend: str | None = None,
    ):
        super().__init__(model, device, prompt_len, max_new_tokens)
        self.block = static_block_for(device) if block is None else block
        self.kind = attention_kind(model)
        if self.kind not in _ATTN_KINDS:
            raise ValueError(
                f"decode='static' supports attention implementations {_ATTN_KINDS}, but the model uses "
                f"{self.kind!r}; use decode='eager'"
            )
        layer_types = set(getattr(model.config, "layer_types", None) or ["full_attention"])
        if layer_types != {"full_attention"}:
            raise ValueError(
                "decode='static' supports full-attention layers only, but the model has "
                f"{sorted(layer_types)}; use decode='eager'"
            )
        self.compiled = compile
        self.step_fn = compiled_step(torch.device(device), backend) if compile else decode_step
        self.clone = (
            compile and torch.device(device).type == "cuda"
        )  # CUDA-graph outputs are overwritten on replay
        self.pool, self.name = ({} if pool is None else pool), name
        self.kv, self.full = None, 0

    def prefill(self, input_ids, mask, positions, first, rows_of):
        logits = super().prefill(input_ids, mask, positions, first, rows_of)
        B, capacity = self.mask.shape[0], self.L + self.N
        kv = self.pool.get(self.name)
        if kv is None or not kv.fits(B, capacity) or kv.valid.device != torch.device(self.device):
            rows, cap = (B, capacity) if kv is None else (max(B, kv.rows), max(capacity, kv.capacity))
            kv = self.pool[self.name] = None  # the old buffers go before the new ones are allocated
            kv = self.pool[self.name] = StaticKV(self.model, rows, cap, self.device)
        self.kv, self.full = kv, B
        kv.fill(self.cache, self.mask.bool())
        self.cache = None  # the DynamicCache is freed: from here on only the preallocated buffers
        return logits

    def step(self, tok: torch.Tensor, t: int) -> torch.Tensor:
        b = tok.shape[0]
        R = batch_bucket(b, self.full)
        slot = self.L + t  # the token emitted at step t sits at position L + t for every row
        K = attended_length(slot, self.block, self.L + self.N)
        self.pos = self.pos + 1
        tok = tok.to(self.device)
        if R > b:  # pad to the bucket: stale rows compute garbage that is sliced away
            tok = torch.cat([tok, tok.new_zeros(R - b)])
            pos = torch.cat([self.pos, self.pos.new_zeros(R - b, 1)])
        else:
            pos = self.pos
        span = self.kv.set_step(R, slot, K)  # (R, K)
        if self.compiled and not torch.compiler.is_compiling():
            for x, dims in ((tok, (0,)), (pos, (0,)), (span, (0, 1))):
                for d in dims:
                    if x.shape[d] > 1:  # dynamo specialises sizes 0 and 1 whatever it is told
                        torch._dynamo.mark_dynamic(x, d)
        with decode_attention(self.model):
            logits = self.step_fn(self.model, self.arg, self.kv.cache, tok, pos, span, self.kv.slot)
        logits = logits[:b]
        return logits.clone() if self.clone else logits

    def select(self, keep: torch.Tensor, t: int) -> None:
        keep = keep.to(self.device)
        self.pos = self.pos[keep]
        self.kv.select(keep, filled=self.L + t)  # positions < L + t are written before step t's forward

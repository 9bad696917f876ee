"""`TandemLogitsProcessor`: the author of every row, and the junior's logits where it is the junior.

One class under both of vLLM 0.31's model runners: it subclasses the V1 interface (used on CPU, and
on CUDA with VLLM_USE_V2_MODEL_RUNNER=0) and the Model Runner V2 interface (the CUDA default), so
either loader accepts it. Register it with `LLM(logits_processors=[TandemLogitsProcessor])`, never
only through the `vllm.logits_processors` entry point: V1 under async scheduling then shows the
processor `-1` placeholders for the newest tokens (refused loudly here).

Per request, `SamplingParams.extra_args` carries the row's key and schedule (`core.tandem_args`).
A request without them (vLLM's own warm-up and dummy requests, a plain request) passes through
untouched: its slot is PASSTHROUGH, its logits the senior's (Model Runner V2: `add_request` returns
False, so vLLM may skip the processor for a batch of such requests), and `validate_params` refuses
nothing of it. The author is the pure fold of `core.TandemRows` over the request's own output
tokens, each row at its own position, so pre-emption, slot moves and batch-mates cannot change it.
Per step:
- V1 (`update_state` + `apply(logits)`): slot events from `BatchUpdate` (removed, added, moved); each
  added request's live output-token list is kept by batch index; `apply` reads every row's length and
  last token with C-level maps (no Python loop over rows), folds the rows that gained one token in
  one batched call per schedule, and replays a re-added (pre-empted) row from its list.
- Model Runner V2 (`add_request` / `apply_staged_writes` / `apply(logits, ctx)`): the output index of
  each row is `pos + 1 - prompt_len`, the token just read is `ctx.input_ids`: rows that gained one
  token advance under a device mask (no host sync); a resumed request is replayed from the runner's
  `all_token_ids` when it is added. Slot indices, positions and tokens are the runner's device tensors
  (`ctx.idx_mapping`, `ctx.pos`, `ctx.input_ids`): nothing is copied to the device per step.
Which interface vLLM built the processor for is read from what it passed: Model Runner V2 passes a
`LogitsProcRequestState`, V1 a device (and whether to pin memory).
Then the junior's logits (stashed by `TandemForCausalLM.compute_logits`) replace the senior's on junior
rows, in place (no (B, V) tensor is made), and a row the schedule has ended (the step schedule's
round cap) can only write its EOS id (the pair cuts that token off). An EOS written by either author
ends the row (vLLM's own stop check: one vocabulary).
"""

from __future__ import annotations

from operator import itemgetter

import numpy as np
import torch
from transformers import AutoTokenizer
from vllm.utils.platform_utils import is_pin_memory_available
from vllm.v1.sample.logits_processor import BatchUpdate, MoveDirectionality
from vllm.v1.sample.logits_processor import LogitsProcessor as V1LogitsProcessor
from vllm.v1.worker.gpu.sample.logits_processor.interface import LogitsProcessor as V2LogitsProcessor
from vllm.v1.worker.gpu.sample.logits_processor.interface import LogitsProcRequestState

from trlvr.engine.schedules import vocab_tables
from trlvr.vllm.core import PASSTHROUGH, TandemRows, is_tandem, parse_tandem_args, tables_digest
from trlvr.vllm.model import model_for

# SamplingParams a tandem request cannot use, and why (checked when vLLM admits the request)
REFUSED = (
    (
        "presence_penalty",
        lambda sp: sp.presence_penalty != 0.0,
        "penalties would be applied to the senior's logits",
    ),
    (
        "frequency_penalty",
        lambda sp: sp.frequency_penalty != 0.0,
        "penalties would be applied to the senior's logits",
    ),
    (
        "repetition_penalty",
        lambda sp: sp.repetition_penalty != 1.0,
        "penalties would be applied to the senior's logits",
    ),
    ("logit_bias", lambda sp: bool(sp.logit_bias), "vLLM adds the bias to the senior's logits only"),
    ("allowed_token_ids", lambda sp: bool(sp.allowed_token_ids), "vLLM masks the senior's logits only"),
    ("bad_words", lambda sp: bool(sp.bad_words), "vLLM masks the senior's logits only"),
    (
        "structured_outputs",
        lambda sp: sp.structured_outputs is not None,
        "the grammar mask is the senior's only",
    ),
    (
        "prompt_logprobs",
        lambda sp: sp.prompt_logprobs is not None,
        "prompt log-probs would be the senior's only",
    ),
    ("min_tokens", lambda sp: sp.min_tokens > 0, "vLLM masks EOS in the senior's logits only"),
    ("thinking_token_budget", lambda sp: sp.thinking_token_budget is not None, "forcing bypasses the author"),
    (
        "n",
        lambda sp: sp.n != 1,
        "children would share one key and so one author sequence: send one request each",
    ),
)


def check_params(sp) -> None:
    """Raise ValueError naming the first SamplingParams field a tandem request cannot use, or bad tandem args.
    A request without tandem args is not checked: it passes through the processor untouched."""
    if not is_tandem(sp.extra_args):
        return
    for name, used, why in REFUSED:
        if used(sp):
            raise ValueError(f"tandem requests cannot use SamplingParams.{name} ({why})")
    parse_tandem_args(sp.extra_args)


def _tables(vllm_config):
    """The schedules' tables from the engine's tokenizer; the pair sent the digest of its own (hf_overrides
    "tandem": {"tables": ...}): two different tables would fold two different authors."""
    model_config = vllm_config.model_config
    tables = vocab_tables(
        AutoTokenizer.from_pretrained(model_config.tokenizer), model_config.get_vocab_size()
    )
    spec = getattr(getattr(model_config, "hf_config", None), "tandem", None) or {}
    if spec.get("tables") not in (None, tables_digest(tables)):
        raise RuntimeError(
            f"tandem: the engine's tokenizer {model_config.tokenizer} gives other word-start/step "
            "tables than the pair's tokenizer: pass the senior directory's own tokenizer"
        )
    return tables


def _last_tokens(lists: list, rows: np.ndarray | None) -> np.ndarray:
    """The last element of each list (all of them, or those at `rows`), by C-level maps: no Python loop."""
    if rows is None:
        picked = lists
    else:
        picked = itemgetter(*rows)(lists) if len(rows) > 1 else (lists[rows[0]],)
    return np.fromiter(map(itemgetter(-1), picked), dtype=np.int64, count=len(picked))


class TandemLogitsProcessor(V1LogitsProcessor, V2LogitsProcessor):
    """See the module docstring. Built by vLLM: V1 calls (vllm_config, device, is_pin_memory)
    (vllm/v1/sample/logits_processor/__init__.py, `build_logitsprocs`), Model Runner V2 calls
    (vllm_config, LogitsProcRequestState) (vllm/v1/worker/gpu/sample/logits_processor/loader.py,
    `build_custom_logits_processors`)."""

    def __init__(self, vllm_config, *args):
        state = args[0] if args else None
        if isinstance(state, LogitsProcRequestState):  # Model Runner V2
            self.req_states = state
            device, capacity = torch.device(state.device), state.max_num_reqs
            pin = is_pin_memory_available()  # vLLM's own answer (its MRV2 buffers pin by the same rule)
        elif isinstance(state, torch.device | str):  # V1: (device, is_pin_memory)
            device, self.req_states = torch.device(state), None
            capacity = vllm_config.scheduler_config.max_num_seqs
            pin = bool(args[1]) if len(args) > 1 else device.type == "cuda"
        else:
            raise TypeError(
                "TandemLogitsProcessor(vllm_config, ...): expected V1's (device, is_pin_memory) or Model "
                f"Runner V2's LogitsProcRequestState, got {args!r}"
            )
        self.vllm_config = vllm_config
        self.rows = TandemRows(capacity, _tables(vllm_config), device, pin=pin)
        self.arange = torch.arange(capacity, device=self.rows.device)  # V1: the batch's rows are slots 0..B-1
        self.lists: list[list[int]] = [[] for _ in range(capacity)]  # V1: each slot's live output tokens
        self.pending: dict[int, tuple | None] = {}  # Model Runner V2: slots added since the last staged write

    @classmethod
    def validate_params(cls, sampling_params) -> None:
        check_params(sampling_params)

    def is_argmax_invariant(self) -> bool:
        return False  # it swaps whole rows of logits

    # V1

    def update_state(self, batch_update: BatchUpdate | None) -> None:
        if batch_update is None:
            return
        self.rows.clear(list(batch_update.removed))
        for slot in batch_update.removed:
            self.lists[slot] = []
        if batch_update.added:
            slots, keys, schedules, forces, plain = [], [], [], [], []
            for slot, params, _prompt, output in batch_update.added:
                if not is_tandem(params.extra_args):  # passes through: the slot's old request is gone
                    plain.append(slot)
                    self.lists[slot] = []
                    continue
                key, schedule, force = parse_tandem_args(params.extra_args)
                slots.append(slot), keys.append(key), schedules.append(schedule), forces.append(force)
                self.lists[slot] = output  # the live list: vLLM appends every new token to it
            self.rows.clear(plain)
            if slots:
                self.rows.add(slots, keys, schedules, forces)
        for a, b, direction in batch_update.moved:
            if direction == MoveDirectionality.SWAP:
                self.rows.swap(a, b)
                self.lists[a], self.lists[b] = self.lists[b], self.lists[a]
            else:
                self.rows.move(a, b)
                self.lists[b], self.lists[a] = self.lists[a], []

    def _catch_up_v1(self, batch: int) -> None:
        """Fold every row's new output token (rows 0..batch-1 are the batch, in order)."""
        rows, lists = self.rows, self.lists[:batch]
        tandem = rows.group[:batch] != PASSTHROUGH
        lengths = np.fromiter(map(len, lists), dtype=np.int64, count=batch)
        need = np.where(tandem, lengths - rows.seen[:batch], 0)
        if (need < 0).any():
            raise RuntimeError(f"tandem: output tokens vanished from rows {np.nonzero(need < 0)[0].tolist()}")
        for slot in np.nonzero(need > 1)[0]:  # re-added after pre-emption: replay its tokens
            rows.replay(int(slot), list(lists[slot]))
        step = np.nonzero(need == 1)[0]
        if step.size == 0:
            return
        every = step.size == batch
        last = _last_tokens(lists, None if every else step)
        if (last < 0).any():
            raise RuntimeError(
                "tandem: the newest tokens are placeholders (-1): pass TandemLogitsProcessor in "
                "LLM(logits_processors=[...]) so vLLM fills them in before sampling"
            )
        if every:  # the usual step: one copy, the tokens
            rows.advance(step, rows.h2d(last), idx=self.arange[:batch])
        else:  # one copy: the rows and their tokens
            both = rows.h2d(np.stack([step, last]))
            rows.advance(step, both[1], idx=both[0])

    # Model Runner V2

    def add_request(self, req_idx: int, sampling_params) -> bool:
        """Stage the slot's new request; False (the slot passes through) for one without tandem args."""
        if not is_tandem(sampling_params.extra_args):
            self.pending[req_idx] = None
            return False
        self.pending[req_idx] = parse_tandem_args(sampling_params.extra_args)
        return True

    def apply_staged_writes(self) -> None:
        if not self.pending:
            return
        pending, self.pending = self.pending, {}
        self.rows.clear([slot for slot, args in pending.items() if args is None])
        added = [(slot, *args) for slot, args in pending.items() if args is not None]
        if not added:
            return
        slots, keys, schedules, forces = (list(x) for x in zip(*added, strict=True))
        self.rows.add(slots, keys, schedules, forces)
        prompt, prefill = self.req_states.prompt_len.np, self.req_states.prefill_len.np
        for slot in slots:
            if prefill[slot] > prompt[slot]:  # resumed after pre-emption: replay its output tokens
                tokens = self.req_states.all_token_ids.gpu[slot, int(prompt[slot]) : int(prefill[slot])]
                self.rows.replay(slot, tokens.tolist())

    def _catch_up_v2(self, ctx) -> None:
        """Fold the token each row just read where it is the row's next output token, on the device."""
        idx = ctx.idx_mapping
        outputs = ctx.pos.long() + 1 - self.req_states.prompt_len.gpu[idx].long()  # outputs before this one
        fresh = outputs == self.rows.consumed[idx] + 1
        self.rows.advance(ctx.idx_mapping_np, ctx.input_ids.long(), fresh, idx=idx)

    # both

    def apply(self, logits: torch.Tensor, ctx=None) -> torch.Tensor:
        if ctx is None:
            slots = np.arange(logits.shape[0])
        else:
            slots = ctx.idx_mapping_np
            if logits.shape[0] != slots.shape[0]:
                raise RuntimeError("tandem: one logits row per request expected (no speculative decoding)")
        if (self.rows.group[slots] == PASSTHROUGH).all():
            return logits
        if ctx is None:
            self._catch_up_v1(logits.shape[0])
            idx = self.arange[: logits.shape[0]]
        else:
            self._catch_up_v2(ctx)
            idx = ctx.idx_mapping
        return self.mix(logits, slots, idx)

    def mix(self, logits: torch.Tensor, slots: np.ndarray, idx: torch.Tensor) -> torch.Tensor:
        """The author's logits per row, written into `logits` (the senior's): the junior's (the stash) on
        junior rows; a row the schedule has ended keeps only its EOS id. No (B, V) tensor is made: the
        stash is cast inside the one `where`, the round cap is a fill and a write-back of the EOS logit."""
        model = model_for(self.vllm_config)
        if model is None:
            raise RuntimeError(
                "tandem requests need the TandemForCausalLM model (hf_overrides architectures)"
            )
        junior = model.take_stash(logits.shape[0])
        torch.where(self.rows.authors(slots, idx)[:, None], logits, junior, out=logits)
        if self.rows.may_stop(slots):
            force = self.rows.force[idx][:, None]
            eos = logits.gather(1, force)
            logits.masked_fill_(self.rows.stops(slots, idx)[:, None], float("-inf"))
            logits.scatter_(1, force, eos)
        return logits

"""After each weight sync of a backend-vllm run, the engine's senior against the trainer's weights (first-start's
`--launch` stage loads it into every training process through `sync_probe_site/sitecustomize.py`).

    TRLVR_SYNC_PROBE=DIR accelerate launch ... -m trlvr.cli.main train ...   # DIR/syncs<rank>.jsonl, one line a sync

The tensors compared are those whose layout the engine keeps as the model has it: every 1-D weight (the
norms) and the embedding's rows this rank's engine holds (its vocabulary shard), by name. The trainer's
are read from the unwrapped module (under ZeRO-2 every rank holds the whole bf16 weights: nothing to
gather) and cast to the engine's dtype, so a faithful sync is exact: `max_abs_diff` 0.

What this file does not know: how the run was launched. It compares tensors.
"""

from __future__ import annotations

import json
import os

EMBED = "model.embed_tokens.weight"


def comparable(named: dict, vocab_rows: tuple[int, int] | None = None) -> dict:
    """The tensors of `named` ({name: tensor}) the check compares: 1-D weights and the embedding (its rows
    `vocab_rows`, [start, stop), where given), names without a wrapper prefix ("module.", "base_model.model.")."""
    out = {}
    for name, t in named.items():
        for prefix in ("module.", "base_model.model."):
            name = name.removeprefix(prefix)
        if name == EMBED:
            out[name] = t if vocab_rows is None else t[vocab_rows[0] : vocab_rows[1]]
        elif t.dim() == 1 and name.endswith(".weight"):
            out[name] = t
    return out


def engine_vs_trainer(engine: dict, trainer: dict) -> dict:
    """{"compared", "missing", "max_abs_diff", "worst"}: every engine tensor against the trainer's of the same
    name, cast to the engine's dtype (shapes must agree; a name the trainer lacks is `missing`)."""
    worst, diff, compared, missing = None, 0.0, 0, []
    for name, e in sorted(engine.items()):
        t = trainer.get(name)
        if t is None or tuple(t.shape) != tuple(e.shape):
            missing.append(name)
            continue
        compared += 1
        d = float((e.float() - t.to(e.dtype).float()).abs().max()) if e.numel() else 0.0
        if worst is None or d > diff:
            worst, diff = name, d
    return {"compared": compared, "missing": missing, "max_abs_diff": diff, "worst": worst}


def sync_verdict(records: dict[int, list[dict]], ranks: int, steps: int) -> dict:
    """The stage's verdict from every rank's sync records ({rank: [{"step", "compared", "max_abs_diff", ...}]}):
    each of `ranks` synced after the last of `steps` training steps (step >= steps - 1: the trained weights
    reached the engine), compared something, and every sync was exact."""
    problems = []
    for rank in range(ranks):
        got = records.get(rank) or []
        if not got:
            problems.append(f"rank {rank} recorded no weight sync")
            continue
        if max(r["step"] for r in got) < steps - 1:
            problems.append(
                f"rank {rank}'s last sync was at step {max(r['step'] for r in got)}, before step {steps - 1}"
            )
        for r in got:
            if r["compared"] == 0:
                problems.append(
                    f"rank {rank} step {r['step']}: no tensor of the engine matched the trainer's"
                )
                break
            if r["max_abs_diff"] > 0:
                problems.append(
                    f"rank {rank} step {r['step']}: the engine's {r['worst']} differs from the trainer's by "
                    f"{r['max_abs_diff']:.3g} after the sync"
                )
                break
    found = {"ranks": ranks, "syncs": {str(k): len(v) for k, v in sorted(records.items())}}
    if problems:
        return {"status": "failed", **found, "reason": "; ".join(problems)}
    return {"status": "ok", **found}


def read_records(folder) -> dict[int, list[dict]]:
    from pathlib import Path

    out = {}
    for path in sorted(Path(folder).glob("syncs*.jsonl")):
        rank = int(path.stem.removeprefix("syncs"))
        out[rank] = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return out


def install() -> None:
    """Wrap `TandemVLLMGeneration.sync_weights`: after each sync, record `engine_vs_trainer` for this rank."""
    folder = os.environ.get("TRLVR_SYNC_PROBE")
    if not folder or os.environ.get("LOCAL_RANK") is None:  # the launcher itself trains nothing
        return
    from trlvr.vllm import trl_backend

    sync = trl_backend.TandemVLLMGeneration.sync_weights

    def checked_sync(self):
        sync(self)
        from trlvr.vllm.model import _senior_of

        def engine_side(model):
            senior = _senior_of(model)
            emb = senior.model.embed_tokens
            ix = getattr(emb, "shard_indices", None)
            rows = (ix.org_vocab_start_index, ix.org_vocab_end_index) if ix is not None else None
            named = {n: p.detach() for n, p in senior.named_parameters()}
            if rows is not None:  # the engine's shard holds its rows first (then padding)
                named[EMBED] = emb.weight.detach()[: rows[1] - rows[0]]
            return {n: t.cpu() for n, t in comparable(named).items()}, rows

        engine, rows = self.llm.apply_model(engine_side)[0]
        trained = {
            n: p.detach().cpu() for n, p in self.accelerator.unwrap_model(self.model).named_parameters()
        }
        found = engine_vs_trainer(engine, comparable(trained, rows))
        rank = self.accelerator.process_index
        step = _count(
            folder, rank
        )  # TRL syncs before the rollout of each step whose weights changed: 0, 1, ...
        with open(os.path.join(folder, f"syncs{rank}.jsonl"), "a") as f:
            f.write(json.dumps({"step": step, **found}) + "\n")

    trl_backend.TandemVLLMGeneration.sync_weights = checked_sync


def _count(folder: str, rank: int) -> int:
    """The sync's index on this rank (TRL syncs once per optimizer step, before the rollout: 0, 1, ...)."""
    path = os.path.join(folder, f"syncs{rank}.jsonl")
    return sum(1 for _ in open(path)) if os.path.exists(path) else 0

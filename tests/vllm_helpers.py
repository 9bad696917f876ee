"""Models and engine settings for the vLLM tests (`tests/test_vllm_*.py`): tiny Qwen3 checkpoints saved
with the toy tokenizer, nothing downloaded.

vLLM's CPU attention runs head sizes 32, 64, 80, ... only, so the toy junior (head_dim 16) cannot run
there: the tandem tests pair the toy senior (head_dim 32) with a random junior of head_dim 32.
"""

from __future__ import annotations

import os
import weakref
from pathlib import Path

import torch

from trlvr.toy.world import ASSETS_DIR

TOY_SENIOR = ASSETS_DIR / "senior"
V = 215  # the toy vocabulary

# the engine settings every vLLM test uses: small, fp32, eager (test_vllm_engine also runs a compiled
# engine), prefix caching on as in production, in one process
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")


def engine_options(**kw):
    from trlvr.vllm.pair import EngineOptions

    base = dict(
        dtype="float32",
        max_model_len=160,
        max_num_seqs=64,
        kv_cache_memory_bytes=32 << 20,
        block_size=32,
        enforce_eager=True,
        enable_prefix_caching=True,
    )
    return EngineOptions(**{**base, **kw})


def metric(pair, name: str) -> int:
    """One of the pair's engine counters (vLLM's own, `LLM.get_metrics()`), e.g. "vllm:prefix_cache_hits"
    (prompt tokens found in the prefix cache), "vllm:prefix_cache_queries", "vllm:num_preemptions"."""
    return int(sum(getattr(m, "value", 0) for m in pair.llm.get_metrics() if m.name == name))


def save_qwen3(
    out: Path,
    seed: int,
    hidden: int = 64,
    layers: int = 1,
    heads: int = 2,
    kv_heads: int = 1,
    head_dim: int = 32,
    tie: bool = True,
    rig: str | None = None,
) -> Path:
    """A random Qwen3 with the toy tokenizer in `out`. rig "even" / "odd": an untied head whose rows for
    the other parity (and EOS, id 0) are zero and whose own rows are large, so that with top_k 5 the
    model only ever writes ids of its parity: a token's parity then names the model that wrote it."""
    from transformers import AutoTokenizer, Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(seed)
    cfg = Qwen3Config(
        vocab_size=V,
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        head_dim=head_dim,
        max_position_embeddings=256,
        tie_word_embeddings=tie and rig is None,
        bos_token_id=0,
        eos_token_id=0,
        pad_token_id=1,
    )
    model = Qwen3ForCausalLM(cfg).float().eval()
    if rig is not None:
        with torch.no_grad():
            w = model.lm_head.weight
            w.normal_(0.0, 1.0)
            other = torch.arange(V) % 2 == (0 if rig == "odd" else 1)
            w[other] = 0.0
            w[0] = 0.0
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    AutoTokenizer.from_pretrained(TOY_SENIOR).save_pretrained(out)
    return out


def save_test_junior(out: Path) -> Path:
    """The junior the vLLM tests pair with the toy senior: a random one-layer Qwen3 of head_dim 32 (vLLM's
    CPU attention refuses the toy junior's head_dim 16)."""
    return save_qwen3(out, seed=1, hidden=64, layers=1, heads=2, kv_heads=1)


def hf(path: Path):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()


def toy_prompts(tokenizer, n: int) -> list[list[int]]:
    texts = [
        "Q: 3 + 4 = ?\n\n",
        "Q: 12 - 5 = ?\n\n",
        "Q: 7 * 2 = ?\n\n",
        "Q: 9 + 9 = ?\n\n",
        "Q: 8 - 6 = ?\n\n",
    ]
    return [tokenizer.encode(texts[i % len(texts)]) for i in range(n)]


class EngineWatch:
    """Every vLLM engine (its `LLM` and the model in it) and every trainer, weakly, as they are built
    (`VLLMPair._build`, `trlvr.training.run.build_trainer` patched through `monkeypatch`); `overlaps`: each
    engine built while an earlier engine or trainer was still alive, with what was."""

    def __init__(self, monkeypatch):
        import trlvr.training.run as run
        from trlvr.vllm.pair import VLLMPair

        self.engines, self.trainers, self.overlaps = [], [], []
        build, build_trainer = VLLMPair._build, run.build_trainer

        def watched_build(pair, cfg):
            alive = [name for name, ref in self.engines + self.trainers if ref() is not None]
            if alive:
                self.overlaps.append((f"engine {len(self.engines) // 2}", alive))
            llm = build(pair, cfg)
            model = llm.llm_engine.model_executor.driver_worker.model_runner.model
            n = len(self.engines) // 2
            self.engines += [(f"LLM {n}", weakref.ref(llm)), (f"model {n}", weakref.ref(model))]
            return llm

        def watched_trainer(*args, **kw):
            trainer = build_trainer(*args, **kw)
            self.trainers.append((f"trainer {len(self.trainers)}", weakref.ref(trainer)))
            return trainer

        monkeypatch.setattr(VLLMPair, "_build", watched_build)
        monkeypatch.setattr(run, "build_trainer", watched_trainer)

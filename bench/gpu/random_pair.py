"""A senior and a junior of a real model's shapes with random weights and the toy world's tokenizer
(no network, no weights to carry): what `bench/gpu/run.sh` trains and runs `trlvr smoke` on at GPU scale.

    python bench/gpu/random_pair.py --shape Qwen/Qwen3-0.6B --tokenizer runs/toy/senior --out /tmp/q06

The vocabulary is the tokenizer's (so every sampled id decodes), not the model's 151,936: the LM head
is smaller than the real model's, everything else has its shapes. Random weights rarely write EOS, so
rollouts run to the completion budget (decode-bound steps, what the speed check is about).
"""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

import torch
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

from trlvr.memory import read_config


def sharpen(model, factor: float) -> None:
    """Multiply the model's logits by `factor`, exactly: its final norm's weight (before the LM head, tied or
    not) scaled. A random model's top-1/top-2 log-prob gaps are small (median ~0.3-0.5 nat at Qwen3's
    shapes), so most greedy positions are near ties a parity check must let pass; x5 makes them ~5 times
    wider, and a corrupted forward's flips then fall outside the near-tie margin."""
    norm = getattr(getattr(model, "base_model", None), "norm", None)
    if norm is None or getattr(norm, "weight", None) is None:
        raise SystemExit(f"--sharpen: {type(model).__name__} has no final norm weight to scale")
    with torch.no_grad():
        norm.weight.mul_(factor)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", default="Qwen/Qwen3-0.6B")
    ap.add_argument("--tokenizer", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=INT",
        help="override a shape field, e.g. num_hidden_layers=2 (a CPU-sized model of the same kind)",
    )
    ap.add_argument(
        "--sharpen",
        type=float,
        default=1.0,
        help="multiply the logits by this (the final norm's weight; first-start uses 5: wider top-1/top-2 "
        "gaps, so that its parity check sees fewer near ties)",
    )
    a = ap.parse_args()
    tok = AutoTokenizer.from_pretrained(a.tokenizer)
    cfg = read_config(a.shape)
    cfg.update(
        vocab_size=len(tok),
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
        torch_dtype=a.dtype,
    )
    for item in a.set:
        key, _, value = item.partition("=")
        if key not in cfg or not value.isdigit():
            raise SystemExit(
                f"--set {item}: expected KEY=INT with KEY one of the shape's fields ({', '.join(sorted(cfg))})"
            )
        cfg[key] = int(value)
    for role, seed in (("senior", 0), ("junior", 1)):
        torch.manual_seed(seed)
        config = AutoConfig.for_model(**cfg)
        model = AutoModelForCausalLM.from_config(config, dtype=getattr(torch, a.dtype))
        if a.sharpen != 1.0:
            sharpen(model, a.sharpen)
        out = Path(a.out) / role
        model.save_pretrained(out)
        tok.save_pretrained(out)
        gen = Path(a.tokenizer) / "generation_config.json"
        if gen.is_file():
            shutil.copy(gen, out / "generation_config.json")
        print(f"{out}: {sum(p.numel() for p in model.parameters()) / 1e6:.1f}M parameters, vocab {len(tok)}")


if __name__ == "__main__":
    main()

"""Build a `TandemGRPOTrainer` from a run config: models, tokenizer, dataset, reward.

The dataset TRL sees has a "prompt" column (a string, or a list of chat messages) and an "answer"
column for the reward. Rows that already carry a `prompt` are used verbatim (the toy world); other
problems get one from `trlvr.data.prompt_for` (the problem in the model's chat template).
"""

from __future__ import annotations

import importlib
import json
import os

from trlvr.config import TandemConfig


def resolve_reward(name: str):
    """ "math" -> trlvr.rewards.math_reward; "pkg.module:function" -> that function."""
    if name == "math":
        from trlvr.rewards import math_reward

        return math_reward
    module, sep, attr = name.partition(":")
    if not sep:
        raise ValueError(f"tandem.reward: expected 'math' or 'package.module:function', got {name!r}")
    return getattr(importlib.import_module(module), attr)


def _read_jsonl(path: str, limit: int | None) -> list[dict]:
    rows = []
    with open(path) as f:
        for line_no, line in enumerate(f, 1):
            if line.strip():
                row = json.loads(line)
                for field in ("prompt", "answer"):
                    if field not in row:
                        raise ValueError(f"{path}:{line_no}: row has no {field!r} field")
                rows.append({"prompt": row["prompt"], "answer": str(row["answer"])})
            if limit is not None and len(rows) >= limit:
                break
    return rows


def build_rows(tandem: TandemConfig, tokenizer) -> list[dict]:
    """[{"prompt": ..., "answer": ...}] for the configured dataset."""
    source = tandem.dataset
    if not source:
        raise ValueError("tandem.dataset: a dataset source is required")
    if source.endswith(".jsonl") and os.path.isfile(source):
        with open(source) as f:
            first = json.loads(next(line for line in f if line.strip()))
        if "prompt" in first:  # toy / pre-rendered rows: prompt used verbatim
            return _read_jsonl(source, tandem.dataset_limit)
    from trlvr.data import load_problems, prompt_for

    problems = load_problems(source, split=tandem.dataset_split, limit=tandem.dataset_limit)
    return [
        {
            "prompt": p.prompt if getattr(p, "prompt", None) else prompt_for(p, tokenizer),
            "answer": str(p.answer),
        }
        for p in problems
    ]


def build_dataset(tandem: TandemConfig, tokenizer):
    from datasets import Dataset

    rows = build_rows(tandem, tokenizer)
    if tandem.max_prompt_length is not None:

        def fits(row):
            p = row["prompt"]
            ids = (
                tokenizer.apply_chat_template(p, add_generation_prompt=True, tokenize=True)
                if isinstance(p, list)
                else tokenizer(text=p)["input_ids"]
            )
            return len(ids) <= tandem.max_prompt_length

        kept = [r for r in rows if fits(r)]
        print(
            f"[trlvr] max_prompt_length={tandem.max_prompt_length}: kept {len(kept)} of {len(rows)} problems"
        )
        rows = kept
    if not rows:
        raise ValueError(f"tandem.dataset: no usable problems in {tandem.dataset!r}")
    return Dataset.from_list(rows)


def build_trainer(tandem: TandemConfig, grpo_kwargs: dict, callbacks=None):
    """GRPOConfig + models + data + reward -> TandemGRPOTrainer (not yet trained)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig

    from trlvr.training.trainer import TandemGRPOTrainer

    args = GRPOConfig(**grpo_kwargs)
    tokenizer = AutoTokenizer.from_pretrained(tandem.senior)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    init = dict(args.model_init_kwargs or {})
    senior = AutoModelForCausalLM.from_pretrained(tandem.senior, **init)
    junior = None
    if tandem.arm == "tandem" and not (args.beta > 0 and tandem.kl_ref == "junior"):
        junior = AutoModelForCausalLM.from_pretrained(tandem.junior, **init)
    return TandemGRPOTrainer(
        senior,
        junior,
        tandem=tandem,
        args=args,
        reward_funcs=resolve_reward(tandem.reward),
        train_dataset=build_dataset(tandem, tokenizer),
        processing_class=tokenizer,
        callbacks=callbacks,
    )

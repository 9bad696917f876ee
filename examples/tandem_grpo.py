"""Tandem RLVR as a TRL script: TRL's `trl/scripts/grpo.py` with `TandemGRPOTrainer` and a frozen junior.

The flags are TRL's (`ScriptArguments`, `GRPOConfig`, `ModelConfig`: `--model_name_or_path` is the
trainable senior, `--dataset_name` the problems, `--use_peft` / `--lora_r` TRL's LoRA) plus trlvr's
`TandemConfig` (`--junior`, `--schedule`, `--p`, `--arm`, ...; every field: docs/reference/configuration.md).
`--config run.yaml` takes any of them as YAML keys, as in TRL. The data is a local .jsonl / folder or a
hub dataset in one of trlvr's schemas (`trlvr.data.load_problems`: a `problem`/`question` column and an
`answer` column, or a ready-made `prompt`); the reward is the paper's verifier (`trlvr.rewards.math_reward`).

Toy run on a CPU (the shipped toy pair; `trlvr toy prepare` writes its data; about a minute):

    trlvr toy prepare --out runs/toy
    python examples/tandem_grpo.py --model_name_or_path runs/toy/senior --junior runs/toy/junior \
        --dataset_name runs/toy/data/train.jsonl --output_dir runs/example-toy --max_steps 2 \
        --per_device_train_batch_size 16 --num_generations 8 --max_completion_length 64 \
        --learning_rate 2e-4 --use_cpu --bf16 false --report_to none

The same under accelerate, one CPU process:

    accelerate launch --cpu --num_processes 1 examples/tandem_grpo.py --model_name_or_path runs/toy/senior ...

A real model on one GPU (Qwen3-0.6B, its base model as the junior, the paper's DeepScaleR problems;
not yet run by this project):

    accelerate launch --num_processes 1 examples/tandem_grpo.py \
        --model_name_or_path Qwen/Qwen3-0.6B --junior Qwen/Qwen3-0.6B-Base \
        --dataset_name agentica-org/DeepScaleR-Preview-Dataset --output_dir runs/qwen3-0.6b-tandem \
        --dtype bfloat16 --bf16 true --per_device_train_batch_size 8 --num_generations 8 \
        --max_completion_length 2048 --learning_rate 1e-6 --max_steps 200 --report_to trackio
"""

from __future__ import annotations

import sys

from datasets import Dataset
from transformers import AutoTokenizer
from trl import GRPOConfig, ModelConfig, ScriptArguments, TrlParser, get_peft_config

from trlvr import TandemConfig, TandemGRPOTrainer
from trlvr.data import load_problems, prompt_for
from trlvr.rewards import math_reward


def parse(argv: list[str]) -> tuple[ScriptArguments, GRPOConfig, ModelConfig, TandemConfig]:
    """TRL's three dataclasses first; `TandemConfig` from what they leave. Its LoRA fields are ModelConfig's
    flags here (TRL makes the peft_config), so `use_peft` is passed on for `--junior self`."""
    trl_parser = TrlParser((ScriptArguments, GRPOConfig, ModelConfig))
    tandem_parser = TrlParser(TandemConfig)
    if {"-h", "--help"} & set(argv):
        print(trl_parser.format_help() + "\n" + tandem_parser.format_help())
        sys.exit(0)
    script_args, training_args, model_args, rest = trl_parser.parse_args_and_config(
        argv, return_remaining_strings=True
    )
    (tandem,) = tandem_parser.parse_args_into_dataclasses(rest + ["--use_peft", str(model_args.use_peft)])
    return script_args, training_args, model_args, tandem


def main(
    script_args: ScriptArguments, training_args: GRPOConfig, model_args: ModelConfig, tandem: TandemConfig
):
    # TRL loads the senior (and trlvr the junior) from their ids with these, as in trl/scripts/grpo.py
    training_args.model_init_kwargs = {
        "revision": model_args.model_revision,
        "trust_remote_code": training_args.trust_remote_code,
        "attn_implementation": model_args.attn_implementation,
        "dtype": model_args.dtype,
        **(training_args.model_init_kwargs or {}),
    }
    tokenizer = AutoTokenizer.from_pretrained(
        model_args.model_name_or_path, revision=model_args.model_revision
    )
    problems = load_problems(script_args.dataset_name, split=script_args.dataset_train_split)
    dataset = Dataset.from_list([{"prompt": prompt_for(p, tokenizer), "answer": p.answer} for p in problems])

    trainer = TandemGRPOTrainer(
        model_args.model_name_or_path,  # the trainable senior
        tandem.junior,  # the frozen junior (None for --arm grpo)
        tandem=tandem,
        args=training_args,
        reward_funcs=math_reward,
        train_dataset=dataset,
        processing_class=tokenizer,
        peft_config=get_peft_config(model_args),
    )
    trainer.train(resume_from_checkpoint=training_args.resume_from_checkpoint)
    trainer.save_model(training_args.output_dir)
    trainer.accelerator.print(f"saved to {training_args.output_dir}")
    if training_args.push_to_hub:
        trainer.push_to_hub(dataset_name=script_args.dataset_name)
    return trainer


if __name__ == "__main__":
    main(*parse(sys.argv[1:]))

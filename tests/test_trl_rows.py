"""What TandemGRPOTrainer adds to TRL's own data: nothing. TRL writes every extra key a `rollout_func` returns into
the caller's input rows (in place) and passes it to the reward functions; the tandem rollout returns only TRL's
keys and `env_mask`, so the rows and the reward functions' arguments are those GRPOTrainer gives, while the
reward-by-junior-share metric still comes out."""

from __future__ import annotations

import os

from datasets import Dataset
from helpers import tiny_model
from trl import GRPOConfig

from trlvr.config import TandemConfig
from trlvr.training import TandemGRPOTrainer

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")


def test_rows_and_reward_arguments_are_trls(tmp_path, tokenizer):
    seen_kwargs, seen_rows = [], []

    def reward(completions, **kwargs):
        seen_kwargs.append(set(kwargs))
        return [len(c) / 10 for c in completions]

    args = GRPOConfig(
        str(tmp_path / "out"),
        use_cpu=True,
        bf16=False,
        per_device_train_batch_size=4,
        num_generations=2,
        max_completion_length=6,
        max_steps=1,
        logging_steps=1,
        report_to=[],
        save_strategy="no",
        disable_tqdm=True,
    )
    senior, junior = tiny_model("qwen3", len(tokenizer), seed=0), tiny_model("qwen3", len(tokenizer), seed=1)
    trainer = TandemGRPOTrainer(
        senior,
        junior,
        tandem=TandemConfig(senior="s", junior="j"),
        args=args,
        reward_funcs=reward,
        processing_class=tokenizer,
        train_dataset=Dataset.from_list([{"prompt": p} for p in ("The cat", "A train")]),
    )
    training_step = trainer.training_step

    def recording_step(model, inputs, *a, **kw):
        seen_rows.append(inputs)  # the rows themselves: TRL mutates them after this call
        return training_step(model, inputs, *a, **kw)

    trainer.training_step = recording_step
    trainer.train()
    assert seen_rows and all(set(row) == {"prompt"} for rows in seen_rows for row in rows)
    assert seen_kwargs and all("senior_share" not in k for k in seen_kwargs)
    assert "tandem/reward_low_junior_share" in trainer.state.log_history[0]

"""TRL's GRPO tests (tests/upstream/fetch.py) that do not pass here, each with its reason: the one list.

Keys are test ids within TRL's tests/test_grpo_trainer.py (`Class::test[params]`). tests/upstream/conftest.py
marks every listed test xfail(strict=True), so the lists are exact: a listed test that passes fails the run, and
so does an unlisted one that fails. docs/guides/trl-integration.md shows DIFFERENCES
(tests/upstream/test_differences_doc.py checks that the page matches it).
"""

from __future__ import annotations

# Fail on TandemGRPOTrainer, pass on GRPOTrainer: differences of the method, with the reason.
DIFFERENCES: dict[str, str] = {
    "TestGRPOTrainer::test_train_with_off_policy_mask": (
        "`off_policy_mask_threshold` is refused in one line: TRL's off-policy sequence mask reads the rollout's "
        "`logprobs` as the sampler's, and the tandem engine's (backend hf) are the senior's at temperature 1, "
        "not at the sampling temperature, so the mask would measure the wrong divergence"
    ),
}

# Fail on GRPOTrainer itself in this setup (TRL 1.16.0 under tests written for TRL's main of 2026-07-24, or
# the offline stand-ins); xfail(strict) on both trainers, but those in TANDEM_PASSES, which must pass on tandem.
_STANDIN_VOCAB = "the offline stand-in's tokenizer has 320 tokens (EOS id 0), not Qwen's 151,936: "
BASELINE: dict[str, str] = {
    "TestGRPORolloutDispatch::test_generate_prefers_rollout_func": "its mock trainer lacks `eos_token_ids`, which TRL 1.16's `_generate` reads",
    "TestGRPORolloutDispatch::test_generate_rollout_func_syncs_vllm_weights_when_needed": "its mock trainer lacks `eos_token_ids`, which TRL 1.16's `_generate` reads",
    "TestGRPOTrainer::test_liger_kernel_with_peft_non_lm_head_target_allowed": "expects an ImportError at construction without liger-kernel installed; TRL 1.16 raises none",
    "TestGRPOTrainer::test_liger_kernel_with_peft_modules_to_save_lm_head_allowed": "expects an ImportError at construction without liger-kernel installed; TRL 1.16 raises none",
    "TestGRPOTrainer::test_liger_kernel_with_peft_prompt_learning_raises": "expects a ValueError for liger with prompt learning that TRL 1.16 does not raise",
    "TestGRPOTrainer::test_train_moe_peft_model": "TRL 1.16 (with peft 0.21.2) adds a 'ref' adapter to a PeftModel whose LoRA uses target_parameters",
    "TestGRPOTrainer::test_entropy_bonus_flows_gradients": "TRL 1.16 computes entropies with a gradient also when the entropy bonus is off; the test expects them detached",
    "TestGRPOTrainer::test_train_with_mask_truncated_completions": _STANDIN_VOCAB
    + "its mocked `generate` writes Qwen token ids (151643, 151645) past the vocabulary",
    "TestGRPOTrainer::test_train_with_mask_truncated_completions_all_masked": _STANDIN_VOCAB
    + "random weights draw EOS within 8 tokens, so not every completion is truncated",
}

# BASELINE tests that pass on TandemGRPOTrainer, with the reason.
TANDEM_PASSES: dict[str, str] = {
    "TestGRPOTrainer::test_train_with_mask_truncated_completions": "the tandem engine does not call transformers' `generate`, which the test mocks, so its ids never arrive",
}


def markdown_table() -> str:
    """DIFFERENCES as the table docs/guides/trl-integration.md shows."""
    rows = [f"| `{test}` | {reason} |" for test, reason in sorted(DIFFERENCES.items())]
    return "\n".join(["| TRL test | why it differs on TandemGRPOTrainer |", "| --- | --- |", *rows])

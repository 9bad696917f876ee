"""Offline stand-ins for the Hub models and data sets TRL's GRPO tests load (`trl-internal-testing/...`).

Each stand-in model is built here from its architecture's config (tiny, random weights) with the suite's own
tokenizer (tests/helpers.tiny_tokenizer, plus a plain chat template) and written into a Hugging Face Hub cache
under its Hub id, so that `from_pretrained("trl-internal-testing/tiny-...")` resolves it with HF_HUB_OFFLINE=1,
for GRPOTrainer and TandemGRPOTrainer alike. Ids with no stand-in here (vision-language models, remote code)
are in NO_STANDIN: the tests that name one are skipped on both trainers.

The data set is `zen`'s two prompt-only configs, rebuilt from the prompts in TRL's own script that wrote it
(scripts/generate_zen_dataset.py, fetched beside the tests), with its split.
"""

from __future__ import annotations

import ast
import json
from pathlib import Path

import torch
from datasets import Dataset, DatasetDict, IterableDataset, IterableDatasetDict
from helpers import tiny_tokenizer
from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForSequenceClassification

ORG = "trl-internal-testing"
SNAPSHOT = "0" * 40  # the commit hash the cache names; any 40 hex digits
STAMP_VERSION = "1"  # bump when a stand-in changes: the cache is rebuilt

CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)
_DIMS = dict(
    hidden_size=16,
    intermediate_size=32,
    num_hidden_layers=2,
    num_attention_heads=2,
    num_key_value_heads=1,
    head_dim=8,
    max_position_embeddings=512,
)
_MOE = dict(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=16)

# Hub id (after ORG/) -> (model_type, head, config overrides); head: "lm" or "cls" (one reward label)
STANDINS: dict[str, tuple[str, str, dict]] = {
    "tiny-Qwen2ForCausalLM-2.5": ("qwen2", "lm", {}),
    "tiny-Qwen2ForSequenceClassification-2.5": ("qwen2", "cls", {}),
    "tiny-Qwen3ForCausalLM": ("qwen3", "lm", {"tie_word_embeddings": False}),
    "tiny-Qwen3ForSequenceClassification": ("qwen3", "cls", {}),
    "tiny-Qwen3MoeForCausalLM": ("qwen3_moe", "lm", {**_MOE, "decoder_sparse_step": 1}),
    "tiny-LlamaForCausalLM-3.2": ("llama", "lm", {}),
    "tiny-LlamaForSequenceClassification-3.2": ("llama", "cls", {}),
    "tiny-MistralForCausalLM-0.2": ("mistral", "lm", {}),
    "tiny-Gemma2ForCausalLM": ("gemma2", "lm", {"tie_word_embeddings": True}),
    "tiny-Cohere2ForCausalLM": ("cohere2", "lm", {}),
    "tiny-GptOssForCausalLM": (
        "gpt_oss",
        "lm",
        {
            "num_local_experts": 4,
            "num_experts_per_tok": 2,
            "layer_types": ["sliding_attention", "full_attention"],
        },
    ),
    "tiny-Glm4MoeForCausalLM": (
        "glm4_moe",
        "lm",
        {
            "n_routed_experts": 4,
            "num_experts_per_tok": 2,
            "moe_intermediate_size": 16,
            "first_k_dense_replace": 1,
            "n_group": 1,
            "topk_group": 1,
            "n_shared_experts": 1,
        },
    ),
}
NO_STANDIN = {
    f"{ORG}/{name}"
    for name in (
        "tiny-NemotronHForCausalLM-nano",
        "tiny-RemoteForCausalLM",
        "tiny-Gemma3ForConditionalGeneration",
        "tiny-Gemma4ForConditionalGeneration",
        "tiny-LlavaForConditionalGeneration",
        "tiny-LlavaNextForConditionalGeneration",
        "tiny-Qwen2VLForConditionalGeneration",
        "tiny-Qwen2_5_VLForConditionalGeneration",
        "tiny-Qwen3_5ForConditionalGeneration-NoThink",
        "tiny-Qwen3_5MoeForConditionalGeneration-3.6",
        "tiny-SmolVLMForConditionalGeneration",
        "zen-image",
        "zen-multi-image",
    )
}


def _tokenizer():
    tok = tiny_tokenizer()
    tok.chat_template = CHAT_TEMPLATE
    return tok


def _model(model_type: str, head: str, overrides: dict, tok, seed: int):
    torch.manual_seed(seed)
    config = AutoConfig.for_model(
        model_type,
        vocab_size=len(tok),
        pad_token_id=tok.pad_token_id,
        eos_token_id=tok.eos_token_id,
        bos_token_id=tok.eos_token_id,
        **{**_DIMS, **overrides},
    )
    if head == "cls":
        config.num_labels = 1
        return AutoModelForSequenceClassification.from_config(config)
    return AutoModelForCausalLM.from_config(config)


def build_hub_cache(cache: Path) -> None:
    """Every stand-in in `cache` (a Hub cache folder, HF_HUB_CACHE) under its Hub id; kept when already built."""
    stamp = cache / f"trlvr-standins-{STAMP_VERSION}.json"
    if stamp.is_file():
        return
    tok = _tokenizer()
    for seed, (name, (model_type, head, overrides)) in enumerate(STANDINS.items()):
        repo = cache / f"models--{ORG}--{name}"
        snapshot = repo / "snapshots" / SNAPSHOT
        _model(model_type, head, overrides, tok, seed).save_pretrained(snapshot)
        tok.save_pretrained(snapshot)
        (repo / "refs").mkdir(parents=True, exist_ok=True)
        (repo / "refs" / "main").write_text(SNAPSHOT)
    stamp.write_text(json.dumps(sorted(STANDINS)))


def _literal_prompts(script: Path, variable: str) -> list:
    """The "prompt" list of `<variable> = Dataset.from_dict({"prompt": [...]})` in TRL's zen script, read as a
    literal (the script is not run)."""
    for node in ast.walk(ast.parse(script.read_text())):
        if (
            isinstance(node, ast.Assign)
            and isinstance(node.value, ast.Call)
            and [getattr(t, "id", None) for t in node.targets] == [variable]
        ):
            return ast.literal_eval(node.value.args[0])["prompt"]
    raise ValueError(f"{script}: no {variable} = Dataset.from_dict(...)")


def zen(config_name: str, script: Path) -> DatasetDict:
    """`trl-internal-testing/zen`'s prompt-only configs as TRL's scripts/generate_zen_dataset.py (`script`) writes
    them: its prompts, split with its default test_size 0.1, unshuffled."""
    if config_name not in ("standard_prompt_only", "conversational_prompt_only"):
        raise ValueError(f"zen stand-in: no config {config_name!r}")
    prompts = _literal_prompts(script, f"{config_name}_dataset")
    return Dataset.from_dict({"prompt": prompts}).train_test_split(test_size=0.1, shuffle=False)


ZEN_SCRIPT = (
    Path(__file__).resolve().parent / "trl_tests" / "generate_zen_dataset.py"
)  # fetch.py puts it there


def load_dataset(
    path: str, name: str | None = None, split: str | None = None, streaming: bool = False, **kwargs
):
    """datasets.load_dataset for the data sets the upstream tests name, offline."""
    if path != f"{ORG}/zen":
        raise ValueError(f"no offline stand-in for the data set {path!r}")
    data = zen(name, ZEN_SCRIPT)
    if streaming:
        data = IterableDatasetDict({k: v.to_iterable_dataset() for k, v in data.items()})
    out = data[split] if split else data
    assert isinstance(out, Dataset | DatasetDict | IterableDataset | IterableDatasetDict)
    return out

"""trlvr.models: loading with one-line errors, the shared-vocabulary check, weight fingerprints."""

from __future__ import annotations

import json
import shutil
import time

import pytest
import torch
from helpers import tiny_model, tiny_tokenizer
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

from trlvr.errors import UserError
from trlvr.models import (
    check_same_vocab,
    load_causal_lm,
    load_tokenizer,
    locate,
    model_fingerprint,
    vocab_fingerprint,
)


def word_tokenizer(words: list[str], **special) -> PreTrainedTokenizerFast:
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token=words[0]))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token=words[0], **special)


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """A tiny Qwen3 + tokenizer saved with save_pretrained."""
    d = tmp_path_factory.mktemp("m") / "senior"
    tok = tiny_tokenizer()
    tiny_model("qwen3", len(tok), seed=0, hidden=16, layers=1).save_pretrained(d)
    tok.save_pretrained(d)
    return d


def test_load_saved_model_and_tokenizer(saved):
    model = load_causal_lm(saved, role="--senior", dtype=torch.float32)
    tok = load_tokenizer(saved, role="--senior")
    assert model.config.vocab_size == len(tok) and model.dtype == torch.float32


def test_same_vocab_passes_and_is_a_content_hash():
    a, b = word_tokenizer(["[UNK]", "x", "y"]), word_tokenizer(["[UNK]", "x", "y"])
    check_same_vocab(a, b)
    assert vocab_fingerprint(a) == vocab_fingerprint(b)


def test_equal_size_different_tokens_fail_and_name_the_ids():
    """Issue 11 item 6: the old check compared sizes only; these two have 4 tokens each."""
    a = word_tokenizer(["[UNK]", "cat", "dog", "eel"])
    b = word_tokenizer(["[UNK]", "cat", "eel", "dog"])
    assert len(a) == len(b)
    with pytest.raises(UserError) as err:
        check_same_vocab(a, b)
    msg = str(err.value)
    assert "2 ids map to different tokens" in msg
    assert "id 2: 'dog' vs 'eel'" in msg and "id 3: 'eel' vs 'dog'" in msg and "id 1" not in msg
    assert "\n" not in msg


def test_different_special_tokens_fail():
    a = word_tokenizer(["[UNK]", "x", "<eos>"], eos_token="<eos>")
    b = word_tokenizer(["[UNK]", "x", "<eos>"])
    assert vocab_fingerprint(a) != vocab_fingerprint(b)
    with pytest.raises(UserError, match=r"special tokens differ \(senior only: \{2: '<eos>'\}"):
        check_same_vocab(a, b)


def test_first_few_ids_only_and_sizes_named():
    a = word_tokenizer(["[UNK]"] + [f"w{i}" for i in range(20)])
    b = word_tokenizer(["[UNK]"] + [f"v{i}" for i in range(25)])
    with pytest.raises(UserError) as err:
        check_same_vocab(a, b, names=("--senior", "--junior"))
    msg = str(err.value)
    assert msg.startswith("--senior and --junior tokenizers differ (21 vs 26 tokens): 25 ids")
    assert "(and 20 more)" in msg and "id 21: '(none)' vs 'v20'" not in msg


def test_fingerprint_tracks_weights_not_location(saved, tmp_path):
    fp = model_fingerprint(saved)
    assert (
        fp == model_fingerprint(saved)
        and fp["revision"] is None
        and fp["weight_files"] == ["model.safetensors"]
    )
    copy = tmp_path / "copy"
    shutil.copytree(saved, copy)
    fc = model_fingerprint(copy)
    assert fc["path"] != fp["path"] and {k: fc[k] for k in ("config", "weights", "tokenizer")} == {
        k: fp[k] for k in ("config", "weights", "tokenizer")
    }
    # the same architecture with other values (a retrained checkpoint saved over the old one)
    tok = tiny_tokenizer()
    tiny_model("qwen3", len(tok), seed=1, hidden=16, layers=1).save_pretrained(copy)
    again = model_fingerprint(copy)
    assert again["config"] == fp["config"] and again["weights"] != fp["weights"]
    cfg = json.loads((copy / "config.json").read_text())
    (copy / "config.json").write_text(json.dumps({**cfg, "rope_theta": 1.0}))
    assert model_fingerprint(copy)["config"] != fp["config"]


def test_fingerprint_is_cheap(saved):
    t = time.perf_counter()
    for _ in range(20):
        model_fingerprint(saved)
    assert (time.perf_counter() - t) / 20 < 0.05


def test_hub_id_without_network_fails_fast(monkeypatch):
    """No network for an uncached hub id: one line at once, not transformers' ~45 s of retries."""
    import huggingface_hub.hf_api

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(huggingface_hub.hf_api.api, "endpoint", "https://hub.invalid")  # unreachable anywhere
    t = time.monotonic()
    with pytest.raises(UserError, match="the Hugging Face Hub cannot be reached"):
        locate("nobody-here/no-such-model-xyz", "--senior")
    assert time.monotonic() - t < 10


def test_hub_id_that_does_not_exist(monkeypatch):
    import trlvr.models

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(trlvr.models, "_probe_hub", lambda repo: "missing")
    with pytest.raises(UserError, match="neither a local folder nor a model on the Hugging Face Hub"):
        load_tokenizer("nobody-here/no-such-model-xyz", role="--junior")


def test_offline_env_and_uncached_hub_id(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(UserError, match="not in the Hugging Face cache, and HF_HUB_OFFLINE is set"):
        load_causal_lm("nobody-here/no-such-model-xyz", role="tandem.senior")

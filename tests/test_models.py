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


# --- hub ids from the local Hugging Face cache (review finding 2: every backend gets a folder) ------------


@pytest.fixture
def hub(tmp_path, monkeypatch, saved):
    """An offline machine whose Hugging Face cache holds `saved` as hub id trlvr-test/tiny (and a partial
    download of trlvr-test/partial: config only). huggingface_hub reads HF_HUB_CACHE when it is imported,
    so the constant is patched here (the CLI test below sets the variable in a fresh process)."""
    import huggingface_hub.constants
    from helpers import lay_out_hub_cache

    cache = tmp_path / "hub"
    snap = lay_out_hub_cache(cache, "trlvr-test/tiny", saved)
    lay_out_hub_cache(cache, "trlvr-test/partial", saved, only=("config.json",))
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return cache, snap


def test_a_cached_hub_id_is_its_snapshot_folder_offline(hub, saved):
    cache, snap = hub
    assert locate("trlvr-test/tiny", "--senior") == (str(snap), {})
    assert locate("trlvr-test/tiny", "--tokenizer", "tokenizer") == (str(snap), {})
    model = load_causal_lm("trlvr-test/tiny", role="--senior")
    tok = load_tokenizer("trlvr-test/tiny", role="--senior")
    assert (
        model.name_or_path == model.config.name_or_path == tok.name_or_path == "trlvr-test/tiny"
    )  # not the cache
    assert torch.equal(model.model.embed_tokens.weight, load_causal_lm(saved).model.embed_tokens.weight)
    fp = model_fingerprint("trlvr-test/tiny")
    assert (fp["path"], fp["revision"]) == ("trlvr-test/tiny", snap.name)
    assert fp["weights"] == model_fingerprint(saved)["weights"]
    assert locate(str(saved), "--senior") == (str(saved), {})  # a local folder is still itself


@pytest.mark.parametrize("repo", ["trlvr-test/not-cached", "trlvr-test/partial"])
def test_an_uncached_hub_id_offline_is_one_line_naming_the_download(hub, repo):
    cache, _ = hub
    with pytest.raises(UserError) as e:
        locate(repo, "--junior")
    line = str(e.value)
    assert "\n" not in line and line.startswith(
        f"--junior: '{repo}' is not a local folder and not in the Hugging Face cache"
    )
    assert f"(`hf download {repo}`, into {cache})" in line and "HF_HUB_OFFLINE is set" in line


def test_a_partly_downloaded_hub_id_gives_only_what_is_whole(hub, saved):
    cache, _ = hub
    from helpers import lay_out_hub_cache

    snap = lay_out_hub_cache(
        cache, "trlvr-test/tok-only", saved, only=("tokenizer.json", "tokenizer_config.json")
    )
    assert locate("trlvr-test/tok-only", "--tokenizer", "tokenizer") == (str(snap), {})
    with pytest.raises(UserError, match="not in the Hugging Face cache"):
        locate("trlvr-test/tok-only", "--senior", "model")


def test_fetch_downloads_an_uncached_hub_id_and_gives_its_folder(monkeypatch, saved):
    """Online and not cached: the vLLM backend (fetch=True) gets the downloaded snapshot folder, HF (fetch=False)
    the id for from_pretrained to download."""
    import huggingface_hub

    import trlvr.models

    calls = []

    def snapshot_download(repo, local_files_only=False, allow_patterns=None):
        calls.append((repo, local_files_only, allow_patterns))
        if local_files_only:
            raise huggingface_hub.errors.LocalEntryNotFoundError("not cached")
        return str(saved)

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    monkeypatch.setattr(huggingface_hub, "snapshot_download", snapshot_download)
    monkeypatch.setattr(trlvr.models, "_probe_hub", lambda repo: "ok")
    assert locate("org/model", "--senior") == ("org/model", {})
    assert locate("org/model", "--senior", fetch=True) == (str(saved), {})
    assert calls[-1] == ("org/model", False, list(trlvr.models.HUB_FILES))


def test_a_config_only_folder_is_a_config_not_a_model(tmp_path):
    """vLLM's load_format "dummy" (the GPU bench) reads a config and draws random weights: `locate(.., "config")`
    takes a folder with config.json alone, while a model still needs its weights."""
    from trlvr.models import locate

    (tmp_path / "config.json").write_text(json.dumps({"model_type": "qwen3"}))
    assert locate(tmp_path, "senior", "config")[0] == str(tmp_path)
    with pytest.raises(UserError, match=r"senior: .*: not a model folder \(no weights"):
        locate(tmp_path, "senior", "model")
    (tmp_path / "config.json").unlink()
    with pytest.raises(UserError, match=r"not a config folder \(no config.json\)"):
        locate(tmp_path, "senior", "config")

"""Loading models and tokenizers, with one-line errors; comparing vocabularies; fingerprinting weights.

    from trlvr.models import load_causal_lm, load_tokenizer, check_same_vocab, model_fingerprint
    tok = load_tokenizer(cfg.senior, role="tandem.senior")
    senior = load_causal_lm(cfg.senior, role="tandem.senior", dtype=torch.bfloat16)
    check_same_vocab(tok, load_tokenizer(cfg.junior, role="tandem.junior"))
    fp = model_fingerprint(cfg.senior)     # {"path", "revision", "config", "weights", "tokenizer"}

A path is a local folder (what `save_pretrained` writes) or a hub id. `locate` is the one place a
path is resolved: a hub id in the Hugging Face cache (HF_HOME / HF_HUB_CACHE) is its snapshot folder
there (`huggingface_hub.snapshot_download(..., local_files_only=True)`), so every backend, the vLLM
one included, reads a folder; with HF_HUB_OFFLINE set that is the only way a hub id loads. Every way
a path cannot be loaded is a `UserError` naming the role (the setting the path came from, e.g.
"--senior") and what was expected: a missing local path, a file or a folder that holds no model, a
hub id that does not exist, a hub id not in the cache while offline (naming `hf download ID`), or no
network for a hub id that is not cached (checked in one short request, not transformers' minute of
retries). What this module does not know: devices, training, decoding.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path
from typing import Any

from trlvr.errors import UserError
from trlvr.kinds import text_kind

MODEL_FILES = (
    "*.safetensors",
    "pytorch_model*.bin",
    "model.safetensors.index.json",
    "pytorch_model.bin.index.json",
)
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json")
TOKENIZER_SIDE_FILES = TOKENIZER_FILES + ("special_tokens_map.json", "chat_template.jinja", "merges.txt")
HUB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,95}(/[A-Za-z0-9][A-Za-z0-9._-]{0,95})?$")
HUB_PROBE_TIMEOUT_S = 3.0
SAMPLE_BYTES = 4096  # per tensor end: what model_fingerprint reads of each tensor's first and last bytes
SHOW_IDS = 5  # differing vocabulary ids named in an error
_EXPECTED = (
    "expected a model folder (config.json and weights, as save_pretrained writes) "
    "or a hub id like Qwen/Qwen3-0.6B"
)


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


def looks_like_hub_id(path: str) -> bool:
    """True for ``name`` or ``owner/name`` that is not a path into an existing local directory.

    >>> looks_like_hub_id("Qwen/Qwen3-0.6B"), looks_like_hub_id("/models/q"), looks_like_hub_id("a/b/c")
    (True, False, False)
    """
    if not HUB_ID.match(path) or ".." in path or "--" in path or path.endswith(".git"):
        return False
    return not ("/" in path and Path(path.split("/")[0]).is_dir())


def _missing(folder: Path, what: str) -> str | None:
    """What ``folder`` lacks to hold a ``what`` ("model", "config": a model's config without its weights,
    as vLLM's load_format "dummy" reads, or "tokenizer"), or None."""
    if what == "config":
        return None if (folder / "config.json").is_file() else "no config.json"
    if what == "model":
        if (folder / "adapter_config.json").is_file():  # a LoRA adapter folder (loads onto its base)
            return (
                None
                if next(folder.glob("adapter_model.*"), None)
                else "adapter_config.json but no adapter weights"
            )
        if not (folder / "config.json").is_file():
            return "no config.json"
        if not any(next(folder.glob(g), None) for g in MODEL_FILES):
            return "no weights (*.safetensors or pytorch_model*.bin)"
        return None
    if not any((folder / f).is_file() for f in TOKENIZER_FILES):
        return f"no tokenizer files ({', '.join(TOKENIZER_FILES)})"
    return None


# what `locate(..., fetch=True)` downloads of a hub model: config, weights (safetensors; pytorch_model*.bin
# only where a repo has no safetensors), tokenizer and generation config; not READMEs, images or other formats
HUB_FILES = ("*.json", "*.safetensors", "*.txt", "*.jinja", "*.model", "*.tiktoken", "*.py")


def hub_snapshot(repo: str, what: str = "model") -> str | None:
    """The folder of hub ``repo``'s snapshot in the local Hugging Face cache (its ``main`` revision, under
    HF_HUB_CACHE), when that folder holds a whole ``what`` (`_missing`); None otherwise. No network."""
    from huggingface_hub import snapshot_download

    try:
        folder = snapshot_download(repo, local_files_only=True)
    except (OSError, ValueError):  # LocalEntryNotFoundError / IncompleteSnapshotError; a malformed id
        return None
    return folder if _missing(Path(folder), what) is None else None


def hub_cache_dir() -> str:
    from huggingface_hub import constants

    return constants.HF_HUB_CACHE


def _fetch(repo: str, role: str, what: str) -> str:
    """Download hub ``repo``'s model files (HUB_FILES) into the cache; its snapshot folder."""
    from huggingface_hub import snapshot_download

    try:
        folder = snapshot_download(repo, allow_patterns=list(HUB_FILES))
        if what == "model" and _missing(Path(folder), what):  # an older repo: pytorch_model*.bin only
            folder = snapshot_download(repo, allow_patterns=[*HUB_FILES, "pytorch_model*.bin"])
    except (OSError, ValueError) as e:
        raise UserError(
            f"{role}: cannot download {repo!r} from the Hugging Face Hub: {_first_line(e)}"
        ) from e
    missing = _missing(Path(folder), what)
    if missing:
        raise UserError(
            f"{role}: {repo!r} on the Hugging Face Hub is not a {what} trlvr can load ({missing})"
        )
    return folder


def _hub_offline() -> bool:
    return any(
        os.environ.get(k, "").lower() in ("1", "true", "yes")
        for k in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")
    )


def _probe_hub(repo: str) -> str:
    """ "ok", "missing" (no such repo, or private without a token) or "unreachable", in one short request."""
    from huggingface_hub import model_info
    from huggingface_hub.errors import GatedRepoError, RepositoryNotFoundError

    try:
        model_info(repo, timeout=HUB_PROBE_TIMEOUT_S)
    except GatedRepoError:
        return "ok"  # exists; from_pretrained gives the licence / login message
    except RepositoryNotFoundError:
        return "missing"
    except Exception:  # httpx/OS errors of every kind: DNS, refused, timeout, proxy
        return "unreachable"
    return "ok"


def offline_refusal(repo: str, role: str) -> UserError:
    """The one line for a hub id that is not in the cache while HF_HUB_OFFLINE is set."""
    return UserError(
        f"{role}: {repo!r} is not a local folder and not in the Hugging Face cache, and HF_HUB_OFFLINE is "
        f"set; download it first (`hf download {repo}`, into {hub_cache_dir()}) or pass a model folder"
    )


def locate(
    path: str | os.PathLike, role: str, what: str = "model", *, fetch: bool = False
) -> tuple[str, dict]:
    """(where to load from, extra from_pretrained kwargs) for ``path``; UserError when it cannot be found.

    ``what``: "model" (config + weights), "config" (config only) or "tokenizer". A local folder is itself; a
    hub id whose whole ``what`` is in the Hugging Face cache is its snapshot folder there (`hub_snapshot`: no
    network, so a cached model loads the same online, offline and with HF_HUB_OFFLINE). A hub id that is not
    cached: refused when offline; otherwise, if the Hub knows it, ``fetch`` downloads it (`_fetch`) and gives
    its folder (what needs a folder: the vLLM backend), else the id itself is given back for
    `from_pretrained` to download (only the files it needs). The kwargs are empty (kept for callers).
    """
    if path is None or str(path).strip() == "":
        raise UserError(f"{role}: no path given; {_EXPECTED}")
    text = str(path)
    p = Path(text).expanduser()
    if p.exists():
        if not p.is_dir():
            raise UserError(f"{role}: {text}: is a file, not a folder; {_EXPECTED}")
        missing = _missing(p, what)
        if missing:
            raise UserError(f"{role}: {text}: not a {what} folder ({missing}); {_EXPECTED}")
        return str(p), {}
    if not looks_like_hub_id(text):
        raise UserError(f"{role}: {text}: no such folder; {_EXPECTED}")
    cached = hub_snapshot(text, what)
    if cached:
        return cached, {}
    if _hub_offline():
        raise offline_refusal(text, role)
    probe = _probe_hub(text)
    if probe == "ok":
        return (_fetch(text, role, what) if fetch else text), {}
    if probe == "missing":
        raise UserError(
            f"{role}: {text!r} is neither a local folder nor a model on the Hugging Face Hub "
            "(check the spelling; a private model needs `hf auth login`)"
        )
    raise UserError(
        f"{role}: {text!r} is not a local folder, and the Hugging Face Hub cannot be reached to fetch it "
        f"(no network, not in the cache); pass a model folder, or run `hf download {text}` where there is "
        "network"
    )


def _keep_name(obj, name: str, where: str):
    """A model or tokenizer loaded from a hub id's cached snapshot keeps the id as its `name_or_path`
    (what a LoRA adapter records as its base, and what provenance shows), not the cache's folder."""
    if where != name:
        for target in (obj, getattr(obj, "config", None)):
            if target is not None and hasattr(target, "name_or_path"):
                try:
                    target.name_or_path = name
                except AttributeError:
                    pass
    return obj


def load_tokenizer(path: str | os.PathLike, role: str = "tokenizer", **kwargs) -> Any:
    """``AutoTokenizer.from_pretrained(path, **kwargs)``, with a one-line UserError when it cannot be."""
    from transformers import AutoTokenizer

    where, extra = locate(path, role, "tokenizer")
    try:
        return _keep_name(AutoTokenizer.from_pretrained(where, **{**extra, **kwargs}), str(path), where)
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise UserError(f"{role}: cannot load a tokenizer from {path}: {_first_line(e)}") from e


def load_causal_lm(path: str | os.PathLike, role: str = "model", **kwargs) -> Any:
    """``AutoModelForCausalLM.from_pretrained(path, **kwargs)``, with a one-line UserError when it cannot be.

    Device placement and ``.eval()`` stay with the caller.
    """
    from transformers import AutoModelForCausalLM

    where, extra = locate(path, role, "model")
    try:
        return _keep_name(
            AutoModelForCausalLM.from_pretrained(where, **{**extra, **kwargs}), str(path), where
        )
    except (OSError, ValueError, KeyError) as e:
        raise UserError(f"{role}: cannot load a causal LM from {path}: {_first_line(e)}") from e
    except Exception as e:
        if type(e).__name__ == "SafetensorError":  # a truncated or corrupt weights file
            raise UserError(f"{role}: {path}: corrupt weights file ({_first_line(e)})") from e
        raise


# --- LoRA adapter folders ---------------------------------------------------------------------------

ADAPTER_CONFIG = "adapter_config.json"


def is_adapter_dir(path: str | os.PathLike) -> bool:
    """True for a PEFT adapter folder (what `Trainer.save_model` writes for a LoRA senior)."""
    return (Path(path) / ADAPTER_CONFIG).is_file()


def adapter_base(path: str | os.PathLike, base: str | None = None) -> str:
    """The base model an adapter folder belongs to: `base` if given, else its adapter_config.json's."""
    if base is not None:
        return base
    config_file = Path(path) / ADAPTER_CONFIG
    try:
        name = json.loads(config_file.read_text()).get("base_model_name_or_path")
    except (OSError, ValueError) as e:
        raise UserError(f"{config_file}: not a readable adapter config ({e})") from None
    if not name:
        raise UserError(
            f"{config_file}: base_model_name_or_path is empty; name the base model folder explicitly"
        )
    local = Path(name).expanduser()
    if local.is_dir():
        return str(local)
    if name.startswith((".", "/", "~")) or name.count("/") > 1:  # a path, not a hub id
        raise UserError(
            f"{config_file}: base_model_name_or_path {name!r} is not a folder (a relative path is read from "
            f"{Path.cwd()}); run from where training ran, or name the base model folder"
        )
    return name  # a hub id


def model_folder(path: str | os.PathLike) -> str:
    """The folder holding a model's config and weights: an adapter folder's base, else `path` itself."""
    return adapter_base(path) if is_adapter_dir(path) else str(path)


# where a model's config states the most positions it reads (GPT-2's n_positions, ...); nested configs
# (a multimodal model's text_config) are looked into too
CONTEXT_KEYS = ("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length", "n_ctx")


def context_length(path: str | os.PathLike, role: str = "model") -> int | None:
    """The most positions the model at ``path`` reads (an adapter folder: its base's), from its config alone
    (no weights): ``max_position_embeddings`` or its equivalent (`CONTEXT_KEYS`); None when the config
    states none."""
    from transformers import AutoConfig

    where, extra = locate(model_folder(path), role, "config")
    return config_positions(AutoConfig.from_pretrained(where, **extra))


def config_positions(config) -> int | None:
    """The most positions a model of `config` (a loaded model's `.config`) reads (`CONTEXT_KEYS`), or None."""
    for c in (config, getattr(config, "text_config", None)):
        for key in CONTEXT_KEYS:
            value = getattr(c, key, None)
            if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                return value
    return None


def load_model_or_adapter(
    path: str | os.PathLike,
    role: str = "model",
    base: str | None = None,
    *,
    trainable: bool = False,
    **kwargs,
) -> Any:
    """A model folder as a causal LM; an adapter folder as a `peft.PeftModel` on its base, frozen (or with
    its adapter trainable: `trainable`, how a run continues an adapter)."""
    if not is_adapter_dir(path):
        return load_causal_lm(path, role, **kwargs)
    from peft import PeftModel

    base_model = load_causal_lm(adapter_base(path, base), f"{role} (the adapter's base)", **kwargs)
    return PeftModel.from_pretrained(base_model, str(path), is_trainable=trainable)


def load_tokenizer_for(path: str | os.PathLike, role: str = "model") -> Any:
    """The tokenizer of a model folder, or of an adapter folder (its own copy, else its base's)."""
    if is_adapter_dir(path) and _missing(Path(path), "tokenizer"):
        return load_tokenizer(adapter_base(path), f"{role} (the adapter's base)")
    return load_tokenizer(path, role)


# --- vocabularies --------------------------------------------------------------------------------


def check_device(name: str, flag: str) -> None:
    """Raise a one-line UserError when device `name` (e.g. "cuda:1") does not exist on this machine.

    >>> check_device("cpu", "--device")
    """
    import torch

    try:
        device = torch.device(name)
    except (RuntimeError, TypeError) as e:
        raise UserError(f"{flag}: {name!r} is not a device name ({_first_line(e)})") from None
    if device.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count == 0 or (device.index or 0) >= count:
            raise UserError(f"{flag}: {name} is not on this machine ({count} CUDA device(s) visible)")
    elif device.type not in ("cpu", "meta") and device.type != getattr(
        torch.accelerator.current_accelerator(), "type", None
    ):
        raise UserError(f"{flag}: {name} is not on this machine")


def _device_problem(name: str) -> str | None:
    try:
        check_device(name, "device")
    except UserError as e:
        return str(e).removeprefix("device: ")
    return None


DEVICE = text_kind(
    "device", "a device name such as cpu or cuda:1", _device_problem
)  # an option's kind (trlvr.kinds)


def vocab_table(tokenizer) -> dict[int, str]:
    """id -> token string, added tokens included."""
    return {i: t for t, i in tokenizer.get_vocab().items()}


def _special(tokenizer) -> dict[int, str]:
    table = vocab_table(tokenizer)
    return {i: table.get(i, "?") for i in sorted(set(tokenizer.all_special_ids))}


def vocab_fingerprint(tokenizer) -> str:
    """sha256 (hex) of the id -> token map and of which ids are special tokens.

    Which special token plays eos/bos/pad is left out on purpose: the engine stops on the senior
    tokenizer's eos, and a base and an instruct model share a vocabulary while naming different eos.
    """
    body = json.dumps(
        [sorted(vocab_table(tokenizer).items()), sorted(_special(tokenizer))], ensure_ascii=False
    )
    return hashlib.sha256(body.encode()).hexdigest()


def check_same_vocab(senior_tok, junior_tok, names: tuple[str, str] = ("senior", "junior")) -> None:
    """Raise UserError unless both tokenizers map every id to the same token and mark the same
    ids special; the message names the first differing ids. Equal sizes are not enough."""
    if vocab_fingerprint(senior_tok) == vocab_fingerprint(junior_tok):
        return
    a, b = vocab_table(senior_tok), vocab_table(junior_tok)
    s, j = names
    diff = [i for i in sorted(set(a) | set(b)) if a.get(i) != b.get(i)]
    problems = []
    if diff:
        shown = ", ".join(
            f"id {i}: {a.get(i, '(none)')!r} vs {b.get(i, '(none)')!r}" for i in diff[:SHOW_IDS]
        )
        more = f" (and {len(diff) - SHOW_IDS} more)" if len(diff) > SHOW_IDS else ""
        problems.append(f"{len(diff)} ids map to different tokens ({s} vs {j}: {shown}{more})")
    sa, sb = _special(senior_tok), _special(junior_tok)
    if sa != sb:
        only_a = {i: t for i, t in sa.items() if sb.get(i) != t}
        only_b = {i: t for i, t in sb.items() if sa.get(i) != t}
        problems.append(f"special tokens differ ({s} only: {only_a}, {j} only: {only_b})")
    raise UserError(
        f"{s} and {j} tokenizers differ ({len(a)} vs {len(b)} tokens): {'; '.join(problems)}; "
        "tandem decoding needs one shared vocabulary"
    )


# --- fingerprints ----------------------------------------------------------------------------------


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:16]


def _safetensors_digest(path: Path, h) -> None:
    """Feed ``h`` the header and the first/last SAMPLE_BYTES of every tensor of a safetensors file."""
    with path.open("rb") as f:
        n = int.from_bytes(f.read(8), "little")
        header_bytes = f.read(n)
        h.update(header_bytes)
        try:
            header = json.loads(header_bytes)
            spans = sorted(tuple(v["data_offsets"]) for k, v in header.items() if k != "__metadata__")
        except (ValueError, KeyError, TypeError, AttributeError):
            raise UserError(f"{path}: corrupt safetensors file (unreadable header)") from None
        base = 8 + n
        for start, end in spans:
            for at in sorted({start, max(start, end - SAMPLE_BYTES)}):
                f.seek(base + at)
                h.update(f.read(min(SAMPLE_BYTES, end - at)))


def _sampled_digest(path: Path, h, chunks: int = 64) -> None:
    """Feed ``h`` the size and ``chunks`` evenly spaced SAMPLE_BYTES pieces of any file."""
    size = path.stat().st_size
    h.update(str(size).encode())
    with path.open("rb") as f:
        for k in range(chunks):
            f.seek(size * k // chunks)
            h.update(f.read(SAMPLE_BYTES))


def model_fingerprint(path: str | os.PathLike, role: str = "model") -> dict:
    """What identifies a model's weights, cheaply: resolved path, hub revision (cached snapshots),
    hashes of config.json, of the weights and of the tokenizer files.

    The weights hash reads each safetensors header and the first and last 4 KiB of every tensor
    (a few MB for a 4B model, not the whole file): any retraining or re-save with other values
    changes it; a copy to another folder does not (the path field does).
    """
    where, _ = locate(path, role, "model")
    folder = Path(where)
    revision = None
    if not folder.is_dir():
        raise UserError(
            f"{role}: {where!r} is not in the Hugging Face cache; load it once before fingerprinting"
        )
    if where != str(Path(str(path)).expanduser()):  # a hub id, found in the cache
        where, revision = str(path), folder.name  # .../snapshots/<commit sha>
    weights = hashlib.sha256()
    files = sorted({p for g in MODEL_FILES for p in folder.glob(g)})
    for p in files:
        weights.update(p.name.encode())
        if p.suffix == ".safetensors":
            _safetensors_digest(p, weights)
        elif p.suffix == ".json":
            weights.update(p.read_bytes())
        else:
            _sampled_digest(p, weights)
    tok = hashlib.sha256()
    for name in TOKENIZER_SIDE_FILES:
        if (folder / name).is_file():
            tok.update(name.encode() + (folder / name).read_bytes())
    return {
        "path": str(folder.resolve()) if revision is None else where,
        "revision": revision,
        "config": _sha(
            (
                folder / ("config.json" if (folder / "config.json").is_file() else "adapter_config.json")
            ).read_bytes()
        ),
        "weights": weights.hexdigest()[:16],
        "weight_files": [p.name for p in files],
        "tokenizer": tok.hexdigest()[:16],
    }

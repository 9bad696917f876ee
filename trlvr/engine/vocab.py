"""Which token ids a pair can emit, and whether two models can share one tokenizer, from their configs.

A tokenizer of N tokens names ids 0..N-1; a model's embedding matrix may have more rows (Qwen2.5-0.5B,
1.5B and 3B pad theirs to 151,936 rows, Qwen2.5-7B to 152,064, all for one 151,665-token tokenizer).
Rows past the tokenizer are padding: never read or sampled as tokens. So tandem needs one tokenizer,
not one embedding size: :func:`shared_ids` is the number of ids a pair decodes over (the engines cut
every model's logits to it), and :func:`check_vocab_rows` refuses, from the configs alone (no weights
loaded), a model with fewer rows than its tokenizer has tokens.

Pure: integers and config objects in, an integer or a one-line UserError out.
"""

from __future__ import annotations

from trlvr.errors import UserError
from trlvr.memory import read_config


def shared_ids(tokenizer_size: int | None, *rows: int) -> int:
    """The ids a token can be: ``min(tokenizer_size, rows...)`` (the models' logit dimensions).

    >>> shared_ids(151665, 151936, 152064), shared_ids(None, 320, 352)
    (151665, 320)
    """
    return min([*rows, *([tokenizer_size] if tokenizer_size is not None else [])])


def config_rows(config) -> int | None:
    """A config's embedding rows (``vocab_size``, a multimodal config's text config's), None if unstated;
    ``config`` is a transformers config or a config.json dict (`trlvr.memory.read_config`).

    >>> (config_rows({"text_config": {"vocab_size": 262208}}), config_rows({"vocab_size": 151936}),
    ...     config_rows({}))
    (262208, 151936, None)
    """
    if isinstance(config, dict):
        return config.get("text_config", config).get("vocab_size")
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    return getattr(text, "vocab_size", None)


def check_vocab_rows(tokenizer_size: int, configs: dict[str, object]) -> int:
    """``configs``: name -> model config of every model decoding over one tokenizer of ``tokenizer_size``
    tokens. Returns the shared ids (:func:`shared_ids`); UserError, one line naming the model, when one
    has fewer embedding rows than the tokenizer has tokens (its logits cannot name every token).

    >>> check_vocab_rows(10, {"senior a": type("C", (), {"vocab_size": 12})(),
    ...                       "junior b": type("C", (), {"vocab_size": 16})()})
    10
    """
    rows = {}
    for name, cfg in configs.items():
        n = config_rows(cfg)
        if n is not None and n < tokenizer_size:
            raise UserError(
                f"{name}: {n} embedding rows for a {tokenizer_size}-token tokenizer; each model of a "
                "pair needs a row for every token of the shared tokenizer"
            )
        rows[name] = n
    return shared_ids(tokenizer_size, *(n for n in rows.values() if n is not None))


def check_pair_rows(tokenizer_size: int, paths: dict[str, str]) -> int:
    """:func:`check_vocab_rows` on the config.json of each model folder or hub id in ``paths`` (role ->
    path), read without loading weights (`trlvr.memory.read_config`). A path with no config.json to
    read (a LoRA adapter folder) is left to the engine's check once loaded."""
    configs = {}
    for role, path in paths.items():
        try:
            configs[f"{role} {path}"] = read_config(str(path))
        except (UserError, OSError, ValueError):
            continue
    return check_vocab_rows(tokenizer_size, configs)

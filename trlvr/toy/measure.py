"""Card figures for the toy world, measured with the tandem engine (temperature 1, test split).

Rows are dicts with at least `prompt` (text) and `answer` (int), e.g. the lines of
data/test.jsonl. Every function is deterministic given `seed`.

    solo_accuracy(model, tok, rows)                  -> float
    jargon_rate(model, tok, rows)                    -> float   (share of samples in jargon)
    continuation_accuracy(junior, tok, rows, prefixes) -> float (junior continues a given text)
    tandem_accuracy_by_dialect(senior, junior, tok, rows) -> dict
    wilson_interval(k, n)                            -> (lo, hi)  (95% binomial interval of k/n)
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from trlvr.data import encode_prompt
from trlvr.engine import Sampling, SoloSchedule, TandemGenerator, WordSchedule
from trlvr.toy.dialects import extract_boxed_int, is_jargon

MAX_NEW_TOKENS = 96


@dataclass
class Samples:
    texts: list[str]
    correct: list[bool]
    authors: list[list[int]] | None = None
    completion_ids: list[list[int]] | None = None


def sample(
    senior,
    tokenizer,
    rows: list[dict],
    junior=None,
    schedule=None,
    prefixes: list[str] | None = None,
    seed: int = 0,
    batch_size: int = 256,
    max_new_tokens: int = MAX_NEW_TOKENS,
    temperature: float = 1.0,
) -> Samples:
    """Generate one completion per row (prompt + optional prefix) and grade it.

    The graded text is prefix + completion. `schedule` defaults to SoloSchedule("senior").
    """
    schedule = schedule or SoloSchedule("senior")
    gen = TandemGenerator(senior, junior, tokenizer)
    prefixes = prefixes or [""] * len(rows)
    texts, correct, authors, comp_ids = [], [], [], []
    for start in range(0, len(rows), batch_size):
        chunk = rows[start : start + batch_size]
        pre = prefixes[start : start + batch_size]
        ids = [encode_prompt(r["prompt"] + p, tokenizer) for r, p in zip(chunk, pre, strict=True)]
        out = gen.generate(
            ids, schedule, Sampling(max_new_tokens, temperature=temperature, seed=seed + start)
        )
        for r, p, c, a in zip(chunk, pre, out.completion_ids, out.authors, strict=True):
            text = p + tokenizer.decode(c, skip_special_tokens=True)
            texts.append(text)
            correct.append(extract_boxed_int(text) == int(r["answer"]))
            authors.append(a)
            comp_ids.append(c)
    return Samples(texts, correct, authors, comp_ids)


def wilson_interval(k: int, n: int, z: float = 1.959964) -> tuple[float, float]:
    """Wilson score interval for k successes in n trials (95% by default); (nan, nan) when n = 0.

    >>> [round(x, 4) for x in wilson_interval(483, 500)]
    [0.9462, 0.9787]
    """
    if n <= 0:
        return (float("nan"), float("nan"))
    if not 0 <= k <= n:
        raise ValueError(f"need 0 <= k <= n, got k={k}, n={n}")
    phat = k / n
    denom = 1 + z * z / n
    centre = (phat + z * z / (2 * n)) / denom
    half = z * math.sqrt(phat * (1 - phat) / n + z * z / (4 * n * n)) / denom
    return (max(0.0, centre - half), min(1.0, centre + half))


def _mean(xs) -> float:
    xs = list(xs)
    return float(sum(xs) / len(xs)) if xs else float("nan")


@torch.no_grad()
def solo_accuracy(model, tokenizer, rows: list[dict], seed: int = 0, **kw) -> float:
    """Share of solo samples whose last \\boxed{N} equals the answer."""
    return _mean(sample(model, tokenizer, rows, seed=seed, **kw).correct)


@torch.no_grad()
def jargon_rate(model, tokenizer, rows: list[dict], seed: int = 0, **kw) -> float:
    """Share of solo samples written in jargon (contain a "<<" annotation)."""
    return _mean(is_jargon(t) for t in sample(model, tokenizer, rows, seed=seed, **kw).texts)


@torch.no_grad()
def solo_figures(model, tokenizer, rows: list[dict], seed: int = 0, **kw) -> dict:
    """Accuracy, jargon rate and per-dialect accuracy from one batch of solo samples."""
    s = sample(model, tokenizer, rows, seed=seed, **kw)
    jar = [is_jargon(t) for t in s.texts]
    return {
        "acc": _mean(s.correct),
        "jargon_rate": _mean(jar),
        "acc_jargon": _mean(c for c, j in zip(s.correct, jar, strict=True) if j),
        "acc_plain": _mean(c for c, j in zip(s.correct, jar, strict=True) if not j),
        "n": len(jar),
        "n_jargon": sum(jar),
    }


@torch.no_grad()
def continuation_accuracy(
    model, tokenizer, rows: list[dict], prefixes: list[str], seed: int = 0, **kw
) -> float:
    """Solo accuracy of `model` continuing after prompt + prefix (e.g. a first step + "\\n\\n")."""
    return _mean(sample(model, tokenizer, rows, prefixes=prefixes, seed=seed, **kw).correct)


@torch.no_grad()
def tandem_accuracy_by_dialect(
    senior, junior, tokenizer, rows: list[dict], p: float = 0.5, seed: int = 0, **kw
) -> dict:
    """WordSchedule(p) team rollouts, split by whether the senior's own tokens contain jargon.

    A rollout counts as "jargon" when the text the senior wrote contains "<<"; rollouts where
    the senior wrote nothing are left out of both groups.
    """
    s = sample(senior, tokenizer, rows, junior=junior, schedule=WordSchedule(p=p), seed=seed, **kw)
    jar, plain, senior_share = [], [], []
    for ids, a, c in zip(s.completion_ids, s.authors, s.correct, strict=True):
        mine = [t for t, w in zip(ids, a, strict=True) if w == 1]
        senior_share.append(len(mine) / max(1, len(ids)))
        if not mine:
            continue
        # The senior's tokens in place (junior tokens blanked): "<<" only counts when the senior wrote it.
        senior_text = "".join(tokenizer.decode([t]) if w == 1 else " " for t, w in zip(ids, a, strict=True))
        (jar if "<<" in senior_text else plain).append(c)
    return {
        "acc": _mean(s.correct),
        "acc_jargon": _mean(jar),
        "acc_plain": _mean(plain),
        "n_jargon": len(jar),
        "n_plain": len(plain),
        "senior_share": _mean(senior_share),
    }

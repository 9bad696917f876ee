"""The fingerprint of an evaluation directory: everything that determines its samples.

    {"version", "models": {senior, junior, tokenizer}, "data": {bench: file identity},
     "problems": {bench: [problem keys, in order]}, "generation": {...}, "scoring": {...}}

A run resumes into a directory only when the stored fingerprint equals the new one, except that
each benchmark's problem list may grow or shrink as a prefix (a larger or smaller `--limit`).
The number of samples and the suite are not in it: they select which batches a run needs, and
each batch carries its own signature (see `trlvr.eval.plan`).

Model identity: a model folder is `trlvr.models.model_fingerprint` (resolved path, revision,
config, sampled weights and tokenizer hashes); a model object without a folder is identified by
a hash of a sample of every tensor (`weights_digest`); the tokenizer by `trlvr.models.vocab_fingerprint`.

What this file does not know: how samples are generated or stored.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from trlvr import rundir
from trlvr.errors import UserError
from trlvr.rundir import FINGERPRINT

VERSION = 1


def file_digest(path: str | Path) -> str:
    """sha256 of a file's bytes (16 hex digits)."""
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()[:16]


def weights_digest(model, sample: int = 4096) -> str:
    """Hash of an in-memory model: every tensor's name, dtype and shape, and `sample` values from its
    start, its end and evenly spaced through it (cheap on a GPU; any training step changes them)."""
    import torch

    h = hashlib.sha256()
    for name, t in sorted(model.state_dict().items()):
        flat = t.detach().reshape(-1)
        if flat.numel() > 3 * sample:
            step = flat.numel() // sample
            flat = torch.cat([flat[:sample], flat[::step][:sample], flat[-sample:]])
        h.update(f"{name}|{t.dtype}|{tuple(t.shape)}".encode())
        h.update(flat.cpu().contiguous().view(torch.uint8).numpy().tobytes())
    return h.hexdigest()[:16]


def _problems_diff(old: dict, new: dict) -> list[str]:
    """Each benchmark's problem keys must be a prefix of the other's (a smaller or larger limit)."""
    diffs = []
    if sorted(old) != sorted(new):
        return [f"benchmarks: {sorted(old)} -> {sorted(new)}"]
    for bench in sorted(new):
        a, b = old[bench], new[bench]
        m = min(len(a), len(b))
        if a[:m] != b[:m]:
            first = next(i for i in range(m) if a[i] != b[i])
            diffs.append(
                f"problems of {bench!r}: problem {first + 1} is {a[first]} in the directory but {b[first]} "
                "now"
            )
    return diffs


def differences(old: dict, new: dict) -> list[str]:
    """Human-readable reasons why samples made under `old` cannot be reused under `new` ([] = resumable)."""
    if old.get("version") != new.get("version"):
        return [f"fingerprint version: {old.get('version')!r} -> {new.get('version')!r}"]
    new = with_partner(old, new)
    old = with_partner(
        new, with_grader(old)
    )  # a directory of solo samples alone had no junior: this run's is no change
    diffs = _problems_diff(old.get("problems", {}), new.get("problems", {}))
    return diffs + rundir.differences(old, new, ignore=("problems",))


FIX = (
    "rerun with the same settings, choose another --out, or pass --fresh to start over "
    "(the earlier one is moved aside)"
)


PARTNER_KEYS = ("junior", "junior_tokenizer", "pairing")  # what `models` says of the junior


def with_partner(old: dict, new: dict) -> dict:
    """`new` as it extends a directory fingerprinted `old`: a run without a junior (solo alone, whose
    samples do not depend on one) keeps the directory's junior, and a directory whose samples had none
    takes this run's; both sides with a junior stay as they are (any difference is a real one)."""
    old_m, new_m = old.get("models") or {}, new.get("models") or {}
    if new_m.get("junior") is None and old_m.get("junior") is not None:
        partner = {k: old_m[k] for k in PARTNER_KEYS if k in old_m}
        return {**new, "models": {**{k: v for k, v in new_m.items() if k not in PARTNER_KEYS}, **partner}}
    return new


def with_grader(old: dict) -> dict:
    """A fingerprint written before graders were recorded (no scoring.grader): its rewards were trlvr's
    grader's (a caller's own score function, grading "custom:<name>", has none)."""
    scoring = old.get("scoring")
    if (
        not isinstance(scoring, dict)
        or "grader" in scoring
        or str(scoring.get("grading", "")).startswith("custom:")
    ):
        return old
    return {**old, "scoring": {**scoring, "grader": "trlvr"}}


def check_resumable(path: Path, old: dict | None, new: dict) -> None:
    """Raise a UserError listing what differs when `path`'s samples were made under other settings."""
    if old is None:
        raise UserError(
            f"{path} holds samples but no {FINGERPRINT} (written by an older trlvr?); "
            "pass --fresh to start over (its samples are moved aside), or choose another --out"
        )
    rundir.refuse(path, differences(old, new), force=False, what="samples of another evaluation", fix=FIX)

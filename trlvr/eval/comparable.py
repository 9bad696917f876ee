"""Like with like: the one rule that decides whether two evaluations may be paired.

    check_comparable("runs/eval-grpo", "runs/eval-tandem")            # [] or UserError naming what differs
    check_comparable(a, b, allow_mismatch=True)   # the differences, for a warning shown with the table

`trlvr compare`, `trlvr report` (one run with --compare, or several against --baseline) and
`trlvr study report` all pair evaluations through this module. An evaluation's settings are what
its results.json records: every entry of `config`, flattened (decoding.temperature, budget.rule,
...), and the junior's identity from `fingerprint.models` (its content: config, weights and
tokenizer hashes, not the folder it lies in). Everything is compared except the entries named in
NOT_COMPARED, each with the reason it cannot change a number both sides report; a setting a newer
trlvr records is compared by default. An entry only one side records (a results.json written by an
older trlvr) cannot be compared and is left out. A seed group's settings are its seeds' settings,
which must agree with each other, plus its list of seeds.

What this file does not know: metrics or statistics. It compares recorded settings.
"""

from __future__ import annotations

from pathlib import Path

from trlvr.errors import UserError
from trlvr.eval.groups import is_group, seed_dirs
from trlvr.eval.store import RESULTS, read_json
from trlvr.rundir import flatten

ALLOW_FLAG = "--allow-mismatch"
# top-level config entries that are not compared, and why none of them changes a number both sides report
NOT_COMPARED = {
    "models": "the seniors are what is compared; files may lie anywhere (the junior is compared by content)",
    "benchmarks": "which problems: a comparison pairs the problems both sides have",
    "num_problems": "which problems (as above)",
    "dropped_problems": "which problems (as above)",
    "lossy_prompts": "which problems (as above)",
    "suite": "which metrics exist: a metric only one side has is skipped and named",
    "protocols": "which metrics exist (as above)",
    "ks": "which pass@k exist (as above)",
    "dose_shares": "which dose points exist (as above)",
    "prefix_ks": "which prefix-K points exist (as above)",
    "batch_size": "how generation was batched: each sample's randomness is keyed by its row, not its batch",
    "score_batch_size": "how scoring was batched (as above)",
    "decode": "the KV-cache path: outputs are equal across paths (tested)",
    "num_resamples": "the precision of the stored CIs: a comparison draws its own",
    "machine": "where it ran (recorded for reproducibility, not a setting)",
    "graders": (
        "which graders' metrics exist beside the first's (`by_grader`); the first, `grader`, is compared"
    ),
    "skipped_rows": "which problems (as dropped_problems)",
}


def settings(results: dict) -> dict[str, object]:
    """The number-changing settings of a results.json, flattened: {"n": 4, "decoding.top_p": 0.8, ...}."""
    config = results.get("config") or {}
    out = flatten({k: v for k, v in config.items() if k not in NOT_COMPARED})
    if "grader" not in out and not str(config.get("grading", "")).startswith("custom:"):
        out["grader"] = "trlvr"  # written before graders were recorded: trlvr's was the only one
    models = (results.get("fingerprint") or {}).get("models") or {}
    if "junior" in models:
        junior = models["junior"]
        if isinstance(junior, dict) and "self_of" in junior:
            out["junior"] = "self (the senior's base, adapters off)"
        elif isinstance(junior, dict):
            out.update({f"junior.{k}": v for k, v in junior.items() if k != "path"})
        else:
            out["junior"] = junior
    if "junior_tokenizer" in models:
        out["junior.tokenizer_vocab"] = models["junior_tokenizer"]
    return out


def _recorded(eval_dir: Path) -> dict:
    """The settings of one evaluation folder ({} for a seed folder without results.json: nothing recorded)."""
    return (
        settings(read_json(eval_dir / RESULTS, "results file", checked=True))
        if (eval_dir / RESULTS).is_file()
        else {}
    )


def differences(a: dict, b: dict, names: tuple[str, str] = ("A", "B")) -> list[str]:
    """["n: 4 (A) vs 8 (B)", ...] over the settings both sides record."""
    return [
        f"{key}: {a[key]!r} ({names[0]}) vs {b[key]!r} ({names[1]})"
        for key in sorted(set(a) & set(b))
        if a[key] != b[key]
    ]


def describe(
    path: str | Path, *, allow_mismatch: bool = False, seeds: list[int] | None = None
) -> tuple[dict, list[str]]:
    """(settings, warnings) of an evaluation directory or a seed group (its `seeds`, default: the group's
    own, `trlvr.eval.groups.seed_dirs`). A group's seeds must have been evaluated alike: otherwise
    UserError, or (allowed) a warning naming the seeds and settings."""
    path = Path(path)
    if not is_group(path):
        return settings(read_json(path / RESULTS, "results file", checked=True)), []
    dirs = seed_dirs(path, seeds)
    per_seed = {s: _recorded(d) for s, d in dirs.items()}
    first = min(per_seed)
    warnings = []
    for s in sorted(per_seed):
        diffs = differences(per_seed[first], per_seed[s], (f"seed {first}", f"seed {s}"))
        if diffs and not allow_mismatch:
            raise UserError(
                f"{path}: the seed group's evaluations differ in settings ({'; '.join(diffs)}); "
                f"evaluate every seed alike, or pass {ALLOW_FLAG} to use it anyway with a warning"
            )
        warnings += [f"{path}: {d}" for d in diffs]
    return {**per_seed[first], "seeds": sorted(per_seed)}, warnings


def check_comparable(
    path_a: str | Path,
    path_b: str | Path,
    *,
    allow_mismatch: bool = False,
    names: tuple[str, str] | None = None,
    seeds: tuple = (None, None),
) -> list[str]:
    """[] when A and B were evaluated alike; else UserError (one line: each differing setting with both
    values), or with `allow_mismatch` the differences, to be shown as a warning beside the numbers.
    `seeds`: for seed groups, the seeds of each side that are paired (default: each group's own)."""
    names = names or (str(path_a), str(path_b))
    (sa, wa), (sb, wb) = (
        describe(p, allow_mismatch=allow_mismatch, seeds=s)
        for p, s in zip((path_a, path_b), seeds, strict=True)
    )
    diffs = differences(sa, sb, ("A", "B"))
    if diffs and not allow_mismatch:
        raise UserError(
            f"A = {names[0]} and B = {names[1]} were evaluated under different settings "
            f"({'; '.join(diffs)}): their numbers are not comparable; evaluate both alike, or pass "
            f"{ALLOW_FLAG} to pair them anyway with a warning"
        )
    return wa + wb + diffs


def warning_text(diffs: list[str]) -> str:
    """The warning shown with a comparison made despite differing settings ('' when there is none)."""
    if not diffs:
        return ""
    return (
        f"NOT LIKE WITH LIKE ({ALLOW_FLAG}): the evaluations differ in settings that change the numbers: "
        + "; ".join(diffs)
    )

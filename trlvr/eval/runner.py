"""`evaluate`: run the evaluation suite, write DIR/samples.jsonl and DIR/results.json, resume.

Files in `out_dir`:
    config.json       generation settings; a resumed run must match them (else it refuses)
    samples.jsonl     one row per completion, appended and flushed per finished batch
    per_problem.json  {benchmark: {metric: {problem_id: value}}} (what compare and report resample)
    results.json      per benchmark and macro metrics with 95% bootstrap CIs, plus the config

Resumption: problems x samples of one (benchmark, protocol) are cut into fixed batches; batch b
uses seed hash(seed, benchmark, protocol, b). A batch with any missing row is regenerated whole
(same seed, same batch-mates, same output) and only its missing rows are appended.

Sample row fields: benchmark, problem_id, protocol, sample_idx, seed, answer, text, token_ids,
authors ("1" senior / "0" junior per token), num_tokens, senior_share, num_switches, reward,
parsed_answer, finish_reason, piece_lens (chars of `text` per token; null when single-token
decoding does not reproduce the text), junior_logprobs (3 dp; tandem rows, and solo rows when
scored), legibility / drift (solo rows when scored: the per-sample mean junior CE and KL), and
prompt (sample 0 only).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

from trlvr.eval.aggregate import problem_table, summarize
from trlvr.eval.protocols import (
    DEFAULT_DECODING,
    DEFAULT_DOSE_SHARES,
    HANDOFF_MAX_ROUNDS,
    SUITE_NAMES,
    batch_seed,
    protocols_for,
    run_protocol,
)
from trlvr.eval.scoring import score_completions

RESULTS_VERSION = 1
# Settings that change what a batch generates: a resumed run must match them.
_GENERATION_KEYS = ("n", "decoding", "seed", "max_new_tokens", "batch_size", "handoff_max_rounds")


def _default_score_fn():
    from trlvr.rewards import math_reward

    return math_reward  # math_reward(completions, answers): one gold answer per completion


def _default_extract_fn():
    from trlvr.rewards import extract_boxed

    return extract_boxed


def prompt_ids_for(problem, tokenizer) -> list[int]:
    """A row's `prompt` verbatim when present, else the data module's template."""
    prompt = getattr(problem, "prompt", None)
    if prompt is None:
        from trlvr.data import prompt_for

        prompt = prompt_for(problem, tokenizer)
    if isinstance(prompt, str):
        return tokenizer.encode(prompt, add_special_tokens=False)
    return [int(t) for t in prompt]


def load_samples(path: Path) -> list[dict]:
    """Rows of samples.jsonl. A torn last line (interrupted write) is dropped and cut from the file."""
    path = Path(path)
    if not path.exists():
        return []
    rows, good_bytes = [], 0
    with open(path, "rb") as f:
        lines = f.readlines()
    for i, line in enumerate(lines):
        try:
            rows.append(json.loads(line))
            good_bytes += len(line)
        except json.JSONDecodeError as e:
            if i == len(lines) - 1:
                with open(path, "r+b") as f:
                    f.truncate(good_bytes)
                break
            raise ValueError(f"{path}: line {i + 1} is not valid JSON ({e})") from e
    for i, r in enumerate(rows):
        for key in ("benchmark", "protocol", "problem_id", "sample_idx", "reward", "finish_reason"):
            if key not in r:
                raise ValueError(f"{path}: row {i + 1} lacks field {key!r}")
    return rows


def load_json(path: Path, what: str = "file") -> dict:
    path = Path(path)
    try:
        with open(path) as f:
            return json.load(f)
    except FileNotFoundError:
        raise FileNotFoundError(f"{what} not found: {path}") from None
    except (OSError, json.JSONDecodeError) as e:
        raise ValueError(f"cannot read {what} {path}: {e}") from e


def _piece_lens(tokenizer, ids: list[int], text: str) -> list[int] | None:
    pieces = tokenizer.batch_decode([[i] for i in ids], skip_special_tokens=True)
    return [len(p) for p in pieces] if "".join(pieces) == text else None


def _check_config(out_dir: Path, config: dict) -> None:
    path = out_dir / "config.json"
    if path.exists():
        old = load_json(path, "evaluation config")
        diff = [k for k in _GENERATION_KEYS if old.get(k) != config.get(k)]
        if diff:
            detail = ", ".join(f"{k}: {old.get(k)!r} -> {config.get(k)!r}" for k in diff)
            raise ValueError(
                f"{path} was written with other generation settings ({detail}); "
                "resume with the same settings or use a fresh output directory"
            )
    with open(path, "w") as f:
        json.dump(config, f, indent=2)


def evaluate(
    senior,
    junior,
    tokenizer,
    benchmarks: dict[str, list],
    out_dir: str | Path,
    suite: list[str] | tuple[str, ...] = SUITE_NAMES,
    n: int = 8,
    ks: list[int] | tuple[int, ...] = (1, 2, 4, 8),
    decoding: dict | None = None,
    seed: int = 0,
    max_new_tokens: int = 3000,
    batch_size: int = 64,
    progress: bool = True,
    *,
    score_fn: Callable[[list[str], list[str]], list[float]] | None = None,
    extract_fn: Callable[[str], str | None] | None = None,
    handoff_max_rounds: int = HANDOFF_MAX_ROUNDS,
    dose_shares: tuple[float, ...] = DEFAULT_DOSE_SHARES,
    score_batch_size: int = 8,
    num_resamples: int = 2000,
    model_paths: dict | None = None,
) -> dict:
    """Evaluate `senior` (with `junior` as partner, scorer and floor) and return results.json's dict.

    `benchmarks`: name -> problems (objects with id, answer, and `prompt` or what
    `trlvr.data.prompt_for` needs). `score_fn(completions, answers)` grades texts (default
    `trlvr.rewards.math_reward`); `extract_fn(text)` gives the parsed answer (default
    `trlvr.rewards.extract_boxed`).
    """
    from tqdm.auto import tqdm

    from trlvr.engine import TandemGenerator

    suite = list(suite)
    ks = sorted({int(k) for k in ks})
    if not ks or ks[0] < 1 or ks[-1] > n:
        raise ValueError(f"every k must be in [1, n={n}], got ks={ks}")
    if not benchmarks:
        raise ValueError("no benchmarks to evaluate")
    protocols = protocols_for(suite, dose_shares)
    decoding = {**DEFAULT_DECODING, **(decoding or {})}
    default_grader = score_fn is None
    score_fn = score_fn or _default_score_fn()
    extract_fn = extract_fn or _default_extract_fn()
    want_scores = bool({"legibility", "drift"} & set(suite))
    for name, problems in benchmarks.items():
        if not problems:
            raise ValueError(f"benchmark {name!r} has no problems")
        ids = [str(p.id) for p in problems]
        if len(set(ids)) != len(ids):
            raise ValueError(f"benchmark {name!r} has duplicate problem ids")

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    config = {
        "n": n, "ks": ks, "decoding": decoding, "seed": seed, "max_new_tokens": max_new_tokens,
        "batch_size": batch_size, "handoff_max_rounds": handoff_max_rounds, "suite": suite,
        "dose_shares": list(dose_shares), "protocols": protocols, "benchmarks": sorted(benchmarks),
        "models": model_paths or {}, "num_resamples": num_resamples,
    }  # fmt: skip
    _check_config(out_dir, config)

    samples_path = out_dir / "samples.jsonl"
    rows = load_samples(samples_path)
    done = {(r["benchmark"], r["protocol"], str(r["problem_id"]), int(r["sample_idx"])) for r in rows}
    gen = TandemGenerator(senior, junior, tokenizer)

    with open(samples_path, "a") as sink:
        for bench, problems in benchmarks.items():
            prompts = [prompt_ids_for(p, tokenizer) for p in problems]
            index_of = {str(p.id): i for i, p in enumerate(problems)}
            items = [(i, s) for i in range(len(problems)) for s in range(n)]  # fixed order -> fixed batches
            for proto in protocols:
                batches = [items[b : b + batch_size] for b in range(0, len(items), batch_size)]
                bar = tqdm(total=len(items), desc=f"{bench}/{proto}", disable=not progress, leave=False)
                for b, batch in enumerate(batches):
                    missing = [(i, s) for i, s in batch if (bench, proto, str(problems[i].id), s) not in done]
                    if not missing:
                        bar.update(len(batch))
                        continue
                    seed_b = batch_seed(seed, bench, proto, b)
                    out = run_protocol(
                        gen, proto, [prompts[i] for i, _ in batch], max_new_tokens=max_new_tokens,
                        decoding=decoding, seed=seed_b, handoff_max_rounds=handoff_max_rounds,
                    )  # fmt: skip
                    # Rows (and scores) for the whole batch, so a resumed batch is scored with the
                    # same batch-mates and padding as the first time; only missing rows are written.
                    new = _rows_for_batch(
                        out, batch, problems, prompts, bench, proto, seed_b, tokenizer, score_fn, extract_fn
                    )
                    if proto == "solo" and want_scores:
                        new_prompts = [prompts[index_of[r["problem_id"]]] for r in new]
                        _attach_scores(senior, junior, new, new_prompts, tokenizer, score_batch_size)
                    missing = set(missing)
                    new = [r for r, item in zip(new, batch, strict=True) if item in missing]
                    for r in new:
                        sink.write(json.dumps(r) + "\n")
                        done.add((bench, proto, str(r["problem_id"]), r["sample_idx"]))
                    sink.flush()
                    os.fsync(sink.fileno())
                    rows.extend(new)
                    bar.update(len(batch))
                bar.close()

    if want_scores:
        _rescore_missing(senior, junior, rows, benchmarks, tokenizer, score_batch_size, samples_path)
    extra = {}
    if default_grader:  # timeouts and failures of the math grader, so a wave of them is seen
        from trlvr.rewards import reward_stats

        extra["grading"] = reward_stats()["total"]
    return write_results(out_dir, rows, config, num_resamples=num_resamples, extra=extra)


def _rows_for_batch(out, batch, problems, prompts, bench, proto, seed_b, tokenizer, score_fn, extract_fn):
    keep = list(range(len(batch)))
    ids_all = out.completion_ids
    texts = tokenizer.batch_decode([ids_all[j] for j in keep], skip_special_tokens=True)
    answers = [str(problems[batch[j][0]].answer) for j in keep]
    rewards = score_fn(texts, answers)
    if len(rewards) != len(texts):
        raise ValueError(f"score_fn returned {len(rewards)} rewards for {len(texts)} completions")
    authors, finish = out.authors, out.finish_reasons
    share, switches = out.senior_share.tolist(), out.num_switches
    jlp = out.junior_logprobs if proto not in ("solo", "junior") else None
    rows = []
    for j, text, reward, gold in zip(keep, texts, rewards, answers, strict=True):
        i, s = batch[j]
        ids = ids_all[j]
        row = {
            "benchmark": bench, "problem_id": str(problems[i].id), "protocol": proto, "sample_idx": s,
            "seed": seed_b, "answer": gold, "text": text, "token_ids": ids,
            "authors": "".join(map(str, authors[j])), "num_tokens": len(ids),
            "senior_share": share[j], "num_switches": switches[j],
            "reward": None if reward is None else float(reward), "parsed_answer": extract_fn(text),
            "finish_reason": finish[j], "piece_lens": _piece_lens(tokenizer, ids, text),
        }  # fmt: skip
        if row["reward"] is None:
            row["reward"] = 0.0  # an ungradable completion counts as wrong
        if jlp is not None:
            row["junior_logprobs"] = [round(x, 3) for x in jlp[j]]
        if s == 0:
            row["prompt"] = tokenizer.decode(prompts[i], skip_special_tokens=False)
        rows.append(row)
    return rows


def _attach_scores(
    senior, junior, rows: list[dict], prompts: list[list[int]], tokenizer, batch_size: int
) -> None:
    """Add legibility, drift and per-token junior log-probs to solo rows (teacher-forced)."""
    if not rows:
        return
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    scores = score_completions(
        senior, junior, prompts, [r["token_ids"] for r in rows], pad_token_id=pad, batch_size=batch_size
    )
    for r, sc in zip(rows, scores, strict=True):
        r["legibility"] = sc.junior_ce
        r["drift"] = sc.mean_kl
        r["junior_logprobs"] = [round(x, 3) for x in sc.junior_logprobs]


def _rescore_missing(senior, junior, rows, benchmarks, tokenizer, batch_size, samples_path: Path) -> None:
    """Solo rows written by a run without legibility/drift get scored now; the file is rewritten."""
    todo = [
        r
        for r in rows
        if r["protocol"] == "solo" and r.get("legibility") is None and r["benchmark"] in benchmarks
    ]
    if not todo:
        return
    prompt_of = {
        (b, str(p.id)): prompt_ids_for(p, tokenizer) for b, probs in benchmarks.items() for p in probs
    }
    prompts = [prompt_of[(r["benchmark"], str(r["problem_id"]))] for r in todo]
    _attach_scores(senior, junior, todo, prompts, tokenizer, batch_size)
    tmp = samples_path.with_suffix(".jsonl.tmp")
    with open(tmp, "w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")
    os.replace(tmp, samples_path)


def write_results(
    out_dir: Path, rows: list[dict], config: dict, num_resamples: int = 2000, extra: dict | None = None
) -> dict:
    """Recompute per-problem metrics and results.json from sample rows."""
    out_dir = Path(out_dir)
    benches = set(config.get("benchmarks") or {r["benchmark"] for r in rows})
    rows = [r for r in rows if r["benchmark"] in benches]
    table = problem_table(rows, config["ks"])
    with open(out_dir / "per_problem.json", "w") as f:
        json.dump(table, f)
    summary = summarize(table, num_resamples=num_resamples, seed=config.get("seed", 0))
    results = {"version": RESULTS_VERSION, "config": config, **summary, **(extra or {})}
    tmp = out_dir / "results.json.tmp"
    with open(tmp, "w") as f:
        json.dump(results, f, indent=2)
    os.replace(tmp, out_dir / "results.json")
    return results

"""`evaluate`: run the evaluation suite into a directory, resume it, write results.json.

Files in `out_dir`: see `trlvr.eval.store` (samples.jsonl, fingerprint.json, config.json,
per_problem.json, results.json, the lock).

Order of a run: validate everything (decoding, suite, problems, prompt lengths) -> take the
directory's lock -> compare the stored fingerprint (refuse on any difference, unless `fresh`)
-> write fingerprint.json and config.json -> generate the planned batches that are missing
(`trlvr.eval.plan`), appending each one's rows -> keep only this plan's rows -> results.json.
A start that fails before any sample is written leaves no files behind.

Sample row fields: benchmark, problem_id (content key, `trlvr.data.problem_key`), source_id (the
row's own id), protocol, sample_idx, batch (the batch signature), seed, answer, text, token_ids,
authors ("1" senior / "0" junior per token), num_tokens, senior_share, num_switches, reward,
grading (ok / no_box / timeout / failure; null for a caller's score_fn), parsed_answer, finish_reason,
piece_lens (chars of `text` per token; null when single-token decoding does not reproduce the text),
junior_logprobs (3 dp; tandem rows, and solo rows when scored, every token), legibility / drift (solo rows
when scored: the sample's mean junior CE and KL over its text, the final EOS left out unless `include_eos`),
legibility_bpb (solo rows when scored: the junior's bits per UTF-8 byte of the text), and prompt (sample 0
only).

Text pairs (`junior_tokenizer` given: the two models have different vocabularies,
`trlvr.engine.text_pair`): every protocol runs through a text `Pair`; rows hold the senior's
tokenization of the shared text (authors "0" on the junior's text re-encoded) and
senior_char_share; legibility is the junior's CE per token of ITS OWN tokenization of the text and
legibility_bpb its bits per byte (the number comparable across pairs); drift needs one vocabulary
and is None (results.json's `undefined` says why); junior_logprobs are not recorded.
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Callable
from pathlib import Path

from tqdm.auto import tqdm

from trlvr import rundir
from trlvr.data import encode_prompt, prompt_for
from trlvr.engine import capabilities
from trlvr.engine.backends import backend
from trlvr.engine.text_pair import text_nll
from trlvr.errors import UserError
from trlvr.eval import defaults as D
from trlvr.eval import fingerprint as fpr
from trlvr.eval.aggregate import problem_table, summarize, with_graders
from trlvr.eval.grading import (
    BY_GRADER,
    by_grader,
    grade,
    grade_others,
    grader_tables,
    grading_counts,
)
from trlvr.eval.partners import SCORED, Partners
from trlvr.eval.plan import plan_batches
from trlvr.eval.prepare import Bench, Prepared, prepare
from trlvr.eval.protocols import (
    answer_in_text,
    cut,
    eval_row_key,
    loophole_report,
    parse_protocol,
    run_protocol,
    trace_body,
)
from trlvr.eval.scoring import score_completions, text_means
from trlvr.eval.spec import BUDGET_RULE, EvalSpec
from trlvr.eval.store import CONFIG, FINGERPRINT, PER_PROBLEM, RESULTS, EvalDir, read_json, write_json
from trlvr.provenance import machine
from trlvr.ranks import Ranks
from trlvr.rewards import extract_boxed
from trlvr.team import is_text

# what a text pair cannot define, and why (results.json's `undefined`): the capability check's own words
UNDEFINED_FOR_TEXT_PAIRS = {m: why for m, (_, why) in capabilities.UNDEFINED_FOR_TEXT_PAIRS.items()}
RESULTS_VERSION = 3  # 3: per-sample `grading`; grading_stats counted from this run's samples
__all__ = ["BUDGET_RULE", "Partners", "evaluate", "write_results"]


def machine_record(model) -> dict:
    """Versions, device, dtype and threads this evaluation ran with (`trlvr.provenance.machine`);
    without a model in hand (nothing generated yet), the versions and threads."""
    if model is None:
        return machine()
    p = next(model.parameters(), None)
    return machine(
        dtype=str(p.dtype).removeprefix("torch.") if p is not None else None,
        device=str(p.device) if p is not None else None,
    )


# what an evaluation's folder may hold (--fresh sets aside an earlier evaluation, or a seed group of them)
_KINDS = (rundir.EVALUATION, rundir.EVALUATION_SEEDS)


def evaluate(
    partners: Partners,
    benchmarks: dict[str, list],
    spec: EvalSpec,
    out_dir: str | Path,
    *,
    score_fn: Callable[[list[str], list[str]], list[float]] | None = None,
    extract_fn: Callable[[str], str | None] | None = None,
    progress: bool = True,
    fresh: bool = False,
    refuse_lossy: bool = False,
    check_only: bool = False,
    skipped_rows: dict[str, list[dict]] | None = None,
) -> dict | None:
    """Evaluate `partners` (the senior, with its junior as partner, scorer and floor) on `benchmarks`
    under `spec` into `out_dir`; return results.json's dict.

    `benchmarks`: name -> problems (`trlvr.data.Problem`s or objects with id, problem, answer and
    optionally prompt). `score_fn(completions, answers)` grades texts (default: `spec.grading` with
    trlvr's math grader); `extract_fn(text)` gives the parsed answer (default
    `trlvr.rewards.extract_boxed`). `spec.context_length` "auto" takes `partners.context_length`
    (None = unknown: a flat budget of `max_new_tokens`); the budget of a problem is then
    min(max_new_tokens, context - prompt - 8). `spec.max_prompt_tokens` "auto" = the longest prompt
    that leaves room to generate. `fresh` sets the directory's earlier work aside (replaced-<time>/). Problems
    whose prompt the tokenizer cannot spell (decode(encode(prompt)) differs) are listed in config.json's
    `lossy_prompts` and warned about; `refuse_lossy` makes them an error. `check_only` (`trlvr eval
    --dry-run`): every check up to the folder's samples (`check_samples`), then None; nothing is written.
    `spec.graders`: the first grades each row's `reward`; each other one is graded from the same texts into
    the row's `grader_rewards` and results.json's `by_grader` (one generation, several graders; a caller's own
    `score_fn` takes no other). `skipped_rows`: {benchmark: [{file, row, reason}]}, the unusable rows left out
    (`trlvr eval --skip-bad-rows`), listed in config.json and results.json.
    """
    prep = prepare(
        partners, benchmarks, spec, score_fn=score_fn, refuse_lossy=refuse_lossy, skipped_rows=skipped_rows
    )
    fingerprint, config = prep.fingerprint, prep.config
    if fresh:
        # the folder's kind before anything (its lock file too) is written or set aside: a refusal moves
        # nothing
        rundir.prepare_output(out_dir, _KINDS, flag="--out")
    if check_only:  # the dry run: the folder's samples checked as the run checks them, nothing written
        check_samples(EvalDir(out_dir), fingerprint, fresh)
        return None
    ranks = Ranks.current().session("eval")
    run = _Run(partners, prep, extract_fn or _default_extract_fn(), progress and ranks.writer, ranks)
    if not ranks.writer:  # another process of a launch: generates its share of the batches, writes nothing
        return run.serve()
    store = EvalDir(out_dir)
    try:
        if not fresh and (done := _finished(store, fingerprint, config, run)) is not None:
            run.announce(("done", done))
            return done  # nothing to write: no lock taken, no file touched (a read-only copy reports too)
        results = _evaluate_locked(run, store, fingerprint, config, fresh)
    except BaseException as e:
        run.announce_failure(e)
        raise
    run.announce(("results", results), key="results")
    return results


def _evaluate_locked(run: _Run, store: EvalDir, fingerprint: dict, config: dict, fresh: bool) -> dict:
    """`evaluate`'s writing half, in the one process that writes (rank 0): under the lock, open the
    directory, generate what the plan lacks, write results.json."""
    spec, tokenizer, pairing, suite = run.spec, run.tokenizer, run.partners.pairing, list(run.spec.suite)
    created = not store.path.exists()
    try:
        with store.lock():
            rows, fingerprint = _open(store, fingerprint, config, fresh)
            try:
                rows = run.generate(store, rows)
                model = run.pair.senior if run.pair is not None else (run._scorers or (None,))[0]
                if model is not None:  # the machine it ran on (rank 0's, and how many processes generated)
                    config["machine"] = {**machine_record(model), "processes": run.ranks.size}
                    store.write(CONFIG, config)
            except BaseException:
                if not store.has_samples():  # nothing generated: leave no metadata behind
                    for name in (FINGERPRINT, CONFIG):
                        store.file(name).unlink(missing_ok=True)
                raise
            # text pairs: the word schedule redraws before a word start there, and the detector
            # replays lockstep's (after) on one vocabulary, so it is not computed
            loophole = loophole_report(rows, tokenizer) if not is_text(pairing) else {}
            extra = {
                "fingerprint": {k: v for k, v in fingerprint.items() if k != "problems"},
                "grading_stats": grading_counts(rows),
                "loophole": loophole,
            }
            if len(spec.graders) > 1:
                extra[BY_GRADER] = by_grader(
                    rows, spec.graders[1:], config["ks"], spec.num_resamples, spec.seed
                )
            if is_text(pairing):
                extra["undefined"] = {
                    m: why
                    for m, (entry, why) in capabilities.UNDEFINED_FOR_TEXT_PAIRS.items()
                    if entry in suite
                }
            results = write_results(store.path, rows, config, num_resamples=spec.num_resamples, extra=extra)
            store.seal()
            if why := store.problem():  # the postcondition: every file a reader opens is there, whole
                raise UserError(
                    f"{store.path}: the evaluation finished incomplete ({why}); "
                    "rerun the same command to write it again"
                )
            return results
    except BaseException:
        if created and not store.has_samples():
            store.remove_lock_files()
            if store.path.is_dir() and not any(store.path.iterdir()):
                store.path.rmdir()
        raise


def _failure(e: BaseException) -> str:
    """One line for another process: what failed here."""
    return f"{type(e).__name__}: {' '.join(str(e).split())[:300]}"


def _row_key(r: dict) -> tuple:
    return (r["benchmark"], r["protocol"], str(r["problem_id"]), int(r["sample_idx"]), r.get("batch"))


def _made_again(todo: list, have: dict) -> dict[str, int]:
    """{"benchmark/protocol": count} of the planned samples in `todo` that are finished in another batch
    and so are made again: their batch changed (the partial last batch under a larger --limit, every
    batch under another --n). A sample's random numbers are its own (`eval_row_key`), but its arithmetic
    is not: padding, kernel shapes and compaction follow its batch-mates, so on a GPU (bf16 above all) a
    token can flip. Samples are reused only in the batch they were made in, so a folder equals a fresh run."""
    made = {k[:4] for k in have}  # (benchmark, protocol, problem, sample) of every finished row
    counts: dict[str, int] = {}
    for _, batch, keys in todo:
        again = sum(k not in have and k[:4] in made for k in keys)
        if again:
            where = f"{batch.benchmark}/{batch.protocol}"
            counts[where] = counts.get(where, 0) + again
    return counts


def _finished(store: EvalDir, fingerprint: dict, config: dict, run: _Run) -> dict | None:
    """results.json of a directory this evaluation would not change, read without the lock: the same
    fingerprint and settings (the machine aside), exactly the planned rows, each scored, a whole last
    line and results of this version. None when anything would be written."""

    def as_stored(obj: dict) -> dict:
        return json.loads(json.dumps(obj, default=str))

    def settings(c: dict) -> dict:
        return {k: v for k, v in c.items() if k != "machine"}

    names = (FINGERPRINT, CONFIG, RESULTS)
    if store.problem(
        deep=True
    ):  # a reader's file is gone, torn or changed since: the locked path says or rewrites
        return None
    try:
        old_fp, old_config, results = (read_json(store.file(n)) for n in names)
        want = settings(as_stored(config))
        if (
            old_fp != as_stored(fingerprint)
            or settings(old_config) != want
            or settings(results["config"]) != want
        ):
            return None
        if results.get("version") != RESULTS_VERSION or not store.samples.read_bytes().endswith(b"\n"):
            return None
        rows = store.rows()
    except (UserError, OSError, KeyError, TypeError, ValueError):  # unreadable: the locked path says why
        return None
    planned = {k for _, _, keys in run.planned() for k in keys}
    keys = [_row_key(r) for r in rows]
    if (
        len(keys) != len(planned)
        or set(keys) != planned
        or results.get("grading_stats", {}).get("graded") != len(rows)
    ):
        return None
    if run.want_scores and any(r["protocol"] == "solo" and "legibility" not in r for r in rows):
        return None
    return results


def check_samples(store: EvalDir, fingerprint: dict, fresh: bool) -> dict | None:
    """The folder's samples may be reused by an evaluation of `fingerprint` (refused in one line when they
    were made under other settings, `trlvr.eval.fingerprint.check_resumable`); returns their fingerprint
    (None: no samples, or `fresh`: they are set aside). What the run checks under its lock and --dry-run
    checks."""
    if fresh or not store.has_samples():
        return None
    path = store.file(FINGERPRINT)
    old = read_json(path, "fingerprint") if path.exists() else None
    fpr.check_resumable(store.path, old, fingerprint)
    return old


def _open(store: EvalDir, fingerprint: dict, config: dict, fresh: bool) -> tuple[list[dict], dict]:
    """Under the lock: check that the directory's samples may be reused, repair, write the metadata;
    return the rows and the directory's fingerprint from now on (`trlvr.eval.fingerprint.with_partner`)."""
    if fresh:  # every check passed: start over through the one way a folder is readied (`trlvr.rundir`)
        rundir.prepare_output(
            store.path, _KINDS, flag="--out", start_over=True, set_aside_with=lambda _: store.clear()
        )
    if store.has_samples():
        store.check_samples_unchanged()  # samples edited after the seal are never reused
        old = check_samples(store, fingerprint, fresh=False)
        fingerprint = fpr.with_partner(old, fingerprint)
        store.repair_tail()
    store.write(FINGERPRINT, fingerprint)
    store.write(CONFIG, config)
    return store.rows(), fingerprint


def _default_extract_fn():
    return extract_boxed


def _piece_lens(tokenizer, ids: list[int], text: str) -> list[int] | None:
    pieces = tokenizer.batch_decode([[i] for i in ids], skip_special_tokens=True)
    return [len(p) for p in pieces] if "".join(pieces) == text else None


# the models each engine holds, in the order evaluation runs them (backend vllm: one engine per set)
ENGINE_STACKS = {"pair": ("senior", "junior"), "solo": ("senior",), "junior": ("junior",)}


class _Run:
    """The generation half of `evaluate`: planned batches in, rows out, through one Pair."""

    def __init__(
        self, partners: Partners, prep: Prepared, extract_fn, progress: bool, ranks: Ranks | None = None
    ):
        # several processes (a launch of N): rank 0 plans, writes and generates its share; the others
        # generate theirs (`serve`) and hand the rows over through `ranks`
        self.ranks = ranks or Ranks()
        self._told: set[str] = set()  # what rank 0 has announced (so a failure reaches whoever still waits)
        self.partners, self.tokenizer = partners, partners.tokenizer
        self.junior_tokenizer = partners.junior_tokenizer
        self.benches, self.protocols, self.spec = prep.benches, prep.protocols, prep.spec
        self.decodings, self.score_fn = prep.decodings, prep.score_fn
        self.extract_fn, self.progress = extract_fn, progress
        self.want_scores = bool(SCORED & set(self.spec.suite))
        self.junior_prompts: dict[tuple, list[int]] = {}  # text pairs: senior prompt ids -> the junior's
        self.pair = None  # built on first use: a resumed evaluation with nothing to do loads no model
        self.pair_stacks: tuple[str, ...] = ()  # the models `pair` holds
        # (senior, junior) HF modules that score, when the pair holds none (backend vllm)
        self._scorers = None
        # an engine without HF models generates everything first and is closed; then scoring loads them
        self.score_later = partners.scorers is not None

    def _scoring(self):
        if not self.score_later:
            pair = self._pair()
            return pair.senior, pair.junior
        if self._scorers is None:
            self.close()  # the engine's memory is free before the scorers load
            self._scorers = self.partners.scorers()
        return self._scorers

    @property
    def senior(self):  # the HF modules that score (teacher-forced legibility and drift)
        return self._scoring()[0]

    @property
    def junior(self):
        return self._scoring()[1]

    def close(self) -> None:
        """Shut the pair's engine down (backend vllm: its GPU memory is free for the next one)."""
        if self.pair is not None and hasattr(self.pair, "close"):
            self.pair.close()
        self.pair = None

    def planned(self):
        """(bench, batch, the batch's row keys) of every planned batch, in plan order (`trlvr.eval.plan`)."""
        spec = self.spec
        for bench, b in self.benches.items():
            for proto in self.protocols:
                n = parse_protocol(proto).samples(spec.n)  # handoff-paper: its own n
                for batch in plan_batches(bench, proto, b.keys, n, spec.batch_size, spec.seed):
                    yield b, batch, [(bench, proto, b.keys[i], s, batch.signature) for i, s in batch.items]

    def stacks(self, protocol: str) -> tuple[str, ...]:
        """The models an engine needs for `protocol`: one engine per set (backend vllm: a protocol that
        needs one model runs one stack); an HF pair runs every protocol and skips an idle model itself."""
        if not backend(self.partners.backend).own_engine:
            return ENGINE_STACKS["pair"]
        if (
            parse_protocol(protocol).entry == "prefix"
        ):  # the junior alone, after solo (its engine comes later)
            return ENGINE_STACKS["junior"]
        return ENGINE_STACKS.get(protocol, ENGINE_STACKS["pair"])

    def generate(self, store: EvalDir, old_rows: list[dict]) -> list[dict]:
        """Generate every planned batch that lacks a row; return this plan's rows in plan order. Batches
        run grouped by the engine they need (each engine built once, the last closed before the next).
        Finished rows of another plan (another --limit, --n or --suite) are never dropped: they move to
        samples-other-plans.jsonl, and a plan that asks for them again takes them back."""
        other = store.other_rows()
        have = {_row_key(r): r for r in other}
        have.update((_row_key(r), r) for r in old_rows)
        in_file = [_row_key(r) for r in old_rows]  # the keys samples.jsonl holds, in order
        total = sum(len(b.keys) for b in self.benches.values()) * sum(
            parse_protocol(p).samples(self.spec.n) for p in self.protocols
        )
        bar = tqdm(total=total, desc="eval", disable=not self.progress, leave=False)
        plan = list(self.planned())
        order = list(ENGINE_STACKS.values())
        todo = sorted(
            (j for j, t in enumerate(plan) if any(k not in have for k in t[2])),
            key=lambda j: order.index(self.stacks(plan[j][1].protocol)),
        )  # stable: plan order within an engine
        self.announce(("todo", todo))
        todo = [plan[j] for j in todo]
        again = _made_again(todo, have)  # said once the run is done (a refusal or Ctrl-C stays one line)
        bar.update(total - sum(len(batch.items) for _, batch, _ in todo))
        self.solo_rows = {
            (r["benchmark"], str(r["problem_id"]), int(r["sample_idx"])): r
            for r in have.values()
            if r["protocol"] == "solo"
        }  # prefix-K continues these
        for i, (b, batch, keys) in enumerate(todo):
            # The whole batch, so a resumed batch has the same batch-mates (and the same
            # scoring padding) as the first time; only its missing rows are written.
            if self.ranks.owner(i) == self.ranks.rank:
                new = self._batch_rows(self._pair(self.stacks(batch.protocol)), b, batch)
            else:  # another process generated it (its share: every size-th batch of todo)
                new = self.ranks.take(f"batch/{i}")
            new = [r for r, k in zip(new, keys, strict=True) if k not in have]
            self.solo_rows.update(
                ((r["benchmark"], str(r["problem_id"]), int(r["sample_idx"])), r)
                for r in new
                if r["protocol"] == "solo"
            )
            store.append(new)
            in_file += [_row_key(r) for r in new]
            have.update((_row_key(r), r) for r in new)
            bar.set_postfix_str(f"{batch.benchmark}/{batch.protocol}", refresh=False)
            bar.update(len(batch.items))
        plan_rows = [have[k] for _, _, keys in plan for k in keys]
        bar.close()
        if self.score_later:
            self.close()  # generation is done: the engine goes before the scorers load
        rescored = self._rescore_missing(plan_rows) if self.want_scores else False
        rescored = grade_others(plan_rows, self.spec.graders[1:], self.spec.grading) or rescored
        planned = {_row_key(r) for r in plan_rows}
        others = [r for k, r in have.items() if k not in planned]
        if rescored or len(in_file) != len(planned) or set(in_file) != planned or len(others) != len(other):
            store.rewrite(
                plan_rows, others
            )  # samples.jsonl: this plan's rows (with new scores); the rest aside
            moved = sum(_row_key(r) not in planned for r in old_rows)
            if moved:
                print(
                    f"kept {moved} finished sample(s) of another plan (another --limit, --n or --suite) in "
                    f"{store.other_samples}; a run that plans them again takes them back",
                    file=sys.stderr,
                )
        if again:
            each = ", ".join(f"{w} {c}" for w, c in again.items())
            print(
                f"generated again {sum(again.values())} finished sample(s) ({each}): their batch has other "
                "batch-mates in this plan (another --limit or --n), and a sample's arithmetic follows its "
                "batch (padding, kernel shapes), so samples are reused only in their own batch and this "
                f"folder equals a fresh run; the earlier ones stay in {store.other_samples.name}",
                file=sys.stderr,
            )
        return plan_rows

    def serve(self) -> dict:
        """A process other than rank 0: generate this rank's share of the batches rank 0 planned (every
        size-th one of its todo list, in its order), hand each batch's rows over, close the engine, and
        return the results rank 0 wrote."""
        kind, value = self.ranks.hear("start")
        if kind == "done":
            return value
        plan = list(self.planned())
        todo = [plan[j] for j in value]
        try:
            for i, (b, batch, _) in self.ranks.share(list(enumerate(todo))):
                self.ranks.put(
                    f"batch/{i}", self._batch_rows(self._pair(self.stacks(batch.protocol)), b, batch)
                )
        except BaseException as e:
            self.ranks.fail(f"batch/{i}", _failure(e))
            raise
        finally:
            self.close()
        return self.ranks.hear("results")[1]

    def announce(self, message: tuple, key: str = "start") -> None:
        """Rank 0 tells the other processes (nothing to do for one process)."""
        if self.ranks.size > 1 and key not in self._told:
            self._told.add(key)
            self.ranks.announce(key, message)

    def announce_failure(self, e: BaseException) -> None:
        """Rank 0 failed: every process still waiting for it hears why, instead of waiting."""
        if self.ranks.size > 1:
            for key in ("start", "results"):
                if key not in self._told:
                    self._told.add(key)
                    self.ranks.fail(key, _failure(e), everyone=True)

    def _pair(self, stacks: tuple[str, ...] = ("senior", "junior")):
        """The Pair for `stacks`, built once per set (`Partners.build`; the previous one is closed first);
        a text pair's junior prompts are each problem's rendered prompt encoded by the junior's
        tokenizer (as training's)."""
        if self.pair is not None and self.pair_stacks != stacks:
            self.close()
        if self.pair is None:
            if self.junior_tokenizer is not None:
                self._fill_junior_prompts()
                self.pair = self.partners.build(junior_prompts=lambda ids: self.junior_prompts[tuple(ids)])
            elif backend(self.partners.backend).needs_context_length:
                self.pair = self.partners.build(max_model_len=self.longest(), stacks=stacks)
            else:
                self.pair = self.partners.build()
            self.pair_stacks = stacks
        return self.pair

    def longest(self) -> int:
        """The longest sequence this plan writes: a prompt plus its budget (an engine's max_model_len)."""
        return max(
            len(p) + n for b in self.benches.values() for p, n in zip(b.prompts, b.budgets, strict=True)
        )

    def _fill_junior_prompts(self) -> None:
        for b in self.benches.values():
            for problem, ids in zip(b.problems, b.prompts, strict=True):
                self.junior_prompts[tuple(ids)] = encode_prompt(
                    prompt_for(problem, self.tokenizer, self.spec.prompt_template), self.junior_tokenizer
                )

    def _prefixes(self, b: Bench, batch) -> list[list[int]] | None:
        """prefix-K: the first K% of the solo trace of each item's (problem, sample); None for others."""
        proto = parse_protocol(batch.protocol)
        if proto.entry != "prefix":
            return None
        if self.junior_tokenizer is not None:
            raise UserError(
                f"{batch.protocol}: the prefix protocols hand the junior the senior's tokens, so they "
                "need one vocabulary (lockstep); this pair is a text pair"
            )
        out = []
        for i, s in batch.items:
            solo = getattr(self, "solo_rows", {}).get((batch.benchmark, str(b.keys[i]), int(s)))
            if solo is None:  # solo runs before prefix in every plan (protocols_for); a served rank has none
                raise UserError(
                    f"{batch.protocol}: no solo sample of problem {b.keys[i]} sample {s} to continue "
                    "(the prefix protocols run in one process, after solo)"
                )
            out.append(cut(trace_body(solo), proto.prefix_percent))
        return out

    def _batch_rows(self, pair, b: Bench, batch) -> list[dict]:
        problems, tok, spec = b.problems, self.tokenizer, self.spec
        prefixes = self._prefixes(b, batch)
        given = prefixes or [[] for _ in batch.items]
        # prefix-K draws with the junior protocol's row keys: prefix-0 is the junior's samples, and every K
        # shares the junior's random numbers (paired across K)
        key_protocol = "junior" if prefixes is not None else batch.protocol
        budgets = [b.budgets[i] - len(p) for (i, _), p in zip(batch.items, given, strict=True)]
        if max(budgets) > 0:
            out = run_protocol(
                pair,
                batch.protocol,
                [b.prompts[i] + p for (i, _), p in zip(batch.items, given, strict=True)],
                max_new_tokens=budgets,
                decoding=self.decodings[batch.protocol],
                seed=spec.seed,
                handoff_max_rounds=spec.handoff_max_rounds,
                row_keys=[eval_row_key(batch.benchmark, b.keys[i], s, key_protocol) for i, s in batch.items],
            )
            ids_all, authors, finish = out.completion_ids, out.authors, out.finish_reasons
            share, switches = out.senior_share.tolist(), out.num_switches
        else:  # every prefix fills its budget: nothing left to write
            out, ids_all, authors = None, [[] for _ in batch.items], [[] for _ in batch.items]
            finish, share, switches = ["length"] * len(budgets), [0.0] * len(budgets), [0] * len(budgets)
        if prefixes is not None:  # the team text: the senior's prefix, then the junior's continuation
            ids_all = [p + list(c) for p, c in zip(prefixes, ids_all, strict=True)]
            authors = [[1] * len(p) + list(a) for p, a in zip(prefixes, authors, strict=True)]
            share = [len(p) / max(1, len(ids)) for p, ids in zip(prefixes, ids_all, strict=True)]
            switches = [int(bool(p) and len(ids) > len(p)) for p, ids in zip(prefixes, ids_all, strict=True)]
        texts = tok.batch_decode(ids_all, skip_special_tokens=True)
        answers = [str(problems[i].answer) for i, _ in batch.items]
        rewards, outcomes = grade(self.score_fn, texts, answers)
        jlp = (
            out.junior_logprobs
            if out is not None and batch.protocol not in ("solo", "junior") and prefixes is None
            else None
        )
        rows = []
        for j, ((i, s), text, reward, gold, outcome) in enumerate(
            zip(batch.items, texts, rewards, answers, outcomes, strict=True)
        ):
            ids = ids_all[j]
            row = {
                "benchmark": batch.benchmark,
                "problem_id": b.keys[i],
                "source_id": str(problems[i].id),
                "protocol": batch.protocol,
                "sample_idx": s,
                "batch": batch.signature,
                "seed": spec.seed,
                "answer": gold,
                "text": text,
                "token_ids": ids,
                "authors": "".join(map(str, authors[j])),
                "num_tokens": len(ids),
                "senior_share": share[j],
                "num_switches": switches[j],
                "reward": 0.0
                if reward is None
                else float(reward),  # an ungradable completion counts as wrong
                "grading": outcome,
                "parsed_answer": self.extract_fn(text),
                "finish_reason": finish[j],
                "piece_lens": _piece_lens(tok, ids, text),
            }
            if jlp is not None:
                row["junior_logprobs"] = [round(x, 3) for x in jlp[j]]
            if prefixes is not None:
                row["prefix_tokens"] = len(prefixes[j])
                row["answer_in_prefix"] = answer_in_text(
                    tok.decode(prefixes[j], skip_special_tokens=True), gold
                )
            if self.junior_tokenizer is not None:
                row["senior_char_share"] = round(pair.last.senior_char_share[j], 4)
            if s == 0:
                row["prompt"] = tok.decode(b.prompts[i], skip_special_tokens=False)
            rows.append(row)
        if batch.protocol == "solo" and self.want_scores and not self.score_later:
            self._attach_scores(rows, [b.prompts[i] for i, _ in batch.items])
        return rows

    def _attach_scores(self, rows: list[dict], prompts: list[list[int]]) -> None:
        """Add legibility, drift and per-token junior log-probs to solo rows (teacher-forced)."""
        if not rows:
            return
        if self.junior_tokenizer is not None:
            return self._attach_text_scores(rows, prompts)
        tok = self.tokenizer
        pad = tok.pad_token_id if tok.pad_token_id is not None else 0
        scores = score_completions(
            self.senior,
            self.junior,
            prompts,
            [r["token_ids"] for r in rows],
            pad_token_id=pad,
            batch_size=self.spec.score_batch_size,
            n_ids=len(tok),
        )
        for r, sc in zip(rows, scores, strict=True):
            means = text_means(
                sc, ends_with_eos=r["finish_reason"] == "eos", include_eos=self.spec.include_eos
            )
            r["legibility"], r["drift"] = means if means else (None, None)
            r["junior_logprobs"] = [round(x, 3) for x in sc.junior_logprobs]
            m = len(sc.junior_logprobs) - (
                1 if r["finish_reason"] == "eos" and not self.spec.include_eos else 0
            )
            n_bytes = len(r["text"].encode("utf-8"))
            r["legibility_bpb"] = (
                -sum(sc.junior_logprobs[:m]) / math.log(2) / n_bytes if means and n_bytes else None
            )

    def _attach_text_scores(self, rows: list[dict], prompts: list[list[int]]) -> None:
        """A text pair's solo rows: the junior reads the text in its own tokenization (`text_nll`);
        legibility = CE per junior token, legibility_bpb = bits per byte; drift is not defined (None)."""
        if not self.junior_prompts:
            self._fill_junior_prompts()  # a resume that only rescores
        scored = text_nll(
            self.junior,
            self.junior_tokenizer,
            [self.junior_prompts[tuple(p)] for p in prompts],
            [r["text"] for r in rows],
            batch_size=self.spec.score_batch_size,
        )
        for r, (nll, n_bytes, n_tokens) in zip(rows, scored, strict=True):
            r["legibility"] = nll / n_tokens if n_tokens else None
            r["legibility_bpb"] = nll / math.log(2) / n_bytes if n_tokens and n_bytes else None
            r["drift"] = None

    def _rescore_missing(self, rows: list[dict]) -> bool:
        """Solo rows written by a run without legibility/drift get scored now (True when any was)."""
        todo = [r for r in rows if r["protocol"] == "solo" and "legibility" not in r]
        if not todo:
            return False
        prompt_of = {
            (bench, k): p for bench, b in self.benches.items() for k, p in zip(b.keys, b.prompts, strict=True)
        }
        self._attach_scores(todo, [prompt_of[(r["benchmark"], r["problem_id"])] for r in todo])
        return True


def write_results(
    out_dir: Path,
    rows: list[dict],
    config: dict,
    num_resamples: int = D.NUM_RESAMPLES,
    extra: dict | None = None,
) -> dict:
    """Per-problem metrics (per_problem.json) and results.json from sample rows. per_problem.json also holds
    each grader after the first (`config["graders"]`), its metrics named `graded` ("solo/pass@1 (grader
    authors)"), so `trlvr compare` and seed groups pair them too; results.json's metrics are the first
    grader's."""
    out_dir = Path(out_dir)
    table = problem_table(rows, config["ks"])
    others = grader_tables(rows, (config.get("graders") or [])[1:], config["ks"])
    write_json(out_dir / PER_PROBLEM, with_graders(table, others))
    summary = summarize(table, num_resamples=num_resamples, seed=config.get("seed", 0))
    results = {"version": RESULTS_VERSION, "config": config, **summary, **(extra or {})}
    write_json(out_dir / RESULTS, results)
    return results

"""Results you can trust (issue 11 items 1, 8, 9, 11, 14, 16; issue 12 items 5, 6): an evaluation
directory is never reused under other settings, extends or shrinks exactly, is written by one run
at a time, is never changed by a reader, and a failed start leaves nothing behind."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest
from helpers import Problem, evaluate_models, last_word, parity_reward, tiny_model, toy_problems

from trlvr import artifacts
from trlvr.data.schema import problem_key
from trlvr.engine import LockstepPair
from trlvr.errors import UserError
from trlvr.eval.protocols import cut_to_budgets, run_protocol
from trlvr.eval.report import build_report
from trlvr.eval.scoring import TokenScores, score_completions, text_means
from trlvr.eval.store import EvalDir, read_samples

pytestmark = pytest.mark.parametrize("arch", ["qwen3"], indirect=True)


def run(models, tokenizer, out, problems, **kw):
    senior, junior = kw.pop("senior", models[0]), models[1]
    args = dict(
        suite=["solo"],
        n=2,
        ks=[1, 2],
        seed=1,
        max_new_tokens=6,
        batch_size=4,
        progress=False,
        score_fn=parity_reward,
        extract_fn=last_word,
        num_resamples=50,
    )
    args.update(kw)
    return evaluate_models(senior, junior, tokenizer, {"alpha": problems}, out, **args)


def keyed(path):
    return {(r["protocol"], r["problem_id"], r["sample_idx"]): r["token_ids"] for r in read_samples(path)}


def test_other_models_data_or_decoding_are_refused_listing_each_difference(models, tokenizer, tmp_path):
    probs = toy_problems(3)
    run(models, tokenizer, tmp_path, probs)
    other_senior = tiny_model("qwen3", len(tokenizer), seed=7)
    with pytest.raises(UserError) as err:
        run(models, tokenizer, tmp_path, probs, senior=other_senior, decoding={"temperature": 0.9})
    msg = str(err.value)
    assert "models.senior.weights" in msg and "generation.decoding.temperature: 0.7 -> 0.9" in msg
    assert "--fresh" in msg and "\n" not in msg
    # Another data set under the same benchmark name: the first problem differs.
    renamed = [Problem(p.id, p.problem + " (v2)", p.answer, prompt=p.prompt) for p in probs]
    with pytest.raises(
        UserError, match=r"problems of 'alpha': problem 1 is [0-9a-f]{16} in the directory but"
    ):
        run(models, tokenizer, tmp_path, renamed)
    with pytest.raises(UserError, match="generation.max_new_tokens: 6 -> 7"):
        run(models, tokenizer, tmp_path, probs, max_new_tokens=7)
    # --fresh: the old samples go, the new run is exactly a run into an empty directory.
    res = run(models, tokenizer, tmp_path, renamed, fresh=True)
    assert res == run(models, tokenizer, tmp_path / "clean", renamed)
    assert keyed(tmp_path / "samples.jsonl") == keyed(tmp_path / "clean" / "samples.jsonl")


def test_larger_limit_extends_and_equals_a_fresh_run(models, tokenizer, tmp_path):
    probs = toy_problems(5)
    run(models, tokenizer, tmp_path / "d", probs[:3])
    first = {r["batch"] for r in read_samples(tmp_path / "d" / "samples.jsonl")}
    res = run(models, tokenizer, tmp_path / "d", probs)
    fresh = run(models, tokenizer, tmp_path / "f", probs)
    assert res == fresh and res["benchmarks"]["alpha"]["num_problems"] == 5
    assert keyed(tmp_path / "d" / "samples.jsonl") == keyed(tmp_path / "f" / "samples.jsonl")
    # The full batch of the first run (problems 0-1 x 2 samples) was reused, not regenerated.
    assert first & {r["batch"] for r in read_samples(tmp_path / "d" / "samples.jsonl")}


def test_a_larger_limit_says_which_finished_samples_it_generates_again_and_why(
    models, tokenizer, tmp_path, capsys
):
    """n 2, batch 4: --limit 3 plans batches [p0 p1] [p2]; --limit 5 plans [p0 p1] [p2 p3] [p4]. The whole
    batch is kept row for row; p2's 2 finished samples are generated again beside their new batch-mates
    (a sample's arithmetic depends on its batch: padding, kernel shapes, bf16 on a GPU), so the folder
    equals a fresh run. Before: regenerated without a word (with --limit below one batch: every sample).
    Now one line says how many, where, and why; an extension from whole batches says nothing."""
    probs = toy_problems(5)
    run(models, tokenizer, tmp_path / "d", probs[:3])
    old = {(r["problem_id"], r["sample_idx"]): r for r in read_samples(tmp_path / "d" / "samples.jsonl")}
    capsys.readouterr()
    run(models, tokenizer, tmp_path / "d", probs)
    [line] = [ln for ln in capsys.readouterr().err.splitlines() if "generated again" in ln]
    assert "generated again 2 finished sample(s) (alpha/solo 2)" in line and "batch-mates" in line, line
    assert "fresh run" in line and "samples-other-plans.jsonl" in line, line
    new = {(r["problem_id"], r["sample_idx"]): r for r in read_samples(tmp_path / "d" / "samples.jsonl")}
    keys = [problem_key(p) for p in probs]
    assert all(new[k] == old[k] for k in old if k[0] in keys[:2])  # the whole batch: kept as it was
    assert all(new[k]["batch"] != old[k]["batch"] for k in old if k[0] == keys[2])  # generated again
    run(models, tokenizer, tmp_path / "e", probs[:4])
    capsys.readouterr()
    run(models, tokenizer, tmp_path / "e", probs)
    assert "generated again" not in capsys.readouterr().err


def test_smaller_limit_reports_exactly_the_subset(models, tokenizer, tmp_path):
    probs = toy_problems(6)
    run(models, tokenizer, tmp_path / "d", probs)
    res = run(models, tokenizer, tmp_path / "d", probs[:3])
    assert res["benchmarks"]["alpha"]["num_problems"] == 3
    assert res["benchmarks"]["alpha"]["metrics"]["solo/pass@1"]["num_problems"] == 3
    per = json.loads((tmp_path / "d" / "per_problem.json").read_text())
    assert len(per["alpha"]["solo/pass@1"]) == 3
    rows = read_samples(tmp_path / "d" / "samples.jsonl")
    assert len({r["problem_id"] for r in rows}) == 3 and len(rows) == 3 * 2
    assert res == run(models, tokenizer, tmp_path / "f", probs[:3])


def test_a_second_run_is_refused_with_the_holders_pid(models, tokenizer, tmp_path):
    with EvalDir(tmp_path / "d").lock():
        with pytest.raises(UserError, match=rf"being written by another trlvr eval \(pid {os.getpid()}\)"):
            run(models, tokenizer, tmp_path / "d", toy_problems(2))
    # Another process holds it.
    holder = textwrap.dedent(f"""
        import sys, time
        from trlvr.eval.store import EvalDir
        with EvalDir({str(tmp_path / "e")!r}).lock():
            print("held", flush=True)
            sys.stdin.readline()
    """)
    proc = subprocess.Popen(
        [sys.executable, "-c", holder], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout.readline().strip() == "held"
        with pytest.raises(UserError, match=rf"\(pid {proc.pid}\)"):
            run(models, tokenizer, tmp_path / "e", toy_problems(2))
    finally:
        proc.communicate("\n", timeout=30)
    run(models, tokenizer, tmp_path / "e", toy_problems(2))  # released: the next run proceeds


def test_readers_never_write_and_the_lock_owner_repairs(models, tokenizer, tmp_path):
    run(models, tokenizer, tmp_path, toy_problems(3))
    path = tmp_path / "samples.jsonl"
    torn = path.read_bytes() + b'{"benchmark": "alpha", "protocol": "so'
    path.write_bytes(torn)
    assert len(read_samples(path)) == 3 * 2  # the torn line is skipped by the resume reader...
    with pytest.raises(UserError, match=r"is not a finished evaluation \(samples.jsonl ends in a cut line\)"):
        build_report(tmp_path)  # ...a report refuses the torn folder in one line...
    assert path.read_bytes() == torn  # ...and never cuts it
    run(models, tokenizer, tmp_path, toy_problems(3))
    assert path.read_bytes().endswith(b"\n") and b'"protocol": "so\n' not in path.read_bytes()
    assert len(read_samples(path)) == 3 * 2


def test_a_failed_start_leaves_nothing_behind(models, tokenizer, tmp_path):
    def broken(completions, answers):
        raise RuntimeError("grader crashed")

    with pytest.raises(RuntimeError, match="grader crashed"):
        run(models, tokenizer, tmp_path / "new", toy_problems(2), score_fn=broken)
    assert not (tmp_path / "new").exists()
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "notes.txt").write_text("mine")
    with pytest.raises(RuntimeError):
        run(models, tokenizer, tmp_path / "old", toy_problems(2), score_fn=broken)
    assert sorted(p.name for p in (tmp_path / "old").iterdir() if not p.name.startswith(".")) == ["notes.txt"]
    # Metadata without samples (a start killed before its first batch) does not block other settings.
    (tmp_path / "old" / "config.json").write_text("{}")
    (tmp_path / "old" / "fingerprint.json").write_text('{"version": 0}')
    res = run(models, tokenizer, tmp_path / "old", toy_problems(2), max_new_tokens=5)
    assert res["config"]["max_new_tokens"] == 5


def test_prompt_cap_drops_up_front_and_budget_follows_the_context(models, tokenizer, tmp_path):
    probs = toy_problems(3) + [Problem("long", "big", "0", prompt="What is 1 plus 1? " * 30)]
    res = run(models, tokenizer, tmp_path / "cap", probs, max_prompt_tokens=40)
    dropped = res["config"]["dropped_problems"]["alpha"]
    assert [d["source_id"] for d in dropped] == ["long"] and dropped[0]["prompt_tokens"] > 40
    assert res["benchmarks"]["alpha"]["num_problems"] == 3
    assert {r["source_id"] for r in read_samples(tmp_path / "cap" / "samples.jsonl")} == {"p0", "p1", "p2"}
    # Default: the tiny models' 512-token context, the authors' rule, recorded.
    res = run(models, tokenizer, tmp_path / "auto", probs[:2])
    assert (
        res["config"]["budget"]["context_length"] == 512
        and "context_length - prompt_tokens - 8" in res["config"]["budget"]["rule"]
    )
    # A context that leaves the long prompt 3 tokens: its completions stop at 3, the others at 6.
    from trlvr.eval.prepare import prompt_ids_for

    n_long = len(prompt_ids_for(probs[3], tokenizer))
    res = run(models, tokenizer, tmp_path / "ctx", probs, context_length=n_long + 8 + 3, max_new_tokens=6)
    rows = read_samples(tmp_path / "ctx" / "samples.jsonl")
    assert max(r["num_tokens"] for r in rows if r["source_id"] == "long") <= 3
    assert any(r["num_tokens"] > 3 for r in rows if r["source_id"] != "long")
    with pytest.raises(UserError, match="every prompt is longer than --max-prompt-tokens 2"):
        run(models, tokenizer, tmp_path / "none", probs, max_prompt_tokens=2)
    assert not (tmp_path / "none").exists()


def test_cut_to_budgets_equals_generating_with_the_smaller_budget(models, tokenizer):
    senior, junior = models
    pair = LockstepPair(senior, junior, tokenizer, eos_token_ids=[0])  # id 0 is rare: rows run long
    prompts = [tokenizer.encode(p.prompt) for p in toy_problems(3)]
    decoding = {"temperature": 1.0, "top_p": 1.0, "top_k": 0}
    long = run_protocol(pair, "dose-0.5", prompts, max_new_tokens=[4, 12, 12], decoding=decoding, seed=3)
    short = run_protocol(pair, "dose-0.5", prompts, max_new_tokens=4, decoding=decoding, seed=3)
    assert long.completion_ids[0] == short.completion_ids[0] and long.authors[0] == short.authors[0]
    assert long.finish_reasons[0] == short.finish_reasons[0]
    assert len(long.completion_ids[0]) <= 4 and max(len(c) for c in long.completion_ids) > 4
    same = cut_to_budgets(long, [12, 12, 12], pair.pad_token_id)
    assert same.completion_ids == long.completion_ids


def test_report_escapes_tampered_metadata(models, tokenizer, tmp_path):
    run(models, tokenizer, tmp_path, toy_problems(2))
    path = tmp_path / "samples.jsonl"
    rows = read_samples(path)
    evil = "<img src=x onerror=alert(1)>"
    rows[0].update(num_tokens=evil, finish_reason=evil, reward=evil, senior_share=evil, parsed_answer=evil)
    rows[0].update(piece_lens=[1, "<b>"], prompt=evil)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    artifacts.write_manifest(tmp_path)  # written so (model text is untrusted), not a file changed since
    page = build_report(tmp_path)
    assert "<img src=x" not in page and "&lt;img src=x onerror=alert(1)&gt;" in page


def test_legibility_and_drift_leave_out_the_final_eos(models, tokenizer):
    sc = TokenScores(junior_logprobs=[-1.0, -2.0, -9.0], senior_logprobs=[0.0] * 3, kl=[0.5, 0.5, 4.0])
    assert text_means(sc, ends_with_eos=True) == (1.5, 0.5)
    assert text_means(sc, ends_with_eos=True, include_eos=True) == (4.0, 5.0 / 3)
    assert text_means(sc, ends_with_eos=False) == (4.0, 5.0 / 3)  # a cut completion has no EOS
    assert text_means(TokenScores([-1.0], [0.0], [0.1]), ends_with_eos=True) is None
    # Real models: with EOS minus without, times lengths, is exactly the EOS token's CE.
    senior, junior = models
    eos = tokenizer.eos_token_id if tokenizer.eos_token_id is not None else 0
    completion = tokenizer.encode(" 12 plus 30 is 42.") + [eos]
    s = score_completions(senior, junior, [tokenizer.encode("The cat")], [completion])[0]
    m = len(completion) - 1
    ce_text, _ = text_means(s, ends_with_eos=True)
    ce_all, _ = text_means(s, ends_with_eos=True, include_eos=True)
    assert (m + 1) * ce_all - m * ce_text == pytest.approx(-s.junior_logprobs[-1], abs=1e-5)


def test_cli_refuses_another_senior_and_fresh_starts_over(models, tokenizer, tmp_path, capsys):
    from trlvr.cli.main import main

    for name, model in (
        ("senior", models[0]),
        ("junior", models[1]),
        ("other", tiny_model("qwen3", len(tokenizer), 9)),
    ):
        model.save_pretrained(tmp_path / name)
        tokenizer.save_pretrained(tmp_path / name)
    data = tmp_path / "d.jsonl"
    data.write_text(
        "".join(
            json.dumps({"problem": f"What is {i} plus {i}?", "answer": str(2 * i)}) + "\n" for i in range(3)
        )
    )
    argv = [
        "eval",
        "--junior",
        str(tmp_path / "junior"),
        "--data",
        f"toy={data}",
        "--n",
        "2",
        "--k",
        "1,2",
        "--suite",
        "solo",
        "--max-new-tokens",
        "4",
        "--no-progress",
        "--out",
        str(tmp_path / "out"),
    ]
    assert main(argv + ["--senior", str(tmp_path / "senior"), "--limit", "2"]) == 0
    capsys.readouterr()
    assert main(argv + ["--senior", str(tmp_path / "other"), "--limit", "2"]) == 2
    err = capsys.readouterr().err
    assert "models.senior.path" in err and "models.senior.weights" in err and "--fresh" in err
    assert len(err.strip().splitlines()) == 1
    assert main(argv + ["--senior", str(tmp_path / "other"), "--fresh"]) == 0
    res = json.loads((tmp_path / "out" / "results.json").read_text())
    assert res["fingerprint"]["models"]["senior"]["path"] == str((tmp_path / "other").resolve())
    assert res["benchmarks"]["toy"]["num_problems"] == 3
    assert res["fingerprint"]["data"]["toy"]["sha256"]


def test_fresh_into_a_folder_of_another_kind_is_refused_and_moves_nothing(models, tokenizer, tmp_path):
    """`fresh` (the library's --fresh) sets aside only an earlier evaluation (`trlvr.rundir.prepare_output`):
    a training run is refused in one line, byte for byte as it was, no lock file left. Before: the run's
    record and checkpoints moved into replaced-<time>/ and an evaluation was written in their place."""
    run_dir = tmp_path / "run"
    (run_dir / "checkpoint-1").mkdir(parents=True)
    (run_dir / "trlvr_run.json").write_text('{"tandem": {}}\n')
    (run_dir / "checkpoint-1" / "config.json").write_text("{}\n")
    before = {p.relative_to(run_dir): p.read_bytes() if p.is_file() else None for p in run_dir.rglob("*")}
    with pytest.raises(UserError, match=r"holds a training run \(trlvr_run.json\), not an evaluation") as err:
        run(models, tokenizer, run_dir, toy_problems(2), fresh=True)
    assert "\n" not in str(err.value)
    assert {
        p.relative_to(run_dir): p.read_bytes() if p.is_file() else None for p in run_dir.rglob("*")
    } == before

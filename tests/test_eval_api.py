"""One path from a checkpoint to a number (`trlvr.eval.api`): eval, select and the demo share it.

Every case here failed on the code before the shared path: a junior with two ids swapped was
evaluated in lockstep (now: refused under `--pairing lockstep`, text-paired under auto), select on
a `junior: self` run looked for a folder called "self", select rendered
prompts with the junior's tokenizer, grading stats were process-lifetime counters, and compare of
disjoint runs / `--out FILE` gave empty reports or tracebacks.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from trlvr.cli.main import main as cli
from trlvr.data import read_jsonl
from trlvr.toy.task import make_splits
from trlvr.toy.world import ASSETS_DIR, _rows, _write_jsonl

SENIOR, JUNIOR = ASSETS_DIR / "senior", ASSETS_DIR / "junior"
FAST = ["--n", "2", "--k", "1", "--max-new-tokens", "24", "--no-progress", "--dtype", "float32"]


def swapped_junior(tmp_path: Path) -> tuple[Path, tuple[int, int]]:
    """A copy of the toy junior whose tokenizer has two ordinary ids swapped (same size, same files)."""
    out = tmp_path / "junior-swapped"
    shutil.copytree(JUNIOR, out)
    tok = json.loads((out / "tokenizer.json").read_text())
    vocab = tok["model"]["vocab"]
    (a, ia), (b, ib) = sorted(vocab.items(), key=lambda kv: kv[1])[10:12]
    vocab[a], vocab[b] = ib, ia
    (out / "tokenizer.json").write_text(json.dumps(tok))
    return out, (ia, ib)


@pytest.fixture
def test_file(tmp_path):
    path = tmp_path / "test.jsonl"
    _write_jsonl(path, _rows(make_splits(60, 6, seed=0)[1]))
    return path


def eval_argv(senior, junior, data, out, *extra):
    return [
        "eval",
        "--senior",
        str(senior),
        "--junior",
        str(junior),
        "--data",
        f"toy={data}",
        "--out",
        str(out),
        *FAST,
        *extra,
    ]


def test_eval_refuses_a_junior_with_swapped_ids_and_solo_needs_no_junior(tmp_path, test_file, capsys):
    bad, (ia, ib) = swapped_junior(tmp_path)
    assert (
        cli(eval_argv(SENIOR, bad, test_file, tmp_path / "e", "--suite", "handoff", "--pairing", "lockstep"))
        == 2
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "2 ids map to different tokens" in err[0] and f"id {min(ia, ib)}:" in err[0]
    assert not (tmp_path / "e").exists()
    # solo alone never reads the junior: the same bad junior is not even loaded
    assert cli(eval_argv(SENIOR, bad, test_file, tmp_path / "solo", "--suite", "solo")) == 0
    res = json.loads((tmp_path / "solo" / "results.json").read_text())
    assert res["config"]["models"]["junior"] is None and res["fingerprint"]["models"]["junior"] is None


def fake_run(
    tmp_path: Path, junior: str, checkpoints: dict[int, Path], senior: Path = SENIOR, pairing: str = "auto"
) -> Path:
    run = tmp_path / "run"
    run.mkdir()
    for step, src in checkpoints.items():
        shutil.copytree(src, run / f"checkpoint-{step}")
    record = {"tandem": {"senior": str(senior), "junior": junior, "holdout": 0, "pairing": pairing}}
    (run / "trlvr_run.json").write_text(json.dumps(record))
    return run


def select_argv(run, val, *extra):
    return [
        "select",
        str(run),
        "--val",
        str(val),
        "--metric",
        "handoff/pass@1",
        "--n",
        "2",
        "--max-new-tokens",
        "24",
        "--no-progress",
        *extra,
    ]


def test_select_refuses_a_junior_with_swapped_ids(tmp_path, test_file, capsys):
    bad, _ = swapped_junior(tmp_path)
    run = fake_run(tmp_path, str(bad), {10: SENIOR}, pairing="lockstep")  # select follows the run's pairing
    assert cli(select_argv(run, test_file)) == 2
    assert "ids map to different tokens" in capsys.readouterr().err
    assert not (run / "selected.json").exists()


def test_select_and_eval_render_prompts_with_the_seniors_tokenizer(tmp_path, test_file):
    """A junior with another chat template (same vocabulary): select used to render with it."""
    junior = tmp_path / "junior-chat"
    shutil.copytree(JUNIOR, junior)
    cfg = json.loads((junior / "tokenizer_config.json").read_text())
    cfg["chat_template"] = "{% for m in messages %}JUNIOR SAYS {{ m['content'] }}{% endfor %}"
    (junior / "tokenizer_config.json").write_text(json.dumps(cfg))
    run = fake_run(tmp_path, str(junior), {10: SENIOR})
    assert cli(select_argv(run, test_file)) == 0
    assert cli(eval_argv(f"{run}@selected", junior, test_file, tmp_path / "e", "--suite", "handoff")) == 0
    sel_rows = read_jsonl(run / "select" / "test" / "step-10" / "samples.jsonl")
    eval_rows = read_jsonl(tmp_path / "e" / "samples.jsonl")
    first = sel_rows[0]["problem_id"]
    sel_prompt = next(r["prompt"] for r in sel_rows if r["problem_id"] == first and "prompt" in r)
    eval_prompt = next(r["prompt"] for r in eval_rows if r["problem_id"] == first and "prompt" in r)
    assert sel_prompt == eval_prompt and "JUNIOR SAYS" not in sel_prompt


def make_adapter(base_src: Path, out: Path, seed: int = 0) -> Path:
    """A LoRA adapter (random non-zero B) on `base_src`, saved with its tokenizer as a run would."""
    import torch
    from peft import get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from trlvr.training.peft_setup import lora_config

    torch.manual_seed(seed)
    model = get_peft_model(AutoModelForCausalLM.from_pretrained(base_src), lora_config(rank=4))
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.05)
    model.save_pretrained(out)
    AutoTokenizer.from_pretrained(base_src).save_pretrained(out)
    return out


def test_select_on_a_lora_self_run_then_eval_selected_with_junior_self(tmp_path, test_file):
    base = tmp_path / "base"
    shutil.copytree(SENIOR, base)
    adapters = {s: make_adapter(base, tmp_path / f"adapter-{s}", seed=s) for s in (5, 10)}
    run = fake_run(tmp_path, "self", adapters, senior=base)
    assert cli(select_argv(run, test_file, "--include-initial")) == 0
    sel = json.loads((run / "selected.json").read_text())
    assert [r["step"] for r in sel["table"]] == [0, 5, 10]
    assert (
        cli(eval_argv(f"{run}@selected", "self", test_file, tmp_path / "e", "--suite", "solo,handoff")) == 0
    )
    res = json.loads((tmp_path / "e" / "results.json").read_text())
    assert res["config"]["models"]["senior_selection"]["step"] == sel["step"]
    if sel["step"] == 0:  # the base itself was chosen: it is its own adapters-off junior
        assert res["config"]["models"]["junior"] == str(base)
    else:
        assert res["fingerprint"]["models"]["junior"] == {"self_of": res["fingerprint"]["models"]["senior"]}
    # the adapter checkpoint itself, paired with its base through `self`
    assert (
        cli(eval_argv(run / "checkpoint-10", "self", test_file, tmp_path / "e10", "--suite", "handoff")) == 0
    )
    res = json.loads((tmp_path / "e10" / "results.json").read_text())
    assert res["fingerprint"]["models"]["junior"] == {"self_of": res["fingerprint"]["models"]["senior"]}


def test_grading_stats_are_counted_per_seed_from_the_samples(tmp_path, test_file):
    seeds = tmp_path / "seniors"
    for s in (0, 1):
        shutil.copytree(SENIOR, seeds / f"seed-{s}")
    out = tmp_path / "group"
    argv = [
        "eval",
        "--senior",
        str(seeds / "seed-{seed}"),
        "--seeds",
        "0,1",
        "--junior",
        str(JUNIOR),
        "--data",
        f"toy={test_file}",
        "--out",
        str(out),
        "--suite",
        "solo",
        *FAST,
    ]
    assert cli(argv) == 0
    for s in (0, 1):
        rows = read_jsonl(out / f"seed-{s}" / "samples.jsonl")
        stats = json.loads((out / f"seed-{s}" / "results.json").read_text())["grading_stats"]
        assert stats["graded"] == len(rows) == 12  # 6 problems x 2 samples, this seed's only
        for outcome in ("ok", "no_box", "timeout", "failure"):
            assert stats[outcome] == sum(r["grading"] == outcome for r in rows)
        assert stats["no_box"] == sum("\\boxed{" not in r["text"] for r in rows)


def test_compare_of_runs_that_share_no_problem_is_one_line(tmp_path, capsys):
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    _write_jsonl(a, _rows(make_splits(60, 4, seed=0)[1]))
    _write_jsonl(b, _rows(make_splits(60, 4, seed=7)[1][-4:]))
    keys_a = {r["problem"] for r in read_jsonl(a)}
    assert not keys_a & {r["problem"] for r in read_jsonl(b)}
    for src, out in ((a, tmp_path / "ea"), (b, tmp_path / "eb")):
        assert cli(eval_argv(SENIOR, JUNIOR, src, out, "--suite", "solo")) == 0
    capsys.readouterr()
    assert cli(["compare", str(tmp_path / "ea"), str(tmp_path / "eb")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "share no problem" in err[0] and "(4 problems)" in err[0]
    assert not (tmp_path / "eb" / "compare").exists()
    assert cli(["report", str(tmp_path / "ea"), str(tmp_path / "eb")]) == 2
    assert "share no problem" in capsys.readouterr().err


def test_eval_out_that_is_a_file_is_one_line(tmp_path, test_file, capsys):
    f = tmp_path / "results.txt"
    f.write_text("not a directory")
    for out in (f, f / "sub"):
        assert cli(eval_argv(SENIOR, JUNIOR, test_file, out, "--suite", "solo")) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "is in the way" in err[0] and "Traceback" not in err[0]
    assert f.read_text() == "not a directory"


def test_problems_the_tokenizer_cannot_spell_are_counted_listed_and_refused_on_request(tmp_path, capsys):
    rows = _rows(make_splits(60, 3, seed=0)[1])
    rows.append({"id": "zh-1", "problem": "小明有 3 个苹果 🍎，又买了 4 个。现在有几个？", "answer": "7"})
    data = tmp_path / "mixed.jsonl"
    _write_jsonl(data, rows)
    assert cli(eval_argv(SENIOR, JUNIOR, data, tmp_path / "e", "--suite", "solo")) == 0
    out = capsys.readouterr().out
    res = json.loads((tmp_path / "e" / "results.json").read_text())
    lossy = res["config"]["lossy_prompts"]["toy"]
    # the toy tokenizer has no byte fallback: the Chinese problem loses its characters, and every
    # problem loses the apostrophe of the paper's "Let's think step by step"
    assert "zh-1" in {x["source_id"] for x in lossy} and "明" in next(
        x["lost"] for x in lossy if x["source_id"] == "zh-1"
    )
    assert sum("WARNING: problems the tokenizer cannot spell" in line for line in out.splitlines()) == 1
    assert (
        cli(eval_argv(SENIOR, JUNIOR, data, tmp_path / "r", "--suite", "solo", "--refuse-lossy-prompts")) == 2
    )
    assert "do not survive the tokenizer" in capsys.readouterr().err


def test_cut_to_budgets_keeps_every_other_field_of_the_output():
    import torch

    from trlvr.engine import TandemOutput
    from trlvr.eval.protocols import cut_to_budgets

    out = TandemOutput(
        tokens=torch.tensor([[5, 6, 7], [5, 6, 0]]),
        senior_authored=torch.ones(2, 3, dtype=torch.bool),
        completion_mask=torch.tensor([[True, True, True], [True, True, False]]),
        senior_logprob=None,
        junior_logprob=None,
        finish_codes=torch.zeros(2, dtype=torch.long),
        num_sub_batches=3,
    )
    cut = cut_to_budgets(out, [2, 3], pad_token_id=0)
    assert cut.num_sub_batches == 3 and cut.tokens.tolist() == [[5, 6, 0], [5, 6, 0]]
    assert cut.completion_mask.sum(1).tolist() == [2, 2]


def test_an_eval_sample_does_not_depend_on_its_batch(tmp_path, test_file):
    """Each sample's randomness is keyed by (benchmark, problem, sample index, protocol): another
    batch size (other batch-mates, other padding) and another --limit give the same completions."""
    runs = {
        "b12": ("--batch-size", "12"),
        "b5": ("--batch-size", "5"),
        "lim": ("--batch-size", "12", "--limit", "4"),
    }
    for name, extra in runs.items():
        assert (
            cli(eval_argv(SENIOR, JUNIOR, test_file, tmp_path / name, "--suite", "solo,handoff", *extra)) == 0
        )

    def samples(name):
        return {
            (r["protocol"], r["problem_id"], r["sample_idx"]): (r["token_ids"], r["authors"])
            for r in read_jsonl(tmp_path / name / "samples.jsonl")
        }

    a, b, c = samples("b12"), samples("b5"), samples("lim")
    assert len(a) == 24 and a == b
    assert len(c) == 16 and all(a[k] == v for k, v in c.items())

"""The pairing interface (`trlvr.engine.pair`): one constructor, one contract, schedules refused up front."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from trlvr.engine import (
    BoundarySchedule,
    LockstepPair,
    Sampling,
    SoloSchedule,
    TandemGenerator,
    TextPair,
    WordSchedule,
    make_pair,
    pair_class,
    unsupported_schedule,
)
from trlvr.errors import UserError

ASSETS = Path(__file__).resolve().parents[1] / "trlvr" / "toy" / "assets"


@pytest.fixture(scope="module")
def toy():
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(ASSETS / "senior")
    senior = AutoModelForCausalLM.from_pretrained(ASSETS / "senior", dtype=torch.float32).eval()
    junior = AutoModelForCausalLM.from_pretrained(ASSETS / "junior", dtype=torch.float32).eval()
    return senior, junior, tok


def test_lockstep_pair_gives_the_engines_rows(toy):
    """make_pair on one vocabulary is lockstep, and its output is TandemGenerator's for the same call."""
    senior, junior, tok = toy
    pair = make_pair(senior, junior, tok)
    assert isinstance(pair, LockstepPair) and (pair.backend, pair.pairing) == ("hf", "lockstep")
    prompts = [tok.encode("Q: 3 + 4 =")] * 3 + [tok.encode("Q: 12 - 5 =")]
    keys = [11, 12, 13, 14]
    out = pair.generate(prompts, WordSchedule(0.5), Sampling(16, temperature=1.0, seed=7), keys)
    ref = TandemGenerator(senior, junior, tok).generate(
        prompts, WordSchedule(0.5), Sampling(16, seed=7), keys
    )
    assert out.completion_ids == ref.completion_ids and out.authors == ref.authors
    assert any(0 in a for a in out.authors) and any(1 in a for a in out.authors)  # both wrote
    # a row is a function of (seed, key): alone it is the same
    alone = pair.generate(prompts[1:2], WordSchedule(0.5), Sampling(16, seed=7), keys[1:2])
    assert alone.completion_ids[0] == out.completion_ids[1] and alone.authors[0] == out.authors[1]


def test_text_pair_refuses_token_id_schedules_in_one_line(toy):
    senior, junior, tok = toy
    from transformers import AutoModelForCausalLM, AutoTokenizer

    jtok = AutoTokenizer.from_pretrained(ASSETS / "junior-cross")
    jmodel = AutoModelForCausalLM.from_pretrained(ASSETS / "junior-cross", dtype=torch.float32).eval()
    pair = make_pair(senior, jmodel, tok, junior_tokenizer=jtok)
    assert isinstance(pair, TextPair) and pair.pairing == "text"
    why = TextPair.unsupported(BoundarySchedule(0.5))
    assert why is not None and "'boundary' needs one shared vocabulary" in why and "\n" not in why
    assert (
        TextPair.unsupported(WordSchedule(0.5)) is None
        and LockstepPair.unsupported(BoundarySchedule(0.5)) is None
    )
    with pytest.raises(UserError, match="'boundary' needs one shared vocabulary"):
        pair.generate([tok.encode("Q: 1 + 1 =")], BoundarySchedule(0.5), Sampling(4))
    out = pair.generate([tok.encode("Q: 1 + 1 =")], SoloSchedule("junior"), Sampling(6, seed=1))
    assert len(out) == 1 and set(out.authors[0]) <= {0}


def test_pair_class_refuses_what_does_not_exist():
    assert pair_class("hf", "text") is TextPair and pair_class() is LockstepPair
    with pytest.raises(UserError, match="backend: must be one of hf, vllm, got 'tpu'"):
        pair_class("tpu")
    with pytest.raises(UserError, match="backend vllm runs pairs with one shared vocabulary"):
        pair_class("vllm", "text")
    assert unsupported_schedule(BoundarySchedule(0.5), "hf", "text") is not None
    assert unsupported_schedule(BoundarySchedule(0.5), "hf", "lockstep") is None


def test_sampling_is_validated():
    with pytest.raises(ValueError, match="max_new_tokens must be >= 1"):
        Sampling(0)
    with pytest.raises(ValueError):
        Sampling(4, top_p=0.0)
    assert not Sampling(4, temperature=0.5).greedy and Sampling(4, temperature=0).greedy


def test_train_dry_run_refuses_boundary_on_a_text_pair(tmp_path, capsys):
    """The README's advice (`schedule: boundary`) with a junior on another tokenizer is refused by the
    config check, in one line, before any model loads (it used to die at the first rollout)."""
    from trlvr.cli.main import main as cli

    data = tmp_path / "train.jsonl"
    data.write_text('{"problem": "1 + 1", "answer": "2"}\n')
    common = [
        "train",
        "--config",
        "toy",
        "--holdout",
        "0",
        "--senior",
        str(ASSETS / "senior"),
        "--dataset",
        str(data),
        "--per_device_train_batch_size",
        "8",
        "--output_dir",
        str(tmp_path / "run"),
        "--dry-run",
    ]
    assert cli([*common, "--junior", str(ASSETS / "junior-cross"), "--schedule", "word"]) == 0
    capsys.readouterr()
    assert cli([*common, "--junior", str(ASSETS / "junior-cross"), "--schedule", "boundary"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "schedule 'boundary' needs one shared vocabulary" in err[0]
    assert (
        cli([*common, "--junior", str(ASSETS / "junior"), "--schedule", "boundary"]) == 0
    )  # lockstep runs it


def test_every_schedule_says_whether_it_runs_over_text():
    """The text engine asks the schedule (`text_rule`): the registry's text schedules are exactly the
    ones a text pair accepts, and each rule carries the schedule's own settings."""
    from trlvr.engine import SCHEDULES, ChunkSchedule, StepSchedule
    from trlvr.engine.text_pair import text_schedules

    assert set(text_schedules()) == {n for n, cls in SCHEDULES.items() if TextPair.unsupported(cls()) is None}
    assert "boundary" not in text_schedules() and {"word", "token", "step", "chunk", "solo"} <= set(
        text_schedules()
    )
    word = WordSchedule(0.3, 7).text_rule()
    assert (word.p, word.backstop, word.redraw_before_word) == (0.3, 7, True)
    assert word.first_author(0.29) == "senior" and word.first_author(0.31) == "junior"
    assert (
        StepSchedule("junior", 4).text_rule().max_steps == 8
        and StepSchedule("junior").text_rule().first == "junior"
    )
    assert ChunkSchedule(5).text_rule().alternate_every == 5
    assert SoloSchedule("junior").text_rule().first_author(0.0) == "junior"


@pytest.mark.skipif(
    __import__("importlib.util").util.find_spec("vllm") is not None, reason="vLLM is installed here"
)
def test_backend_vllm_without_vllm_is_one_line(tmp_path, capsys):
    """Asking for the vLLM backend where vLLM is not installed: one line naming what to install, from the
    config check (train --dry-run) and from trlvr eval, before any model loads."""
    from trlvr.cli.main import main as cli

    data = tmp_path / "train.jsonl"
    data.write_text('{"problem": "1 + 1", "answer": "2"}\n')
    assert (
        cli(
            [
                "train",
                "--config",
                "toy",
                "--holdout",
                "0",
                "--senior",
                str(ASSETS / "senior"),
                "--junior",
                str(ASSETS / "junior"),
                "--dataset",
                str(data),
                "--output_dir",
                str(tmp_path / "run"),
                "--backend",
                "vllm",
                "--dry-run",
            ]
        )
        == 2
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "backend vllm needs vllm, which is not installed here" in err[0]
    assert (
        cli(
            [
                "eval",
                "--senior",
                str(ASSETS / "senior"),
                "--junior",
                str(ASSETS / "junior"),
                "--data",
                f"toy={data}",
                "--backend",
                "vllm",
                "--out",
                str(tmp_path / "ev"),
                "--no-progress",
            ]
        )
        == 2
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "backend vllm needs vllm" in err[0]
    assert not (tmp_path / "ev").exists()


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (
            ["--backend", "hf", "--vllm_importance_sampling_correction", "true"],
            "vllm_importance_sampling_correction needs the sampler's log-probs: backend hf's engine returns the senior's",
        ),
        (["--use_cpu", "true", "--vllm_enable_sleep_mode", "true"], "vllm_enable_sleep_mode needs a GPU"),
        (["--backend", "hf", "--vllm_enable_sleep_mode", "true"], "vllm_enable_sleep_mode is backend vllm's"),
        (["--pairing", "text"], "text pairing runs on backend hf"),
        (["--junior_device", "cpu"], "junior_device is backend hf's"),
        (["--backend", "tpu"], "backend: must be hf or vllm"),
    ],
)
def test_backend_settings_it_cannot_run_are_refused_by_the_config(tmp_path, capsys, extra, message):
    from trlvr.cli.main import main as cli

    data = tmp_path / "train.jsonl"
    data.write_text('{"problem": "1 + 1", "answer": "2"}\n')
    argv = [
        "train",
        "--config",
        "toy",
        "--holdout",
        "0",
        "--senior",
        str(ASSETS / "senior"),
        "--junior",
        str(ASSETS / "junior"),
        "--dataset",
        str(data),
        "--output_dir",
        str(tmp_path / "run"),
        "--backend",
        "vllm",
        *extra,
        "--dry-run",
    ]
    assert cli(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0], err

"""TRL's idioms on TandemGRPOTrainer: model id strings and local paths (loaded as TRL loads them), `args=None`
and `reward_funcs=None` behaving as in GRPOTrainer."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from datasets import Dataset
from trl import GRPOConfig, GRPOTrainer

from trlvr.config import TandemConfig
from trlvr.toy.task import generate_problems
from trlvr.toy.world import ASSETS_DIR
from trlvr.training import TandemGRPOTrainer

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
ROOT = Path(__file__).resolve().parents[1]
SENIOR, JUNIOR = str(ASSETS_DIR / "senior"), str(ASSETS_DIR / "junior")


def toy_dataset(n: int = 4) -> Dataset:
    return Dataset.from_list(
        [{"prompt": p.text + "\n\n", "answer": str(p.answer)} for p in generate_problems(n, "train", seed=0)]
    )


def reward(completions, **kwargs):
    return [len(c) / 10 for c in completions]


def args(tmp_path, **kw) -> GRPOConfig:
    base = dict(
        output_dir=str(tmp_path / "out"),
        use_cpu=True,
        bf16=False,
        per_device_train_batch_size=8,
        num_generations=4,
        max_completion_length=12,
        max_steps=1,
        report_to=[],
        save_strategy="no",
        disable_tqdm=True,
    )
    return GRPOConfig(**{**base, **kw})


def test_local_paths_as_strings_train(tmp_path):
    trainer = TandemGRPOTrainer(
        SENIOR,
        JUNIOR,
        args=args(tmp_path, model_init_kwargs={"dtype": "float32"}),
        reward_funcs=reward,
        train_dataset=toy_dataset(),
    )
    # the senior TRL loaded, the junior beside it, both ids recorded in the run's TandemConfig
    assert trainer.tandem.senior == SENIOR and trainer.tandem.junior == JUNIOR
    assert trainer.junior is not None and not any(p.requires_grad for p in trainer.junior.parameters())
    assert trainer.junior.config._name_or_path == JUNIOR
    trainer.train()
    assert 0.0 < trainer.state.log_history[0]["tandem/senior_share"] < 1.0


def test_a_config_with_ids_keeps_them():
    tandem = TandemConfig(senior="a", junior="b")
    from trlvr.training.trainer import _with_model_ids

    assert _with_model_ids(tandem, "x", "y") is tandem
    filled = _with_model_ids(TandemConfig(p=0.25), "x", None)
    assert (filled.senior, filled.junior, filled.p) == ("x", None, 0.25)


def trl_error(**kw) -> str:
    with pytest.raises(Exception) as info:
        GRPOTrainer(SENIOR, train_dataset=toy_dataset(), **kw)
    return f"{type(info.value).__name__}: {info.value}"


def tandem_error(**kw) -> str:
    with pytest.raises(Exception) as info:
        TandemGRPOTrainer(SENIOR, JUNIOR, train_dataset=toy_dataset(), **kw)
    return f"{type(info.value).__name__}: {info.value}"


def test_args_none_is_grpo_trainers_default(tmp_path):
    # TRL builds GRPOConfig("<model>-GRPO"); on a machine without a GPU its default bf16 refuses, in both
    expected = trl_error(reward_funcs=reward)
    assert tandem_error(reward_funcs=reward) == expected
    assert "bf16" in expected or "GRPO" in expected


def test_no_reward_source_is_trls_refusal(tmp_path):
    expected = trl_error(args=args(tmp_path))
    assert expected.startswith("ValueError: No reward source provided")
    assert tandem_error(args=args(tmp_path)) == expected


SCRIPT = """
import sys
from datasets import Dataset
from trl import GRPOConfig
from trlvr.toy.task import generate_problems
from trlvr.training import TandemGRPOTrainer

ds = Dataset.from_list([{"prompt": p.text + "\\n\\n", "answer": str(p.answer)} for p in generate_problems(4, "train", seed=0)])
args = GRPOConfig(output_dir=sys.argv[1], use_cpu=True, bf16=False, per_device_train_batch_size=8, num_generations=4,
                  max_completion_length=8, max_steps=1, report_to=[], save_strategy="no", disable_tqdm=True)
trainer = TandemGRPOTrainer("trlvr-test/senior", "trlvr-test/junior", args=args,
                            reward_funcs=lambda completions, **k: [0.0] * len(completions), train_dataset=ds)
trainer.train()
print("share", trainer.state.log_history[0]["tandem/senior_share"], trainer.junior.config._name_or_path)
"""


# HF_HOME (the cache under it) runs in make test-slow: the same lookup through one more variable
@pytest.mark.parametrize("where", ["HF_HUB_CACHE", pytest.param("HF_HOME", marks=pytest.mark.slow)])
def test_hub_ids_from_the_local_cache_offline(tmp_path, where):
    """Model ids from the cache a download leaves (HF_HOME/hub, or HF_HUB_CACHE), with HF_HUB_OFFLINE=1."""
    from helpers import lay_out_hub_cache
    from huggingface_hub import scan_cache_dir

    home = tmp_path / "home"
    cache = home / "hub" if where == "HF_HOME" else tmp_path / "hub"
    lay_out_hub_cache(cache, "trlvr-test/senior", ASSETS_DIR / "senior")
    lay_out_hub_cache(cache, "trlvr-test/junior", ASSETS_DIR / "junior")
    assert {r.repo_id for r in scan_cache_dir(cache).repos} == {
        "trlvr-test/senior",
        "trlvr-test/junior",
    }  # hub's view
    (tmp_path / "run.py").write_text(textwrap.dedent(SCRIPT))
    env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_CACHE", "HF_HOME", "TRANSFORMERS_CACHE")}
    env.update(
        {
            "PYTHONPATH": str(ROOT),
            "OMP_NUM_THREADS": "1",
            "TRL_EXPERIMENTAL_SILENCE": "1",
            "HF_HUB_OFFLINE": "1",
            "HF_HOME": str(home),
        }
    )
    if where == "HF_HUB_CACHE":
        env["HF_HUB_CACHE"] = str(cache)
    done = subprocess.run(
        [sys.executable, "run.py", str(tmp_path / "out")],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "trlvr-test/junior" in done.stdout.splitlines()[-1]


def test_checkpoints_and_saved_models_carry_the_tandem_model_card(tmp_path):
    trainer = TandemGRPOTrainer(
        SENIOR,
        JUNIOR,
        tandem=TandemConfig(p=0.7),
        args=args(tmp_path, save_strategy="steps", save_steps=1),
        reward_funcs=reward,
        train_dataset=toy_dataset(),
    )
    trainer.train()
    trainer.save_model(str(tmp_path / "final"))
    for folder in (tmp_path / "out" / "checkpoint-1", tmp_path / "final"):
        card = (folder / "README.md").read_text()
        assert "tandem-rlvr" in card.split("---")[1]  # a tag in the card's metadata
        for needed in (
            f"| junior (frozen co-writer) | {JUNIOR} |",
            f"| base model (the senior before training) | {SENIOR} |",
            "| arm | tandem |",
            "| schedule | word (p=0.7, max_gap=32, handoff=bernoulli) |",
            "| reward grader | trlvr |",
            "| steps | 1 |",
            "2606.28166",
            "@article{jiao2026tandemrlvr",
        ):
            assert needed in card, needed
        assert (
            "[None]" not in card and "base_model:" not in card
        )  # a local folder is no hub id for the metadata

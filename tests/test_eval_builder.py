"""The named objects of an evaluation (`trlvr.eval.api.eval_team`, `trlvr.eval.partners.EngineBuilder`): what the
team of a ModelSpec is, what the builder loads for it, and that `evaluate_specs` closes the builder however
the run ends."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from helpers import write_sum_problems

import trlvr.eval.partners as partners_mod
import trlvr.team as team_mod
from trlvr.engine.self_pair import AdapterOffView
from trlvr.eval.api import ModelSpec, _identities, _stored_paths, eval_team, evaluate_specs, load_benchmarks
from trlvr.eval.partners import EngineBuilder
from trlvr.eval.spec import EvalSpec
from trlvr.team import LOCKSTEP, TEXT

ASSETS = Path(__file__).resolve().parents[1] / "trlvr" / "toy" / "assets"
SENIOR, JUNIOR, CROSS = str(ASSETS / "senior"), str(ASSETS / "junior"), str(ASSETS / "junior-cross")
SOLO = EvalSpec(n=1, ks=(1,), suite=("solo",), max_new_tokens=2)
PAIRED = EvalSpec(n=1, ks=(1,), suite=("solo", "handoff"), max_new_tokens=2)


@pytest.fixture
def loads(monkeypatch):
    """The (path, role) of every weight load the builder makes."""
    seen = []
    real = team_mod.load_model_or_adapter

    def load(path, role, **kw):
        seen.append((str(path), role))
        return real(path, role, **kw)

    monkeypatch.setattr(team_mod, "load_model_or_adapter", load)  # Team.load: the one place weights load
    return seen


@pytest.fixture(scope="module")
def adapter(tmp_path_factory):
    """A LoRA adapter folder on a copy of the toy senior, with its tokenizer, as a run's final/ holds it."""
    from peft import get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from trlvr.training.peft_setup import lora_config

    root = tmp_path_factory.mktemp("adapter")
    shutil.copytree(SENIOR, root / "base")
    model = get_peft_model(AutoModelForCausalLM.from_pretrained(root / "base"), lora_config(rank=2))
    model.save_pretrained(root / "final")
    AutoTokenizer.from_pretrained(root / "base").save_pretrained(root / "final")
    return str(root / "final")


def test_a_solo_only_evaluation_resolves_no_junior_and_loads_none(loads):
    team = eval_team(ModelSpec(SENIOR, JUNIOR), SOLO, SENIOR, None)
    assert team.junior is None and not team.writes and team.pairing is None
    builder = EngineBuilder.of(team, SOLO, "float32", "cpu")
    senior, junior = builder.models()
    assert junior is None and not senior.training
    assert loads == [(SENIOR, "--senior")]
    partners = builder.partners({"senior": {}}, {}, None)
    assert not partners.has_junior and partners.pairing is None and partners.scorers is None
    assert partners.fingerprint()["junior"] is None
    assert builder.build().junior is None  # the HF pair of a solo evaluation holds the senior alone


def test_a_self_team_pairs_the_senior_with_its_adapter_off_view(adapter, loads, tmp_path):
    team = eval_team(ModelSpec(adapter, "self"), PAIRED, adapter, None)
    assert team.is_self and team.pairing == LOCKSTEP and team.junior_model is None
    builder = EngineBuilder.of(team, PAIRED, "float32", "cpu")
    senior, junior = builder.models()
    assert isinstance(junior, AdapterOffView) and junior.peft_model is senior
    assert loads == [(adapter, "--senior")]  # one load: the junior is the senior's weights, adapters off
    assert builder.junior_tokenizer is None
    ids = _identities(team, None)
    assert ids["junior"] == {"self_of": ids["senior"]}
    assert _stored_paths(team, tmp_path / "out", None, None, None)["junior"] == team.junior


@pytest.mark.parametrize(("junior", "pairing"), [(JUNIOR, LOCKSTEP), (CROSS, TEXT)])
def test_the_builder_hands_a_text_pair_its_junior_tokenizer_and_a_lockstep_pair_none(junior, pairing):
    team = eval_team(ModelSpec(SENIOR, junior), PAIRED, SENIOR, None)
    builder = EngineBuilder.of(team, PAIRED)
    partners = builder.partners({"senior": {}, "junior": {}}, {}, None)
    assert partners.has_junior and partners.pairing == pairing == team.pairing
    assert (builder.junior_tokenizer is None) == (pairing == LOCKSTEP)
    assert partners.junior_tokenizer is builder.junior_tokenizer
    assert partners.tokenizer is team.senior_tok


def test_evaluate_specs_closes_its_builder_when_the_run_fails(tmp_path, monkeypatch):
    import trlvr.eval.runner as runner

    closed = []
    monkeypatch.setattr(EngineBuilder, "close", lambda self: closed.append(self.team.senior))

    def fails(partners, *args, **kw):
        raise RuntimeError("the run broke")

    monkeypatch.setattr(runner, "evaluate", fails)
    data = write_sum_problems(tmp_path / "d.jsonl", 2)
    benchmarks, ids = load_benchmarks({"sum": str(data)})
    with pytest.raises(RuntimeError, match="the run broke"):
        evaluate_specs(
            ModelSpec(SENIOR), benchmarks, SOLO, tmp_path / "ev", data_identities=ids, progress=False
        )
    assert closed == [SENIOR]


def test_the_builder_closes_every_engine_it_made_and_frees_memory(monkeypatch):
    freed = []
    monkeypatch.setattr(partners_mod, "free_memory", lambda: freed.append(True))

    class Engine:
        closed = 0

        def close(self):
            self.closed += 1

    team = eval_team(ModelSpec(SENIOR), SOLO, SENIOR, None)
    builder = EngineBuilder.of(team, SOLO)
    builder.engines += [Engine(), Engine()]
    builder.close()
    assert [e.closed for e in builder.engines] == [1, 1] and freed == [True]

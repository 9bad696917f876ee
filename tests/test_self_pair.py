"""Self-paired tandem on one copy of the weights: a LoRA senior and its adapters-off view as the junior.

The reference is the full-copy pair (the LoRA senior plus a separate copy of its base model as the
junior): the self pair must give the same tokens, authors and log-probs for every schedule, with
finished rows dropped mid-generation, and leave the senior exactly as it found it.
"""

from __future__ import annotations

import copy

import pytest
import torch
from helpers import SCHEDULES, tiny_model
from peft import LoraConfig, get_peft_model

from trlvr.engine import (
    Sampling,
    TandemGenerator,
    WordSchedule,
)
from trlvr.engine.runners import cache_arg as _cache_arg
from trlvr.engine.self_pair import AdapterOffView, resident_weight_bytes, self_pair


def is_self_pair(junior, senior=None) -> bool:
    """True when `junior` is an adapters-off view (of `senior`, when given)."""
    return isinstance(junior, AdapterOffView) and (senior is None or junior.peft_model is senior)


TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]  # Llama/Qwen3 names
PROMPTS = [
    "The cat sat on the mat.",
    "Let's think",
    "A train leaves at 3 pm and travels 60 miles.",
    "12 plus",
]


def lora(base, bias: str = "none", seed: int = 5):
    """A rank-8 LoRA model with random non-zero adapters (lora_B starts at zero: fill it with noise)."""
    model = get_peft_model(base, LoraConfig(r=8, lora_alpha=16, target_modules=TARGETS, bias=bias))
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_" in name:
                p.copy_(torch.randn(p.shape, generator=g) * 0.1)
    return model.eval()


@pytest.fixture(scope="module")
def setup(tokenizer, arch):
    """(LoRA senior, a separate copy of its base model, the adapters-off view of the senior)."""
    base = tiny_model(arch, len(tokenizer), seed=0, hidden=64, layers=2)
    base_copy = copy.deepcopy(base)
    senior, view = self_pair(lora(base))
    return senior, base_copy, view


def logits(model, ids):
    with torch.no_grad():
        return model(input_ids=torch.tensor([ids])).logits[0]


def test_view_is_the_base_model_and_the_senior_is_not(setup, tokenizer):
    senior, base_copy, view = setup
    ids = tokenizer.encode(PROMPTS[2])
    assert torch.allclose(logits(view, ids), logits(base_copy, ids), atol=1e-6)
    assert (logits(senior, ids) - logits(base_copy, ids)).abs().max() > 1e-2, "adapters have no effect"
    assert _cache_arg(view) == _cache_arg(base_copy)  # the view forwards the base model's signature


@pytest.mark.parametrize("score_both", [False, True])
@pytest.mark.parametrize("schedule", SCHEDULES, ids=repr)
def test_self_pair_matches_separate_base_copy(setup, tokenizer, schedule, score_both):
    senior, base_copy, view = setup
    eos = list(range(2, len(tokenizer), 9))  # ~11% of ids end a sequence: rows finish at different times
    prompts = [tokenizer.encode(t) for t in PROMPTS] * 8
    full = TandemGenerator(senior, base_copy, tokenizer, eos_token_ids=eos)
    own = TandemGenerator(senior, view, tokenizer, eos_token_ids=eos)
    a = full.generate(prompts, schedule, Sampling(40, seed=11), score_both=score_both)
    b = own.generate(prompts, schedule, Sampling(40, seed=11), score_both=score_both)
    # Finished-row compaction ran: a quarter of the rows ended (at EOS) before the last step.
    assert sum(n < 39 for n in a.lengths.tolist()) >= len(prompts) // 4
    assert a.completion_ids == b.completion_ids
    assert a.authors == b.authors
    assert a.finish_reasons == b.finish_reasons
    for x, y in ((a.senior_logprob, b.senior_logprob), (a.junior_logprob, b.junior_logprob)):
        assert (x is None) == (y is None)
        if x is not None:
            assert torch.allclose(x, y, atol=1e-5, rtol=0)


def test_adapters_are_on_again_after_generation(setup, tokenizer):
    senior, _, view = setup
    ids = tokenizer.encode(PROMPTS[0])
    before = logits(senior, ids)
    grads = {n: p.requires_grad for n, p in senior.named_parameters()}
    senior.train()
    gen = TandemGenerator(senior, view, tokenizer)
    gen.generate([ids] * 3, WordSchedule(p=0.5, max_gap=4), Sampling(12, seed=0))
    assert senior.training, "the senior's mode must come back as it was"
    senior.eval()
    assert torch.equal(logits(senior, ids), before)
    assert senior.get_model_status().enabled is True
    assert {n: p.requires_grad for n, p in senior.named_parameters()} == grads


def test_view_matches_peft_disable_adapter_and_restores_nested_state(setup, tokenizer):
    senior, _, view = setup
    ids = tokenizer.encode(PROMPTS[1])
    with senior.disable_adapter():
        reference = logits(senior, ids)
        assert torch.equal(logits(view, ids), reference)  # nested inside peft's own switch
        assert senior.get_model_status().enabled is False, "the view re-enabled adapters peft had turned off"
    assert torch.equal(logits(view, ids), reference)
    view._switch.fast = False  # the fallback path (peft's disable_adapter) gives the same
    try:
        assert torch.equal(logits(view, ids), reference)
    finally:
        view._switch.fast = True


def test_view_mode_is_its_own_and_its_forward_runs_in_eval(setup, tokenizer):
    senior, base_copy, view = setup
    ids = tokenizer.encode(PROMPTS[3])
    senior.train()
    try:
        view.eval()
        view.train()
        assert senior.training and view.training
        view.eval()
        assert senior.training and not view.training
        assert torch.allclose(logits(view, ids), logits(base_copy, ids), atol=1e-6)
        assert senior.training and all(m.training for m in senior.modules())
    finally:
        senior.eval()


def test_view_holds_no_second_copy(setup):
    senior, base_copy, view = setup
    assert list(view.children()) == [] and view.state_dict() == {}
    assert resident_weight_bytes(senior, view) == resident_weight_bytes(senior)
    assert resident_weight_bytes(senior, base_copy) > 1.9 * resident_weight_bytes(base_copy)
    base_ptrs = {p.data_ptr() for n, p in senior.named_parameters() if "lora_" not in n}
    assert {p.data_ptr() for p in view.parameters()} == base_ptrs  # base weights, no adapters
    assert next(view.parameters()).device == next(senior.parameters()).device


def test_refuses_models_whose_adapters_off_are_not_the_base(tokenizer):
    base = tiny_model("llama", len(tokenizer), seed=0, hidden=32, layers=1)
    with pytest.raises(ValueError, match="junior: self needs a PEFT \\(LoRA\\) senior, got LlamaForCausalLM"):
        AdapterOffView(base)
    with pytest.raises(ValueError, match="bias='none' \\(got 'all'\\)"):
        AdapterOffView(lora(copy.deepcopy(base), bias="all"))
    merged = lora(copy.deepcopy(base))
    merged.merge_adapter()
    with pytest.raises(ValueError, match="needs unmerged adapters"):
        AdapterOffView(merged)


# Loading a run's adapter folder onto its base (trlvr.models, trlvr.team.Team.load).


@pytest.fixture(scope="module")
def adapter_run(tmp_path_factory, tokenizer):
    """(base folder, adapter folder, the trained LoRA model) as `save_model` of a LoRA run leaves them."""
    from transformers import AutoModelForCausalLM

    from trlvr.training.peft_setup import lora_config

    root = tmp_path_factory.mktemp("lora-run")
    tiny_model("qwen3", len(tokenizer), seed=0, hidden=32, layers=1).save_pretrained(root / "base")
    base = AutoModelForCausalLM.from_pretrained(str(root / "base"))
    model = get_peft_model(base, lora_config(rank=8, target_modules=TARGETS))
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.1, generator=torch.Generator().manual_seed(1))
    model.save_pretrained(root / "final")
    return root / "base", root / "final", model.eval()


def test_adapter_folder_loads_onto_its_base_and_self_is_that_base(adapter_run, tokenizer):
    from trlvr.models import is_adapter_dir
    from trlvr.models import load_model_or_adapter as load_senior
    from trlvr.team import Team

    base_dir, final, trained = adapter_run
    assert is_adapter_dir(final) and not is_adapter_dir(base_dir)
    ids = tokenizer.encode(PROMPTS[0])
    senior, junior = Team.resolve(str(final), "self").load(device="cpu", with_junior=True)
    assert is_self_pair(junior, senior) and not senior.training
    assert torch.allclose(logits(senior, ids), logits(trained, ids), atol=1e-6)
    assert torch.allclose(logits(junior, ids), logits(load_senior(base_dir), ids), atol=1e-6)
    assert not any(p.requires_grad for p in senior.parameters())  # loaded frozen, for evaluation
    plain, other = Team.resolve(
        str(base_dir), str(base_dir), senior_tok=tokenizer, junior_tok=tokenizer
    ).load(device="cpu", with_junior=True)
    assert type(plain) is type(other) and not is_self_pair(other)


def test_adapter_loading_errors_are_one_line_user_errors(adapter_run, tmp_path, monkeypatch):
    from trlvr.errors import UserError
    from trlvr.eval.api import check_self_junior
    from trlvr.models import adapter_base

    base_dir, final, _ = adapter_run
    with pytest.raises(UserError, match=f"--junior self: {base_dir} has no adapter_config.json"):
        check_self_junior(base_dir)
    moved = tmp_path / "final"
    moved.mkdir()
    (moved / "adapter_config.json").write_text('{"base_model_name_or_path": "runs/gone/senior"}')
    with pytest.raises(UserError, match="base_model_name_or_path 'runs/gone/senior' is not a folder"):
        adapter_base(moved)
    assert adapter_base(moved, base=str(base_dir)) == str(base_dir)
    monkeypatch.chdir(base_dir.parent)  # a relative base path is read from the current directory
    (moved / "adapter_config.json").write_text('{"base_model_name_or_path": "./base"}')
    assert adapter_base(moved) == "base"

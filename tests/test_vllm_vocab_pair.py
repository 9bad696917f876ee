"""One tokenizer, two paddings on backend vllm (issue 44, mechanism 5; `tests/test_vocab_pair.py` is backend hf).

Qwen2.5-0.5B/1.5B/3B have 151,936 embedding rows and Qwen2.5-7B 152,064 for one 151,665-token tokenizer.
Here tiny Qwen3 pairs are built the same way: the same weights saved with no padding and with padded
rows whose logits are made to win every argmax (if any padded row were read, the tokens would change).
The padded pairs decode the tokens, authors and log-probs of the unpadded pair, in both directions: the
junior with more rows than the engine's (the senior's) vocabulary, and the senior with more than the
junior. A model with fewer rows than the tokenizer has tokens is refused in one line from its config,
before any engine is built or weight is read.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from torch import nn

pytest.importorskip("vllm")
pytestmark = pytest.mark.vllm

from vllm_helpers import TOY_SENIOR, V, engine_options, hf, toy_prompts  # noqa: E402

from trlvr.engine import Sampling, SoloSchedule, TokenSchedule, WordSchedule  # noqa: E402
from trlvr.errors import UserError  # noqa: E402
from trlvr.vllm.model import TandemForCausalLM  # noqa: E402
from trlvr.vllm.pair import VLLMPair  # noqa: E402

PAD_LOGIT = 100.0  # a padded row's weight on the beacon dimension: its logit is ~8 x this, a real one's ~1


def save_beacon_qwen3(out: Path, seed: int, rows: int) -> Path:
    """A random untied Qwen3 (head_dim 32) with the toy tokenizer and `rows` embedding rows, of which the
    first V are the same for every `rows` (same seed). Hidden dimension 0 is a beacon: every input
    embedding holds 1.0 there, so after the final norm it is ~8 at every position, and no real output
    row reads it (0.0). Padded output rows (V on) read only it, with weight PAD_LOGIT + k: if any padded
    logit were seen, a padded id would win every argmax and sample."""
    from transformers import AutoTokenizer, Qwen3Config, Qwen3ForCausalLM

    def config(n):
        return Qwen3Config(
            vocab_size=n,
            hidden_size=64,
            intermediate_size=128,
            num_hidden_layers=1,
            num_attention_heads=2,
            num_key_value_heads=1,
            head_dim=32,
            max_position_embeddings=256,
            tie_word_embeddings=False,
            bos_token_id=0,
            eos_token_id=0,
            pad_token_id=1,
        )

    torch.manual_seed(seed)
    base = Qwen3ForCausalLM(config(V)).float().eval()
    with torch.no_grad():
        base.model.embed_tokens.weight[:, 0] = 1.0
        base.lm_head.weight.normal_(0.0, 1.0)
        base.lm_head.weight[:, 0] = 0.0
        state = base.state_dict()
        model = (
            Qwen3ForCausalLM(config(rows)).float().eval()
        )  # after every draw: the same base for every `rows`
        for name in ("model.embed_tokens.weight", "lm_head.weight"):
            w = torch.zeros(rows, 64)
            w[:V] = state[name]
            if name == "lm_head.weight":
                w[V:, 0] = PAD_LOGIT + torch.arange(rows - V, dtype=torch.float32)
            state[name] = w
        model.load_state_dict(state)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    AutoTokenizer.from_pretrained(TOY_SENIOR).save_pretrained(out)
    return out


SCHEDULES = [WordSchedule(0.5), TokenSchedule(0.5), SoloSchedule("junior"), SoloSchedule("senior")]
SAMPLING = Sampling(24, temperature=1.0, seed=5)


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("padded")
    built = [
        ("senior", 2, V),
        ("senior", 2, V + 96),
        ("junior", 3, V),
        ("junior", 3, V + 32),
        ("junior", 3, V + 64),
    ]
    return {
        (role, rows): save_beacon_qwen3(root / f"{role}-{rows}", seed, rows) for role, seed, rows in built
    }


@pytest.fixture(scope="module")
def reference(models):
    """The unpadded pair's rollouts under every schedule, and its tokenizer."""
    pair = VLLMPair(models["senior", V], models["junior", V], engine=engine_options())
    prompts = toy_prompts(pair.tokenizer, 6)
    outs = {repr(s): pair.generate(prompts, s, SAMPLING) for s in SCHEDULES}
    pair.close()
    return prompts, outs


@pytest.mark.parametrize(
    ("senior_rows", "junior_rows"),
    [(V, V + 64), (V + 96, V + 32)],
    ids=["junior-more-rows-than-the-engine", "senior-more-rows-like-qwen2.5-7b"],
)
def test_a_padded_pair_decodes_what_the_unpadded_pair_decodes(models, reference, senior_rows, junior_rows):
    prompts, want = reference
    # the rig: in both padded models a padded row wins the argmax at every position the reference decoded
    for role, rows in (("senior", senior_rows), ("junior", junior_rows)):
        if rows > V:
            model = hf(models[role, rows])
            for p, ids in zip(prompts, want[repr(SCHEDULES[0])].completion_ids, strict=True):
                with torch.no_grad():
                    top = model(input_ids=torch.tensor([p + ids])).logits[0].argmax(-1)
                assert (top >= V).all(), f"{role}: a real row wins somewhere; the padded rows would go unseen"
    pair = VLLMPair(models["senior", senior_rows], models["junior", junior_rows], engine=engine_options())
    try:
        assert pair.n_ids == V and pair.llm.llm_engine.model_config.get_vocab_size() == V  # the shared ids
        senior_head = pair.llm.apply_model(lambda m: tuple(m.senior.lm_head.weight.shape))[0]
        assert senior_head[0] >= senior_rows  # the senior stack keeps its own rows (vLLM pads to 64s)
        for schedule in SCHEDULES:
            out, ref = pair.generate(prompts, schedule, SAMPLING), want[repr(schedule)]
            ids = out.tokens[out.completion_mask]
            assert ids.numel() > 0 and int(ids.max()) < V, schedule
            assert out.completion_ids == ref.completion_ids, schedule
            assert out.authors == ref.authors, schedule
            torch.testing.assert_close(out.senior_logprob, ref.senior_logprob, atol=1e-5, rtol=0)
    finally:
        pair.close()


@pytest.mark.parametrize("role", ["junior", "senior"])
def test_a_model_with_fewer_rows_than_tokens_is_refused_from_its_config(tmp_path, monkeypatch, role):
    """One line naming the model, its rows and the tokenizer's size; no engine built, no weight read (the
    short model's weights file is not a safetensors file: reading it would fail otherwise)."""
    short = tmp_path / "short"
    short.mkdir()
    (short / "model.safetensors").write_bytes(b"not weights")
    cfg = json.loads((TOY_SENIOR / "config.json").read_text())
    (short / "config.json").write_text(json.dumps({**cfg, "vocab_size": V - 15}))
    for f in TOY_SENIOR.glob("tokenizer*"):
        (short / f.name).write_bytes(f.read_bytes())

    def never(*a, **k):
        raise AssertionError("an engine was built for a pair that should be refused from its configs")

    monkeypatch.setattr(VLLMPair, "_build", never)
    senior, junior = (TOY_SENIOR, short) if role == "junior" else (short, TOY_SENIOR)
    with pytest.raises(UserError) as err:
        VLLMPair(senior, junior, engine=engine_options())
    assert str(err.value) == (
        f"{role} {short}: {V - 15} embedding rows for a {V}-token tokenizer; each model of "
        "a pair needs a row for every token of the shared tokenizer"
    )


class _Head(nn.Module):
    """A unit whose logits are its hidden state's first `rows` values tiled: (T, rows)."""

    def __init__(self, rows: int):
        super().__init__()
        self.rows = rows

    def compute_logits(self, hidden):
        return hidden.repeat(1, -(-self.rows // hidden.shape[-1]))[:, : self.rows].clone()


@pytest.mark.parametrize(("senior_rows", "junior_rows"), [(12, 10), (10, 12), (10, 10), (14, 16)])
def test_the_composite_hands_vllm_the_shared_ids_of_both_models(senior_rows, junior_rows):
    """`compute_logits` on units of any two row counts over a 10-token tokenizer: the logits vLLM samples
    from are the senior's first 10 columns, the stash the junior's first 10, whatever their rows."""
    model = TandemForCausalLM.__new__(TandemForCausalLM)
    nn.Module.__init__(model)
    model.senior, model.junior, model.senior_hidden, model.n_ids = (
        _Head(senior_rows),
        _Head(junior_rows),
        7,
        10,
    )
    model.stash = None
    hidden = torch.randn(3, 7 + 5)
    logits = model.compute_logits(hidden)
    assert torch.equal(logits, _Head(senior_rows).compute_logits(hidden[:, :7])[:, :10])
    assert torch.equal(model.take_stash(3), _Head(junior_rows).compute_logits(hidden[:, 7:])[:, :10])

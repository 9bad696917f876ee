"""TandemGRPOTrainer on tiny CPU models: what TRL hands the rollout function, what the loss sees,
who learns, loud failures, resume. Everything goes through TRL's real code paths."""

from __future__ import annotations

import copy
import os

import pytest
import torch
from datasets import Dataset
from helpers import tiny_model
from trl import GRPOConfig

from trlvr.algos import AuthorMaskError
from trlvr.config import TandemConfig
from trlvr.engine.schedules import ChunkSchedule, SoloSchedule
from trlvr.errors import UserError
from trlvr.training import TandemGRPOTrainer

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

PROMPTS = ["The cat sat", "A train leaves", "So the answer", "Then the dog"]


def length_reward(completions, **kwargs):
    """A reward that varies inside every group, so advantages are non-zero."""
    return [len(c) / 10 for c in completions]


def grpo_args(tmp_path, **kw) -> GRPOConfig:
    base = dict(
        output_dir=str(tmp_path / "out"),
        use_cpu=True,
        bf16=False,
        gradient_checkpointing=False,
        per_device_train_batch_size=8,
        num_generations=4,
        max_completion_length=10,
        max_steps=2,
        logging_steps=1,
        report_to=[],
        save_strategy="no",
        learning_rate=1e-2,
        lr_scheduler_type="constant",
        seed=0,
        disable_tqdm=True,
        loss_type="dapo",
    )
    base.update(kw)
    return GRPOConfig(**base)


def make_trainer(tmp_path, tokenizer, senior, junior, tandem: TandemConfig | None = None, **kw):
    tandem = tandem or TandemConfig(senior="senior", junior="junior")
    ds = Dataset.from_list([{"prompt": p, "answer": "1"} for p in PROMPTS])
    return TandemGRPOTrainer(
        senior,
        junior,
        tandem=tandem,
        args=grpo_args(tmp_path, **kw),
        reward_funcs=length_reward,
        train_dataset=ds,
        processing_class=tokenizer,
    )


@pytest.fixture
def pair(tokenizer):
    """Fresh (senior, junior) tiny Qwen3 models; training mutates them."""
    return tiny_model("qwen3", len(tokenizer), seed=0), tiny_model(
        "qwen3", len(tokenizer), seed=1, hidden=32, layers=1
    )


def capture(trainer):
    """Record every rollout_func call's prompts and return value, and every compute_loss input."""
    seen = {"prompts": [], "rollouts": [], "loss_inputs": []}
    rollout = trainer.rollout_func

    def recording_rollout(prompts, tr):
        seen["prompts"].append(list(prompts))
        out = rollout(prompts, tr)
        seen["rollouts"].append(out)
        return out

    trainer.rollout_func = recording_rollout
    compute_loss = trainer.compute_loss

    def recording_loss(model, inputs, *args, **kwargs):
        seen["loss_inputs"].append({k: v for k, v in inputs.items()})
        return compute_loss(model, inputs, *args, **kwargs)

    trainer.compute_loss = recording_loss
    return seen


def test_rollout_func_gets_repeated_prompts_and_mask_reaches_loss(tmp_path, tokenizer, pair):
    trainer = make_trainer(tmp_path, tokenizer, *pair, max_steps=2)
    seen = capture(trainer)
    trainer.train()
    check_metrics(trainer)
    prompts = seen["prompts"][0]
    # TRL 1.16's RepeatSampler repeats each prompt num_generations times before rollout_func sees
    # the batch (its docstring says "no duplication"): 8 entries = 2 prompts x 4, consecutive.
    assert len(prompts) == 8
    assert prompts[0:4] == [prompts[0]] * 4 and prompts[4:8] == [prompts[4]] * 4 and prompts[0] != prompts[4]
    out = seen["rollouts"][0]
    assert len(out["completion_ids"]) == 8 and len(out["env_mask"]) == 8
    # env_mask arrives at the loss as tool_mask, and the dapo normaliser counts senior tokens only.
    inputs = seen["loss_inputs"][0]
    env = [torch.tensor(m) for m in out["env_mask"]]
    # TRL shuffles the rows of the generation batch; compare (completion, mask) pairs as multisets.
    lengths = inputs["completion_mask"].sum(1).tolist()
    got = sorted(
        (tuple(inputs["completion_ids"][i, :n].tolist()), tuple(inputs["tool_mask"][i, :n].tolist()))
        for i, n in enumerate(lengths)
    )
    sent = sorted((tuple(c), tuple(m)) for c, m in zip(out["completion_ids"], out["env_mask"], strict=True))
    assert got == sent
    senior_tokens = sum(int(m.sum()) for m in env)
    assert 0 < senior_tokens < sum(len(m) for m in env)
    assert int(inputs["num_items_in_batch"]) == senior_tokens


def check_metrics(trainer):
    """Every logging step's entry in log_history carries the tandem metrics."""
    logs = [h for h in trainer.state.log_history if "loss" in h]
    assert len(logs) == 2
    for key in [
        "tandem/senior_share",
        "tandem/switches_per_seq",
        "tandem/team_length/mean",
        "tandem/senior_tokens/mean",
        "tandem/junior_tokens/mean",
        "tandem/reward_low_junior_share",
        "tandem/reward_high_junior_share",
        "timing/rollout_tokens_per_s",
        "timing/generation_s",
        "timing/update_s",
        "reward",
    ]:
        assert all(key in h for h in logs), key
    h = logs[-1]
    assert h["tandem/senior_tokens/mean"] + h["tandem/junior_tokens/mean"] == pytest.approx(
        h["tandem/team_length/mean"]
    )
    assert not any(k.startswith("tandem/length_") for k in h), "one name per logged quantity: team_length/*"
    assert 0.0 < h["tandem/senior_share"] < 1.0


# ---------------------------------------------------------------- the loss, through TRL's compute_loss


def hand_batch(tokenizer, senior_authored: torch.Tensor, seed: int = 0) -> dict:
    """A loss-ready batch as _generate_and_score_completions would build it. senior_authored: (B, T)."""
    g = torch.Generator().manual_seed(seed)
    B, T = senior_authored.shape
    return {
        "prompt_ids": torch.randint(1, len(tokenizer), (B, 3), generator=g),
        "prompt_mask": torch.ones(B, 3, dtype=torch.long),
        "completion_ids": torch.randint(1, len(tokenizer), (B, T), generator=g),
        "completion_mask": torch.ones(B, T, dtype=torch.long),
        "tool_mask": senior_authored.long(),
        "advantages": torch.tensor([1.0, -0.5, 0.7, -1.2][:B]),
        "num_items_in_batch": senior_authored.sum(),
    }


def loss_and_grads(trainer, inputs, hidden_noise: torch.Tensor | None = None):
    """Loss, parameter grads and d loss / d (final hidden states) at the completion-predicting positions.

    TRL's fused head turns the final hidden state at position t into the log-prob of token t+1
    without materialising logits, so the hidden states entering the head stand for the logits.
    hidden_noise: (B, T) mask of completion positions whose hidden state gets random noise.
    """
    model = trainer.model
    model.zero_grad()
    P, T = inputs["prompt_ids"].shape[1], inputs["completion_ids"].shape[1]
    kept = {}

    def hook(module, args, output):
        output = output.clone()
        if hidden_noise is not None:
            noise = torch.randn(output.shape, generator=torch.Generator().manual_seed(7))
            pos = torch.zeros(output.shape[:2], dtype=torch.bool)
            pos[:, P - 1 : P - 1 + T] = hidden_noise.bool()  # hidden at P-1+j predicts completion token j
            output = torch.where(pos[..., None], output + 3 * noise, output)
        output.retain_grad()
        kept["h"] = output
        return output

    handle = model.model.norm.register_forward_hook(hook)
    try:
        loss = trainer.compute_loss(model, inputs)
        loss.backward()
    finally:
        handle.remove()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    return loss.detach(), grads, kept["h"].grad[:, P - 1 : P - 1 + T]


@pytest.fixture
def loss_trainer(tmp_path, tokenizer, pair):
    trainer = make_trainer(tmp_path, tokenizer, *pair)
    trainer.model.train()
    trainer.current_gradient_accumulation_steps = 1  # set by Trainer's train loop; we call the loss directly
    return trainer


def test_loss_ignores_junior_positions(loss_trainer, tokenizer):
    senior = torch.tensor([[1, 0, 1, 1, 0, 0], [0, 1, 1, 0, 1, 0], [1, 1, 0, 0, 0, 1]], dtype=torch.bool)
    inputs = hand_batch(tokenizer, senior)
    with torch.no_grad():
        old, _, _ = loss_trainer._get_per_token_logps_and_entropies(
            loss_trainer.model,
            torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], 1),
            torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], 1),
            inputs["completion_ids"].shape[1],
        )
    inputs["old_per_token_logps"] = old - 0.1  # ratio exp(0.1) = 1.105: inside the clip range
    loss, grads, dh = loss_and_grads(loss_trainer, inputs)

    # 1. Nothing reaches the logits (the head's input) at junior positions; senior positions do get gradient.
    assert torch.all(dh[~senior] == 0)
    assert torch.all(dh[senior].abs().sum(-1) > 0)

    # 2. Junior tokens' old log-probs do not matter.
    moved = dict(inputs, old_per_token_logps=torch.where(senior, inputs["old_per_token_logps"], old + 5.0))
    loss2, grads2, _ = loss_and_grads(loss_trainer, moved)
    assert torch.equal(loss, loss2)
    assert all(torch.equal(grads[n], grads2[n]) for n in grads)

    # 3. The junior tokens' current log-probs do not matter (noise on the head input there only).
    loss3, grads3, _ = loss_and_grads(loss_trainer, inputs, hidden_noise=~senior)
    assert torch.allclose(loss, loss3, atol=1e-7)
    assert all(torch.allclose(grads[n], grads3[n], atol=1e-7) for n in grads)

    # 4. Token-mean over senior tokens. With ratio r = exp(0.1) on every token and no clipping,
    #    per-token loss = -r * A_seq, so loss = -r * sum_i A_i * n_senior_i / sum_i n_senior_i
    #    = -1.105 * (1*3 - 0.5*3 + 0.7*3) / 9.
    r = torch.exp(torch.tensor(0.1))
    expected = -r * (1.0 * 3 - 0.5 * 3 + 0.7 * 3) / 9
    assert loss.item() == pytest.approx(expected.item(), rel=1e-5)


def test_sequence_without_senior_tokens_is_silent(loss_trainer, tokenizer):
    senior = torch.tensor([[0, 0, 0, 0], [1, 0, 1, 1]], dtype=torch.bool)
    loss, grads, dh = loss_and_grads(loss_trainer, hand_batch(tokenizer, senior))
    assert torch.isfinite(loss) and all(torch.isfinite(g).all() for g in grads.values())
    assert torch.all(dh[0] == 0)
    # A whole batch of junior tokens: loss 0, no NaN, no gradient.
    none = torch.zeros(2, 4, dtype=torch.bool)
    loss, grads, _ = loss_and_grads(loss_trainer, hand_batch(tokenizer, none))
    assert loss.item() == 0.0 and all(torch.count_nonzero(g) == 0 for g in grads.values())


# ---------------------------------------------------------------- who learns


@pytest.mark.parametrize("arch", ["qwen3", "llama"])
def test_training_moves_senior_never_junior(tmp_path, tokenizer, arch):
    senior = tiny_model(arch, len(tokenizer), seed=0)
    junior = tiny_model(arch, len(tokenizer), seed=1, hidden=32, layers=1)
    s0 = copy.deepcopy(senior.state_dict())
    j0 = copy.deepcopy(junior.state_dict())
    trainer = make_trainer(tmp_path, tokenizer, senior, junior, max_steps=2)
    trainer.train()
    changed = [n for n, p in trainer.model.named_parameters() if not torch.equal(p.detach(), s0[n])]
    assert len(changed) == len(list(trainer.model.named_parameters())), "every senior parameter should move"
    assert all(torch.equal(p, j0[n]) for n, p in junior.state_dict().items())
    assert all(not p.requires_grad for p in junior.parameters()) and not junior.training


def test_grpo_arm_is_solo_with_all_ones_mask(tmp_path, tokenizer, pair):
    tandem = TandemConfig(arm="grpo", senior="senior")
    trainer = make_trainer(tmp_path, tokenizer, pair[0], None, tandem=tandem, max_steps=1)
    seen = capture(trainer)
    trainer.train()
    out = seen["rollouts"][0]
    assert all(all(v == 1 for v in m) for m in out["env_mask"])
    assert trainer.junior is None


def test_kl_reference_is_the_junior(tmp_path, tokenizer, pair):
    senior, junior = pair
    junior.save_pretrained(tmp_path / "junior")
    tandem = TandemConfig(arm="grpo", senior="senior", junior=str(tmp_path / "junior"), kl_ref="junior")
    name = senior.config._name_or_path
    trainer = make_trainer(tmp_path, tokenizer, senior, None, tandem=tandem, beta=0.1, max_steps=1)
    ref = trainer.accelerator.unwrap_model(trainer.ref_model)
    assert ref is not trainer.model and senior.config._name_or_path == name
    ref_state, j_state = ref.state_dict(), junior.state_dict()
    assert set(ref_state) == set(j_state)
    assert all(torch.equal(ref_state[k], j_state[k]) for k in j_state)
    trainer.train()
    assert any("kl" == k for h in trainer.state.log_history for k in h)


# ---------------------------------------------------------------- loud failures and EOS


def test_missing_author_mask_raises(tmp_path, tokenizer, pair):
    trainer = make_trainer(tmp_path, tokenizer, *pair, max_steps=1)
    rollout = trainer.rollout_func

    def maskless(prompts, tr):
        out = rollout(prompts, tr)
        out.pop("env_mask")
        return out

    trainer.rollout_func = maskless
    with pytest.raises(AuthorMaskError, match="without an author mask"):
        trainer.train()


def test_all_senior_batch_at_half_p_raises(tmp_path, tokenizer, pair):
    trainer = make_trainer(tmp_path, tokenizer, *pair, max_steps=1)
    trainer.rollout.schedule = SoloSchedule("senior")  # a broken engine: the junior never writes
    with pytest.raises(AuthorMaskError, match="the junior never ran"):
        trainer.train()


def test_tools_and_environments_are_refused_in_one_line(tmp_path, tokenizer, pair):
    def calculator(a: int, b: int) -> int:
        """Add two numbers.

        Args:
            a: the first number
            b: the second number
        """
        return a + b

    ds = Dataset.from_list([{"prompt": p, "answer": "1"} for p in PROMPTS])
    common = dict(
        tandem=TandemConfig(senior="senior", junior="junior"),
        args=grpo_args(tmp_path),
        reward_funcs=length_reward,
        train_dataset=ds,
        processing_class=tokenizer,
    )
    for extra in ({"tools": [calculator]}, {"environment_factory": object}):
        with pytest.raises(UserError, match="does not take tools or environment_factory") as info:
            TandemGRPOTrainer(*pair, **common, **extra)
        assert "\n" not in str(info.value)


def test_junior_tokens_in_the_loss_stop_training(tmp_path, tokenizer, pair):
    # With tools, TRL 1.16's `_generate` drops the rollout's env_mask and uses its tool loop's mask, all
    # ones where no tool was called (`_tool_call_loop`). The guard looks at what reaches the loss, so it
    # fires although a mask exists. (Tools are refused at __init__; this forces TRL's branch after it.)
    trainer = make_trainer(tmp_path, tokenizer, *pair, max_steps=1)
    trainer.tools = [len]

    def no_tool_called(prompts, prompt_ids, completion_ids, completions, logprobs, images, multimodal_fields):
        ones = [[1] * len(ids) for ids in completion_ids]  # TRL's mask when no completion calls a tool
        return ones, completions, completion_ids, logprobs, 0, 0, [[] for _ in completion_ids]

    trainer._tool_call_loop = no_tool_called
    with pytest.raises(AuthorMaskError, match=r"^\d+ junior tokens reached the loss"):
        trainer.train()
    assert trainer.state.global_step == 0


class EosLover(torch.nn.Module):
    """A model wrapper whose next token is almost surely EOS (for the junior's side of the engine)."""

    def __init__(self, inner, eos: int):
        super().__init__()
        self.inner, self.eos, self.generation_config = inner, eos, inner.generation_config

    def get_output_embeddings(self):
        return self.inner.get_output_embeddings()

    def forward(self, *args, cache=None, **kwargs):
        out = self.inner(*args, cache=cache, **kwargs)
        out.logits[..., self.eos] += 100.0
        return out


def love_eos_when_generating(model, eos: int):
    """Make the (trainable) senior pick EOS during decoding only. TRL's loss forward goes through its
    fused head (`fused_lm_head=True`, no logits) and is left untouched."""
    forward = model.forward

    def eos_forward(*args, cache=None, **kwargs):
        out = forward(*args, cache=cache, **kwargs)
        if not kwargs.get("fused_lm_head") and getattr(out, "logits", None) is not None:
            out.logits[..., eos] += 100.0
        return out

    model.forward = eos_forward


@pytest.mark.parametrize("owner", ["junior", "senior"])
def test_eos_ends_the_sequence_whoever_writes_it(tmp_path, tokenizer, pair, owner):
    senior, junior = pair
    eos = tokenizer.eos_token_id
    trainer = make_trainer(tmp_path, tokenizer, senior, junior, max_steps=1, mask_truncated_completions=True)
    if owner == "junior":
        trainer.rollout.junior = EosLover(junior, eos)
    else:
        love_eos_when_generating(trainer.model, eos)
    # the other author writes 2 tokens, then the owner's first token is EOS
    trainer.rollout.schedule = ChunkSchedule(
        chunk_size=2, first_author="senior" if owner == "junior" else "junior"
    )
    trainer.rollout.check_junior_p = None
    seen = capture(trainer)
    trainer.train()
    out, inputs = seen["rollouts"][0], seen["loss_inputs"][0]
    for ids, mask in zip(out["completion_ids"], out["env_mask"], strict=True):
        assert len(ids) <= 3  # an earlier EOS by the other author also ends it
        if len(ids) == 3:
            assert ids[-1] == eos and mask[-1] == (1 if owner == "senior" else 0)
    assert any(len(ids) == 3 for ids in out["completion_ids"])
    # ended by EOS, so not "truncated": mask_truncated_completions keeps every completion mask
    lengths = sorted(len(ids) for ids in out["completion_ids"])
    assert sorted(inputs["completion_mask"].sum(1).tolist()) == lengths
    assert [h for h in trainer.state.log_history if "loss" in h][0]["completions/clipped_ratio"] == 0.0


# ---------------------------------------------------------------- resume


def test_resume_gives_identical_weights(tmp_path, tokenizer):
    # 4 prompts, 1 prompt x 4 rollouts per step: an epoch is 4 steps; the run crosses into epoch 2.
    def run(out_dir, max_steps, resume=False):
        senior = tiny_model("qwen3", len(tokenizer), seed=0)
        junior = tiny_model("qwen3", len(tokenizer), seed=1, hidden=32, layers=1)
        trainer = make_trainer(
            tmp_path,
            tokenizer,
            senior,
            junior,
            output_dir=str(out_dir),
            max_steps=max_steps,
            save_strategy="steps",
            save_steps=4,
            per_device_train_batch_size=4,
            max_completion_length=6,
        )
        trainer.train(resume_from_checkpoint=resume)
        return {k: v.clone() for k, v in trainer.model.state_dict().items()}

    full = run(tmp_path / "a", 5)
    run(tmp_path / "b", 4)  # "killed" right after its step-4 checkpoint (an epoch boundary)
    resumed = run(tmp_path / "b", 5, resume=True)
    diff = max((full[k] - resumed[k]).abs().max().item() for k in full)
    assert diff <= 1e-6

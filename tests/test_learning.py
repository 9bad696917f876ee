"""Issue 51, "no silent non-learning" and "arms treated alike by the trainer" (`trlvr.training.learning`,
`trlvr.training.metrics.is_corrected_counts`): full fine-tuning of bf16 weights without ZeRO is refused in one
line before any model loads; a run whose first step with a gradient moved no weight stops in one line; every
shipped config learns as it is launched; TRL's IS correction is token_truncate by default and its zeroed or
clipped share is counted over the loss's tokens."""

from __future__ import annotations

import json
import re

import pytest
import torch
from helpers import cli_errors, copy_toy_pair, toy_train_argv
from torch import nn

from trlvr.cli.main import main as cli
from trlvr.config import IS_MODE, parse_run_args, shipped_configs
from trlvr.errors import UserError
from trlvr.training.learning import (
    WEIGHTS_MOVED,
    WeightsDidNotMove,
    WeightsMoved,
    check_updates_land,
    low_precision_problem,
    moved_fraction,
    senior_dtype,
)
from trlvr.training.metrics import is_corrected_counts

SMALL = [
    "--per_device_train_batch_size",
    "8",
    "--num_generations",
    "4",
    "--max_completion_length",
    "8",
    "--use_cpu",
    "true",
    "--save_steps",
    "1",
    "--max_steps",
    "1",
    "--reward",
    "test_learning:varied_reward",
]


def varied_reward(completions, **kwargs):
    """A reward that differs within most groups (the toy's math reward is often 0 for all of an 8-token group,
    which gives a zero gradient): the step has something to learn."""
    return [float(len(str(c)) % 2) for c in completions]


@pytest.fixture
def toy(tmp_path):
    return copy_toy_pair(tmp_path, 40)


def argv(toy, *extra):
    return toy_train_argv(toy, *SMALL, *extra)


errors = cli_errors


# --- the measurement behind the refusal ------------------------------------------------------------------------------


def test_torch_adamw_on_bf16_weights_rounds_lr_1e6_updates_away_and_fp32_keeps_them():
    """The review's CPU measurement, smaller: a 4B-like linear slice (std 0.02) and a norm (~1), two AdamW
    steps at lr 1e-6. bf16 in place: a few % of the linear's elements and none of the norm's change; fp32
    (what a master copy holds): all of them."""
    torch.manual_seed(0)
    weights = [torch.randn(256, 2560) * 0.02, 1.0 + 0.05 * torch.randn(2560)]

    def changed(dtype):
        params = [w.to(dtype).clone().requires_grad_() for w in weights]
        start = [p.detach().clone() for p in params]
        opt = torch.optim.AdamW(params, lr=1e-6, weight_decay=0.0)
        for _ in range(2):
            for p in params:
                p.grad = (torch.randn(p.shape) * 1e-3).to(dtype)
            opt.step()
        return [moved_fraction([s], [p.detach()]) for s, p in zip(start, params, strict=True)]

    linear, norm = changed(torch.bfloat16)
    assert linear < 0.1 and norm == 0.0, (linear, norm)
    assert changed(torch.float32) == [1.0, 1.0]


# --- the refusal (pure) --------------------------------------------------------------------------------------------

BASE = {
    "dtype": "bfloat16",
    "use_peft": False,
    "sharding": None,
    "optim": "adamw_torch",
    "optim_args": None,
    "learning_rate": 1e-6,
}


@pytest.mark.parametrize(
    "change, refused",
    [
        ({}, True),
        ({"dtype": torch.bfloat16}, True),
        ({"dtype": "float16"}, True),
        ({"optim": "adamw_torch_fused"}, True),
        ({"sharding": "fsdp2"}, True),  # FSDP shards the bf16 weights as they are: no master copy either
        ({"optim": "adamw_torch_8bit"}, True),  # 8-bit states, but deterministic rounding of the bf16 weights
        ({"optim": "adamw_torch_8bit", "optim_args": "bf16_stochastic_round=True"}, False),
        ({"optim": "stable_adamw"}, False),  # torch-optimi: Kahan summation on bf16 parameters
        ({"dtype": "float32"}, False),
        ({"dtype": None}, False),  # unknown (a hub id not downloaded): judged on the loaded model
        ({"use_peft": True}, False),  # PEFT keeps LoRA adapters in fp32
        ({"sharding": "zero2"}, False),  # DeepSpeed keeps fp32 master weights
        ({"sharding": "zero3"}, False),
    ],
)
def test_low_precision_problem_names_bf16_full_fine_tuning_without_a_master_copy(change, refused):
    problem = low_precision_problem(**{**BASE, **change})
    assert (problem is not None) == refused, problem
    if refused:
        assert "full fine-tuning" in problem and "round away" in problem and "learning_rate 1e-06" in problem


def test_a_bf16_full_fine_tuning_run_without_zero_is_refused_in_one_line_before_anything_is_written(
    toy, capsys
):
    assert cli(argv(toy, "--model_init_kwargs", '{"dtype": "bfloat16"}')) == 2
    [line] = errors(capsys.readouterr().err)
    assert (
        "full fine-tuning of bfloat16 weights (model_init_kwargs dtype bfloat16, use_peft false)" in line
    ), line
    for fix in (
        "model_init_kwargs: {dtype: float32}",
        "use_peft: true",
        "DeepSpeed ZeRO",
        "optim: stable_adamw",
    ):
        assert fix in line, (fix, line)
    assert not (toy / "run").exists() or not any((toy / "run").iterdir())


def test_the_dry_run_refuses_bf16_full_fine_tuning_in_the_run_s_line_and_passes_it_under_zero(toy, capsys):
    """`trlvr train --dry-run` is the run's check list: the same line as the run for bf16 weights without
    ZeRO (its CPU overrides, bf16 false and use_cpu, leave the weights' dtype as the run loads them); a
    launch planned with ZeRO (--zero-stage) passes."""
    bf16 = argv(toy, "--model_init_kwargs", '{"dtype": "bfloat16"}')
    assert cli([*bf16, "--dry-run"]) == 2
    [dry] = errors(capsys.readouterr().err)
    assert cli(bf16) == 2
    [run] = errors(capsys.readouterr().err)
    assert dry == run and "full fine-tuning of bfloat16 weights" in dry, (dry, run)
    assert cli([*bf16, "--dry-run", "--zero-stage", "2"]) == 0
    assert capsys.readouterr().out.startswith("config ok")
    assert cli([*bf16, "--dry-run", "--zero-stage", "0"]) == 2
    assert errors(capsys.readouterr().err) == [run]
    assert not (toy / "run").exists() or not any((toy / "run").iterdir())


def test_a_checkpoint_saved_in_bf16_is_judged_by_its_own_dtype(toy):
    """transformers 5 loads dtype "auto" (the checkpoint's): a bf16 checkpoint with no model_init_kwargs is
    the same run, refused the same way."""
    config = json.loads((toy / "senior" / "config.json").read_text())
    config["dtype"] = "bfloat16"
    (toy / "senior" / "config.json").write_text(json.dumps(config))
    tandem, grpo, _ = parse_run_args(argv(toy)[1:])
    assert senior_dtype(tandem, grpo) == "bfloat16"
    with pytest.raises(UserError, match="bfloat16 weights"):
        check_updates_land(tandem, grpo, None)
    check_updates_land(tandem, grpo, "zero2")  # under ZeRO nothing changes


def test_under_an_accelerate_deepspeed_launch_bf16_weights_pass(toy, monkeypatch):
    from trlvr.training.learning import launch_sharding

    tandem, grpo, _ = parse_run_args(argv(toy, "--model_init_kwargs", '{"dtype": "bfloat16"}')[1:])
    with pytest.raises(UserError):
        check_updates_land(tandem, grpo, launch_sharding(grpo))
    monkeypatch.setenv("ACCELERATE_USE_DEEPSPEED", "true")
    monkeypatch.setenv("ACCELERATE_DEEPSPEED_ZERO_STAGE", "2")
    check_updates_land(tandem, grpo, launch_sharding(grpo))


def test_every_shipped_config_learns_as_it_is_launched():
    """One process (`trlvr train`, `trlvr smoke`) unless the config's header launches it under DeepSpeed ZeRO;
    the one-GPU starter trains fp32 master weights in bf16 autocast."""
    from trlvr.training.memory_plan import recipe_launcher

    for name, path in shipped_configs().items():
        tandem, grpo, _ = parse_run_args(
            [
                "--config",
                str(path),
                "--senior",
                tandem_senior(path),
                "--junior",
                "j",
                "--dataset",
                "d",
                "--use_cpu",
                "true",
            ]
        )
        dtype = senior_dtype(tandem, grpo)
        launcher = recipe_launcher(path)
        sharding = "zero2" if launcher is not None and launcher.name == "accelerate-zero2-2gpu.yaml" else None
        problem = low_precision_problem(
            dtype=dtype,
            use_peft=tandem.use_peft,
            sharding=sharding,
            optim=grpo.optim,
            optim_args=grpo.optim_args,
            learning_rate=grpo.learning_rate,
        )
        assert problem is None, (name, problem)
    starter = parse_run_args(
        ["--config", "starter", "--senior", "s", "--junior", "j", "--dataset", "d", "--use_cpu", "true"]
    )[1]
    assert starter.model_init_kwargs == {"dtype": "float32"} and starter.bf16


def tandem_senior(path) -> str:
    """The config's own senior (a hub id the shipped model configs describe), or a placeholder."""
    import yaml

    return yaml.safe_load(path.read_text()).get("senior") or "s"


# --- the postcondition ---------------------------------------------------------------------------------------------


def test_fp32_master_weights_in_bf16_autocast_learn_and_the_run_logs_how_many_moved(toy, capsys):
    """The starter's fix on the toy pair: float32 weights, bf16 autocast. The first step moves (nearly) every
    sampled trainable element, logged as train/weights_moved."""
    assert cli(argv(toy, "--model_init_kwargs", '{"dtype": "float32"}', "--bf16", "true")) == 0, (
        capsys.readouterr().err
    )
    rows = [json.loads(x) for x in (toy / "run" / "metrics.jsonl").read_text().splitlines()]
    [moved] = [r[WEIGHTS_MOVED] for r in rows if WEIGHTS_MOVED in r]
    assert moved > 0.9, moved


def test_a_step_that_moves_no_weight_stops_the_run_in_one_line_without_a_final_model(toy, capsys):
    """learning_rate 1e-30 (0 is refused by the config check): every fp32 update rounds away, as bf16's
    did at 1e-6. Exit 2, one line naming the step, no final/."""
    assert cli(argv(toy, "--learning_rate", "1e-30")) == 2
    [line] = errors(capsys.readouterr().err)
    assert re.search(
        r"step 1: the optimizer step changed none of \d+ sampled trainable weights although the "
        r"gradient norm was [0-9.e-]+ \(learning_rate 1e-30",
        line,
    ), line
    assert not (toy / "run" / "final").exists()


class _Trainer:
    def __init__(self):
        from collections import defaultdict

        self._metrics = {"train": defaultdict(list)}


class _Args:
    learning_rate, optim = 1e-3, "adamw_torch"


class _State:
    global_step = 0


def test_steps_with_a_zero_gradient_are_waited_out_and_a_later_move_is_recorded():
    """Zero advantages (every group's rewards equal) give a zero gradient: nothing moves by design. The
    check waits for the first step with a gradient, and fails only if that one moves nothing."""
    model, trainer, state = nn.Linear(8, 8), _Trainer(), _State()
    check = WeightsMoved(trainer)
    for step, (grad_norm, move) in enumerate([(0.0, False), (0.0, False), (0.5, True)], start=1):
        check.on_step_begin(_Args, state, None, model=model)
        if move:
            with torch.no_grad():
                model.weight.add_(1.0)
        state.global_step = step
        check.on_step_end(_Args, state, None, model=model)
        check.on_log(_Args, state, None, logs={"grad_norm": grad_norm})
    assert check.result["step"] == 3 and check.result["fraction"] == pytest.approx(64 / 72)
    assert trainer._metrics["train"][WEIGHTS_MOVED] == [pytest.approx(64 / 72)]

    frozen = WeightsMoved(
        _Trainer()
    )  # nothing trainable held in this process (ZeRO-3's partitions): not measured
    frozen.on_step_begin(_Args, state, None, model=nn.Linear(8, 8).requires_grad_(False))
    frozen.on_step_end(_Args, state, None, model=model)
    frozen.on_log(_Args, state, None, logs={"grad_norm": 0.5})
    assert frozen.result == {"step": None, "fraction": None, "elements": 0}

    stuck = WeightsMoved(_Trainer())
    stuck.on_step_begin(_Args, state, None, model=model)
    stuck.on_step_end(_Args, state, None, model=model)
    with pytest.raises(WeightsDidNotMove, match="changed none of 72 sampled trainable weights"):
        stuck.on_log(_Args, state, None, logs={"grad_norm": 0.5})


# --- importance sampling: the mode and what it corrected -------------------------------------------------------------


def test_trlvr_runs_token_truncate_by_default_and_a_config_can_choose_another():
    _, grpo, _ = parse_run_args(["--config", "toy"])
    assert IS_MODE == "token_truncate" and grpo.vllm_importance_sampling_mode == IS_MODE
    _, grpo, _ = parse_run_args(["--config", "toy", "--vllm_importance_sampling_mode", "sequence_mask"])
    assert grpo.vllm_importance_sampling_mode == "sequence_mask"
    for name, path in shipped_configs().items():
        assert (
            parse_run_args(
                [
                    "--config",
                    str(path),
                    "--senior",
                    "s",
                    "--junior",
                    "j",
                    "--dataset",
                    "d",
                    "--use_cpu",
                    "true",
                ]
            )[1].vllm_importance_sampling_mode
            == IS_MODE
        ), name


def test_is_corrected_counts_token_truncate_counts_clamped_loss_tokens_only():
    ratio = torch.tensor([[3.0, 1.0, 0.5, 3.0], [1.0, 1.0, 1.0, 1.0], [3.0, 3.0, 3.0, 3.0]])
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0], [0, 0, 0, 0]])  # row 3: no loss token (all junior's)
    assert is_corrected_counts(ratio, mask, mode="token_truncate", clip_min=None, clip_max=3.0) == (
        1,
        5,
        1,
        2,
    )
    assert is_corrected_counts(ratio, mask, mode="token_truncate", clip_min=0.5, clip_max=3.0) == (2, 5, 1, 2)


def test_is_corrected_counts_sequence_mask_zeroes_whole_rows_by_their_loss_tokens():
    ratio = torch.tensor([[0.0], [1.2], [0.0]])  # TRL's (B, 1) sequence ratio after its mask
    mask = torch.tensor([[1, 1, 1, 1], [1, 0, 0, 0], [0, 1, 1, 0]])
    assert is_corrected_counts(ratio, mask, mode="sequence_mask", clip_min=None, clip_max=3.0) == (6, 7, 2, 3)
    assert is_corrected_counts(
        torch.tensor([[0.0, 2.0]]), torch.tensor([[1, 1]]), mode="token_mask", clip_min=None, clip_max=3.0
    ) == (1, 2, 1, 1)
    with pytest.raises(ValueError, match="unknown importance-sampling mode"):
        is_corrected_counts(ratio, mask, mode="sequence", clip_min=None, clip_max=3.0)


def test_the_smoke_check_is_ok_when_every_arm_moved_and_not_measured_when_an_arm_had_no_gradient():
    from trlvr.experiments.smoke import weights_moved_check

    arms = {
        "tandem": {
            "rows": [
                {
                    "step": 1,
                    WEIGHTS_MOVED: 0.97,
                    "tandem/is/corrected_tokens": 0.01,
                    "tandem/is/corrected_rows": 0.25,
                },
                {"step": 2},
            ]
        },
        "grpo": {"rows": [{"step": 1, WEIGHTS_MOVED: 1.0}]},
    }
    check = weights_moved_check(arms)
    assert check["status"] == "ok" and check["fraction"] == {"tandem": 0.97, "grpo": 1.0}
    assert check["is_corrected"] == {"tandem": {"corrected_tokens": 0.01, "corrected_rows": 0.25}, "grpo": {}}
    arms["grpo"]["rows"] = [{"step": 1}]  # every step's gradient was zero: nothing to judge
    assert weights_moved_check(arms)["status"] == "not measured"


# --- issue 59: at the first step, the optimizer's master weights are fp32 (structural) ----------------------------


class _Wrapper:
    """accelerate's AcceleratedOptimizer / DeepSpeedOptimizerWrapper: the optimizer it wraps as `.optimizer`."""

    def __init__(self, inner):
        self.optimizer = inner


class _FakeZero:
    """DeepSpeed ZeRO-1/2's optimizer (deepspeed 0.19.8 `zero/stage_1_and_2.py:344,577`): its fp32 partition of the
    bf16 weights in `single_partition_of_fp32_groups`, which its inner torch optimizer updates."""

    def __init__(self, master_dtype):
        bf16 = [torch.randn(64, dtype=torch.bfloat16)]
        self.single_partition_of_fp32_groups = [bf16[0].clone().to(master_dtype).requires_grad_()]
        self.low_precision_master_weights_and_grads = master_dtype != torch.float32
        self.optimizer = torch.optim.AdamW(self.single_partition_of_fp32_groups, lr=1e-6)


def _step_begin(optimizer, optim="adamw_torch", optim_args=None):
    from types import SimpleNamespace

    from transformers import TrainerControl, TrainerState

    trainer = SimpleNamespace(_metrics={"train": {}})
    args = SimpleNamespace(optim=optim, optim_args=optim_args, learning_rate=1e-6)
    model = nn.Linear(4, 4)
    WeightsMoved(trainer).on_step_begin(
        args, TrainerState(), TrainerControl(), model=model, optimizer=optimizer
    )


def test_a_torch_optimizer_over_bf16_weights_is_refused_at_the_first_step():
    from trlvr.training.learning import UpdatesRoundAway

    params = [nn.Parameter(torch.randn(8, 8, dtype=torch.bfloat16)), nn.Parameter(torch.randn(8))]
    with pytest.raises(UpdatesRoundAway) as e:
        _step_begin(_Wrapper(torch.optim.AdamW(params, lr=1e-6)))
    line = str(e.value)
    assert "\n" not in line and line.startswith(
        "step 1: the optimizer (AdamW, optim adamw_torch) updates 1 of its 2 "
        "tensors in bfloat16 with no fp32 master copy"
    )
    _step_begin(
        _Wrapper(torch.optim.AdamW([nn.Parameter(torch.randn(8, 8))], lr=1e-6))
    )  # fp32 weights: passes
    _step_begin(_Wrapper(torch.optim.AdamW(params, lr=1e-6)), optim="stable_adamw")  # Kahan summation: passes


def test_deepspeeds_fp32_master_partition_passes_and_a_bf16_one_is_refused():
    from trlvr.training.learning import UpdatesRoundAway, master_weights_problem

    assert master_weights_problem(_Wrapper(_FakeZero(torch.float32))) is None
    _step_begin(_Wrapper(_FakeZero(torch.float32)))
    with pytest.raises(UpdatesRoundAway, match="bf16_master_weights_and_grads: true"):
        _step_begin(_Wrapper(_FakeZero(torch.bfloat16)))
    zero = _FakeZero(torch.bfloat16)
    del (
        zero.low_precision_master_weights_and_grads
    )  # a DeepSpeed without the flag: its partitions' dtype tells
    assert "updates 1 of its 1 tensors in bfloat16" in master_weights_problem(_Wrapper(zero))


def test_the_measured_moved_share_cannot_tell_bf16_from_fp32_masters_after_one_step():
    """Why the check above is structural: one AdamW step at lr 1e-6 changes about the same share of bf16
    elements whether the update is applied to the bf16 weights or to an fp32 master rounded to bf16."""
    torch.manual_seed(0)
    w = torch.randn(256, 256) * 0.02
    grad = torch.randn(256, 256) + 0.5
    pure = w.to(torch.bfloat16).clone().requires_grad_()
    master = w.to(torch.bfloat16).float().requires_grad_()
    start = pure.detach().clone()
    for p in (pure, master):
        p.grad = grad.to(p.dtype)
        torch.optim.AdamW([p], lr=1e-6, weight_decay=0.0).step()
    a, b = (
        moved_fraction([start], [pure.detach()]),
        moved_fraction([start], [master.detach().to(torch.bfloat16)]),
    )
    assert abs(a - b) < 0.01 and 0 < a < 0.1, (a, b)

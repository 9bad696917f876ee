"""backend vllm under a training sharding its weight sync cannot read (review finding 9) is refused in one
line at config check time: TRL 1.16 hands the weight sync each ZeRO-3 parameter inside its own gather, and
each FSDP1 module's parameters inside `summon_full_params`, while vLLM's layerwise reload keeps the tensors
until a whole layer has arrived (no vLLM needed: the check and the facts it reads)."""

from __future__ import annotations

import json

import pytest

from trlvr.engine.capabilities import Plan, check_capabilities
from trlvr.errors import UserError
from trlvr.training.learning import launch_sharding

LAUNCH_VARS = (
    "ACCELERATE_USE_DEEPSPEED",
    "ACCELERATE_DEEPSPEED_ZERO_STAGE",
    "ACCELERATE_DEEPSPEED_CONFIG_FILE",
    "ACCELERATE_USE_FSDP",
    "FSDP_VERSION",
)


@pytest.fixture
def launch(monkeypatch):
    for var in LAUNCH_VARS:
        monkeypatch.delenv(var, raising=False)
    return monkeypatch


@pytest.mark.parametrize(("sharding", "named"), [("zero3", "DeepSpeed ZeRO-3"), ("fsdp1", "FSDP1")])
def test_vllm_under_zero3_or_fsdp1_is_refused_in_one_line(sharding, named):
    with pytest.raises(UserError) as e:
        check_capabilities(Plan("train", "lockstep", "vllm", sharding=sharding))
    assert str(e.value).startswith(f"backend vllm: this launch shards the senior with {named},")
    assert "\n" not in str(e.value) and "ZeRO-1/2" in str(e.value)


@pytest.mark.parametrize("sharding", [None, "zero1", "zero2", "fsdp2"])
def test_vllm_under_other_shardings_and_hf_under_any_pass(sharding):
    assert check_capabilities(Plan("train", "lockstep", "vllm", sharding=sharding)) == {}
    assert check_capabilities(Plan("train", "lockstep", "hf", sharding="zero3")) == {}


def test_the_sharding_is_read_from_what_accelerate_launch_exports(launch, tmp_path):
    assert launch_sharding() is None
    launch.setenv("ACCELERATE_USE_DEEPSPEED", "true")
    launch.setenv("ACCELERATE_DEEPSPEED_ZERO_STAGE", "3")
    assert launch_sharding() == "zero3"
    launch.delenv("ACCELERATE_DEEPSPEED_ZERO_STAGE")
    config = tmp_path / "ds.json"
    config.write_text(json.dumps({"zero_optimization": {"stage": 2}}))
    launch.setenv("ACCELERATE_DEEPSPEED_CONFIG_FILE", str(config))
    assert launch_sharding() == "zero2"
    launch.setenv("ACCELERATE_USE_DEEPSPEED", "false")
    launch.setenv("ACCELERATE_USE_FSDP", "true")
    assert launch_sharding() == "fsdp1"  # accelerate's default version
    launch.setenv("FSDP_VERSION", "2")
    assert launch_sharding() == "fsdp2"


def test_the_sharding_is_read_from_the_runs_own_arguments(launch, tmp_path):
    class Args:
        deepspeed, fsdp, fsdp_config = None, "", None

    args = Args()
    assert launch_sharding(args) is None
    args.deepspeed = {"zero_optimization": {"stage": 3}}
    assert launch_sharding(args) == "zero3"
    args.deepspeed = str(tmp_path / "missing.json")
    assert launch_sharding(args) == "zero?"
    args.deepspeed, args.fsdp, args.fsdp_config = None, "full_shard auto_wrap", {"version": 2}
    assert launch_sharding(args) == "fsdp2"


def test_a_zero3_launch_refuses_a_vllm_run_config_before_any_model_loads(launch, tmp_path):
    from trlvr.config import load_run_config
    from trlvr.toy.world import ASSETS_DIR
    from trlvr.training.build import check_pairing

    models = {"senior": str(ASSETS_DIR / "senior"), "junior": str(ASSETS_DIR / "junior")}
    vllm, _ = load_run_config(
        "toy", {**models, "backend": "vllm"}
    )  # before the launch's variables: GRPOConfig reads them
    hf, _ = load_run_config("toy", {**models, "backend": "hf"})
    launch.setenv("ACCELERATE_USE_DEEPSPEED", "true")
    launch.setenv("ACCELERATE_DEEPSPEED_ZERO_STAGE", "3")
    with pytest.raises(UserError, match="DeepSpeed ZeRO-3"):
        check_pairing(vllm)
    check_pairing(hf)  # backend hf trains under ZeRO-3

"""Every shipped YAML loads through TRL's parser, and every recipe matches the paper's batch arithmetic."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from trlvr.cli.main import main as cli
from trlvr.config import (
    CONFIGS_DIR,
    TANDEM_FIELDS,
    TandemConfig,
    grpo_field_names,
    load_run_config,
    parse_run_args,
)
from trlvr.errors import UserError

ROOT = Path(__file__).resolve().parents[1]
RECIPES = sorted(p for p in (ROOT / "recipes").glob("*.yaml") if not p.name.startswith("accelerate"))
# starter.yaml leaves the models and data to the user (test_the_starter_config_is_the_papers_on_a_gpu)
RUN_CONFIGS = sorted(p for p in CONFIGS_DIR.glob("*.yaml") if p.stem != "starter") + RECIPES
STARTER_PATHS = {"senior": "Qwen/Qwen3-1.7B", "junior": "Qwen/Qwen3-0.6B", "dataset": "problems.jsonl"}
GPU_ON_CPU = {"bf16": False, "use_cpu": True}  # validate GPU recipes' fields on a CPU machine
PROCESSES = yaml.safe_load((ROOT / "recipes/accelerate-zero2-2gpu.yaml").read_text())["num_processes"]


def test_configs_exist_and_ship_in_the_package():
    assert (CONFIGS_DIR / "toy.yaml").is_file() and CONFIGS_DIR.parent.name == "trlvr"
    assert {p.name for p in RECIPES} == {
        "qwen3-4b-deepscaler.yaml",
        "qwen3-4b-grpo-g16-deepscaler.yaml",
        "qwen3-4b-grpo-kl-junior-deepscaler.yaml",
        "qwen3-4b-lora-self-1gpu.yaml",
        "qwen3-4b-junior-0.6b-deepscaler.yaml",
    }


@pytest.mark.parametrize("path", RUN_CONFIGS, ids=lambda p: p.name)
def test_run_config_validates(path):
    raw = yaml.safe_load(path.read_text())
    over = {} if raw.get("use_cpu") else GPU_ON_CPU
    tandem, args = load_run_config(path, over)
    assert isinstance(tandem, TandemConfig)
    assert args.loss_type == "dapo" and args.epsilon == 0.2 and args.logging_nan_inf_filter is False
    assert args.generation_batch_size % args.num_generations == 0
    assert "{arm}" not in args.output_dir and tandem.arm in args.output_dir
    lines = path.read_text().splitlines()
    assert lines[0].startswith("#") and any("Launch" in line for line in lines[:5]), (
        "header with launch command"
    )


def prompts_per(args, processes: int) -> tuple[float, float]:
    """(prompts per generation batch, prompts per optimizer step) over all processes, TRL 1.16 semantics."""
    per_step_seqs = args.per_device_train_batch_size * processes * args.gradient_accumulation_steps
    per_gen_seqs = args.per_device_train_batch_size * processes * args.steps_per_generation
    return per_gen_seqs / args.num_generations, per_step_seqs / args.num_generations


@pytest.mark.parametrize("path", RECIPES, ids=lambda p: p.name)
def test_recipes_match_the_papers_batch(path):
    tandem, args = load_run_config(path, GPU_ON_CPU)
    per_gen, per_step = prompts_per(args, 1 if "1gpu" in path.name else PROCESSES)
    assert (per_gen, per_step) == (16, 8), path.name  # 16 prompts per generation, 8-prompt mini-batch
    assert args.num_generations == (16 if "g16" in path.name else 8)
    assert tandem.senior == "Qwen/Qwen3-4B-Instruct-2507" and tandem.max_prompt_length == 1024
    assert args.learning_rate == (1e-5 if tandem.use_peft else 1e-6) and args.lr_scheduler_type == "constant"
    assert tandem.use_peft == ("lora" in path.name) and (tandem.junior == "self") == (
        "lora-self" in path.name
    )
    assert args.temperature == 0.6 and args.top_p == 1.0 and args.max_completion_length == 3000
    assert args.beta == (0.001 if "kl-junior" in path.name else 0.0)
    if "kl-junior" in path.name:
        assert tandem.kl_ref == "junior" and tandem.arm == "grpo"
    if "lora" not in path.name:  # the paper's recipes train as the authors did (issue 57)
        assert tandem.prompt_template == "authors"
        assert (
            args.weight_decay == 0.01
        )  # verl's actor AdamW default (ppo_trainer.yaml actor.optim.weight_decay)
        assert args.vllm_importance_sampling_correction is False  # verl: no rollout IS correction


def test_a_training_prompt_is_built_with_the_runs_template():
    from helpers import tiny_tokenizer

    from trlvr.data import Problem
    from trlvr.data.prompts import AUTHORS_INSTRUCTION
    from trlvr.training.build import build_dataset

    probs = [Problem("p:1", "What is 1+1?", "2", "p")]
    assert (
        build_dataset(probs, tiny_tokenizer(), template="authors")[0]["prompt"]
        == "What is 1+1?" + AUTHORS_INSTRUCTION
    )
    assert "Let's think step by step" in build_dataset(probs, tiny_tokenizer())[0]["prompt"]
    with pytest.raises(UserError, match="^prompt_template: must be one of"):
        load_run_config(CONFIGS_DIR / "toy.yaml", {"prompt_template": "paper"})


def test_the_is_correction_switch_is_the_recipes_key_and_a_flag():
    """Off in the paper's recipes; on again from the command line, in trlvr's mode (token_truncate)."""
    path = ROOT / "recipes" / "qwen3-4b-deepscaler.yaml"
    _, off = load_run_config(path, GPU_ON_CPU)
    _, on = load_run_config(path, {**GPU_ON_CPU, "vllm_importance_sampling_correction": True})
    assert (off.vllm_importance_sampling_correction, on.vllm_importance_sampling_correction) == (False, True)
    assert on.vllm_importance_sampling_mode == "token_truncate"


def test_the_starter_config_is_the_papers_on_a_gpu():
    """`--config starter` (docs: training from the CLI) must not bring the toy's CPU settings to real models."""
    raw = yaml.safe_load((CONFIGS_DIR / "starter.yaml").read_text())
    assert "use_cpu" not in raw and raw["bf16"] is True
    tandem, args = load_run_config(CONFIGS_DIR / "starter.yaml", {**GPU_ON_CPU, **STARTER_PATHS})
    assert tandem.backend == "hf"
    assert prompts_per(args, 1) == (16, 8)
    assert (args.max_completion_length, args.learning_rate, args.temperature) == (3000, 1e-6, 0.6)
    assert args.loss_type == "dapo" and tandem.schedule == "word" and tandem.holdout > 0
    with pytest.raises(UserError, match=r"^senior: a senior model path is required"):
        load_run_config(CONFIGS_DIR / "starter.yaml", GPU_ON_CPU)
    with pytest.raises(UserError, match=r"^junior: arm=tandem needs a junior model path"):
        load_run_config(CONFIGS_DIR / "starter.yaml", {**GPU_ON_CPU, "senior": "s", "dataset": "d.jsonl"})


def test_ablation_arms_never_share_a_directory():
    dirs = {
        load_run_config(p, {**GPU_ON_CPU, "arm": arm})[1].output_dir for p in RECIPES for arm in ("grpo",)
    }
    dirs |= {load_run_config(RECIPES[0], {**GPU_ON_CPU, "arm": "tandem"})[1].output_dir}
    assert len(dirs) == len(RECIPES) + 1, dirs


def test_toy_config_arm_on_the_command_line():
    t, a, _ = parse_run_args(["--config", "toy", "--arm", "grpo", "--p", "0.3", "--max_steps", "3"])
    assert (t.arm, t.p, a.max_steps, a.output_dir) == ("grpo", 0.3, 3, "runs/toy-grpo")
    t, a, opts = parse_run_args(["--config", "toy", "--resume", "--seed", "7"])
    assert t.arm == "tandem" and a.output_dir == "runs/toy-tandem" and a.seed == 7 and opts.resume


@pytest.mark.parametrize(
    "argv, fragment",
    [
        (["--config", "toy", "--p", "high"], "argument --p: invalid float value: 'high'"),
        (["--config", "toy", "--learning_rate", "abc"], "invalid float value: 'abc'"),
        (["--config", "toy", "--bogus", "1"], "unknown key(s) bogus"),
        (["--config", "toy", "--max_step", "3"], "unknown key(s) max_step (did you mean max_steps?)"),
        # TRL's script names, named before the missing senior they stand for
        (
            [
                "--config",
                "starter",
                "--model_name_or_path",
                "Qwen/Qwen3-0.6B",
                "--dataset_name",
                "openai/gsm8k",
                "--dry-run",
            ],
            "unknown key(s) model_name_or_path (TRL's script name; trlvr's field is senior), dataset_name (TRL's "
            "script name; trlvr's field is dataset)",
        ),
        (["--config", "toy", "--arm", "ppo"], "arm: must be one of"),
        (["--config", "nope.yaml"], "--config nope.yaml: no such file"),
        (["--config", "toy", "--junior", "self"], "'self' needs use_peft: true"),
    ],
)
def test_bad_train_input_is_one_line_naming_the_key(argv, fragment, capsys):
    assert cli(["train", *argv]) == 2
    err = capsys.readouterr().err
    assert fragment in err and err.count("\n") == 1 and "Traceback" not in err


@pytest.mark.parametrize(
    "argv, fragment",
    [
        (
            ["eval", "--senoir", "s", "--data", "a=b"],
            "unrecognized arguments: --senoir (did you mean --senior?)",
        ),
        (["toy", "prepare", "--outt", "x"], "unrecognized arguments: --outt (did you mean --out?)"),
    ],
)
def test_an_unknown_flag_is_named_before_a_missing_one(argv, fragment, capsys):
    assert cli(argv) == 2
    err = capsys.readouterr().err
    assert fragment in err and err.count("\n") == 1 and "required" not in err


@pytest.fixture
def no_loggers(monkeypatch):
    """A machine where no logger package (wandb, trackio, ...) is installed."""
    from transformers.integrations import integration_utils

    monkeypatch.setattr(integration_utils, "get_available_reporting_integrations", lambda: [])


@pytest.mark.parametrize(
    "flags, fragment",
    [
        (["--report_to", "wandb"], "report_to wandb: its package is not installed (pip install wandb)"),
        (
            ["--report_to", "comet_ml"],
            "report_to comet_ml: its package is not installed (pip install comet-ml)",
        ),
        (["--report_to", "wand"], "report_to wand: not a logger transformers knows (did you mean wandb?"),
    ],
)
def test_a_missing_logger_is_one_line_at_dry_run(no_loggers, flags, fragment, capsys):
    assert cli(["train", "--config", "toy", "--holdout", "0", *flags, "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert fragment in err and err.count("\n") == 1


def test_a_missing_logger_is_refused_before_the_trainer_loads_a_model(no_loggers, tmp_path):
    from trl import GRPOConfig

    from trlvr.training import TandemGRPOTrainer

    args = GRPOConfig(output_dir=str(tmp_path), use_cpu=True, bf16=False, report_to="trackio")
    with pytest.raises(UserError, match=r"^GRPOConfig: report_to trackio: its package is not installed"):
        TandemGRPOTrainer("no-such-org/no-such-model", "no-such-org/junior", args=args, reward_funcs=len)


def test_unknown_yaml_key_is_named(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("senior: s\ntandem:\n  p: 0.3\n")
    with pytest.raises(UserError, match="unknown key.*tandem.*drop the tandem:/grpo: sections"):
        parse_run_args(["--config", str(bad)])


def test_tandem_fields_do_not_collide_with_grpo_fields():
    assert not TANDEM_FIELDS & grpo_field_names()


def test_tandem_config_errors_name_the_field():
    with pytest.raises(UserError, match="^arm:"):
        TandemConfig(arm="ppo", senior="s")
    with pytest.raises(UserError, match="^junior: arm=tandem needs"):
        TandemConfig(arm="tandem", senior="s").check_model_paths()  # what a run that loads models checks
    with pytest.raises(UserError, match="^senior: a senior model path is required"):
        TandemConfig(junior="j").check_model_paths()
    assert TandemConfig(p=0.5).senior == ""  # model objects passed to TandemGRPOTrainer need no paths
    with pytest.raises(UserError, match="^p:"):
        TandemConfig(senior="s", junior="j", p=1.5)
    assert TandemConfig(arm="grpo", senior="s").schedule_kwargs() == ("solo", {"author": "senior"})


def test_every_field_declares_its_kind_once_with_the_field():
    """One declaration per setting: each TandemConfig field carries exactly one kind in its annotation,
    FIELD_KINDS is read from those (field order), and no kind is declared for what is not a field."""
    import dataclasses
    import typing

    from trl import GRPOConfig

    from trlvr import kinds as K
    from trlvr.config import FIELD_KINDS, TRL_KINDS

    hints = typing.get_type_hints(TandemConfig, include_extras=True)
    fields = [f.name for f in dataclasses.fields(TandemConfig)]
    declared = {
        n: [k for k in getattr(h, "__metadata__", ()) if isinstance(k, K.Kind)] for n, h in hints.items()
    }
    assert [n for n in fields if len(declared.get(n, ())) != 1] == [], "a field without exactly one kind"
    assert sorted(n for n, kinds in declared.items() if kinds and n not in fields) == [], (
        "a kind on a non-field"
    )
    same = [
        (k.name, k.base, k.expected) for k in FIELD_KINDS.values()
    ]  # annotations are re-read as new objects
    assert list(FIELD_KINDS) == fields and same == [
        (k.name, k.base, k.expected) for n in fields for k in declared[n]
    ]
    grpo = {f.name for f in dataclasses.fields(GRPOConfig)}
    assert sorted(set(TRL_KINDS) - grpo) == [], "a TRL_KINDS key that is no trl.GRPOConfig field"


# One refused value per TandemConfig field and the exact line the user reads (a field missing here fails below).
def _refusals():
    from trlvr.config import ARMS, KL_REFS, SCHEDULES
    from trlvr.engine.options import DECODE_MODES
    from trlvr.engine.schedules import WORD_HANDOFFS
    from trlvr.rewards import GRADERS
    from trlvr.rewards.length import LENGTH_PENALTIES

    count = "must be an integer in [1, 2**63 - 1]"
    return {
        "arm": ("ppo", f"must be one of {ARMS}"),
        "senior": (" ", "must be a non-empty value"),
        "junior": (" ", "must be a non-empty value"),
        "schedule": ("x", f"must be one of {SCHEDULES}"),
        "p": (1.5, "must be a number in [0, 1]"),
        "max_gap": (0, count),
        "handoff": ("flip", f"must be one of {WORD_HANDOFFS}"),
        "chunk_size": (-1, count),
        "first_author": ("both", "must be 'senior' or 'junior'"),
        "max_rounds": (1.5, count),
        "kl_ref": ("ref", f"must be one of {KL_REFS}"),
        "dataset": (" ", "must be a non-empty value"),
        "dataset_split": ("", "must be a non-empty value"),
        "dataset_limit": (0, count),
        "reward": ("", "must be a non-empty value"),
        "grader": ("verl", f"must be one of {GRADERS}"),
        "length_penalty": ("dapo", f"must be one of {LENGTH_PENALTIES}"),
        "length_penalty_weight": (-1, "must be a finite number >= 0"),
        "max_prompt_length": ([1], count),  # YAML gives any type
        "prompt_template": ("qwen", "must be one of trlvr, authors"),
        "nonfinite_patience": (0, count),
        "preempt_grace_s": (float("inf"), "must be a finite number > 0"),
        "refuse_lossy_prompts": (3, "must be true or false"),
        "decode": ("paged", f"must be one of {DECODE_MODES}"),
        "compile": ("maybe", "must be true, false or auto"),
        "junior_device": (" ", "must be a device name such as cpu or cuda:1"),
        "pairing": ("tokens", "must be auto, lockstep or text"),
        "gpu_memory": (" ", "must be a size such as 80GB or 141GiB, or a GPU name such as H200"),
        "backend": ("tpu", "must be hf or vllm"),
        "holdout": (-1, "must be an integer in [0, 2**63 - 1]"),
        "holdout_seed": (1.5, "must be an integer"),
        "use_peft": ("yes", "must be true or false"),
        "lora_r": (0, count),
        "lora_alpha": (0, count),
        "lora_dropout": (1.0, "must be a number in [0, 1)"),
        "lora_target_modules": (" ", "must be a non-empty value"),
    }


def test_every_field_has_a_refused_value_below():
    from trlvr.config import FIELD_KINDS

    assert list(_refusals()) == list(FIELD_KINDS)


@pytest.mark.parametrize("name", list(_refusals()))
def test_a_refused_value_is_one_line_naming_the_key(name):
    value, rule = _refusals()[name]
    with pytest.raises(UserError) as e:
        TandemConfig(**{name: value})
    assert str(e.value) == f"{name}: {rule} (got {value!r})"


@pytest.mark.parametrize(
    "text, said",
    [
        ("a: [", "not a readable YAML file (while parsing"),
        ("- 1\n", "expected a mapping of keys to values, got list"),
    ],
)
def test_a_config_file_it_cannot_read_is_one_line_at_dry_run(tmp_path, capsys, text, said):
    """The dry run reads the config for its sleep-mode question before the checks do: the same one line."""
    path = tmp_path / "c.yaml"
    path.write_text(text)
    assert cli(["train", "--config", str(path), "--vllm_enable_sleep_mode", "true", "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"trlvr train: error: config {path}: {said}") and err.count("\n") == 1


def test_the_toy_config_in_a_fresh_folder_names_the_command_that_makes_its_world(
    tmp_path, monkeypatch, capsys
):
    monkeypatch.chdir(tmp_path)
    assert cli(["train", "--config", "toy", "--arm", "tandem", "--max_steps", "1"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "run `trlvr toy prepare --out runs/toy` first" in err
    assert "runs/toy/senior, runs/toy/data/train.jsonl are not here" in err


def test_the_toy_config_holds_out_200_and_a_small_file_is_one_line_naming_the_override(tmp_path, capsys):
    """toy.yaml holds out 200 problems (what `trlvr select RUN --val split:200` reads); a training file that cannot
    spare them is refused before any model loads, naming --holdout 0."""
    from trlvr.toy.task import generate_problems
    from trlvr.toy.world import ASSETS_DIR, _rows, _write_jsonl

    assert parse_run_args(["--config", "toy"])[0].holdout == 200
    _write_jsonl(tmp_path / "small.jsonl", _rows(generate_problems(32, "train", seed=0)))
    argv = [
        "train",
        "--config",
        "toy",
        "--senior",
        str(ASSETS_DIR / "senior"),
        "--junior",
        str(ASSETS_DIR / "junior"),
        "--dataset",
        str(tmp_path / "small.jsonl"),
        "--output_dir",
        str(tmp_path / "run"),
        "--dry-run",
    ]
    assert cli(argv) == 2
    err = capsys.readouterr().err
    assert err == (
        "trlvr train: error: holdout: cannot hold out 200 of 32 problems and still train on some; hold out "
        "fewer (--holdout 0: none)\n"
    )
    assert cli([*argv, "--holdout", "0"]) == 0
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("path", RECIPES, ids=lambda p: p.name)
def test_a_recipes_launch_line_works_from_any_folder(path):
    """accelerate reads --config_file itself: a clone path (`recipes/...`) fails in an installed package, so the
    Launch line names the shipped file through `trlvr recipes --path`, which the dry run's plan reads too."""
    from trlvr.config import RECIPES_DIR
    from trlvr.training.memory_plan import recipe_launcher

    launch = [line for line in path.read_text().splitlines()[:6] if "accelerate launch" in line]
    assert all("--config_file recipes/" not in line for line in launch), launch
    if launch:
        assert '--config_file "$(trlvr recipes --path accelerate-zero2-2gpu)"' in launch[0]
        assert recipe_launcher(path) == RECIPES_DIR / "accelerate-zero2-2gpu.yaml"
    else:
        assert recipe_launcher(path) is None

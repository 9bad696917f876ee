"""`trlvr smoke` on CPU: the toy pair (the shipped checkpoints) for one step of each arm, then select and eval;
the checks are computed from the runs' own logs, and smoke.json records them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from trlvr.cli.main import main
from trlvr.experiments.smoke import GRADER_PAIRS, mask_check, self_pair_check, self_pair_model, step_bound
from trlvr.memory import MemoryPlan, Stack, read_config
from trlvr.team import SELF, Team
from trlvr.toy.task import generate_problems
from trlvr.toy.world import ASSETS_DIR, _rows, _write_jsonl


@pytest.fixture(scope="module")
def toy_data(tmp_path_factory):
    path = tmp_path_factory.mktemp("toy") / "train.jsonl"
    _write_jsonl(path, _rows(generate_problems(120, "train", seed=0)))
    return path


def smoke_argv(out: Path, toy_data: Path) -> list[str]:
    return [
        "smoke",
        "--config",
        "toy",
        "--out",
        str(out),
        "--steps",
        "1",
        "--problems",
        "2",
        "--set",
        f"senior={ASSETS_DIR / 'senior'}",
        "--set",
        f"junior={ASSETS_DIR / 'junior'}",
        "--set",
        f"dataset={toy_data}",
        "--set",
        "per_device_train_batch_size=16",
        "--set",
        "max_completion_length=48",
    ]


@pytest.fixture(scope="module")
def screen_smoke(tmp_path_factory, toy_data):
    """(out, what a terminal showed, exit code) of one `trlvr smoke` in a child process (native and library
    output count too): the screen test reads its screen, the checks test its smoke.json."""
    import os
    import subprocess
    import sys

    root, cwd = Path(__file__).resolve().parents[1], tmp_path_factory.mktemp("screen")
    env = {k: v for k, v in os.environ.items() if k != "TRL_EXPERIMENTAL_SILENCE"}
    env.update(PYTHONPATH=str(root), OMP_NUM_THREADS="1")
    out = cwd / "smoke"
    done = subprocess.run(
        [sys.executable, "-m", "trlvr.cli.main", *smoke_argv(out, toy_data)],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    return out, (done.stdout + done.stderr).splitlines(), done.returncode


def test_smoke_runs_both_arms_and_records_every_check(tmp_path, toy_data, screen_smoke):
    import shutil

    first, screen, code = screen_smoke
    assert code == 0, "\n".join(screen[-30:])
    out = tmp_path / "smoke"
    shutil.copytree(first, out)  # the screen test's smoke (its own folder stays as it ran)
    argv = smoke_argv(out, toy_data)
    report = json.loads((out / "smoke.json").read_text())
    checks = report["checks"]
    assert report["passed"] and report["code"] is not None
    assert (
        checks["author_mask"]["status"] == "ok"
    )  # the share in 0.5 +- 0.3, TRL's length = the senior's tokens
    assert checks["author_mask"]["grpo_senior_share"] == [1.0]
    assert checks["grader"]["status"] == "ok" and checks["grader"]["timeout_status"] == "timeout"
    assert checks["select_eval"]["status"] == "ok"
    assert checks["lengths"]["eval"]["samples"] == 2 * 2  # 2 problems x (solo, handoff) x n 1
    pair = checks[
        "self_pair"
    ]  # the toy junior as its own partner, solo and handoff on the 2 held-out problems
    assert pair["status"] == "ok" and pair["model"] == str(ASSETS_DIR / "junior"), pair
    assert (
        pair["problems"] == 2 and pair["samples"] == 4 and pair["interval"][0] <= 0.0 <= pair["interval"][1]
    )
    assert "  self-pair: ok: handoff - solo pass@1 " in "\n".join(screen)
    assert checks["memory"]["status"] == "not measured"  # backend hf on a CPU: no engine KV report
    printed = "\n".join(screen)
    assert "smoke" in printed and "  weights moved: " in printed  # beside the other checks
    assert checks["weights_moved"]["status"] in ("ok", "not measured"), checks[
        "weights_moved"
    ]  # never failed: training stops first
    # a second smoke into the same folder sets the first aside (nothing deleted)
    assert main(argv[:-2] + ["--set", "max_completion_length=40"]) == 0
    assert [p.name.startswith("replaced-") for p in out.iterdir()].count(True) == 1


def test_mask_check_fails_when_trl_counted_the_juniors_tokens():
    tandem = [
        {
            "tandem/senior_share": 0.5,
            "completions/mean_length": 30.0,
            "tandem/senior_tokens/mean": 15.0,
            "tandem/team_length/mean": 30.0,
        }
    ]
    grpo = [{"tandem/senior_share": 1.0}]
    assert mask_check(tandem, grpo, 0.5)["status"] == "failed"
    tandem[0]["completions/mean_length"] = 15.0
    assert mask_check(tandem, grpo, 0.5)["status"] == "ok"
    assert mask_check(tandem, [{"tandem/senior_share": 0.9}], 0.5)["status"] == "failed"  # grpo must be solo
    tandem[0]["tandem/senior_share"] = 1.0  # the junior never wrote
    assert mask_check(tandem, grpo, 0.5)["status"] == "failed"


def test_step_bound_counts_each_models_kv_at_the_context():
    # issue 35 claim 8: 1.7B + 0.6B hold the same KV per token, so at a long context the bound nears 2,
    # far above the weights-only 1.35
    s, j = (Stack.from_config(n, read_config(n), "bfloat16") for n in ("Qwen/Qwen3-1.7B", "Qwen/Qwen3-0.6B"))
    plan = MemoryPlan((s, j), prompt_len=512, completion_len=3000)
    b = step_bound(plan, prompt_len=512, completion_len=3000, rows=128)
    assert b["weights_only"] == pytest.approx((s.weight_bytes + j.weight_bytes) / s.weight_bytes, abs=1e-3)
    assert 1.9 < b["bound"] < 2.0 and b["weights_only"] < 1.4


def test_grader_pairs_hold_both_verdicts():
    assert {w for _, _, w in GRADER_PAIRS} == {0.0, 1.0}


@pytest.mark.slow  # ~15 s: every smoke check runs by default on the toy pair (test_smoke_runs_both_arms_...)
def test_smoke_on_tiny_random_qwen3_shapes_made_by_the_gpu_script(tmp_path, toy_data):
    """bench/gpu/random_pair.py (what bench/gpu/run.sh runs on a GPU at Qwen3-0.6B's shapes) at tiny
    Qwen3 shapes, then the smoke on that pair: the same code path as the GPU run."""
    import subprocess
    import sys
    from pathlib import Path

    shape = tmp_path / "shape"
    shape.mkdir()
    cfg = {
        "architectures": ["Qwen3ForCausalLM"],
        "model_type": "qwen3",
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 16,
        "vocab_size": 151936,
        "tie_word_embeddings": True,
        "max_position_embeddings": 512,
    }
    (shape / "config.json").write_text(json.dumps(cfg))
    root = Path(__file__).resolve().parents[1]
    subprocess.run(
        [
            sys.executable,
            str(root / "bench" / "gpu" / "random_pair.py"),
            "--shape",
            str(shape),
            "--tokenizer",
            str(ASSETS_DIR / "senior"),
            "--out",
            str(tmp_path / "pair"),
            "--dtype",
            "float32",
        ],
        check=True,
        env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin"},
        capture_output=True,
    )
    out = tmp_path / "smoke"
    code = main(
        [
            "smoke",
            "--config",
            "toy",
            "--out",
            str(out),
            "--steps",
            "1",
            "--problems",
            "2",
            "--set",
            f"senior={tmp_path / 'pair' / 'senior'}",
            "--set",
            f"junior={tmp_path / 'pair' / 'junior'}",
            "--set",
            f"dataset={toy_data}",
            "--set",
            "per_device_train_batch_size=8",
            "--set",
            "max_completion_length=12",
        ]
    )
    report = json.loads((out / "smoke.json").read_text())
    assert code == 0, report["checks"]
    plan = report["checks"]["memory"]["plan"]
    assert (
        plan["stacks"]["senior"]["kv_bytes_per_token"] == 2 * 2 * 2 * 16 * 4
    )  # K+V x layers x KV heads x dim x fp32
    assert (
        report["checks"]["lengths"]["train"]["tandem"]["truncated"] > 0.5
    )  # random weights run to the budget


def test_the_screen_says_n_a_for_what_was_not_measured():
    from trlvr.experiments.smoke import render

    report = {
        "config": "toy",
        "passed": True,
        "checks": {
            "memory": {
                "status": "not measured",
                "planned_kv_tokens": None,
                "engine_kv_tokens": None,
                "device_peak_bytes": None,
            },
            "author_mask": {"status": "ok", "reason": "x"},
            "grader": {
                "status": "ok",
                "pairs": 6,
                "wrong": [],
                "timeout_status": "timeout",
                "timeout_s": 2.02,
            },
            "speed": {"step": 1.5, "generation": None},
            "lengths": {"train": "t", "eval": "e"},
            "preemptions": {"count": 0, "note": "none"},
            "select_eval": {"status": "ok", "eval_dir": "d"},
        },
    }
    screen = render(report)
    assert "None" not in screen and "planned KV n/a tokens, engine KV n/a, device peak n/a" in screen
    assert (
        "grader: ok: 6 of 6 known pairs graded right; a stalled answer ended as timeout after 2.02 s"
        in screen
    )


def test_a_gpu_config_without_cuda_is_one_line_naming_what_to_run(tmp_path, capsys):
    import torch

    from trlvr.cli.main import main as cli

    if torch.cuda.is_available():
        pytest.skip("a CUDA device is here")
    assert cli(["smoke", "--config", "qwen3-4b-lora-self-1gpu", "--out", str(tmp_path / "s")]) == 2
    err = capsys.readouterr().err
    assert (
        err.count("\n") == 1
        and "no CUDA device" in err
        and "`trlvr train --config qwen3-4b-lora-self-1gpu --dry-run`" in err
    )
    assert not (tmp_path / "s").exists()


def test_the_smoke_screen_fits_one_screen_and_the_libraries_output_goes_to_its_log(screen_smoke):
    """A real terminal's view (a child process, so native and library output count too): the checks, no "None",
    no upstream warning or progress bar; those are in DIR/smoke.log."""
    out, screen, code = screen_smoke
    assert code == 0, "\n".join(screen[-30:])
    assert len(screen) <= 40, "\n".join(screen)
    assert not [ln for ln in screen if "None" in ln or "warning" in ln.lower() or "it/s]" in ln], "\n".join(
        screen
    )
    assert any(ln.startswith("smoke ") and ln.endswith(": passed") for ln in screen)
    assert f"  log: {out / 'smoke.log'} (the stages' own output; --verbose prints it here)" in screen
    log = (out / "smoke.log").read_text()
    assert (
        "Loading weights" in log and "wrote " in log
    )  # the libraries' output (transformers' loader) and the stages' own lines, kept


def test_console_to_takes_python_and_native_output_and_none_leaves_it(tmp_path, capfd):
    import os
    import sys

    from trlvr.experiments.smoke import console_to

    log = tmp_path / "smoke.log"
    with console_to(log):
        print("from python")
        os.write(2, b"from native code\n")
        print(
            "a library's warning", file=sys.stderr
        )  # (the warnings module writes there; pytest records them)
    with console_to(None):
        print("on the screen")
    screen = capfd.readouterr()
    assert screen.out == "on the screen\n" and screen.err == ""
    text = log.read_text()
    assert "from python" in text and "from native code" in text and "a library's warning" in text


def test_smoke_keeps_its_verbose_flag():
    from trlvr.cli.main import _split_verbose, build_parser

    argv, verbose = _split_verbose(["smoke", "--config", "toy", "--verbose"])
    assert verbose and build_parser().parse_args(argv).verbose
    assert not build_parser().parse_args(["smoke", "--config", "toy"]).verbose


def test_a_cpu_rehearsal_of_a_bf16_recipe_is_one_line_naming_the_override(tmp_path, capsys):
    import torch

    from trlvr.cli.main import main as cli

    if torch.cuda.is_available():
        pytest.skip("a CUDA device is here")
    assert (
        cli(
            [
                "smoke",
                "--config",
                "qwen3-4b-lora-self-1gpu",
                "--out",
                str(tmp_path / "s"),
                "--set",
                "use_cpu=true",
            ]
        )
        == 2
    )
    err = capsys.readouterr().err
    assert err == (
        "trlvr smoke: error: smoke of qwen3-4b-lora-self-1gpu with use_cpu on a machine without CUDA: bf16 "
        "needs a GPU here; add --set bf16=false for the CPU rehearsal\n"
    )
    assert not (tmp_path / "s").exists()


def test_the_screen_says_n_a_inside_nested_values_and_names_a_failed_stages_error():
    from trlvr.experiments.smoke import render

    report = {
        "config": "toy",
        "passed": False,
        "log": "s/smoke.log",
        "checks": {
            "memory": {
                "status": "not measured",
                "planned_kv_tokens": None,
                "engine_kv_tokens": None,
                "device_peak_bytes": None,
            },
            "author_mask": {"status": "ok", "reason": "x"},
            "weights_moved": {"status": "not measured", "fraction": {"tandem": 1.0, "grpo": None}},
            "grader": {
                "status": "ok",
                "pairs": 6,
                "wrong": [],
                "timeout_status": "timeout",
                "timeout_s": 2.0,
            },
            "speed": {},
            "lengths": {"train": {"tandem": {"truncated": None}}, "eval": None},
            "preemptions": {"count": None, "note": "backend vllm only"},
            "select_eval": {
                "status": "failed",
                "exit_code": 2,
                "eval_dir": "d",
                "error": "trlvr select: error: x",
            },
        },
    }
    screen = render(report)
    assert "None" not in screen
    assert "first step changed {tandem: 1.0, grpo: n/a} of the trainable weights" in screen
    assert (
        "  lengths: {tandem: {truncated: n/a}}, eval n/a" in screen
        and "  pre-emptions: n/a (backend" in screen
    )
    assert "  select + eval: failed (trlvr select: error: x)" in screen
    assert screen.endswith("  log: s/smoke.log (the stages' own output; --verbose prints it here)")


# --- issue 59: refusals before engines; a self-pair's parity after training ----------------------------------------


def _smoke_without_engines(monkeypatch, tmp_path, overrides):
    """run_smoke of the main recipe with its engines faked to fail loudly if reached: (the error, what ran)."""
    from trlvr.errors import UserError
    from trlvr.experiments import smoke

    ran = []

    def engine(*a, **k):
        ran.append("parity")
        raise AssertionError("an engine was built before the checks")

    monkeypatch.setattr(smoke, "run_parity", engine)
    opts = smoke.SmokeOptions(
        "qwen3-4b-deepscaler",
        str(tmp_path / "s"),
        1,
        2,
        None,
        {"use_cpu": True, "bf16": False, **overrides},
        False,
    )
    with pytest.raises(UserError) as e:
        smoke.run_smoke(opts, lambda argv: 0, say=lambda line: ran.append(line))
    return str(e.value), ran


def test_the_bf16_guard_refuses_a_zero_recipes_smoke_before_any_engine(tmp_path, monkeypatch):
    """The main recipe is bf16 full fine-tuning planned for ZeRO-2 on 2 GPUs: a one-process smoke is refused by the
    guard before the parity's three engines are built, naming the override for a one-GPU smoke."""
    line, ran = _smoke_without_engines(monkeypatch, tmp_path, {})
    assert ran == [] and not (tmp_path / "s").exists()
    assert line.startswith("smoke of qwen3-4b-deepscaler, arm tandem: full fine-tuning of bfloat16 weights")
    assert (
        line.endswith("; for a one-GPU smoke of a recipe planned for ZeRO: --set use_peft=true")
        and "\n" not in line
    )


def test_the_disk_refuses_a_smoke_before_any_engine(tmp_path, monkeypatch):
    import shutil

    monkeypatch.setattr(shutil, "disk_usage", lambda p: shutil._ntuple_diskusage(1, 0, 0))
    line, ran = _smoke_without_engines(monkeypatch, tmp_path, {"use_peft": True})
    assert (
        ran == [] and line.startswith("disk: the run's checkpoints need ~") and f"in {tmp_path / 's'}" in line
    )


def test_a_self_pairs_parity_runs_again_after_training_with_the_trained_senior(tmp_path, monkeypatch):
    from trlvr.config import load_run_config
    from trlvr.experiments import smoke

    seen = []
    monkeypatch.setattr(
        smoke, "run_parity", lambda tandem, grpo, memory: seen.append(tandem) or {"status": "ok"}
    )
    tandem, grpo = load_run_config("qwen3-4b-deepscaler", {"use_cpu": True, "bf16": False})
    assert smoke.self_paired(Team.of(tandem)) and tandem.junior == tandem.senior
    trained = tmp_path / "final"
    trained.mkdir()
    (trained / "config.json").write_text("{}")
    assert smoke.trained_parity(tandem, grpo, str(trained), None) == {"status": "ok"}
    assert (
        seen[0].senior == str(trained) and seen[0].junior == tandem.senior
    )  # the trained senior, the starting junior
    lora, _ = load_run_config("qwen3-4b-lora-self-1gpu", {"use_cpu": True, "bf16": False})
    assert smoke.self_paired(Team.of(lora))
    check = smoke.trained_parity(lora, grpo, str(trained), None)
    assert check["status"] == "not measured" and "adapter" in check["reason"] and len(seen) == 1
    distinct, _ = load_run_config("qwen3-4b-junior-0.6b-deepscaler", {"use_cpu": True, "bf16": False})
    assert not smoke.self_paired(Team.of(distinct))


def _pair_rows(solo: list[int], handoff: list[int], n: int = 4) -> list[dict]:
    """Samples of an identical pair: per problem, that many of its n samples right in each protocol."""
    return [
        {"protocol": proto, "problem_id": f"p{i}", "reward": float(j < right)}
        for proto, counts in (("solo", solo), ("handoff", handoff))
        for i, right in enumerate(counts)
        for j in range(n)
    ]


def test_the_self_pair_check_holds_the_difference_to_its_interval():
    ok = self_pair_check(_pair_rows([2, 1, 3, 2, 0, 4, 2, 1], [1, 2, 3, 2, 1, 4, 1, 2]))
    assert ok["status"] == "ok" and ok["diff"] == pytest.approx(1 / 32, abs=1e-4) and ok["problems"] == 8
    assert ok["interval"][0] < 0 < ok["interval"][1] and ok["z"] == 3.29
    # a handoff that loses most of what solo gets right on the same problems: far outside the interval
    bad = self_pair_check(_pair_rows([3, 3, 4, 3, 3, 4, 3, 3], [0, 1, 0, 0, 1, 0, 0, 0]))
    assert bad["status"] == "failed" and bad["diff"] < 0 and bad["interval"][1] < 0
    # every sample alike in both protocols: no noise and no difference, ok
    same = self_pair_check(_pair_rows([4, 0, 4], [4, 0, 4]))
    assert same["status"] == "ok" and same["se"] == 0.0 and same["diff"] == 0.0
    assert self_pair_check(_pair_rows([1], [], n=4)[:4])["status"] == "not measured"


def test_the_self_pair_model_is_the_junior_or_the_starting_senior():
    assert (
        self_pair_model(Team.declared("s", "j")) == "j" and self_pair_model(Team.declared("s", None)) == "s"
    )
    assert (
        self_pair_model(Team.declared("s", SELF)) == "s" and self_pair_model(Team.declared("s", "s")) == "s"
    )

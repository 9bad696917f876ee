"""Capabilities checked before work starts (issue 38, item 4): `trlvr.engine.capabilities`.

A run needs a schedule its pairing can run, metrics its pairing defines, a chat template for chat
prompts, a backend that can hold the pair, and models and data from one toy world. `check_capabilities`
judges these facts in one place; training (`trlvr.training.build.check_pairing`, also `train --dry-run`
and `trlvr smoke`), `trlvr eval` and `trlvr select` call it before any model loads. Tested here as a
table over every pairing x backend x command, then through the commands: exit 2, one line, no
traceback, and no model built.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from helpers import write_sum_problems

import trlvr.engine.capabilities as caps
from trlvr.engine.backends import BACKENDS
from trlvr.engine.capabilities import (
    KL_TO_JUNIOR,
    TEAM_KINDS,
    Plan,
    chat_prompt_of,
    check_capabilities,
    text_schedules,
    world_of,
    worlds_of,
)
from trlvr.engine.schedules import SCHEDULES, Schedule
from trlvr.errors import UserError

ASSETS = Path(__file__).resolve().parents[1] / "trlvr" / "toy" / "assets"
COMMANDS = ("train", "eval", "select")
ALL_SUITE = ("solo", "handoff", "dose", "legibility", "drift", "junior")


def refusal(plan: Plan) -> str | None:
    """The one line `plan` is refused with, or None when it is accepted."""
    try:
        check_capabilities(plan)
    except UserError as e:
        assert "\n" not in str(e), str(e)
        return str(e)
    return None


# ---- every pairing x backend x command ------------------------------------------------------------


def typical(command: str, pairing: str, backend: str) -> Plan:
    """What each command runs with a pairing, as the commands build it: training a word schedule (solo
    for none: arm grpo), evaluating the whole suite (solo alone for none), selecting on handoff/pass@1
    (solo/pass@1 for none). An evaluated self pair's senior is a LoRA adapter folder."""
    junior = pairing != "none"
    if command == "train":
        schedule = (
            Schedule.from_config("word", p=0.5) if junior else Schedule.from_config("solo", author="senior")
        )
        return Plan("train", pairing, backend, schedules=(schedule,))
    suite = ALL_SUITE if command == "eval" else ("handoff",) if junior else ("solo",)
    suite = suite if junior else ("solo",)
    metrics = () if command == "eval" else ("handoff/pass@1",) if junior else ("solo/pass@1",)
    return Plan(
        command,
        pairing,
        backend,
        suite=suite,
        metrics=metrics,
        senior_adapter="run/checkpoint-2" if pairing == "self" else None,
    )


VLLM_TEXT = "vllm runs pairs with one shared vocabulary; this pair is text-paired"
VLLM_ADAPTER = "vllm: run/checkpoint-2 is a LoRA adapter folder; the engine loads full model folders"
# (command, pairing, backend) -> None (accepted) or what its one line says; every combination is listed
EXPECTED = {
    **{(c, p, "hf"): None for c in COMMANDS for p in TEAM_KINDS},
    **{(c, p, "vllm"): None for c in COMMANDS for p in ("lockstep", "none")},
    **{(c, "text", "vllm"): VLLM_TEXT for c in COMMANDS},
    (
        "train",
        "self",
        "vllm",
    ): None,  # training syncs the merged LoRA senior into the engine; its base is the junior
    ("eval", "self", "vllm"): VLLM_ADAPTER,
    ("select", "self", "vllm"): VLLM_ADAPTER,
}


def test_the_table_lists_every_pairing_backend_and_command():
    assert set(EXPECTED) == {(c, p, b) for c in COMMANDS for p in TEAM_KINDS for b in BACKENDS}
    assert TEAM_KINDS == ("lockstep", "text", "self", "none")


@pytest.mark.parametrize(("command", "pairing", "backend"), sorted(EXPECTED))
def test_every_pairing_and_backend(command, pairing, backend):
    want = EXPECTED[(command, pairing, backend)]
    said = refusal(typical(command, pairing, backend))
    if want is None:
        assert said is None, said
    else:
        assert said is not None and want in said, said
        flag = "backend" if command == "train" else "--backend"
        assert said.startswith(f"{flag}"), said  # the line names the setting to change


def test_what_a_text_pair_cannot_define_is_returned_not_refused():
    """drift/kl and the dose protocols' loophole report are not defined for a text pair: the suite may ask
    for them (the default suite does), results.json records them as undefined, never as a number."""
    got = check_capabilities(Plan("eval", "text", suite=ALL_SUITE))
    assert set(got) == {"drift/kl", "loophole"} and got["drift/kl"].startswith("not defined for a text pair")
    assert check_capabilities(Plan("eval", "text", suite=("solo", "handoff"))) == {}
    assert check_capabilities(Plan("eval", "lockstep", suite=ALL_SUITE)) == {}
    from trlvr.eval.runner import UNDEFINED_FOR_TEXT_PAIRS as runner_says  # the same words in results.json

    assert runner_says == {m: why for m, (_, why) in caps.UNDEFINED_FOR_TEXT_PAIRS.items()}


# ---- schedules x pairing x backend -------------------------------------------------------------------

# schedule -> (runs on a text pair, runs without a junior): the facts, by hand
SCHEDULE_FACTS = {
    "word": (True, False),
    "boundary": (False, False),
    "token": (True, False),
    "step": (True, False),
    "chunk": (True, False),
    "solo": (True, True),
}


def test_the_schedule_table_lists_every_registered_schedule():
    assert set(SCHEDULE_FACTS) == set(SCHEDULES)
    assert set(text_schedules()) == {n for n, (text, _) in SCHEDULE_FACTS.items() if text}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("pairing", TEAM_KINDS)
@pytest.mark.parametrize("name", sorted(SCHEDULE_FACTS))
def test_every_schedule_on_every_pairing_and_backend(name, pairing, backend):
    schedule = Schedule.from_config(name)  # solo: the senior writes
    runs_on_text, runs_alone = SCHEDULE_FACTS[name]
    said = refusal(Plan("train", pairing, backend, schedules=(schedule,)))
    if pairing == "text" and backend == "vllm":
        assert said.startswith("backend: vllm runs pairs with one shared vocabulary"), said
    elif pairing == "text" and not runs_on_text:
        assert said.startswith(
            f"schedule: schedule {name!r} needs one shared vocabulary (it reads token ids)"
        ), said
        assert "which runs the schedules word, token, step, chunk, solo" in said
    elif pairing == "none" and not runs_alone:
        assert said == f"schedule: schedule {name!r} has the junior write, and this run has no junior", said
    else:
        assert said is None, said


def test_a_schedule_the_junior_alone_writes_needs_a_junior():
    assert refusal(Plan("eval", "none", schedules=(Schedule.from_config("solo", author="junior"),)))
    assert refusal(Plan("eval", "none", schedules=(Schedule.from_config("solo", author="senior"),))) is None


# ---- metrics x pairing ---------------------------------------------------------------------------------


@pytest.mark.parametrize("pairing", TEAM_KINDS)
@pytest.mark.parametrize("entry", ALL_SUITE)
def test_every_suite_entry_on_every_pairing(entry, pairing):
    said = refusal(Plan("eval", pairing, suite=(entry,)))
    if pairing == "none" and entry != "solo":
        assert said == f"--suite: {entry} needs a junior (only solo runs without one)"
    else:  # a text pair's drift is recorded as undefined (above), not refused
        assert said is None, said


@pytest.mark.parametrize(
    ("metric", "refused_on_text"),
    [
        ("handoff/pass@1", False),
        ("solo/pass@1", False),
        ("dose-0.5/pass@1", False),
        ("junior/pass@1", False),
        ("legibility/junior_bpb", False),
        ("legibility/junior_ce", False),
        ("drift/kl", True),
    ],
)
@pytest.mark.parametrize("pairing", TEAM_KINDS)
def test_a_metric_chosen_to_select_on_must_be_defined_for_the_pairing(pairing, metric, refused_on_text):
    said = refusal(Plan("select", pairing, metrics=(metric,)))
    if pairing == "text" and refused_on_text:
        assert said.startswith(
            f"--metric {metric}: not defined for a text pair: KL(senior || junior) needs one vocabulary"
        ), said
        assert "choose another metric" in said
    elif pairing == "none" and not metric.startswith("solo/"):
        assert said == f"--metric: {metric} needs a junior (only solo runs without one)", said
    else:
        assert said is None, said


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("pairing", TEAM_KINDS)
def test_training_kl_to_the_junior_needs_one_vocabulary(pairing, backend):
    said = refusal(Plan("train", pairing, backend, metrics=(KL_TO_JUNIOR,)))
    if pairing == "text":
        want = (
            "backend: vllm runs"
            if backend == "vllm"
            else "kl_ref: junior needs one shared vocabulary; this pair "
        )
        assert said.startswith(want), said
    elif pairing == "none":
        assert said == "kl_ref: junior needs a junior model path", said
    else:
        assert said is None, said


# ---- what was asked for, devices, adapters -----------------------------------------------------------


@pytest.mark.parametrize(
    ("plan", "said"),
    [
        (
            Plan("train", "self", requested="text"),
            "pairing: text needs a junior with its own tokenizer; junior: self "
            "shares the senior's tokenizer and weights (it is lockstep)",
        ),
        (
            Plan("eval", "self", requested="text"),
            "--pairing: text needs a junior with its own tokenizer; --junior self "
            "shares the senior's tokenizer and weights (it is lockstep)",
        ),
        (
            Plan("train", "self", junior_device=True),
            "junior_device: junior: self shares the senior's weights, so it runs on the senior's device",
        ),
        (
            Plan("eval", "lockstep", "vllm", junior_device=True),
            "--backend: vllm holds both models in one engine; --junior-device is backend hf's",
        ),
        (
            Plan("train", None, "vllm", requested="text"),
            "backend: vllm runs pairs with one shared vocabulary",
        ),
        (Plan("eval", "lockstep", "vllm", senior_adapter="a"), "--backend vllm: a is a LoRA adapter folder"),
        (Plan("train", "lockstep", "tpu"), "backend: must be one of hf, vllm, got 'tpu'"),
        (Plan("train", "lockstep", junior_device=True), None),
        (Plan("eval", "lockstep", senior_adapter="a"), None),
        (Plan("train", None, requested="text"), None),  # the tokenizers decide the rest
    ],
)
def test_settings_the_pairing_or_backend_contradicts(plan, said):
    got = refusal(plan)
    assert got == said if said is None else got is not None and got.startswith(said), got


def test_the_run_config_judges_its_pairing_and_backend_settings_here():
    """TandemConfig's own check of pairing x backend x junior: self x junior_device is this module's."""
    from trlvr.config import TandemConfig

    for kw, said in [
        (dict(backend="vllm", pairing="text"), "backend: vllm runs pairs with one shared vocabulary"),
        (dict(backend="vllm", junior_device="cpu"), "backend: vllm holds both models in one engine"),
        (dict(junior="self", use_peft=True, pairing="text"), "pairing: text needs a junior with its own"),
        (dict(junior="self", use_peft=True, junior_device="cpu"), "junior_device: junior: self shares"),
    ]:
        with pytest.raises(UserError) as e:
            TandemConfig(senior="s", **{"junior": "j", **kw})
        assert str(e.value).startswith(said), str(e.value)


# ---- chat prompts and templates ---------------------------------------------------------------------


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize("pairing", TEAM_KINDS)
def test_a_chat_prompt_needs_a_template_in_every_tokenizer_that_renders_it(command, pairing):
    both = (("senior s", True), ("junior j", False)) if pairing == "text" else (("senior s", True),)
    said = refusal(Plan(command, pairing, chat_prompt="d.jsonl row 3", templates=both))
    data = {"train": "dataset", "eval": "--data", "select": "--val"}[command]
    if pairing == "text":
        assert said == (
            f"{data}: d.jsonl row 3 is a prompt of chat messages, and the tokenizer of junior j has no "
            "chat template to render it (give a tokenizer with one, or text prompts)"
        )
    else:
        assert said is None, said
    assert refusal(Plan(command, pairing, chat_prompt="d.jsonl row 3", templates=(("senior s", False),)))
    assert refusal(Plan(command, pairing, chat_prompt=None, templates=(("senior s", False),))) is None


def test_chat_prompt_of_names_the_first_row_of_messages():
    from trlvr.data.schema import Problem

    rows = [
        Problem("1", "q", "1", "d.jsonl", prompt="text", row=1),
        Problem("2", "q", "2", "d.jsonl", prompt=[{"role": "user", "content": "q"}], row=2),
    ]
    assert chat_prompt_of(rows) == "d.jsonl row 2" and chat_prompt_of(rows[:1]) is None


# ---- toy worlds ----------------------------------------------------------------------------------------


def make_world(root: Path, seed: int = 0, **config) -> Path:
    """A toy world as `trlvr toy prepare` lays it out: senior/, junior/, data/{train,test}.jsonl, card.json."""
    root.mkdir(parents=True)
    for role in ("senior", "junior"):
        shutil.copytree(ASSETS / role, root / role)
    (root / "data").mkdir()
    for split, n in (("train", 4), ("test", 2)):
        (root / "data" / f"{split}.jsonl").write_text(
            "".join(
                json.dumps({"problem": f"What is {i} plus {seed}?", "answer": str(i + seed)}) + "\n"
                for i in range(n)
            )
        )
    (root / "card.json").write_text(
        json.dumps({"version": 1, "seed": seed, "config": {"jargon": "spaced", "n_train": 4, **config}})
    )
    return root


@pytest.fixture
def worlds(tmp_path):
    return {
        "w0": make_world(tmp_path / "w0"),
        "w0copy": make_world(tmp_path / "w0copy"),
        "w1": make_world(tmp_path / "w1", seed=1),
        "compact": make_world(tmp_path / "compact", jargon="compact"),
    }


def test_world_of_finds_the_world_of_models_data_and_runs(worlds, tmp_path):
    w0 = worlds["w0"]
    for path in (w0 / "senior", w0 / "junior", w0 / "data" / "test.jsonl"):
        assert world_of(str(path)) == {
            "dir": str(w0),
            "seed": 0,
            "config": {"jargon": "spaced", "n_train": 4},
        }
    assert (
        world_of(str(ASSETS / "senior")) is None
        and world_of("Qwen/Qwen3-4B") is None
        and world_of(None) is None
    )
    run = tmp_path / "run"  # a training run's checkpoint and held-out file: the world the run started from
    (run / "checkpoint-2").mkdir(parents=True)
    (run / "holdout.jsonl").write_text("")
    (run / "trlvr_run.json").write_text(
        json.dumps(
            {"tandem": {"senior": str(worlds["w1"] / "senior"), "dataset": str(w0 / "data" / "train.jsonl")}}
        )
    )
    assert (
        world_of(str(run / "checkpoint-2"))["seed"] == 1 and world_of(str(run / "holdout.jsonl"))["seed"] == 0
    )
    (run / "trlvr_run.json").write_text(
        "{not json"
    )  # a record that does not read: no world, not an error here
    assert world_of(str(run / "checkpoint-2")) is None


def test_models_and_data_from_two_worlds_are_refused(worlds):
    w0, w1, compact, copy = worlds["w0"], worlds["w1"], worlds["compact"], worlds["w0copy"]
    same = worlds_of(
        {
            "--senior": str(w0 / "senior"),
            "--junior": str(copy / "junior"),
            "--data toy": str(w0 / "data" / "test.jsonl"),
        }
    )
    assert (
        len(same) == 3 and refusal(Plan("eval", "lockstep", worlds=same)) is None
    )  # a copy is the same world
    said = refusal(
        Plan(
            "eval",
            "lockstep",
            worlds=worlds_of({"--senior": str(w0 / "senior"), "--data toy": str(w1 / "data" / "test.jsonl")}),
        )
    )
    assert said.startswith(
        f"--data toy is from toy world {w1} (seed 1), --senior from toy world {w0} (seed 0): "
        "a world draws its problems and trains its models with its seed"
    ), said
    said = refusal(
        Plan(
            "train",
            "lockstep",
            worlds=worlds_of({"senior": str(w0 / "senior"), "junior": str(compact / "junior")}),
        )
    )
    assert said.startswith(
        f"junior is from toy world {compact} (jargon compact), senior from toy world {w0} (jargon spaced)"
    ), said


# ---- through the commands: one line, exit 2, before any model ---------------------------------------


@pytest.fixture
def no_models(monkeypatch):
    """Any model load fails the test: the refusal must come before one."""
    import trlvr.eval.api as api
    import trlvr.eval.partners as partners
    import trlvr.models as models
    import trlvr.team as team
    import trlvr.training.build as build

    def loaded(*args, **kw):
        raise AssertionError(f"a model was loaded before the refusal: {args}")

    for module in (models, build, api, partners, team):
        for name in ("load_causal_lm", "load_model_or_adapter"):
            if hasattr(module, name):
                monkeypatch.setattr(module, name, loaded)


def one_line(capsys, argv: list[str]) -> str:
    from trlvr.cli.main import main

    code = main(argv)
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert code == 2 and len(err) == 1 and "Traceback" not in err[0], (code, err)
    assert err[0].startswith(f"trlvr {argv[0]}: error: "), err
    return err[0]


def chat_data(path: Path) -> Path:
    path.write_text(
        "".join(
            json.dumps(
                {"prompt": [{"role": "user", "content": f"What is {i} plus {i}?"}], "answer": str(2 * i)}
            )
            + "\n"
            for i in range(3)
        )
    )
    return path


def plain_data(path: Path) -> Path:
    return write_sum_problems(path, 3)


def train_argv(tmp_path, senior, junior, data, *extra, dry=True) -> list[str]:
    """A toy run on `data`; 8 completions per generation batch (one prompt) so that a 3-problem file holds steps."""
    return [
        "train",
        "--config",
        "toy",
        "--holdout",
        "0",
        "--senior",
        str(senior),
        "--junior",
        str(junior),
        "--dataset",
        str(data),
        "--per_device_train_batch_size",
        "8",
        "--output_dir",
        str(tmp_path / "run"),
        *extra,
        *(["--dry-run"] if dry else []),
    ]


def eval_argv(tmp_path, senior, junior, data, *extra) -> list[str]:
    return [
        "eval",
        "--senior",
        str(senior),
        "--junior",
        str(junior),
        "--data",
        f"toy={data}",
        "--n",
        "1",
        "--k",
        "1",
        "--suite",
        "solo,handoff",
        "--max-new-tokens",
        "2",
        "--no-progress",
        "--out",
        str(tmp_path / "ev"),
        *extra,
    ]


@pytest.mark.parametrize("dry", [True, False], ids=["dry-run", "training"])
def test_train_refuses_a_token_id_schedule_on_a_text_pair(tmp_path, capsys, no_models, dry):
    data = plain_data(tmp_path / "d.jsonl")
    said = one_line(
        capsys,
        train_argv(
            tmp_path,
            ASSETS / "senior",
            ASSETS / "junior-cross",
            data,
            "--schedule",
            "boundary",
            "--max_steps",
            "1",
            dry=dry,
        ),
    )
    assert "schedule: schedule 'boundary' needs one shared vocabulary (it reads token ids)" in said


@pytest.mark.parametrize("dry", [True, False], ids=["dry-run", "training"])
def test_train_refuses_kl_to_a_text_paired_junior_before_the_senior_loads(tmp_path, capsys, no_models, dry):
    """Before: refused after the senior had loaded, and not at all by the dry run."""
    data = plain_data(tmp_path / "d.jsonl")
    said = one_line(
        capsys,
        train_argv(
            tmp_path,
            ASSETS / "senior",
            ASSETS / "junior-cross",
            data,
            "--beta",
            "0.1",
            "--kl_ref",
            "junior",
            "--max_steps",
            "1",
            dry=dry,
        ),
    )
    assert said.endswith(
        "kl_ref: junior needs one shared vocabulary; this pair is text-paired (set kl_ref: initial)"
    )


@pytest.mark.parametrize("dry", [True, False], ids=["dry-run", "training"])
def test_train_refuses_chat_prompts_without_a_chat_template(tmp_path, capsys, no_models, dry):
    """Before: the dry run said 'config ok' and training died in apply_chat_template with a traceback."""
    data = chat_data(tmp_path / "chat.jsonl")
    said = one_line(
        capsys, train_argv(tmp_path, ASSETS / "senior", ASSETS / "junior", data, "--max_steps", "1", dry=dry)
    )
    assert said.endswith(
        f"dataset: {data} row 1 is a prompt of chat messages, and the tokenizer of senior "
        f"{ASSETS / 'senior'} has no chat template to render it (give a tokenizer with one, or "
        "text prompts)"
    )


def test_train_with_a_chat_template_takes_chat_prompts(tmp_path, capsys):
    senior = tmp_path / "senior"
    shutil.copytree(ASSETS / "senior", senior)
    cfg = json.loads((senior / "tokenizer_config.json").read_text())
    cfg["chat_template"] = "{% for m in messages %}{{ m['content'] }}\n{% endfor %}"
    (senior / "tokenizer_config.json").write_text(json.dumps(cfg))
    from trlvr.cli.main import main

    assert main(train_argv(tmp_path, senior, ASSETS / "junior", chat_data(tmp_path / "chat.jsonl"))) == 0
    assert capsys.readouterr().out.startswith("config ok")


def test_train_refuses_a_text_pair_on_backend_vllm_before_asking_for_vllm(tmp_path, capsys, no_models):
    data = plain_data(tmp_path / "d.jsonl")
    said = one_line(
        capsys, train_argv(tmp_path, ASSETS / "senior", ASSETS / "junior-cross", data, "--backend", "vllm")
    )
    assert "backend: vllm runs pairs with one shared vocabulary; this pair is text-paired" in said


def test_train_refuses_models_and_data_of_two_worlds(tmp_path, capsys, no_models, worlds):
    w0, w1 = worlds["w0"], worlds["w1"]
    said = one_line(capsys, train_argv(tmp_path, w0 / "senior", w0 / "junior", w1 / "data" / "train.jsonl"))
    assert f"dataset is from toy world {w1} (seed 1), senior from toy world {w0} (seed 0)" in said
    from trlvr.cli.main import main

    assert main(train_argv(tmp_path, w0 / "senior", w0 / "junior", w0 / "data" / "train.jsonl")) == 0


def test_eval_refuses_chat_prompts_without_a_chat_template(tmp_path, capsys, no_models):
    """Before: a traceback from apply_chat_template, after the output folder was created."""
    data = chat_data(tmp_path / "chat.jsonl")
    said = one_line(capsys, eval_argv(tmp_path, ASSETS / "senior", ASSETS / "junior", data))
    assert said.endswith(
        f"--data: {data} row 1 is a prompt of chat messages, and the tokenizer of --senior "
        f"{ASSETS / 'senior'} has no chat template to render it (give a tokenizer with one, or "
        "text prompts)"
    )
    assert not (tmp_path / "ev").exists()
    one_line(capsys, [*eval_argv(tmp_path, ASSETS / "senior", ASSETS / "junior", data), "--dry-run"])


def test_eval_refuses_a_text_pair_on_backend_vllm(tmp_path, capsys, no_models):
    data = plain_data(tmp_path / "d.jsonl")
    said = one_line(
        capsys, eval_argv(tmp_path, ASSETS / "senior", ASSETS / "junior-cross", data, "--backend", "vllm")
    )
    assert "--backend: vllm runs pairs with one shared vocabulary; this pair is text-paired" in said
    assert not (tmp_path / "ev").exists()


def test_eval_refuses_models_and_data_of_two_worlds(tmp_path, capsys, no_models, worlds):
    w0, w1 = worlds["w0"], worlds["w1"]
    said = one_line(capsys, eval_argv(tmp_path, w0 / "senior", w0 / "junior", w1 / "data" / "test.jsonl"))
    assert f"--data toy is from toy world {w1} (seed 1), --senior from toy world {w0} (seed 0)" in said
    said = one_line(capsys, eval_argv(tmp_path, w0 / "senior", w1 / "junior", w0 / "data" / "test.jsonl"))
    assert f"--junior is from toy world {w1} (seed 1), --senior from toy world {w0} (seed 0)" in said
    assert not (tmp_path / "ev").exists()


def test_eval_refuses_a_junior_device_on_backend_vllm(tmp_path, capsys, no_models):
    data = plain_data(tmp_path / "d.jsonl")
    said = one_line(
        capsys,
        eval_argv(
            tmp_path,
            ASSETS / "senior",
            ASSETS / "junior",
            data,
            "--backend",
            "vllm",
            "--junior-device",
            "cpu",
        ),
    )
    assert "--backend: vllm holds both models in one engine; --junior-device is backend hf's" in said
    assert not (tmp_path / "ev").exists()


@pytest.mark.parametrize("case", ["chat prompts", "text pair on vllm", "two worlds"])
def test_evaluate_specs_checks_the_capabilities_itself(tmp_path, no_models, worlds, case):
    """The library path (`trlvr.eval.api.evaluate_specs`, which the demo and the studies' stages call too), not
    only the command: refused before any model loads and before the output folder is made."""
    from trlvr.eval.api import EvalSpec, ModelSpec, evaluate_specs, load_benchmarks

    senior, junior, data = {
        "chat prompts": (ASSETS / "senior", ASSETS / "junior", chat_data(tmp_path / "chat.jsonl")),
        "text pair on vllm": (ASSETS / "senior", ASSETS / "junior-cross", plain_data(tmp_path / "d.jsonl")),
        "two worlds": (
            worlds["w0"] / "senior",
            worlds["w0"] / "junior",
            worlds["w1"] / "data" / "test.jsonl",
        ),
    }[case]
    said = {
        "chat prompts": "has no chat template",
        "text pair on vllm": "vllm runs pairs with one shared vocabulary",
        "two worlds": "from toy world",
    }[case]
    benchmarks, ids = load_benchmarks({"toy": str(data)})
    models = ModelSpec(str(senior), str(junior), backend="vllm" if case == "text pair on vllm" else "hf")
    with pytest.raises(UserError, match=said):
        evaluate_specs(
            models,
            benchmarks,
            EvalSpec(n=1, ks=(1,), suite=("solo", "handoff"), max_new_tokens=2),
            tmp_path / "ev",
            data_identities=ids,
            data_sources={"toy": str(data)},
            progress=False,
        )
    assert not (tmp_path / "ev").exists()


def test_select_refuses_a_drift_metric_on_a_text_pair_before_the_first_checkpoint(
    tmp_path, capsys, monkeypatch
):
    """Before: the first checkpoint was evaluated, then 'drift/kl is not in the results'."""
    import trlvr.experiments.select_run as select_run

    def evaluated(*args, **kw):
        raise AssertionError("a checkpoint was evaluated before the refusal")

    monkeypatch.setattr(select_run, "evaluate_specs", evaluated)
    run = tmp_path / "run"
    shutil.copytree(ASSETS / "senior", run / "checkpoint-1")
    (run / "trlvr_run.json").write_text(
        json.dumps(
            {
                "tandem": {
                    "senior": str(ASSETS / "senior"),
                    "holdout": 0,
                    "junior": str(ASSETS / "junior-cross"),
                }
            }
        )
    )
    data = plain_data(tmp_path / "val.jsonl")
    argv = ["select", str(run), "--val", str(data), "--n", "1", "--max-new-tokens", "2", "--no-progress"]
    said = one_line(capsys, [*argv, "--metric", "drift/kl"])
    assert said.endswith(
        "--metric drift/kl: not defined for a text pair: KL(senior || junior) needs one vocabulary "
        "(the two models' next-token distributions are over different ids); choose another metric "
        "(legibility/junior_bpb is the one comparable across pairs)"
    )
    assert not (run / "select").exists()
    with pytest.raises(
        AssertionError, match="a checkpoint was evaluated"
    ):  # a defined metric goes on to evaluate
        from trlvr.cli.main import main

        main([*argv, "--metric", "legibility/junior_bpb"])


def test_smoke_refuses_what_its_arms_cannot_run_before_setting_an_earlier_smoke_aside(
    tmp_path, capsys, no_models
):
    """`trlvr smoke` checks both arms' runs (the dry run's checks, capabilities included) first: a refused
    smoke leaves the earlier smoke where it was."""
    out = tmp_path / "smoke"
    out.mkdir()
    (out / "smoke.json").write_text("{}")
    data = plain_data(tmp_path / "d.jsonl")
    said = one_line(
        capsys,
        [
            "smoke",
            "--config",
            "toy",
            "--out",
            str(out),
            "--problems",
            "1",
            "--set",
            f"senior={ASSETS / 'senior'}",
            "--set",
            f"junior={ASSETS / 'junior-cross'}",
            "--set",
            f"dataset={data}",
            "--set",
            "schedule=boundary",
        ],
    )
    assert "schedule: schedule 'boundary' needs one shared vocabulary" in said
    assert sorted(p.name for p in out.iterdir()) == ["smoke.json"]

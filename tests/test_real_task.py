"""The real-model study's task: reasoning-gym sources take the task's own config fields (typed by its
config dataclass, unknown fields refused by name), and bench/real_task_prepare.py writes one-shot
prompts with the test problems held out of training by content. Fast: no model."""

from __future__ import annotations

import dataclasses
import enum
import json
import re
import sys
from pathlib import Path
from typing import Literal, Optional, get_type_hints

import pytest

from trlvr.cli.main import main as cli_main
from trlvr.data import load_problems, prompt_for
from trlvr.data.rg_config import task_config, type_name, typed_value
from trlvr.data.schema import DataError
from trlvr.data.sources import parse_rg_source, read_reasoning_gym

ROOT = Path(__file__).resolve().parents[1]


def _config_class(task: str) -> type:
    from reasoning_gym.factory import DATASETS

    return DATASETS[task][1]


# ---------------------------------------------------------------- parsing and typing


def test_config_fields_are_typed_from_the_dataclass():
    src = parse_rg_source(
        "reasoning-gym:chain_sum?size=7&seed=3&min_digits=1&max_digits=2&allow_negation=true"
    )
    assert (src.task, src.size, src.seed) == ("chain_sum", 7, 3)
    assert src.config == {"min_digits": 1, "max_digits": 2, "allow_negation": True}
    assert type(src.config["max_digits"]) is int and src.config["allow_negation"] is True
    assert parse_rg_source("reasoning-gym:chain_sum").config == {}
    assert parse_rg_source("reasoning-gym:chain_sum")[1:3] == (100, 0)  # the old defaults


def test_list_fields_repeat_their_key_and_plus_is_an_operator_not_a_space():
    src = parse_rg_source(
        "reasoning-gym:basic_arithmetic?operators=+&operators=-&operators=%2A&format_style=natural"
    )
    assert src.config == {"operators": ["+", "-", "*"], "format_style": "natural"}
    eq = parse_rg_source(
        "reasoning-gym:simple_equations?operators=+&operators=*&operators_weights=0.25&operators_weights=0.75"
    )
    assert eq.config == {
        "operators": ("+", "*"),
        "operators_weights": [0.25, 0.75],
    }  # bare tuple stays a tuple


def test_config_fields_change_the_problems():
    """max_digits=1, exactly 3 terms: every question has three one-digit numbers, and its gold is their sum."""
    probs = load_problems("reasoning-gym:chain_sum?size=40&seed=5&max_digits=1&min_terms=3&max_terms=3")
    assert len(probs) == 40
    for p in probs:
        expr = p.problem.split(":", 1)[1].rstrip(" =")
        numbers = re.findall(r"\d+", expr)
        assert len(numbers) == 3 and all(len(n) == 1 for n in numbers), p.problem
        assert int(p.answer) == eval(expr), p.problem  # noqa: S307 (digits and +/- only)
    default = load_problems("reasoning-gym:chain_sum?size=40&seed=5")
    assert max(len(n) for p in default for n in re.findall(r"\d+", p.problem)) > 1
    again = load_problems("reasoning-gym:chain_sum?size=40&seed=5&min_terms=3&max_terms=3&max_digits=1")
    assert [p.problem for p in again] == [p.problem for p in probs]  # the order of keys does not matter


def test_unknown_field_names_it_and_lists_the_dataclass_fields():
    with pytest.raises(DataError) as e:
        parse_rg_source("reasoning-gym:leg_counting?size=5&max_legs=4")
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith("reasoning-gym:leg_counting?size=5&max_legs=4: ")
    assert "unknown keys: ['max_legs']" in msg
    listed = msg.split("config fields: ")[1].split(", ")
    fields = [f.name for f in dataclasses.fields(_config_class("leg_counting"))]
    assert listed == [f for f in fields if f not in ("size", "seed")]  # every field, in the dataclass's order


@pytest.mark.parametrize(
    "query, fragment",
    [
        ("chain_sum?min_digits=two", "field 'min_digits' must be int, got 'two'"),
        ("chain_sum?allow_negation=maybe", "field 'allow_negation' must be bool, got 'maybe'"),
        (
            "basic_arithmetic?format_style=fancy",
            "field 'format_style' must be 'simple' | 'natural', got 'fancy'",
        ),
        ("chain_sum?max_terms=3&max_terms=4", "field 'max_terms' given 2 times; it takes one int"),
        ("chain_sum?size=ten", "size and seed must be integers"),
        ("chain_sum?max_terms", "'max_terms' is not KEY=VALUE"),
        ("chain_sm?size=3", "unknown reasoning-gym task 'chain_sm' (did you mean chain_sum"),
        ("?size=3", "(no task name)"),
    ],
)
def test_bad_values_are_one_line_naming_the_field(query, fragment):
    with pytest.raises(DataError) as e:
        parse_rg_source(f"reasoning-gym:{query}")
    assert fragment in str(e.value) and "\n" not in str(e.value)


def test_a_config_its_own_validate_refuses_is_one_line_naming_the_source():
    with pytest.raises(DataError) as e:
        read_reasoning_gym(*parse_rg_source("reasoning-gym:chain_sum?size=3&min_digits=3&max_digits=1"))
    assert str(e.value) == (
        "reasoning-gym:chain_sum?size=3&seed=0&min_digits=3&max_digits=1: AssertionError: max_digits must be >= min_digits"
    )


def test_cli_refuses_an_unknown_field_in_one_line(capsys):
    assert cli_main(["data", "check", "reasoning-gym:chain_sum?size=5&digits=1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "unknown keys: ['digits']" in err[0] and "max_digits" in err[0], err


class Colour(enum.Enum):
    RED = "r"
    BLUE = "b"


@dataclasses.dataclass
class Nested:
    x: int = 0


@dataclasses.dataclass
class _Cfg:
    ratio: float = 0.5
    names: Optional[list[str]] = None  # noqa: UP045 (reasoning-gym writes Optional)
    colour: Colour = Colour.RED
    mode: Literal["a", "b"] = "a"
    pairs: list[tuple[float, float]] = dataclasses.field(default_factory=list)
    inner: Nested = dataclasses.field(default_factory=Nested)
    size: int = 10
    seed: int | None = None


def test_typing_rules_on_a_dataclass_of_every_kind():
    t = get_type_hints(_Cfg)
    assert typed_value("s", "ratio", ["0.25"], t["ratio"]) == 0.25
    assert typed_value("s", "names", ["a", "b"], t["names"]) == ["a", "b"]
    assert typed_value("s", "names", ["none"], t["names"]) is None
    assert typed_value("s", "colour", ["BLUE"], t["colour"]) is Colour.BLUE
    assert typed_value("s", "colour", ["r"], t["colour"]) is Colour.RED
    assert typed_value("s", "mode", ["b"], t["mode"]) == "b"
    assert (
        typed_value("s", "seed", ["none"], t["seed"]) is None
        and typed_value("s", "seed", ["4"], t["seed"]) == 4
    )
    assert type_name(t["names"]) == "list of str or none" and type_name(t["colour"]) == "RED | BLUE"
    for key in ("pairs", "inner"):
        with pytest.raises(DataError, match=f"field '{key}' has type .*, which a source string cannot set"):
            typed_value("s", key, ["1"], t[key])
    with pytest.raises(DataError, match=r"field 'colour' must be RED \| BLUE, got 'GREEN'"):
        typed_value("s", "colour", ["GREEN"], t["colour"])
    assert task_config("s", "cfg", _Cfg, {"mode": ["b"]}) == {"mode": "b"}
    with pytest.raises(DataError, match=r"cfg's config fields: ratio, names, colour, mode, pairs, inner$"):
        task_config("s", "cfg", _Cfg, {"nope": ["1"]})


def test_eval_data_flag_keeps_a_source_with_config_fields_whole():
    from trlvr.cli.eval_cmd import parse_sources

    spec = "cs=reasoning-gym:chain_sum?size=5&max_digits=1,reasoning-gym:leg_counting?max_animals=2"
    assert parse_sources(spec) == {
        "cs": "reasoning-gym:chain_sum?size=5&max_digits=1",
        "reasoning-gym:leg_counting?max_animals=2": "reasoning-gym:leg_counting?max_animals=2",
    }


# ---------------------------------------------------------------- bench/real_task_prepare.py


@pytest.fixture(scope="module")
def prepare():
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        import real_task_prepare
    finally:
        sys.path.pop(0)
    return real_task_prepare


def test_prepared_test_problems_are_never_trained_on(prepare, tmp_path, monkeypatch, capsys):
    # a tiny problem space (1-digit, 2 terms: 200 problems) so train and test must collide
    test = "reasoning-gym:chain_sum?size=60&seed=2&max_digits=1&max_terms=2"
    train = "reasoning-gym:chain_sum?size=300&seed=1&max_digits=1&max_terms=2"
    monkeypatch.setattr(sys, "argv", ["x", str(tmp_path), "--test", test, "--train", train])
    assert prepare.main() == 0
    rows = {n: [json.loads(line) for line in open(tmp_path / f"{n}.jsonl")] for n in ("train", "test")}
    key = {n: [(r["problem"], r["answer"]) for r in rows[n]] for n in rows}
    assert len(set(key["test"])) == len(key["test"]) and len(set(key["train"])) == len(key["train"])
    assert not set(key["train"]) & set(key["test"])
    raw_train = {(p.problem, p.answer) for p in load_problems(train)}
    assert set(key["train"]) == raw_train - set(key["test"])  # only test problems (and repeats) are dropped
    assert "test, duplicate or example problems dropped" in capsys.readouterr().out


@pytest.mark.parametrize("shot", ["arithmetic2", "none"])
def test_prepared_prompt_is_the_worked_examples_then_the_question(prepare, shot, tmp_path, monkeypatch):
    from trlvr.data import DEFAULT_TEMPLATE, build_prompt

    source = "reasoning-gym:chain_sum?size=3&seed=2&max_digits=1"
    monkeypatch.setattr(sys, "argv", ["x", str(tmp_path), "--test", source, "--shot", shot])
    assert prepare.main() == 0
    probs = load_problems(str(tmp_path / "test.jsonl"))
    assert [p.problem for p in probs] == [p.problem for p in load_problems(source)]
    shots = prepare.SHOTS[shot]
    for p in probs:
        msgs = prompt_for(p)  # the row's prompt, verbatim; none: the paper's own zero-shot prompt
        if not shots:
            assert msgs == build_prompt(p.problem)
            continue
        assert [m["role"] for m in msgs] == ["user", "assistant"] * len(shots) + ["user"]
        for (q, a), (user, assistant) in zip(shots, zip(msgs[::2], msgs[1::2], strict=False), strict=True):
            assert user["content"] == DEFAULT_TEMPLATE.format(problem=q) and assistant["content"] == a
        assert msgs[-1]["content"] == DEFAULT_TEMPLATE.format(problem=p.problem)


def test_worked_examples_are_right_boxed_and_in_steps(prepare):
    from trlvr.rewards import math_reward

    examples = [qa for shots in prepare.SHOTS.values() for qa in shots]
    assert len(examples) >= 4
    for q, a in examples:
        assert a.count("\n\n") >= 2, a  # paragraphs: the step-handoff protocol alternates on them
        assert math_reward([a], answer=[prepare.shot_answer(a)]) == [1.0]
        if "arithmetic problem:" in q:  # the gold is the expression's value
            assert int(prepare.shot_answer(a)) == eval(q.split(":")[1].rstrip(" ="))  # noqa: S307


# ---------------------------------------------------------------- studies/real-smollm2.yaml


def test_real_study_arms_differ_only_in_what_the_arm_is():
    from trlvr.config import parse_run_args
    from trlvr.experiments.study import units
    from trlvr.experiments.study_spec import load_study

    study = load_study(ROOT / "studies" / "real-smollm2.yaml")
    assert study.seeds == [0, 1, 2] and set(study.variants) == {"initial", "grpo", "tandem", "grpo-kl-junior"}
    pipelines = units(study, Path("runs/real-smollm2"))
    (initial,) = [u for u in pipelines if len(u) == 1]  # the starting point: one evaluation, no training
    pipelines.remove(initial)
    initial = initial[0].argv

    def opt(argv, name):
        return argv[argv.index(name) + 1]

    def settings(argv):  # an evaluation's settings: all but which models and where
        return [
            a
            for i, a in enumerate(argv)
            if a not in ("--senior", "--junior", "--out")
            and argv[i - 1] not in ("--senior", "--junior", "--out")
        ]

    assert opt(initial, "--junior") == opt(initial, "--senior")  # its junior is itself, as `self` is
    runs = {}
    for train, _select, evaluate in pipelines:
        assert settings(evaluate.argv) == settings(initial)  # evaluated exactly as the trained arms
        tandem, args, _ = parse_run_args(train.argv[1:])
        runs[(train.variant, train.seed)] = (tandem, args)
        assert args.seed == train.seed
        assert evaluate.argv[evaluate.argv.index("--junior") + 1] == "self"  # self-paired evaluation
        assert evaluate.argv[evaluate.argv.index("--grading") + 1] == "boxed"  # the paper's grader
        data = evaluate.argv[evaluate.argv.index("--data") + 1].split("=", 1)[1]
        assert Path(data).parent == Path(tandem.dataset).parent and Path(data).name == "test.jsonl"
    assert len(runs) == 9
    shared = (
        "per_device_train_batch_size",
        "gradient_accumulation_steps",
        "steps_per_generation",
        "num_generations",
        "max_steps",
        "learning_rate",
        "max_completion_length",
        "temperature",
        "save_steps",
    )
    for field in shared:
        assert len({getattr(args, field) for _, args in runs.values()}) == 1, field
    for (variant, _seed), (tandem, args) in runs.items():
        assert tandem.use_peft and tandem.junior == "self" and tandem.holdout == 200
        assert tandem.arm == ("tandem" if variant == "tandem" else "grpo")
        assert args.beta == (0.001 if variant == "grpo-kl-junior" else 0.0)
        if variant == "grpo-kl-junior":
            assert tandem.kl_ref == "junior"
        if variant == "tandem":
            assert (tandem.schedule, tandem.p, tandem.max_gap) == ("word", 0.5, 32)
    tandem, args = runs[("grpo", 0)]
    assert opt(initial, "--senior") == tandem.senior  # the base the LoRA seniors start from
    assert args.generation_batch_size == 4 * args.num_generations == 32  # 4 prompts x 8 rollouts per step
    assert args.max_steps % args.save_steps == 0 and args.max_steps // args.save_steps == 2  # 2 candidates

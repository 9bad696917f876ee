"""The prefix-continuation curve as an evaluation protocol (suite entry `prefix`, protocols prefix-K): the
junior continues the first K% of the senior's solo trace, each row flagged when the gold is already in its
prefix, and the curve reported on all rows and on the unflagged ones. On the shipped toy pair."""

from __future__ import annotations

import json
from collections import defaultdict

import numpy as np
import pytest

from trlvr.cli.main import main as cli
from trlvr.eval.prefix import answer_in_text, cut, numbers_in, trace_body
from trlvr.eval.suite import parse_protocol, protocols_for
from trlvr.toy.task import make_splits
from trlvr.toy.world import ASSETS_DIR, _rows, _write_jsonl


@pytest.fixture(scope="module")
def evaluated(tmp_path_factory):
    root = tmp_path_factory.mktemp("prefix")
    _write_jsonl(root / "test.jsonl", _rows(make_splits(64, 8, seed=0)[1]))
    out = root / "eval"
    assert (
        cli(
            [
                "eval",
                "--senior",
                str(ASSETS_DIR / "senior"),
                "--junior",
                str(ASSETS_DIR / "junior"),
                "--data",
                f"toy={root / 'test.jsonl'}",
                "--limit",
                "6",
                "--n",
                "2",
                "--k",
                "1",
                "--suite",
                "junior,prefix",
                "--prefix-ks",
                "0,50,100",
                "--max-new-tokens",
                "64",
                "--dtype",
                "float32",
                "--out",
                str(out),
                "--no-progress",
            ]
        )
        == 0
    )
    rows = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    return json.loads((out / "results.json").read_text()), rows


def by(rows, protocol):
    return {(r["problem_id"], r["sample_idx"]): r for r in rows if r["protocol"] == protocol}


def test_the_suite_runs_solo_first_and_names_its_protocols():
    assert protocols_for(["prefix"], prefix_ks=(50, 0)) == ["solo", "prefix-0", "prefix-50"]
    assert parse_protocol("prefix-25").prefix_percent == 25 and parse_protocol("prefix-25").needs_junior
    for bad in ("prefix-101", "prefix-5.0", "prefix-", "prefix-050"):
        with pytest.raises(ValueError, match="prefix-K with K an integer percent"):
            parse_protocol(bad)


def test_the_config_records_the_points_only_for_a_prefix_suite(evaluated):
    from trlvr.eval.spec import EvalSpec

    assert evaluated[0]["config"]["prefix_ks"] == [0, 50, 100]
    assert "prefix_ks" not in EvalSpec(suite=("solo",)).config_part(None, None, "boxed")


def test_k0_is_the_junior_alone_with_its_sampling(evaluated):
    _, rows = evaluated
    junior, k0 = by(rows, "junior"), by(rows, "prefix-0")
    assert junior.keys() == k0.keys() and len(k0) == 12
    for key, r in k0.items():
        assert r["prefix_tokens"] == 0 and set(r["authors"]) <= {"0"}
        assert r["token_ids"] == junior[key]["token_ids"] and r["reward"] == junior[key]["reward"]


def test_k100_leaves_the_junior_only_the_ending(evaluated):
    _, rows = evaluated
    solo, k100 = by(rows, "solo"), by(rows, "prefix-100")
    ended = 0
    for key, r in k100.items():
        body = trace_body(solo[key])
        assert r["prefix_tokens"] == len(body) and r["token_ids"][: len(body)] == body
        assert r["authors"] == "1" * len(body) + "0" * (len(r["token_ids"]) - len(body))
        assert len(r["token_ids"]) <= 64  # the team's budget is the solo sample's
        if (
            solo[key]["finish_reason"] == "eos"
        ):  # the senior's EOS is left to the junior: it writes at least that
            ended += 1
            assert len(r["token_ids"]) - len(body) >= 1
        else:  # a trace cut by the budget fills it: nothing is left for the junior
            assert r["token_ids"] == body and r["finish_reason"] == "length"
    assert ended > 0


def test_k50_continues_half_of_the_solo_trace(evaluated):
    _, rows = evaluated
    solo, k50 = by(rows, "solo"), by(rows, "prefix-50")
    for key, r in k50.items():
        kept = cut(trace_body(solo[key]), 50)
        assert r["token_ids"][: len(kept)] == kept and r["prefix_tokens"] == len(kept)
        assert r["authors"].startswith("1" * len(kept)) and "1" not in r["authors"][len(kept) :]


def test_the_no_answer_curve_uses_exactly_the_unflagged_rows(evaluated):
    results, rows = evaluated
    table = results["benchmarks"]["toy"]["metrics"]
    for k in (0, 50, 100):
        rs = [r for r in rows if r["protocol"] == f"prefix-{k}"]
        per, clean, flags = defaultdict(list), defaultdict(list), defaultdict(list)
        for r in rs:
            per[r["problem_id"]].append(r["reward"] > 0.5)
            flags[r["problem_id"]].append(r["answer_in_prefix"])
            if not r["answer_in_prefix"]:
                clean[r["problem_id"]].append(r["reward"] > 0.5)
        assert table[f"prefix-{k}/pass@1"]["value"] == pytest.approx(
            np.mean([np.mean(v) for v in per.values()])
        )
        assert table[f"prefix-{k}/answer_in_prefix"]["value"] == pytest.approx(
            np.mean([np.mean(v) for v in flags.values()])
        )
        if clean:
            assert table[f"prefix-{k}/pass@1|no-answer"]["value"] == pytest.approx(
                np.mean([np.mean(v) for v in clean.values()])
            )
        else:
            assert f"prefix-{k}/pass@1|no-answer" not in table
    assert all(not r["answer_in_prefix"] for r in rows if r["protocol"] == "prefix-0")
    for r in rows:  # the flag is the reader's verdict on the prefix's text
        if r["protocol"].startswith("prefix-"):
            from transformers import AutoTokenizer

            tok = AutoTokenizer.from_pretrained(str(ASSETS_DIR / "senior"))
            prefix = tok.decode(r["token_ids"][: r["prefix_tokens"]], skip_special_tokens=True)
            assert r["answer_in_prefix"] == answer_in_text(prefix, r["answer"])


@pytest.mark.parametrize(
    "text, gold, want",
    [
        ("4 + 3 = 7", "7", True),
        ("4 + 3 = 17", "7", False),
        ("so the total is 1,200 apples", "1200", True),
        ("3-5 is", "-2", False),
        ("we get (-2) here", "-2", True),
        ("half is 2.50", "5/2", True),
        ("x7 and y7", "7", False),  # inside a name: not a number
        ("7kg of it", "7", True),  # a unit after it: still the number (flagging more is the stricter control)
        ("\\boxed{42}", "42", True),
        ("the answer is blue", "blue", True),
        ("", "7", False),
        ("7.5 is not", "7", False),
    ],
)
def test_the_answer_flag_on_hand_built_prefixes(text, gold, want):
    assert answer_in_text(text, gold) is want


def test_numbers_are_read_exactly():
    assert [str(x) for x in numbers_in("a 10.0 b 007 c 1,2")] == ["10", "7", "1", "2"]


def test_a_text_pair_is_refused_before_any_model_loads():
    from trlvr.engine.capabilities import Plan, check_capabilities
    from trlvr.errors import UserError

    with pytest.raises(UserError, match=r"^--suite: prefix hands the junior the senior's own token ids"):
        check_capabilities(Plan("eval", "text", suite=("solo", "prefix")))
    assert check_capabilities(Plan("eval", "lockstep", suite=("solo", "prefix"))) == {}
    assert check_capabilities(Plan("eval", "self", suite=("solo", "prefix"))) == {}


@pytest.mark.parametrize("value, shown", [("0,abc", "[0, 'abc']"), ("0,150", "[0, 150]")])
def test_bad_prefix_ks_are_one_line_naming_the_flag(tmp_path, capsys, value, shown):
    assert (
        cli(
            [
                "eval",
                "--senior",
                str(ASSETS_DIR / "senior"),
                "--junior",
                str(ASSETS_DIR / "junior"),
                "--data",
                f"x={tmp_path / 'none.jsonl'}",
                "--suite",
                "prefix",
                "--prefix-ks",
                value,
                "--out",
                str(tmp_path / "out"),
            ]
        )
        == 2
    )
    err = capsys.readouterr().err.strip()
    assert err == f"trlvr eval: error: --prefix-ks: expected integer percents in [0, 100], got {shown}"
    assert not (tmp_path / "out").exists()

"""Issue 29, rule 2: a comparison compares like with like.

`trlvr compare` and `trlvr report` refuse to pair evaluations whose number-changing settings differ
(one line naming each setting and both values); `--allow-mismatch` pairs them with the differences
shown as a warning with the table. One function decides (`trlvr.eval.comparable`), from what
results.json records.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from trlvr import artifacts
from trlvr.cli.main import main as cli
from trlvr.toy.task import make_splits
from trlvr.toy.world import ASSETS_DIR, _rows, _write_jsonl

SENIOR, JUNIOR = ASSETS_DIR / "senior", ASSETS_DIR / "junior"


def evaluate(tmp_path: Path, out: str, *extra) -> Path:
    data = tmp_path / "test.jsonl"
    if not data.exists():
        _write_jsonl(data, _rows(make_splits(50, 8, seed=0)[1]))
    argv = [
        "eval",
        "--senior",
        str(SENIOR),
        "--junior",
        str(JUNIOR),
        "--data",
        f"toy={data}",
        "--limit",
        "8",
        "--n",
        "2",
        "--k",
        "1",
        "--suite",
        "solo,handoff",
        "--max-new-tokens",
        "64",
        "--out",
        str(tmp_path / out),
        "--no-progress",
        "--dtype",
        "float32",
        *extra,
    ]
    assert cli(argv) == 0
    return tmp_path / out


@pytest.fixture(scope="module")
def base_eval(tmp_path_factory):
    return evaluate(tmp_path_factory.mktemp("base"), "ev")


def test_the_same_model_under_another_budget_is_refused_naming_the_setting(tmp_path, capsys):
    """The issue's case: the same model showed "+62.5 points *" against itself (another token budget)."""
    a, b = evaluate(tmp_path, "short", "--max-new-tokens", "6"), evaluate(tmp_path, "long")
    capsys.readouterr()
    assert cli(["compare", str(a), str(b), "--out", str(tmp_path / "cmp")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "were evaluated under different settings" in err[0]
    assert "max_new_tokens: 6 (A) vs 64 (B)" in err[0] and "--allow-mismatch" in err[0]
    assert not (tmp_path / "cmp" / "compare.json").exists()
    # asked for: compared, with the difference in the table, compare.json and the page
    assert (
        cli(
            [
                "compare",
                str(a),
                str(b),
                "--out",
                str(tmp_path / "cmp"),
                "--allow-mismatch",
                "--resamples",
                "200",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "WARNING: NOT LIKE WITH LIKE" in out and "max_new_tokens: 6 (A) vs 64 (B)" in out
    assert any(
        "max_new_tokens" in m for m in json.loads((tmp_path / "cmp" / "compare.json").read_text())["mismatch"]
    )
    assert "NOT LIKE WITH LIKE" in (tmp_path / "cmp" / "report.html").read_text()
    # report: one run with --compare, and several runs against a baseline
    assert cli(["report", str(b), "--compare", str(a), "--out", str(tmp_path / "r.html")]) == 2
    assert "max_new_tokens: 6 (A) vs 64 (B)" in capsys.readouterr().err
    assert cli(["report", str(a), str(b), "--out", str(tmp_path / "m.html")]) == 2
    assert "max_new_tokens: 6 (A) vs 64 (B)" in capsys.readouterr().err
    assert cli(["report", str(a), str(b), "--out", str(tmp_path / "m.html"), "--allow-mismatch"]) == 0
    assert "NOT LIKE WITH LIKE" in (tmp_path / "m.html").read_text()


def _variant(base: Path, out: Path, edit) -> Path:
    """A copy of an evaluation whose results.json records another setting (as that evaluation would)."""
    shutil.copytree(base, out)
    res = json.loads((out / "results.json").read_text())
    edit(res)
    (out / "results.json").write_text(json.dumps(res))
    artifacts.write_manifest(out)  # as that evaluation would have recorded it (not a file changed since)
    return out


def _set(path: str, value):
    def edit(res):
        d = res
        *head, last = path.split(".")
        for k in head:
            d = d[k]
        d[last] = value

    return edit


@pytest.mark.parametrize(
    "key, value, shown",
    [
        ("config.decoding.temperature", 1.0, "decoding.temperature: 0.7 (A) vs 1.0 (B)"),
        ("config.decoding.top_p", 0.95, "decoding.top_p: 0.8 (A) vs 0.95 (B)"),
        ("config.decoding.top_k", 0, "decoding.top_k: 20 (A) vs 0 (B)"),
        ("config.grading", "boxed_or_tail", "grading: 'boxed' (A) vs 'boxed_or_tail' (B)"),
        ("config.n", 8, "n: 2 (A) vs 8 (B)"),
        ("config.seed", 3, "seed: 0 (A) vs 3 (B)"),
        ("config.handoff_max_rounds", 4, "handoff_max_rounds: 150 (A) vs 4 (B)"),
        ("config.legibility_drift.include_eos", True, "legibility_drift.include_eos: False (A) vs True (B)"),
        ("config.max_prompt_tokens", 12, "max_prompt_tokens"),
        ("config.pairing", "text", "pairing: 'lockstep' (A) vs 'text' (B)"),
        ("fingerprint.models.junior.weights", "0123456789abcdef", "junior.weights"),
        ("config.a_setting_a_later_trlvr_records", 1, None),  # recorded by one side only: cannot be compared
    ],
)
def test_every_number_changing_setting_results_json_records_is_compared(
    base_eval, tmp_path, key, value, shown
):
    from trlvr.errors import UserError
    from trlvr.eval.comparable import check_comparable

    other = _variant(base_eval, tmp_path / "other", _set(key, value))
    if shown is None:
        assert check_comparable(base_eval, other) == []
        return
    with pytest.raises(UserError, match="evaluated under different settings") as e:
        check_comparable(base_eval, other)
    assert shown in str(e.value)
    assert any(shown in d for d in check_comparable(base_eval, other, allow_mismatch=True))


def test_what_cannot_change_a_shared_number_is_not_compared(base_eval, tmp_path):
    """Batching, the CI resamples, the machine, the senior's path and which metrics/problems exist do not
    change a number both sides report (metrics and problems only one side has are skipped and named)."""
    from trlvr.eval.comparable import check_comparable

    def edit(res):
        c = res["config"]
        c.update(
            batch_size=3,
            score_batch_size=5,
            num_resamples=100,
            decode="static",
            ks=[1, 2],
            suite=["solo"],
            machine={"python": "other"},
        )
        c["models"]["senior"] = "/elsewhere/senior"
        res["fingerprint"]["models"]["junior"]["path"] = "/a/copy/of/the/junior"

    assert check_comparable(base_eval, _variant(base_eval, tmp_path / "other", edit)) == []


def _group(root: Path, base: Path, seeds, edit=None) -> Path:
    for s in seeds:
        _variant(base, root / f"seed-{s}", edit or (lambda res: None))
    return root


def test_seed_groups_with_other_seeds_or_mixed_settings_are_refused(base_eval, tmp_path, capsys):
    a = _group(tmp_path / "a", base_eval, [0, 1, 2])
    b = _group(tmp_path / "b", base_eval, [0, 1])
    assert cli(["compare", str(a), str(b), "--out", str(tmp_path / "c")]) == 2
    assert "seeds: [0, 1, 2] (A) vs [0, 1] (B)" in capsys.readouterr().err
    assert (
        cli(
            [
                "compare",
                str(a),
                str(b),
                "--out",
                str(tmp_path / "c"),
                "--allow-mismatch",
                "--resamples",
                "100",
            ]
        )
        == 0
    )
    assert "seeds: [0, 1, 2] (A) vs [0, 1] (B)" in capsys.readouterr().out
    # a group whose own seeds were evaluated differently is no group to average
    mixed = _group(tmp_path / "mixed", base_eval, [0, 1])
    _variant(base_eval, tmp_path / "tmp", _set("config.n", 8))
    shutil.rmtree(mixed / "seed-1")
    shutil.copytree(tmp_path / "tmp", mixed / "seed-1")
    assert cli(["report", str(b), str(mixed), "--out", str(tmp_path / "m.html")]) == 2
    err = capsys.readouterr().err
    assert "the seed group's evaluations differ in settings (n: 2 (seed 0) vs 8 (seed 1))" in err

"""Issue 29 for `trlvr study`: rule 5 (a study survives one bad stage) and rule 3's study half (a study is
identified by its meaning, and a finished stage is reused when the settings it depends on did not change).

The stages run through the real `execute` (log redirection, exit codes) with a stand-in for the
command-line entry point that keeps its contract: a UserError is one line and exit 2, anything else
propagates (as from `trlvr.cli.main.main`).
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest
from test_study import TINY, FakeStages, write

from trlvr.cli.main import main as cli
from trlvr.errors import UserError
from trlvr.experiments import study as S
from trlvr.experiments.study_spec import load_study


class Commands(FakeStages):
    """FakeStages behind the CLI's contract; `boom`: {argv substring: exception to raise there}."""

    def __init__(self, boom: dict | None = None):
        super().__init__()
        self.boom = boom or {}

    def cli(self, argv):
        for where, exc in self.boom.items():
            if where in " ".join(argv):
                self.calls.append(list(argv))
                if isinstance(exc, UserError):
                    print(f"trlvr {argv[0]}: error: {exc}", file=sys.stderr)
                    return 2
                raise exc
        self(argv, None)
        return 0


@pytest.fixture
def commands(monkeypatch):
    from trlvr.toy import world

    monkeypatch.setattr(world, "is_complete", lambda d: (Path(d) / "data").is_dir())

    def install(boom=None):
        c = Commands(boom)
        monkeypatch.setattr("trlvr.cli.main.main", c.cli)
        return c

    return install


def run(p: Path, out: Path, *extra) -> int:
    return cli(["study", "run", str(p), "--out", str(out), "--no-report", *extra])


def test_any_exception_in_a_stage_ends_that_pipeline_only_with_its_traceback_in_the_log(
    tmp_path, commands, capsys
):
    """The issue's case: the first non-trlvr exception stopped the whole study, and the stage log held only
    the command line."""
    p, out = write(tmp_path, TINY), tmp_path / "out"
    c = commands(
        {
            "output_dir " + str(out / "train/word-spaced/seed-0"): RuntimeError(
                "CUDA error: device-side assert"
            ),
            "select " + str(out / "train/grpo-compact/seed-1"): UserError("--val split:20: boom"),
        }
    )
    assert run(p, out) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("trlvr study: 2 stage(s) failed"), err
    assert "word-spaced seed 0 train: RuntimeError: CUDA error: device-side assert" in err[0]
    assert (
        "grpo-compact seed 1 select: `trlvr select` failed (exit 2): trlvr select: error: --val split:20: boom"
        in err[0]
    )
    log = (out / "logs/word-spaced/seed-0-train.log").read_text()
    assert (
        "Traceback (most recent call last)" in log and "RuntimeError: CUDA error: device-side assert" in log
    )
    assert (
        "trlvr select: error: --val split:20: boom"
        in (out / "logs/grpo-compact/seed-1-select.log").read_text()
    )
    # the failed pipelines stopped at their failure; every other one finished
    done = {
        (v, s)
        for v in ("grpo-spaced", "word-spaced", "grpo-compact", "word-compact")
        for s in (0, 1)
        if (S.eval_dir(out, v, s) / S.DONE).is_file()
    }
    assert done == {
        (v, s) for v in ("grpo-spaced", "word-spaced", "grpo-compact", "word-compact") for s in (0, 1)
    } - {("word-spaced", 0), ("grpo-compact", 1)}
    assert not any(c[0] == "select" and "word-spaced/seed-0" in c[1] for c in c.calls)
    # fixed: the next run retries exactly the failed stages and the rest of their pipelines
    again = commands()
    assert run(p, out) == 0
    assert sorted((a[0], next(x for x in a if "/seed-" in x).split("/")[-2]) for a in again.calls) == [
        ("eval", "grpo-compact"),
        ("eval", "word-spaced"),
        ("select", "grpo-compact"),
        ("select", "word-spaced"),
        ("train", "word-spaced"),
    ]
    assert S.failed_stages(out, [st for u in S.units(load_study(p), out) for st in u]) == []


def test_a_failed_world_stops_only_the_pipelines_that_need_it(tmp_path, commands, capsys):
    p, out = write(tmp_path, TINY), tmp_path / "out"
    c = commands({"--jargon compact": ValueError("bad world")})
    assert run(p, out) == 1
    err = capsys.readouterr().err
    assert "compact world: ValueError: bad world" in err
    assert all(not any("compact" in a for a in call) or call[0] == "toy" for call in c.calls)
    assert all(
        (S.eval_dir(out, v, s) / S.DONE).is_file() for v in ("grpo-spaced", "word-spaced") for s in (0, 1)
    )


# ---- a study is its meaning; finished stages are reused while their settings hold ----------------------


def _stages_run(c) -> list[tuple[str, str]]:
    out = []
    for a in c.calls:
        where = next(x for x in a if "/seed-" in x or "/worlds/" in x)
        out.append((a[0], where.split("/train/")[-1].split("/eval/")[-1].split("@")[0], "--fresh" in a))
    return sorted(out)


def test_an_edited_study_redoes_only_the_stages_whose_settings_changed(tmp_path, commands, capsys):
    """The issue's case: the corrected file was refused by its own directory (its hash covered the raw bytes,
    a comment included), and all training was redone elsewhere."""
    p, out = write(tmp_path, TINY), tmp_path / "out"
    commands()
    assert run(p, out) == 0
    # a comment and another key order: the same study, nothing to do
    p.write_text(
        "# tuned budgets\n"
        + TINY.replace("seeds: [0, 1]\n", "").replace("name: tiny", "seeds: [0, 1]\nname: tiny")
    )
    c = commands()
    assert run(p, out) == 0 and c.calls == []
    # the evaluation's n changed: every eval stage again, from scratch; train and select reused
    p.write_text(TINY.replace("n: 2, k: [1, 2], limit: 30", "n: 4, k: [1, 2], limit: 30"))
    c = commands()
    assert run(p, out) == 0
    assert {(k, fresh) for k, _, fresh in _stages_run(c)} == {("eval", True)} and len(c.calls) == 8
    # the selection's n changed: select and the eval that reads its choice, for every run
    p.write_text(
        TINY.replace("n: 2, k: [1, 2], limit: 30", "n: 4, k: [1, 2], limit: 30").replace(
            "metric: handoff/pass@1, n: 2", "metric: handoff/pass@1, n: 3"
        )
    )
    c = commands()
    assert run(p, out) == 0
    assert sorted({k for k, _, _ in _stages_run(c)}) == ["eval", "select"] and len(c.calls) == 16
    # a training setting of one variant changed: refused before anything runs, naming the stage and the change
    capsys.readouterr()
    p.write_text(TINY.replace("max_gap: 32, baseline: grpo-spaced", "max_gap: 8, baseline: grpo-spaced"))
    c = commands()
    assert run(p, out) == 2 and c.calls == []
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "2 stage(s) ran under other settings" in err[0]
    assert (
        "word-spaced seed 0 train (--max_gap: 32 -> 8)" in err[0]
        and f"remove {out}/train/word-spaced/seed-0" in err[0]
    )


def test_a_study_directory_from_before_stage_records_is_taken_as_it_is(tmp_path, commands):
    p, out = write(tmp_path, TINY), tmp_path / "out"
    commands()
    assert run(p, out) == 0
    shutil.rmtree(out / S.STAGES_DIR)
    c = commands()
    assert run(p, out) == 0 and c.calls == []


def test_the_study_record_holds_the_meaning_not_the_bytes(tmp_path):
    a = load_study(write(tmp_path, TINY, "a.yaml"))
    b = load_study(
        write(
            tmp_path,
            "# note\n" + TINY.replace("{arm: grpo, world: spaced}", "{world: spaced, arm: grpo}"),
            "b.yaml",
        )
    )
    c = load_study(write(tmp_path, TINY.replace("limit: 30", "limit: 31"), "c.yaml"))
    assert a.sha256 == b.sha256 != c.sha256
    out = tmp_path / "out"
    S.claim_dir(a, out, code={"commit": "x"})
    S.refuse_another_study(
        b, out, json.loads((out / S.STUDY_FILE).read_text())
    )  # a comment is no other study
    with pytest.raises(UserError, match="made from another study file"):
        S.refuse_another_study(c, out, json.loads((out / S.STUDY_FILE).read_text()))

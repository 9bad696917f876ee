"""The one run-directory module (issue 27 item 2): one lock, one identity, the layout named in one place.

One lock: a second locker of a directory, training's or evaluation's, in another process, is refused
with one line naming the first's pid; a holder killed by SIGKILL leaves a stale pid file that never
blocks. One identity: a record that differs is refused with its differences on one line unless forced,
then set aside; a record that is not JSON is one line naming the file. No module under trlvr/ but
rundir.py spells a layout name as a string literal (the rule is checked, so it cannot erode).
"""

from __future__ import annotations

import ast
import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from trlvr import rundir
from trlvr.errors import UserError
from trlvr.eval.store import EvalDir

ROOT = Path(__file__).resolve().parents[1]

# ---- one lock ------------------------------------------------------------------------------------------

# the flag that chooses another directory, as each command names it
FLAGS = {by: flag for by, (_, flag) in rundir.LOCKS.items()}  # every command that writes a folder


def locked(by: str, path: Path):
    """The lock of `by`'s directory `path`, taken as the command takes it."""
    if by == "trlvr train":
        from trlvr.training.run import training_lock

        return training_lock(path, main_process=True)
    if by == "trlvr eval":
        return EvalDir(path).lock()
    return rundir.lock(path, by=by)


def hold(by: str, path: Path) -> subprocess.Popen:
    """Another process holding the lock (the one lock: `trlvr.rundir.lock`, without loading torch)."""
    code = textwrap.dedent(f"""
        import time
        from trlvr import rundir
        with rundir.lock({str(path)!r}, by={by!r}):
            print("held", flush=True)
            time.sleep(120)
    """)
    proc = subprocess.Popen(
        [sys.executable, "-c", code],
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env=dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1"),
    )
    assert proc.stdout.readline().strip() == "held"
    return proc


@pytest.mark.parametrize("by", sorted(FLAGS))
def test_a_second_locker_is_refused_with_the_first_ones_pid_and_a_killed_holder_never_blocks(by, tmp_path):
    run = tmp_path / "run"
    lock_file, pid_file = rundir.lock_files(by)
    holder = hold(by, run)
    try:
        assert rundir.holder(run, by) == (str(holder.pid), by)
        with pytest.raises(UserError) as e:
            with locked(by, run):
                pass
        assert str(e.value) == (
            f"{run} is being written by another {by} (pid {holder.pid}); "
            f"wait for it to finish or choose another {FLAGS[by]}"
        )
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    assert rundir.holder_pid(run, by) == str(holder.pid)  # stale: the holder died without cleaning up
    with locked(by, run):
        assert rundir.holder(run, by) == (str(os.getpid()), by)
    assert not (run / pid_file).exists() and (run / lock_file).exists()


def test_training_and_evaluation_keep_their_own_lock_files(tmp_path):
    """The file names of before this module: an older trlvr and this one exclude each other."""
    assert rundir.lock_files("trlvr train") == (".train.lock", ".train.lock.pid")
    assert rundir.lock_files("trlvr eval") == (".lock", ".lock.pid")


def test_other_ranks_pass_through_and_a_held_lock_refuses_this_process_too(tmp_path):
    with rundir.lock(tmp_path / "a", by="trlvr train", main_process=False) as held:
        assert held is None and not (tmp_path / "a").exists()  # nothing made, nothing waited on
    with rundir.lock(tmp_path / "b", by="trlvr train"):
        with pytest.raises(UserError, match=rf"\(pid {os.getpid()}\)"):
            with rundir.lock(tmp_path / "b", by="trlvr train"):
                pass
    with EvalDir(tmp_path / "c").lock() as d:
        assert d.clear() is None  # the lock files stay where they are (nothing else to move)
        assert sorted(p.name for p in d.path.iterdir()) == [".lock", ".lock.pid"]


# ---- one identity --------------------------------------------------------------------------------------

FIX = "use another --out, or --force to start over"


def test_differences_are_key_old_new_over_nested_keys_with_an_ignore_list():
    old = {"a": 1, "b": {"c": "x", "d": [1]}, "skip": 1, "gone": None}
    new = {"a": 2, "b": {"c": "x", "e": {}}, "skip": 2}
    # a key None on one side and absent on the other is no difference (issue 38: an older record that
    # did not write a key means what None means); a dict against a non-dict is one difference
    assert rundir.differences(old, new, ignore=("skip",)) == [
        "a: 1 -> 2",
        "b.d: [1] -> (absent)",
        "b.e: (absent) -> {}",
    ]
    assert rundir.differences({"m": {"j": {"path": "p", "config": "c"}}}, {"m": {"j": None}}) == [
        "m.j: {config, path} -> None"
    ]
    assert rundir.differences({"--n": "4"}, {"--n": "8"}, show=str) == ["--n: 4 -> 8"]
    assert rundir.differences(new, new) == [] and rundir.differences(None, {}) == []


def test_identity_refuses_with_the_differences_on_one_line_unless_forced_then_sets_aside(tmp_path):
    run = tmp_path / "run"
    rundir.write_record(run / "made.json", {"arm": "grpo", "p": 0.5, "facts": 1})
    (run / "checkpoint-3").mkdir()
    compare = lambda old, new: rundir.differences(old, new, ignore=("facts",))  # noqa: E731
    new = {"arm": "tandem", "p": 0.5, "facts": 2}
    kw = dict(compare=compare, what="a different run", fix=FIX)
    with pytest.raises(UserError) as e:
        rundir.check_identity(run, "made.json", new, force=False, **kw)
    assert str(e.value) == f"{run} holds a different run (arm: 'grpo' -> 'tandem'): {FIX}"
    assert (
        rundir.check_identity(run, "made.json", {**new, "arm": "grpo"}, force=False, **kw) == []
    )  # the same run
    assert rundir.check_identity(run, "made.json", new, force=True, **kw) == ["arm: 'grpo' -> 'tandem'"]
    aside = rundir.set_aside(run, say=False)
    assert sorted(p.name for p in aside.iterdir()) == ["checkpoint-3", "made.json"]
    assert rundir.check_identity(run, "made.json", new, force=False, **kw) == []  # nothing made it yet


def test_many_differences_stay_one_line():
    diffs = [f"k{i}: {i} -> {i + 1}" for i in range(11)]
    with pytest.raises(UserError) as e:
        rundir.refuse("d", diffs, force=False, what="x", fix="y")
    assert str(e.value) == "d holds x (" + "; ".join(diffs[:8]) + "; and 3 more): y" and "\n" not in str(
        e.value
    )


@pytest.mark.parametrize(
    "text, says",
    [
        (
            "{bad",
            "not valid JSON (Expecting property name enclosed in double quotes: line 1 column 2 (char 1))",
        ),
        ("[1]", "expected a JSON object, got a JSON array"),
    ],
)
def test_a_record_that_is_not_a_json_object_is_one_line_naming_the_file(tmp_path, text, says):
    path = tmp_path / "run" / rundir.RUN_FILE
    path.parent.mkdir()
    path.write_text(text)
    with pytest.raises(UserError) as e:
        rundir.read_record(path, hint="; remove it")
    assert str(e.value) == f"{path}: {says}; remove it"
    with pytest.raises(UserError) as e:  # through the identity check: refused, naming the file, unless forced
        rundir.check_identity(
            path.parent, rundir.RUN_FILE, {}, rundir.differences, force=False, what="w", fix=FIX
        )
    assert str(e.value) == f"{path}: {says}; {FIX}"
    assert rundir.check_identity(
        path.parent, rundir.RUN_FILE, {}, rundir.differences, force=True, what="w", fix=FIX
    ) == [f"{rundir.RUN_FILE}: unreadable"]
    assert rundir.read_record(tmp_path / "none.json") is None


def test_write_record_is_atomic_and_leaves_no_temp_file(tmp_path):
    rundir.write_record(tmp_path / "d" / "r.json", {"b": 1, "a": [2]}, sort_keys=True)
    assert (tmp_path / "d" / "r.json").read_text() == '{\n  "a": [\n    2\n  ],\n  "b": 1\n}\n'
    assert [p.name for p in (tmp_path / "d").iterdir()] == ["r.json"]


def test_training_identity_bad_record_and_format_1_paths(tmp_path):
    """run_record's content on the generic mechanism: its sections compared, its facts not; a record
    that does not parse is one line naming it (before: `remove it or pass --force`, also under --force)."""
    from trlvr.training.run_record import check_output_dir, differences

    old = {
        "tandem": {"p": 0.5, "arm": "tandem"},
        "grpo": {"seed": 0},
        "data": {"sha256": "a"},
        "machine": {"x": 1},
    }
    new = {
        "tandem": {"p": 0.3, "arm": "tandem"},
        "grpo": {"seed": 0},
        "data": {"sha256": "b"},
        "machine": {"x": 2},
    }
    assert differences(old, new) == ["p: 0.5 -> 0.3", "data sha256: 'a' -> 'b'"]
    run = tmp_path / "run"
    run.mkdir()
    (run / rundir.RUN_FILE).write_text('{"tandem": ')
    with pytest.raises(
        UserError, match=rf"^{run / rundir.RUN_FILE}: not valid JSON \(.*\); use another --output_dir"
    ):
        check_output_dir(run, new, resume=False, force=False)
    assert check_output_dir(run, new, resume=False, force=True) == [f"{rundir.RUN_FILE}: unreadable"]


def test_evaluation_identity_lists_what_differs_on_one_line(tmp_path):
    from trlvr.eval.fingerprint import FIX as EVAL_FIX
    from trlvr.eval.fingerprint import check_resumable

    old = {"version": 1, "models": {"senior": "a"}, "problems": {"b": ["p1", "p2"]}}
    check_resumable(tmp_path, old, {**old, "problems": {"b": ["p1"]}})  # a smaller --limit: resumable
    with pytest.raises(UserError) as e:
        check_resumable(tmp_path, old, {**old, "models": {"senior": "b"}, "problems": {"b": ["p2"]}})
    assert str(e.value) == (
        f"{tmp_path} holds samples of another evaluation (problems of 'b': problem 1 is p1 in "
        f"the directory but p2 now; models.senior: 'a' -> 'b'): {EVAL_FIX}"
    )


def test_a_stage_record_that_does_not_read_is_one_line_naming_it(tmp_path):
    """Before, an unreadable stage record counted as none: the stage's output was taken whatever made it."""
    from trlvr.experiments.study import Stage, record_path, stage_state, write_stage_record

    stage = Stage("train", "v", 0, ["train", "--max_steps", "4"], tmp_path / "train", settings="s1")
    write_stage_record(tmp_path, stage, complete=False)
    assert stage_state(tmp_path, stage) == "todo"
    record_path(tmp_path, stage).write_text("{")
    with pytest.raises(UserError, match=rf"^{record_path(tmp_path, stage)}: not valid JSON .*; remove it"):
        stage_state(tmp_path, stage)


def test_study_stale_lines_use_the_one_diff(tmp_path):
    from dataclasses import replace

    from trlvr.experiments.study import Stage, stale_stages, write_stage_record

    stage = Stage(
        "train", "v", 0, ["train", "--max_steps", "4", "--lr", "1"], tmp_path / "train", settings="s1"
    )
    write_stage_record(tmp_path, stage, complete=True)
    (tmp_path / "train").mkdir()
    (tmp_path / "train" / "x").write_text("")
    now = replace(stage, argv=["train", "--max_steps", "8", "--fast"], settings="s2")
    assert stale_stages(tmp_path, [now]) == [
        f"v seed 0 train (--fast: (absent) -> True; --lr: 1 -> (absent); "
        f"--max_steps: 4 -> 8): remove {tmp_path / 'train'} to redo it"
    ]


# ---- training: the order of refuse, force, set aside -------------------------------------------------------


def test_force_lists_what_differed_before_setting_the_run_aside(tmp_path, monkeypatch, capsys):
    """Before, --force set the earlier run aside first and then compared against nothing: what the
    forced run differed in was never said."""
    import trlvr.training.run as run_module
    from trlvr.cli.main import main as cli
    from trlvr.toy.world import ASSETS_DIR

    for name in ("senior", "junior"):
        shutil.copytree(ASSETS_DIR / name, tmp_path / name)
    # an epoch of the toy recipe draws 16 prompts: the run's own checks (`check_run_start`) pass before --force
    (tmp_path / "train.jsonl").write_text(
        "".join(json.dumps({"problem": f"{i}+1", "answer": str(i + 1)}) + "\n" for i in range(20))
    )
    run = tmp_path / "run"
    rundir.write_record(run / rundir.RUN_FILE, {"format": 2, "tandem": {"arm": "grpo"}})
    seen = []
    monkeypatch.setattr(
        run_module, "_train_and_save", lambda tandem, args, **kw: seen.append(kw["start"].record)
    )
    argv = [
        "train",
        "--config",
        "toy",
        "--holdout",
        "0",
        "--senior",
        str(tmp_path / "senior"),
        "--junior",
        str(tmp_path / "junior"),
        "--dataset",
        str(tmp_path / "train.jsonl"),
        "--output_dir",
        str(run),
        "--arm",
        "tandem",
    ]
    assert cli(argv) == 2
    assert f"{run} holds a different run (arm: 'grpo' -> 'tandem'; " in capsys.readouterr().err
    assert cli([*argv, "--force"]) == 0
    err = capsys.readouterr().err
    assert f"--force: training into {run} although arm: 'grpo' -> 'tandem'" in err
    [aside] = [p for p in run.iterdir() if rundir.is_aside(p.name)]
    assert json.loads((aside / rundir.RUN_FILE).read_text())["tandem"] == {"arm": "grpo"}
    assert seen and seen[0]["tandem"]["arm"] == "tandem"


# ---- the layout is named in one place ----------------------------------------------------------------------

# Literals that ARE a layout name (or a path starting with one), outside docstrings. Containment in prose
# ("a results.json metric") is not a spelling of the layout.
STARTS = (
    rundir.RUN_FILE,
    rundir.SELECTED_FILE,
    rundir.HOLDOUT_FILE,
    rundir.METRICS_FILE,
    rundir.PREEMPT_MARK,
    rundir.SAMPLES,
    rundir.FINGERPRINT,
    rundir.PER_PROBLEM,
    rundir.RESULTS,
    rundir.STUDY_DONE,
    rundir.CHECKPOINT,
)
EQUALS = (rundir.FINAL, rundir.TRAIN_LOCK, rundir.EVAL_LOCK)
# (file, name) that is not the layout
NOT_LAYOUT = {("trlvr/engine/text_pair.py", "final"): "a text snapshot's label"}
# (file, name) in files the run-directory job did not own: the lead switches each to the constant of
# trlvr.rundir and removes it here (an entry no longer needed fails the test too)
PENDING: set[tuple[str, str]] = set()  # literals still to switch to trlvr.rundir's names (none)


def layout_literals(path: Path) -> list[tuple[int, str]]:
    """(line, layout name) of every string literal in `path` that spells one (docstrings aside)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    docs = {
        id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant)
    }
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
            value = node.value
            out += [(node.lineno, name) for name in STARTS if value.lstrip("/").startswith(name)]
            out += [(node.lineno, name) for name in EQUALS if value.strip("/") == name]
    return out


def test_no_module_but_rundir_spells_a_layout_name():
    found = {}
    for path in sorted((ROOT / "trlvr").rglob("*.py")):
        rel = str(path.relative_to(ROOT))
        if rel != "trlvr/rundir.py":
            for line, name in layout_literals(path):
                found.setdefault((rel, name), []).append(line)
    spelled = [
        f"{rel}:{lines[0]} spells {name!r}: use trlvr.rundir's constant"
        for (rel, name), lines in found.items()
        if (rel, name) not in NOT_LAYOUT and (rel, name) not in PENDING
    ]
    stale = [
        f"{key} no longer spelled there: remove it from PENDING / NOT_LAYOUT"
        for key in (*PENDING, *NOT_LAYOUT)
        if key not in found
    ]
    assert spelled + stale == []


def test_the_layout_check_catches_a_literal_but_not_a_docstring_or_prose(tmp_path):
    module = tmp_path / "m.py"
    module.write_text(
        '"""Writes selected.json."""\n\ndef f(run):\n    """final/ and checkpoint-N."""\n'
        '    print("a results.json metric")\n    return run / "final", f"{run}/selected.json"\n'
    )
    assert sorted(layout_literals(module)) == [(6, "final"), (6, "selected.json")]

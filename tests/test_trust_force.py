"""Starting over means starting over: `trlvr train --force`, `trlvr eval --fresh` and `trlvr demo --fresh`
move the earlier run aside (OUT/replaced-<time>/, nothing deleted) through one helper
(`trlvr.rundir.set_aside`), so no later command (`--resume`, `select`, `eval RUN@selected`, a study's
stage check) picks up anything of it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from helpers import copy_toy_pair, save_tiny_models, toy_run_argv, toy_train_argv, write_sum_problems

from trlvr.cli.main import main as cli
from trlvr.errors import UserError
from trlvr.rundir import ASIDE_PREFIX, set_aside

SMALL = [
    "--per_device_train_batch_size",
    "8",
    "--num_generations",
    "4",
    "--max_completion_length",
    "16",
    "--use_cpu",
    "true",
    "--save_steps",
    "1",
]


def tree(path: Path) -> dict[str, bytes]:
    """{relative path: content} of every file under `path`."""
    return {str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()}


def asides(path: Path) -> list[Path]:
    return sorted(p for p in path.iterdir() if p.name.startswith(ASIDE_PREFIX))


# ---- the helper --------------------------------------------------------------------------------------


def test_set_aside_moves_everything_but_the_lock_and_earlier_runs_and_deletes_nothing(tmp_path):
    run = tmp_path / "run"
    for name, text in {
        "checkpoint-2/model.safetensors": "w",
        "final/config.json": "{}",
        "selected.json": "{}",
        "select/holdout/results.json": "{}",
        ".done": "",
        ".train.lock": "",
    }.items():
        (run / name).parent.mkdir(parents=True, exist_ok=True)
        (run / name).write_text(text)
    before = tree(run)
    lines = []
    first = set_aside(run, keep=(".train.lock",), say=lines.append)
    assert first.parent == run and first.name.startswith(ASIDE_PREFIX)
    assert sorted(p.name for p in run.iterdir()) == [".train.lock", first.name]
    assert {k: v for k, v in before.items() if k != ".train.lock"} == tree(first)  # moved, byte for byte
    assert len(lines) == 1 and str(first) in lines[0] and "nothing was deleted" in lines[0]
    assert set_aside(run, keep=(".train.lock",), say=False) is None  # nothing left to move
    (run / "metrics.jsonl").write_text("{}\n")
    second = set_aside(run, keep=(".train.lock",), say=False)  # a second start over: its own folder
    assert second != first and asides(run) == sorted([first, second])
    assert tree(second) == {"metrics.jsonl": b"{}\n"} and tree(first) == {
        k: v for k, v in before.items() if k != ".train.lock"
    }
    assert set_aside(tmp_path / "never-made") is None


def _a_run_with_an_earlier_aside(run: Path) -> dict[str, bytes]:
    for name, text in {
        "checkpoint-1/model.safetensors": "w1",
        "checkpoint-2/model.safetensors": "w2",
        "final/config.json": "{}",
        "metrics.jsonl": "{}\n",
        "selected.json": "{}",
        "replaced-20200101-000000/final/config.json": "old",
        ".train.lock": "",
        ".train.lock.pid": "7",
    }.items():
        (run / name).parent.mkdir(parents=True, exist_ok=True)
        (run / name).write_text(text)
    return tree(run)


@pytest.mark.parametrize("fail_at", [1, 2, 3])
def test_a_failure_between_the_moves_leaves_every_finished_file_where_it_was(tmp_path, monkeypatch, fail_at):
    """The earlier run moves in one rename (`set_aside`): a rename that fails at any point (the first, the
    second, the third) leaves the folder byte for byte as it was, no half-made replaced-*, no hidden
    folder beside it. Before, entries moved one `os.replace` each: a failure on the second left
    checkpoint-1 aside and checkpoint-2, final/ and metrics where `--resume` and `select` read them."""
    import os

    run = tmp_path / "run"
    before = _a_run_with_an_earlier_aside(run)
    calls, real_rename, real_replace = [], os.rename, os.replace

    def flaky(real):
        def move(src, dst, *a, **k):
            calls.append((src, dst))
            if len(calls) == fail_at:
                raise OSError(28, "No space left on device")
            return real(src, dst, *a, **k)

        return move

    monkeypatch.setattr(os, "rename", flaky(real_rename))
    monkeypatch.setattr(os, "replace", flaky(real_replace))
    try:
        moved = set_aside(run, keep=(".train.lock", ".train.lock.pid"), say=False)
    except OSError:
        moved = None
    monkeypatch.undo()
    if moved is None:  # the move failed: nothing of it shows
        assert tree(run) == before
        assert sorted(p.name for p in asides(run)) == ["replaced-20200101-000000"]
    else:  # it finished before the failing call (only the earlier aside's move back can fail after)
        assert {k: v for k, v in before.items() if not k.startswith((".train", "replaced-"))}.items() <= {
            k.split("/", 1)[1]: v for k, v in tree(run).items() if k.startswith(moved.name)
        }.items()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]  # no hidden fresh folder left beside it


def test_the_one_rename_keeps_a_held_lock_held_and_earlier_asides_beside_the_new_one(tmp_path):
    from filelock import FileLock, Timeout

    run = tmp_path / "run"
    before = _a_run_with_an_earlier_aside(run)
    held = FileLock(str(run / ".train.lock"), timeout=0)
    held.acquire()
    try:
        moved = set_aside(run, keep=(".train.lock", ".train.lock.pid"), say=False)
        with pytest.raises(Timeout):  # the lock file in place is the held one (a link, not a copy)
            FileLock(str(run / ".train.lock"), timeout=0).acquire()
    finally:
        held.release()
    assert sorted(p.name for p in run.iterdir()) == sorted(
        [".train.lock", ".train.lock.pid", moved.name, "replaced-20200101-000000"]
    )
    assert tree(moved) == {k: v for k, v in before.items() if not k.startswith((".train", "replaced-"))}
    assert tree(run / "replaced-20200101-000000") == {"final/config.json": b"old"}
    assert (run / ".train.lock.pid").read_text() == "7"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]


@pytest.mark.parametrize("where", [".", "absolute"])
def test_a_folder_this_process_works_in_is_set_aside_in_place(tmp_path, monkeypatch, where):
    """`--out .` (or the working directory named in full): renaming the folder itself would leave the
    command working inside the aside, so its entries move instead; the working directory stays the folder."""
    run = tmp_path / "run"
    before = _a_run_with_an_earlier_aside(run)
    monkeypatch.chdir(run)
    moved = set_aside(Path(".") if where == "." else run, keep=(".train.lock", ".train.lock.pid"), say=False)
    assert Path.cwd().resolve() == run.resolve() and (run / ".train.lock").is_file()
    kept = {k: v for k, v in before.items() if not k.startswith((".train", "replaced-"))}
    assert tree(run / moved.name) == kept and sorted(p.name for p in tmp_path.iterdir()) == ["run"]


def test_a_kill_between_the_two_renames_is_completed_by_the_next_command(tmp_path):
    """A kill (no `finally`, no undo) right after the earlier run moved whole into the fresh folder beside
    it: the folder is missing and the run waits, whole, in the hidden sibling; the next lock or
    prepare_output of the folder renames it into place (`rundir.finish_swap`)."""
    import os

    from trlvr import rundir

    run = tmp_path / "run"
    before = _a_run_with_an_earlier_aside(run)
    pid = os.fork()
    if pid == 0:  # the child is killed at its second rename
        calls = []
        real = os.rename

        def killed(src, dst, *a, **k):
            calls.append(src)
            if len(calls) == 2:
                os._exit(9)
            return real(src, dst, *a, **k)

        os.rename = killed
        set_aside(run, keep=(".train.lock", ".train.lock.pid"), say=False)
        os._exit(0)
    assert os.waitpid(pid, 0)[1] >> 8 == 9
    assert not run.exists()
    [waiting] = list(tmp_path.iterdir())
    assert waiting.name.startswith(".run.replaced-")
    rundir.prepare_output(run, rundir.TRAINING, flag="--output_dir")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]
    [new, earlier] = sorted(asides(run), reverse=True)
    assert earlier.name == "replaced-20200101-000000"
    moved = {k.split("/", 1)[1]: v for k, v in tree(run).items() if k.startswith(new.name + "/")}
    assert {
        k: v for k, v in before.items() if not k.startswith((".train", "replaced-"))
    }.items() <= moved.items()
    assert (run / ".train.lock.pid").read_text() == "7"


# ---- trlvr train --force -----------------------------------------------------------------------------


@pytest.fixture
def toy(tmp_path):
    return copy_toy_pair(tmp_path, 120)


def train(toy: Path, *extra: str, out: str = "run") -> int:
    return cli(toy_train_argv(toy, *SMALL, *extra, out=out))


def test_force_leaves_nothing_of_the_old_run_for_resume_or_select(toy_run, capsys):
    """The issue's case: a run of one arm (checkpoints 1 and 2, final, selected.json, a selection folder), then
    `--force` a run of the other arm, one step. Before, checkpoint-2, final/ and selected.json of the earlier
    run stayed: `--resume` continued the new run from the earlier run's checkpoint and `select` offered both.
    (The issue's earlier run was grpo, the new one tandem; here conftest's tandem toy run is the earlier one.)"""
    from trlvr.experiments.selection import list_checkpoints
    from trlvr.training.checkpoints import pick_checkpoint

    toy, run = toy_run, toy_run / "run"
    (run / "selected.json").write_text(json.dumps({"step": 2, "path": str(run / "checkpoint-2")}))
    (run / "select" / "holdout20").mkdir(parents=True)
    (run / "select" / "holdout20" / "table.md").write_text("| step |\n")
    old = tree(run)
    capsys.readouterr()
    assert cli(toy_run_argv(toy, "--arm", "grpo", "--max_steps", "1", "--force")) == 0
    err = capsys.readouterr().err
    [aside] = asides(run)
    assert f"--force: started over in {run}: the earlier run is now in {aside}" in err
    assert tree(aside) == {k: v for k, v in old.items() if not k.startswith(".train.lock")}  # nothing deleted
    top = {p.name for p in run.iterdir()} - {aside.name}
    assert "selected.json" not in top and "select" not in top and "checkpoint-2" not in top
    assert [c.step for c in list_checkpoints(run)] == [1]  # select sees the new run only
    assert json.loads((run / "trlvr_run.json").read_text())["tandem"]["arm"] == "grpo"
    assert pick_checkpoint(run)[0] == run / "checkpoint-1"
    shutil.rmtree(run / "final")  # killed before final/ (a finished run is never resumed to more steps)
    assert (
        cli(toy_run_argv(toy, "--arm", "grpo", "--max_steps", "2", "--resume")) == 0
    )  # continues the new run
    err = capsys.readouterr().err
    assert "resuming from" in err and err.split("resuming from")[1].split()[0] == str(run / "checkpoint-1")
    state = json.loads((run / "final" / "trainer_state.json").read_text())
    assert state["global_step"] == 2


def test_force_and_resume_together_are_refused_before_anything_moves(toy_run, capsys):
    toy = toy_run  # a finished 2-step run (conftest)
    before = tree(toy / "run")
    capsys.readouterr()
    assert cli(toy_run_argv(toy, "--max_steps", "3", "--force", "--resume")) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--force starts over" in err[0] and "--resume continues" in err[0]
    assert tree(toy / "run") == before


def test_force_with_seeds_starts_over_in_the_whole_folder(toy, monkeypatch, capsys):
    """`--seeds 0,1 --force` into a folder of an earlier `--seeds 0,1,2`: seed-2 of the earlier runs
    does not stay beside the new seeds (training itself is stubbed: this is about the folder)."""
    import trlvr.training.run as run_module

    out = toy / "runs"
    for s in (0, 1, 2):
        (out / f"seed-{s}" / "checkpoint-5").mkdir(parents=True)
        (out / f"seed-{s}" / "checkpoint-5" / "model.safetensors").write_text("old")
        (out / f"seed-{s}" / ".train.lock").write_text("")
    trained = []

    def fake(tandem, args, **kw):
        trained.append((Path(args.output_dir).name, sorted(p.name for p in Path(args.output_dir).iterdir())))
        return Path(args.output_dir) / "final"

    monkeypatch.setattr(run_module, "_train_and_save", fake)
    assert train(toy, "--seeds", "0,1", "--force", "--max_steps", "1", out="runs") == 0
    [aside] = asides(out)
    assert sorted(p.name for p in aside.iterdir()) == ["seed-0", "seed-1", "seed-2"]
    assert not (out / "seed-2").exists()
    assert [name for name, _ in trained] == ["seed-0", "seed-1"]
    assert all("checkpoint-5" not in names for _, names in trained)  # each seed starts from nothing


def test_force_refuses_a_folder_with_a_run_being_trained(toy, monkeypatch):
    """A run in the folder holds its lock (another `trlvr train`): --force over the folder is refused
    and nothing moves."""
    from trlvr.training.run import start_over, training_lock

    out = toy / "runs"
    (out / "seed-0").mkdir(parents=True)
    (out / "seed-0" / "metrics.jsonl").write_text("{}\n")
    before = tree(out)
    with training_lock(out / "seed-0", main_process=True):
        with pytest.raises(UserError, match="being written by another trlvr train"):
            start_over(out)
    assert tree(out) == {**before, ".train.lock": b"", "seed-0/.train.lock": b""}  # (the lock files only)


# ---- trlvr eval --fresh, trlvr demo --fresh ----------------------------------------------------------


def _eval_world(tmp: Path) -> list[str]:
    save_tiny_models(tmp, {"senior": 0, "junior": 1, "other": 2}, hidden=32)
    data = write_sum_problems(tmp / "d.jsonl", 3)
    return [
        "eval",
        "--junior",
        str(tmp / "junior"),
        "--data",
        f"toy={data}",
        "--n",
        "2",
        "--k",
        "1",
        "--suite",
        "solo",
        "--max-new-tokens",
        "4",
        "--no-progress",
        "--out",
        str(tmp / "out"),
    ]


def test_eval_fresh_sets_the_earlier_evaluation_aside_with_its_markers(tmp_path, capsys):
    """Before, --fresh deleted the evaluation's own files (finished work gone) and kept the rest, e.g.
    a study's `.done` marker and a compare folder of the replaced run, which a later command reads."""
    argv = _eval_world(tmp_path)
    out = tmp_path / "out"
    assert cli(argv + ["--senior", str(tmp_path / "senior")]) == 0
    (out / ".done").touch()
    (out / "compare").mkdir()
    (out / "compare" / "compare.json").write_text("{}")
    old = tree(out)
    assert cli(argv + ["--senior", str(tmp_path / "other"), "--fresh"]) == 0
    [aside] = asides(out)
    assert tree(aside) == {k: v for k, v in old.items() if not k.startswith(".lock")}
    assert not (out / ".done").exists() and not (out / "compare").exists()
    res = json.loads((out / "results.json").read_text())
    assert res["config"]["models"]["senior"].endswith("other")
    assert cli(argv + ["--senior", str(tmp_path / "other"), "--out", str(tmp_path / "clean")]) == 0
    keyed = [
        {
            (r["problem_id"], r["sample_idx"]): r["token_ids"]
            for r in map(json.loads, open(d / "samples.jsonl"))
        }
        for d in (out, tmp_path / "clean")
    ]
    assert keyed[0] == keyed[1]  # the new run is exactly a run into an empty directory


def test_demo_fresh_moves_the_earlier_demo_aside_instead_of_deleting_it(tmp_path, monkeypatch, capsys):
    """Before, `trlvr demo --fresh` deleted the whole directory (hours of finished work)."""
    from trlvr.cli import study_cmd

    out = tmp_path / "demo"
    (out / "train" / "grpo" / "seed-0" / "final").mkdir(parents=True)
    (out / "train" / "grpo" / "seed-0" / "final" / "config.json").write_text("{}")
    (out / "demo.yaml").write_text("# an earlier demo's study, with other options\n")
    old = tree(out)

    def stop(args):
        raise UserError("stopped after the start-over (test)")

    monkeypatch.setattr(study_cmd, "run", stop)  # the demo's study runner
    assert cli(["demo", "--out", str(out), "--fresh"]) == 2
    assert "stopped after the start-over" in capsys.readouterr().err
    [aside] = asides(out)
    assert tree(aside) == old
    assert "name: demo" in (out / "demo.yaml").read_text()  # the new demo's study

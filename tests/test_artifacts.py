"""One definition of a complete artifact (`trlvr.artifacts`), and every reader asking it.

A real toy run is made once (train 2 steps with a checkpoint each step, `trlvr select`): checkpoint-N/,
final/, selected.json and the selection's evaluation folders. Then each file of each artifact is cut
short in turn (the run restored as made before each cut), and every reader of that artifact is driven:
resume's choice and `trlvr train --resume`, `trlvr select`, `RUN@selected` and a checkpoint named as
`--senior` (`trlvr eval`), a study's stage check, `trlvr report` and `trlvr compare`, a rerun of the evaluation. Each skips the torn artifact or refuses in one line naming it; none trusts it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from helpers import copy_toy_run, toy_run_argv

from trlvr import artifacts, rundir
from trlvr.cli.main import main as cli
from trlvr.errors import UserError
from trlvr.eval.api import resolve_senior
from trlvr.eval.store import EvalDir
from trlvr.experiments.selection import list_checkpoints
from trlvr.experiments.study import DONE, Stage, stage_done
from trlvr.training.checkpoints import pick_checkpoint

# ---- the definition, on folders made here -------------------------------------------------------------


def _model_folder(d: Path, resume: bool = True) -> Path:
    from safetensors.torch import save_file

    d.mkdir(parents=True)
    (d / "config.json").write_text(json.dumps({"hidden": 2}))
    save_file({"w": torch.arange(64.0)}, str(d / "model.safetensors"))
    (d / "merges.txt").write_text("a b\nc d\n")
    (d / rundir.TRAINER_STATE).write_text(json.dumps({"global_step": 2}))
    if resume:
        torch.save({"state": torch.arange(64.0)}, d / "optimizer.pt")
        torch.save({"lr": 1.0}, d / "scheduler.pt")
        torch.save({"rng": torch.arange(8)}, d / "rng_state.pth")
    return d


def _cut(path: Path, keep: float = 0.5) -> None:
    path.write_bytes(path.read_bytes()[: int(path.stat().st_size * keep)])


@pytest.mark.parametrize("manifest", [True, False], ids=["with-manifest", "format-only"])
def test_every_file_cut_short_makes_the_checkpoint_incomplete(tmp_path, manifest):
    """With a manifest every cut is caught by its recorded size; without one (an older run), by the
    file's format (safetensors header, torch archive, JSON), merges.txt aside: text has no format."""
    made = _model_folder(tmp_path / "made")
    if manifest:
        artifacts.write_manifest(made)
    assert artifacts.problem(made, artifacts.CHECKPOINT) is None
    assert artifacts.problem(made, artifacts.CHECKPOINT, deep=True) is None
    names = sorted(p.name for p in made.iterdir())
    assert (artifacts.MANIFEST in names) == manifest
    for name in names:
        if name == "merges.txt" and not manifest:
            continue
        torn = tmp_path / f"torn-{name}"
        shutil.copytree(made, torn)
        _cut(torn / name)
        why = artifacts.problem(torn, artifacts.CHECKPOINT)
        assert why is not None and name in why, (name, why)
        assert artifacts.problem(torn, artifacts.WEIGHTS) is not None, name  # torn is torn, for any reader


def test_a_changed_file_of_the_same_size_is_caught_only_by_the_deep_check(tmp_path):
    made = _model_folder(tmp_path / "m")
    artifacts.write_manifest(made)
    text = (made / "merges.txt").read_text()
    (made / "merges.txt").write_text(text.replace("a", "x"))
    assert artifacts.problem(made, artifacts.WEIGHTS) is None
    assert "merges.txt changed since it was written" in artifacts.problem(made, artifacts.WEIGHTS, deep=True)


def test_a_weights_only_checkpoint_is_complete_weights_but_no_resume_point(tmp_path):
    """Resume state pruned after the manifest was written (an older checkpoint kept for selection only)."""
    made = _model_folder(tmp_path / "m")
    artifacts.write_manifest(made)
    for name in ("optimizer.pt", "scheduler.pt", "rng_state.pth"):
        (made / name).unlink()
    assert artifacts.problem(made, artifacts.WEIGHTS) is None
    assert artifacts.problem(made, artifacts.CHECKPOINT) == "no optimizer.pt or global_step*"
    (made / "merges.txt").unlink()  # but a model file listed in the manifest and gone is torn
    assert (
        artifacts.problem(made, artifacts.WEIGHTS)
        == f"merges.txt is missing (listed in {artifacts.MANIFEST})"
    )


def test_a_sharded_model_needs_every_shard(tmp_path):
    made = _model_folder(tmp_path / "m", resume=False)
    (made / "model.safetensors").rename(made / "model-00001-of-00002.safetensors")
    shutil.copy(made / "model-00001-of-00002.safetensors", made / "model-00002-of-00002.safetensors")
    index = {"weight_map": {"a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}}
    (made / "model.safetensors.index.json").write_text(json.dumps(index))
    assert artifacts.problem(made, artifacts.FINAL) is None
    (made / "model-00002-of-00002.safetensors").unlink()
    assert artifacts.problem(made, artifacts.FINAL) == "model-00002-of-00002.safetensors is missing"


def test_an_evaluation_needs_every_file_its_readers_open(tmp_path):
    d = tmp_path / "e"
    d.mkdir()
    for name in rundir.EVAL_OUTPUTS:
        (d / name).write_text('{"a": 1}\n')
    assert artifacts.problem(d, rundir.EVALUATION_ARTIFACT) is None
    (d / rundir.SAMPLES).write_text('{"a": 1}\n{"a"')  # a kill mid-line
    assert artifacts.problem(d, rundir.EVALUATION_ARTIFACT) == f"{rundir.SAMPLES} ends in a cut line"
    (d / rundir.SAMPLES).write_text('{"a": 1}\n')
    (d / rundir.PER_PROBLEM).unlink()
    assert artifacts.problem(d, rundir.EVALUATION_ARTIFACT) == f"no {rundir.PER_PROBLEM}"


# ---- a real run, every file of every artifact cut in turn, every reader driven ------------------------------


@pytest.fixture(scope="module")
def made(tmp_path_factory, trained_toy):
    """A finished toy run: checkpoint-1, checkpoint-2, final/ (conftest's toy run), a selection and its
    evaluation folders."""
    from trlvr.toy.task import make_splits
    from trlvr.toy.world import _rows, _write_jsonl

    tmp = copy_toy_run(trained_toy, tmp_path_factory.mktemp("artifacts"))
    _write_jsonl(tmp / "val.jsonl", _rows(make_splits(24, 4, seed=0)[1])[:1])
    run = tmp / "run"
    assert cli(select_argv(tmp, run)) == 0
    shutil.copytree(run, tmp / "pristine", ignore=shutil.ignore_patterns(".*lock*"))
    return tmp


def train_argv(tmp: Path, run: Path, max_steps: int, *extra: str) -> list[str]:
    """The command line of the made run (conftest's toy run), into `run`, to `max_steps`; every checkpoint kept."""
    argv = toy_run_argv(tmp, "--save_total_limit", "20", "--max_steps", str(max_steps), *extra)
    argv[argv.index("--output_dir") + 1] = str(run)
    return argv


def select_argv(tmp: Path, run: Path) -> list[str]:
    return [
        "select",
        str(run),
        "--val",
        str(tmp / "val.jsonl"),
        "--metric",
        "solo/pass@1",
        "--n",
        "1",
        "--max-new-tokens",
        "2",
        "--no-progress",
    ]


def eval_dirs(run: Path) -> list[Path]:
    return sorted((run / "select").glob("*/step-*"))


def one_line_refusal(code: int, err: str) -> None:
    assert "Traceback" not in err, err
    assert code == 2 and len([ln for ln in err.splitlines() if ": error: " in ln]) == 1, (code, err)


def test_every_artifact_a_run_writes_is_complete_and_records_every_file(made):
    run = made / "pristine"
    assert [c.name for c in rundir.checkpoints(run)] == ["checkpoint-2", "checkpoint-1"]
    for folder, kind in [
        *((c, artifacts.CHECKPOINT) for c in rundir.checkpoints(run)),
        (run / rundir.FINAL, artifacts.FINAL),
        *((e, rundir.EVALUATION_ARTIFACT) for e in eval_dirs(run)),
    ]:
        assert artifacts.problem(folder, kind, deep=True) is None, folder
        listed, _ = artifacts.read_manifest(folder)
        assert set(listed) == {
            p.name
            for p in folder.iterdir()
            if p.is_file() and not p.name.startswith(".") and p.name != artifacts.MANIFEST
        }, folder
    assert eval_dirs(run) and artifacts.problem(run, rundir.SELECTION_ARTIFACT) is None
    # the cuts below cover every file of every artifact kind
    assert {f"{c.name}/{n}" for c in rundir.checkpoints(run) for n in _files(c)} == set(CHECKPOINT_FILES)
    assert {f"{rundir.FINAL}/{n}" for n in _files(run / rundir.FINAL)} == set(FINAL_FILES)
    assert set(_files(eval_dirs(run)[0])) == set(EVAL_FILES)


def _files(folder: Path) -> list[str]:
    return sorted(
        p.name for p in folder.iterdir() if p.is_file() and not p.name.startswith(".") and p.stat().st_size
    )


def _torn_copy(made: Path, rel: str) -> Path:
    """The run as made (at its own path: an evaluation's fingerprint names its checkpoint), `rel` cut in half."""
    run = made / "run"
    shutil.rmtree(run)
    shutil.copytree(made / "pristine", run)
    _cut(run / rel)
    return run


def _selected(run: Path) -> Path:
    return (run / json.loads((run / rundir.SELECTED_FILE).read_text())["path"]).resolve()


def _refused(fn, *names: str) -> None:
    with pytest.raises(UserError) as e:
        fn()
    assert "\n" not in str(e.value) and all(n in str(e.value) for n in names), str(e.value)


CHECKPOINT_FILES = [
    f"checkpoint-{s}/{n}"
    for s in (1, 2)
    for n in (
        "model.safetensors",
        "config.json",
        "generation_config.json",
        "optimizer.pt",
        "scheduler.pt",
        "rng_state.pth",
        "trainer_state.json",
        "training_args.bin",
        "tokenizer.json",
        "tokenizer_config.json",
        rundir.MODEL_CARD,
        artifacts.MANIFEST,
    )
]


@pytest.mark.parametrize("rel", CHECKPOINT_FILES)
def test_a_cut_checkpoint_file_is_skipped_or_refused_by_every_reader(made, tmp_path, rel, capsys):
    run = _torn_copy(made, rel)
    torn = (run / rel).parent
    assert not artifacts.is_complete(torn, artifacts.CHECKPOINT) and not artifacts.is_complete(
        torn, artifacts.WEIGHTS
    )
    newest, skipped = pick_checkpoint(run)  # resume's choice: the newest complete one
    assert newest != torn and torn in [c for c, _ in skipped] + list(rundir.checkpoints(run))[1:]
    assert newest == (run / "checkpoint-1" if torn.name == "checkpoint-2" else run / "checkpoint-2")
    _refused(lambda: list_checkpoints(run), str(torn))  # select, before it evaluates anything
    _refused(lambda: resolve_senior(str(torn)), str(torn))  # `trlvr eval --senior RUN/checkpoint-N`
    capsys.readouterr()
    one_line_refusal(cli(select_argv(made, run)), capsys.readouterr().err)
    stage = Stage("select", "v", 0, [], run)
    if _selected(run) == torn.resolve():  # eval RUN@selected, a study's select stage
        _refused(lambda: resolve_senior(f"{run}@selected"), str(torn))
        assert not stage_done(stage)
    else:
        assert resolve_senior(f"{run}@selected")[0] != str(torn) and stage_done(stage)


FINAL_FILES = [
    f"{rundir.FINAL}/{n}"
    for n in (
        "model.safetensors",
        "config.json",
        "trainer_state.json",
        "tokenizer.json",
        "tokenizer_config.json",
        "generation_config.json",
        "training_args.bin",
        rundir.MODEL_CARD,
        artifacts.MANIFEST,
    )
]


@pytest.mark.parametrize("rel", FINAL_FILES)
def test_a_cut_final_is_never_a_finished_run(made, tmp_path, rel, capsys):
    """Before: `--resume` said "nothing to train" and exited 0 over the torn final/; select and a study's
    train stage took it as the run's result."""
    run = _torn_copy(made, rel)
    final = run / rundir.FINAL
    assert rundir.train_state(run).stage == "started"
    assert not stage_done(Stage("train", "v", 0, [], run))
    _refused(lambda: list_checkpoints(run), str(final))
    _refused(lambda: resolve_senior(str(final)), str(final))  # `trlvr eval --senior RUN/final`
    capsys.readouterr()
    one_line_refusal(cli(select_argv(made, run)), capsys.readouterr().err)
    assert cli(train_argv(made, run, 2, "--resume")) == 0  # final/ again, from checkpoint-2 (at the target)
    err = capsys.readouterr().err
    assert (
        f"{rundir.FINAL}/ unchanged" not in err
        and f"{final} is torn" in err
        and f"wrote {final} (step 2" in err
    ), err
    assert artifacts.problem(final, artifacts.FINAL, deep=True) is None and rundir.train_state(run).step == 2
    [aside] = [p for p in run.iterdir() if rundir.is_aside(p.name)]  # the torn one, kept (nothing deleted)
    assert (aside / rundir.FINAL / Path(rel).name).stat().st_size < (made / "pristine" / rel).stat().st_size


def test_a_cut_selection_is_refused_by_eval_and_the_study(made, tmp_path, capsys):
    run = _torn_copy(made, rundir.SELECTED_FILE)
    assert not artifacts.is_complete(run, rundir.SELECTION_ARTIFACT)
    _refused(lambda: resolve_senior(f"{run}@selected"), rundir.SELECTED_FILE)
    assert not stage_done(Stage("select", "v", 0, [], run))
    capsys.readouterr()
    code = cli(
        [
            "eval",
            "--senior",
            f"{run}@selected",
            "--junior",
            str(made / "junior"),
            "--data",
            str(made / "val.jsonl"),
            "--out",
            str(tmp_path / "ev"),
            "--suite",
            "solo",
            "--n",
            "1",
        ]
    )
    one_line_refusal(code, capsys.readouterr().err)
    assert not (tmp_path / "ev").exists()


EVAL_FILES = [*rundir.EVAL_OUTPUTS, artifacts.MANIFEST]


@pytest.mark.parametrize("name", EVAL_FILES)
def test_a_cut_evaluation_is_not_done_and_a_rerun_makes_it_whole(made, tmp_path, name, capsys):
    """A study's eval stage (its .study-done marker there) is not done; the same evaluation run again
    (`trlvr select` reruns each checkpoint's) writes it whole again instead of reporting the torn one."""
    ev = eval_dirs(made / "pristine")[0].relative_to(made / "pristine")
    run = _torn_copy(made, f"{ev}/{name}")
    (run / ev / DONE).touch()
    assert EvalDir(run / ev).problem() is not None
    assert not stage_done(Stage("eval", "v", 0, [], run / ev))
    capsys.readouterr()
    for argv, wrote in (
        (["report", str(run / ev), "--out", str(tmp_path / "r.html")], tmp_path / "r.html"),
        (["compare", str(run / ev), str(run / ev), "--out", str(tmp_path / "c")], tmp_path / "c"),
    ):
        one_line_refusal(cli(argv), err := capsys.readouterr().err)  # the readers of a finished evaluation
        assert name in err and "not a finished evaluation" in err and not wrote.exists(), err
    code = cli(select_argv(made, run))
    err = capsys.readouterr().err
    if code != 0:  # a file its resume must read (fingerprint.json) is refused, naming it
        one_line_refusal(code, err)
        assert name in err
        return
    assert artifacts.problem(run / ev, rundir.EVALUATION_ARTIFACT, deep=True) is None and stage_done(
        Stage("eval", "v", 0, [], run / ev)
    )


def test_resume_goes_on_from_the_last_complete_checkpoint_when_the_newest_optimizer_state_is_cut(
    made, capsys
):
    """Before: a cut optimizer.pt counted as present, so `--resume` chose that checkpoint and crashed in
    torch.load. Now it is skipped with one warning line, and the run goes on from checkpoint-1."""
    run = _torn_copy(made, "checkpoint-2/optimizer.pt")
    shutil.rmtree(run / rundir.FINAL)  # killed before final/: a run to go on with
    capsys.readouterr()
    assert cli(train_argv(made, run, 3, "--resume")) == 0
    err = capsys.readouterr().err
    assert "Traceback" not in err and "skipping checkpoint-2 (optimizer.pt" in err, err
    assert err.split("resuming from ")[1].split()[0] == str(run / "checkpoint-1"), err
    assert rundir.train_state(run) == rundir.TrainState("finished", 3, 3)
    newest_two, older = rundir.checkpoints(run)[:2], rundir.checkpoints(run)[2:]
    for c in newest_two:  # checkpoint-2 saved again, whole; the two newest keep their resume state
        assert artifacts.problem(c, artifacts.CHECKPOINT, deep=True) is None, c
    for c in older:  # pruned to their weights (trlvr.training.checkpoints.prune_resume_state)
        assert artifacts.problem(c, artifacts.WEIGHTS, deep=True) is None, c


@pytest.mark.parametrize("rel", ["checkpoint-2/model.safetensors", f"{rundir.FINAL}/model.safetensors"])
def test_a_cut_model_of_a_run_without_its_manifest_is_refused_as_senior(made, rel):
    """A kill after the weights were cut short and before the manifest was written: `trlvr eval --senior
    RUN/checkpoint-N` (or RUN/final) judges the folder by its formats and refuses it in one line. Before: no
    manifest, no check, and the loader met the cut file."""
    run = _torn_copy(made, rel)
    folder = (run / rel).parent
    (folder / artifacts.MANIFEST).unlink()
    _refused(lambda: resolve_senior(str(folder)), str(folder), "model.safetensors")

"""Stateful property tests over one evaluation folder (issue 38): random sequences of what users do to it.

Hypothesis' RuleBasedStateMachine drives `trlvr eval` (another --limit, --n, --suite or seed; a seed
group into the folder, then a single evaluation), `trlvr compare` and `trlvr report` as readers, a
Ctrl-C in the middle of a run, and damage to samples.jsonl (a torn last line, a garbage line, a row
missing a field) against one folder, with the toy world's tiny models. After every step:
    no finished sample is lost      every row of samples.jsonl before the step is there after it,
                                    unless the console said where it went (--fresh: replaced-<time>/;
                                    another plan's rows: samples-other-plans.jsonl)
    numbers match the identity      results.json (and what compare reports for the folder) counts the
                                    problems and samples the last accepted run asked for, under its seed
    a refusal names a real change   a refused run names the setting that differs (seed), never a
                                    missing key against None, and is one line
    damage is never trusted         a torn tail is repaired by the next run; a garbage or incomplete
                                    row is refused in one line (by the run and by every reader); a
                                    folder cut short or damaged since its run is no finished
                                    evaluation: compare and report refuse it in one line
    no silent regeneration          a finished sample made again (its batch has other batch-mates under
                                    another --limit or --n) is said in one line, and only then
Shrunk failures are kept below as explicit regression tests.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from trlvr.cli.main import main

PROBLEMS = 4


def _keys(rows: list[dict]) -> set[tuple]:
    """The finished samples among rows (a garbage line or a row missing a field is none)."""
    return {_key(r) for r in rows if "garbage" not in r and "reward" in r}


def _key(row: dict) -> tuple:
    return (
        row["benchmark"],
        row["problem_id"],
        row["protocol"],
        row["sample_idx"],
        row.get("batch"),
        row.get("seed"),
    )


def _rows(path: Path) -> list[dict]:
    """Whole rows of a samples.jsonl (a torn last line, with no newline, is not a row yet)."""
    if not path.exists():
        return []
    text = path.read_text()
    lines = text.split("\n")
    whole = lines if text.endswith("\n") else lines[:-1]
    out = []
    for line in whole:
        if line.strip():
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                out.append({"garbage": line})
    return out


@pytest.fixture(scope="module")
def toy(tmp_path_factory):
    from helpers import save_tiny_models, write_sum_problems

    tmp = tmp_path_factory.mktemp("state")
    save_tiny_models(tmp, {"senior-0": 0, "senior-1": 3, "junior": 1})
    write_sum_problems(tmp / "d.jsonl", PROBLEMS)
    return tmp


class EvalFolder(RuleBasedStateMachine):
    """One --out folder; `self.settings` is the identity of what it holds (None: nothing yet)."""

    toy: Path = None
    capsys = None
    counter = [0]

    @initialize()
    def start(self):
        EvalFolder.counter[0] += 1
        self.root = self.toy / f"run-{EvalFolder.counter[0]}"
        self.root.mkdir()
        self.out = self.root / "out"
        self.identity = None  # (seed, group) of what the folder holds
        self.last = None  # the last accepted single evaluation's settings
        self.kept: set = set()  # every finished sample row, by key, the console has not said it moved
        self.damaged = None  # "torn" / "garbage" / "incomplete" since the last accepted run
        self.whole = False  # the folder is a finished evaluation, as its last accepted run left it

    # ---- running a command ----

    def _run(self, argv: list[str]) -> tuple[int, str, str]:
        self.capsys.readouterr()
        try:
            code = main(argv)
        except Exception as e:  # noqa: BLE001 - a traceback is a defect here
            raise AssertionError(f"{argv}: traceback {type(e).__name__}: {e}") from e
        out, err = self.capsys.readouterr()
        assert "Traceback" not in err, err
        return code, out, err

    def _one_line(self, code: int, err: str) -> str:
        lines = [ln for ln in err.splitlines() if ln.strip() and "it/s]" not in ln and "%|" not in ln]
        assert code in (2, 74, 130) and len(lines) == 1 and ": error: " in lines[0], (code, err)
        assert "(absent) -> None" not in lines[0] and "None -> (absent)" not in lines[0], lines[0]
        return lines[0]

    def _eval_argv(
        self, out: Path, limit: int, n: int, suite: str, seed: int, senior: str = "senior-0"
    ) -> list[str]:
        t = self.toy
        return [
            "eval",
            "--senior",
            f"{t}/{senior}",
            "--junior",
            f"{t}/junior",
            "--data",
            f"toy={t}/d.jsonl",
            "--limit",
            str(limit),
            "--n",
            str(n),
            "--k",
            "1",
            "--suite",
            suite,
            "--seed",
            str(seed),
            "--max-new-tokens",
            "2",
            "--no-progress",
            "--out",
            str(out),
        ]

    # ---- rules ----

    @rule(
        limit=st.integers(1, PROBLEMS),
        n=st.integers(1, 2),
        suite=st.sampled_from(["handoff", "solo,handoff", "solo"]),
        seed=st.sampled_from([0, 1]),
        fresh=st.booleans(),
    )
    def evaluate(self, limit, n, suite, seed, fresh):
        argv = self._eval_argv(self.out, limit, n, suite, seed) + (["--fresh"] if fresh else [])
        finished = _keys(_rows(self.out / "samples.jsonl")) | _keys(
            _rows(self.out / "samples-other-plans.jsonl")
        )
        code, out, err = self._run(argv)
        if self.identity == ("group",) and not fresh:
            assert "holds a seed group" in self._one_line(
                code, err
            )  # never a single evaluation beside a group
            return
        if self.damaged in ("garbage", "incomplete") and not fresh:
            line = self._one_line(
                code, err
            )  # the damaged file is named, never trusted (or, first, another seed)
            assert "samples.jsonl" in line or self.identity != ("single", seed) and "seed" in line, line
            return
        if self.identity is not None and self.identity != ("single", seed) and not fresh:
            line = self._one_line(code, err)
            assert "seed" in line, line  # the real difference is named
            return
        assert code == 0, err
        now = _keys(_rows(self.out / "samples.jsonl"))
        if not fresh:  # a finished sample made again (its batch changed) is said, in one line
            made = {k[:4] + k[5:] for k in finished}
            again = {k for k in now - finished if k[:4] + k[5:] in made}
            assert bool(again) == ("generated again" in err), (sorted(again)[:2], err)
        lost = self.kept - now
        if fresh and lost:  # the console said where they went: --fresh moved them into replaced-<time>/
            assert "replaced-" in out + err, out + err
            aside = {k for p in self.out.glob("replaced-*/samples.jsonl") for k in _keys(_rows(p))}
            assert lost <= aside, f"{len(lost - aside)} sample(s) neither kept nor set aside"
        elif lost:  # a run under another plan (--n, --limit, --suite) moves the earlier plan's rows aside
            assert "samples-other-plans.jsonl" in err, err  # ... and says where
            aside = _keys(_rows(self.out / "samples-other-plans.jsonl"))
            assert lost <= aside, f"{len(lost - aside)} sample(s) neither kept nor set aside"
        self.identity, self.last, self.damaged, self.whole = (
            ("single", seed),
            (limit, n, suite, seed),
            None,
            True,
        )
        self.kept = now

    @precondition(lambda self: self.identity is None)
    @rule()
    def seed_group(self):
        """A seed group into the folder (OUT/seed-<s>/, OUT/group.json), then single runs are refused."""
        argv = self._eval_argv(self.out, 2, 1, "handoff", 0, senior="senior-{seed}") + ["--seeds", "0,1"]
        code, out, err = self._run(argv)
        assert code == 0, err
        assert (self.out / "group.json").is_file()
        self.identity = ("group",)

    @precondition(
        lambda self: self.identity is not None and self.identity[0] == "single" and self.damaged is None
    )
    @rule(after=st.integers(1, 3))
    def interrupted(self, after):
        """Ctrl-C after `after` batches of a larger run: exit 130 in one line, only whole rows left."""
        import trlvr.eval.store as store

        real, calls = store.EvalDir.append, [0]

        def append(d, rows):
            calls[0] += 1
            if calls[0] > after:
                raise KeyboardInterrupt
            return real(d, rows)

        limit, n, suite, seed = self.last
        samples_before = (self.out / "samples.jsonl").read_bytes()
        store.EvalDir.append = append
        try:
            code, out, err = self._run(self._eval_argv(self.out, PROBLEMS, 2, "solo,handoff", seed))
        finally:
            store.EvalDir.append = real
        now = _keys(_rows(self.out / "samples.jsonl"))
        if code == 0:  # everything was there already, or fewer batches than `after` were missing
            self.last, self.kept = (PROBLEMS, 2, "solo,handoff", seed), now  # (a completed run: see evaluate)
            self.whole = True
        else:
            if (self.out / "samples.jsonl").read_bytes() != samples_before:  # a run cut short: not finished
                self.whole = False
            assert self._one_line(code, err).endswith("interrupted") and code == 130, err
            assert self.kept <= now, "an interrupted run lost finished samples"
            self.kept = now

    @precondition(
        lambda self: self.identity is not None and self.identity[0] == "single" and self.damaged is None
    )
    @rule(how=st.sampled_from(["torn", "garbage", "incomplete"]))
    def damage(self, how):
        path = self.out / "samples.jsonl"
        text = path.read_text()
        if not text.endswith("\n"):  # torn already: the next run repairs it first
            return
        if how == "torn":  # a write cut inside the last line: that row is not finished, so not kept
            last = text.rstrip("\n").rsplit("\n", 1)[-1]
            self.kept.discard(_key(json.loads(last)))
            path.write_text(text.rstrip("\n")[: -max(1, len(last) // 2)])
        elif how == "garbage":
            path.write_text(text + "{not json at all\n")
        else:
            row = json.loads(text.splitlines()[0])
            del row["reward"]
            path.write_text(text + json.dumps(row) + "\n")
        self.damaged, self.whole = how, False
        if how == "torn":
            self.damaged = None  # a torn tail is what a kill leaves: the next run repairs it (not an error)

    @precondition(lambda self: self.identity is not None and self.identity[0] == "single")
    @rule()
    def read(self):
        """The readers: compare the folder with itself and a report; numbers from the current identity. A
        folder that is no finished evaluation (a run cut short, a file damaged since) is refused by both
        in one line naming the file (`trlvr.artifacts`), never read."""
        compare = [
            "compare",
            str(self.out),
            str(self.out),
            "--out",
            str(self.root / "cmp"),
            "--resamples",
            "20",
        ]
        report = ["report", str(self.out), "--out", str(self.root / "r.html"), "--max-problems", "1"]
        if not self.whole:
            for argv in (compare, report):
                code, out, err = self._run(argv)
                line = self._one_line(code, err)
                # a run cut short names the first file it left unlike the manifest: samples.jsonl, or the
                # config.json a rerun under other settings rewrote before it was stopped
                unfinished = re.search(r"is not a finished evaluation \((samples|config)\.jsonl? ", line)
                assert unfinished or (
                    self.damaged in ("garbage", "incomplete") and "samples.jsonl" in line
                ), line
            return
        code, out, err = self._run(compare)
        assert code == 0, err
        res = json.loads((self.out / "results.json").read_text())
        cmp = json.loads((self.root / "cmp" / "compare.json").read_text())
        limit, n, suite, seed = self.last
        for name, e in cmp["macro"].items():
            assert e["a"] == e["b"] or e["a"] != e["a"] and e["b"] != e["b"], (name, e)  # itself (NaN: both)
        assert res["config"]["seed"] == seed and res["config"]["n"] == n
        for bench in res["benchmarks"].values():
            for metric, m in bench["metrics"].items():
                if isinstance(m, dict) and "num_problems" in m:
                    assert m["num_problems"] == limit, (metric, m, self.last)
        code, out, err = self._run(report)
        assert code == 0, err

    # ---- invariants ----

    @invariant()
    def no_finished_sample_lost(self):
        if self.identity is None or self.identity[0] != "single":
            return
        now = _keys(_rows(self.out / "samples.jsonl")) | _keys(_rows(self.out / "samples-other-plans.jsonl"))
        assert self.kept <= now, (
            f"{len(self.kept - now)} finished sample(s) lost, e.g. {sorted(self.kept - now)[:2]}"
        )


@pytest.mark.slow
def test_eval_folder_state_machine_long(toy, capsys):
    EvalFolder.toy, EvalFolder.capsys = toy, capsys
    run = EvalFolder.TestCase
    run.settings = settings(
        max_examples=40, stateful_step_count=10, deadline=None, suppress_health_check=list(HealthCheck)
    )
    run("runTest").runTest()


def test_eval_folder_state_machine(toy, capsys):
    EvalFolder.toy, EvalFolder.capsys = toy, capsys
    run = EvalFolder.TestCase
    run.settings = settings(
        max_examples=5, stateful_step_count=5, deadline=None, suppress_health_check=list(HealthCheck)
    )
    run("runTest").runTest()


def test_a_finished_sample_made_again_under_a_larger_limit_is_said(toy, capsys):
    """A fixed walk (the random ones may miss it): --limit 2, then --limit 3 in the same folder. The one
    batch gains a batch-mate, so its finished samples are made again; before, without a word."""
    EvalFolder.toy, EvalFolder.capsys = toy, capsys
    machine = EvalFolder()
    machine.start()
    for limit in (2, 3):
        machine.evaluate(limit=limit, n=1, suite="solo", seed=0, fresh=False)
        machine.no_finished_sample_lost()
    machine.teardown()


def test_a_run_under_another_plan_keeps_the_samples_it_does_not_plan(toy, tmp_path, capsys):
    """Shrunk by the state machine: eval --n 1, then eval --n 2 into the same folder. Before, every n=1
    sample (made under batch signatures of the n=1 plan) was deleted from samples.jsonl when the n=2 run
    finished, and the console said nothing. Now they move to samples-other-plans.jsonl (said in one line),
    samples.jsonl holds exactly the n=2 plan, and the n=1 command again takes them back unchanged."""
    m = EvalFolder.__new__(EvalFolder)
    m.toy, m.capsys = toy, capsys
    out = tmp_path / "out"
    assert main(m._eval_argv(out, 1, 1, "handoff", 0)) == 0
    first = _rows(out / "samples.jsonl")
    capsys.readouterr()
    assert main(m._eval_argv(out, 1, 2, "handoff", 0)) == 0
    said = capsys.readouterr().err
    assert "samples-other-plans.jsonl" in said and said.count("\n") >= 1, said
    second = _rows(out / "samples.jsonl")
    assert _keys(first) <= _keys(_rows(out / "samples-other-plans.jsonl"))
    assert not _keys(first) & _keys(second)  # results come from the n=2 plan's rows only
    results = json.loads((out / "results.json").read_text())
    assert results["grading_stats"]["graded"] == len(second)
    assert main(m._eval_argv(out, 1, 1, "handoff", 0)) == 0
    again = _rows(out / "samples.jsonl")
    assert again == first  # taken back, token for token, not regenerated into other rows
    assert _keys(second) <= _keys(_rows(out / "samples-other-plans.jsonl"))


def test_solo_alone_extends_a_folder_with_a_junior_and_keeps_its_identity(toy, tmp_path, capsys):
    """Shrunk by the state machine: eval --suite handoff, then eval --suite solo (same --junior) into the
    folder. Solo alone loads no junior, so its fingerprint said junior None and the run was refused as
    "models.junior: {...} -> None", a difference that does not change a solo sample. Now it runs, the
    folder keeps its junior, and the handoff run afterwards takes its samples back."""
    m = EvalFolder.__new__(EvalFolder)
    m.toy, out = toy, tmp_path / "out"
    assert main(m._eval_argv(out, 2, 1, "handoff", 0)) == 0
    stored = json.loads((out / "fingerprint.json").read_text())["models"]["junior"]
    assert stored is not None
    assert main(m._eval_argv(out, 2, 1, "solo", 0)) == 0, capsys.readouterr().err
    assert json.loads((out / "fingerprint.json").read_text())["models"]["junior"] == stored
    capsys.readouterr()
    assert main(m._eval_argv(out, 2, 1, "handoff", 0)) == 0
    assert {r["protocol"] for r in _rows(out / "samples.jsonl")} == {"handoff"}


def test_a_single_evaluation_into_a_seed_groups_folder_is_refused(toy, tmp_path, capsys):
    """Shrunk by the state machine: `trlvr eval --seeds 0,1 --out G`, then `trlvr eval --out G`. Before, the
    single run wrote G/per_problem.json beside group.json, and from then on every reader took G for one
    evaluation (`is_group`: 'no evaluation of its own'): the group vanished from compare and report."""
    m = EvalFolder.__new__(EvalFolder)
    m.toy = toy
    group = tmp_path / "g"
    assert main(m._eval_argv(group, 1, 1, "handoff", 0, senior="senior-{seed}") + ["--seeds", "0,1"]) == 0
    capsys.readouterr()
    assert main(m._eval_argv(group, 1, 1, "handoff", 0)) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "holds a seed group" in err[0], err
    assert not (group / "per_problem.json").exists()
    single = tmp_path / "s"  # and the other way round
    assert main(m._eval_argv(single, 1, 1, "handoff", 0)) == 0
    capsys.readouterr()
    assert main(m._eval_argv(single, 1, 1, "handoff", 0, senior="senior-{seed}") + ["--seeds", "0,1"]) == 2
    assert "holds an evaluation of its own" in capsys.readouterr().err

"""`.ci/demo-check`: the exact check of the committed demo table, and the conclusions that must hold on any
machine (the handoff gain's CI excludes 0; tandem's solo accuracy within the stated margin of grpo's)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BLOCK = re.compile(r"<!-- demo-table:start[^>]*-->\n(.*?)<!-- demo-table:end -->", re.S)


def committed_table() -> list[str]:
    page = (ROOT / "docs" / "results" / "toy-demo.md").read_text()
    return [line for line in BLOCK.findall(page)[0].splitlines() if line.startswith("|")]


def committed_kind() -> str:
    return re.search(
        r"<!-- demo-table:start[^>]*machine kind: (.*?) -->",
        (ROOT / "docs" / "results" / "toy-demo.md").read_text(),
    )[1]


def paired(lines: list[str], column: str, cell: str) -> list[str]:
    """The table with the `tandem | grpo` row's `column` set to `cell`."""
    header = next(line for line in lines if line.startswith("| variant | baseline |"))
    i = [c.strip() for c in header.strip("|").split("|")].index(column)
    out = []
    for line in lines:
        cells = line.strip("|").split("|")
        if [c.strip() for c in cells[:2]] == ["tandem", "grpo"]:
            cells[i] = f" {cell} "
            line = "|" + "|".join(cells) + "|"
        out.append(line)
    return out


def record(tmp_path, variant: str, **machine) -> None:
    """A demo training record beside the summary, as `trlvr demo` leaves it, with these machine facts."""
    folder = tmp_path / "train" / variant / "seed-0"
    folder.mkdir(parents=True)
    (folder / "trlvr_run.json").write_text(json.dumps({"machine": machine}))


KIND = {
    "cpu": "AMD EPYC",
    "cpu_capability": "AVX512",
    "torch_threads": 1,
    "versions": {"torch": "2.13.0+cpu"},
}


def check(tmp_path, lines: list[str], *flags: str) -> subprocess.CompletedProcess:
    summary = tmp_path / "summary.md"
    summary.write_text("# the demo\n\n" + "\n".join(lines) + "\n")
    return subprocess.run(
        [sys.executable, str(ROOT / ".ci" / "demo-check"), "--summary", str(summary), *flags],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_committed_table_passes_both_checks(tmp_path):
    done = check(tmp_path, committed_table())
    assert done.returncode == 0, done.stderr
    assert "the conclusions hold" in done.stdout and "equals" in done.stdout


def test_other_digits_with_the_same_conclusions_fail_only_the_exact_check(tmp_path):
    # one seed on another CPU kind: the digits move (here the solo difference), the conclusions stay
    moved = paired(committed_table(), "Δ solo/pass@1 (%)", "-0.6 [-1.8, +0.0]")
    assert check(tmp_path, moved, "--conclusions-only").returncode == 0
    done = check(tmp_path, moved)
    assert done.returncode == 1 and "differs" in done.stderr


@pytest.mark.parametrize(
    ("column", "cell", "why"),
    [
        ("Δ handoff/pass@1 (%)", "+4.0 [-1.5, +9.0]", "the handoff gain's CI [-1.5, 9.0] includes 0"),
        ("Δ solo/pass@1 (%)", "-3.0 [-6.5, -0.5] *", "not within 5.0 points of grpo's"),
    ],
)
def test_a_broken_conclusion_fails_on_any_machine(tmp_path, column, cell, why):
    done = check(tmp_path, paired(committed_table(), column, cell), "--conclusions-only")
    assert done.returncode == 1 and why in done.stderr


def test_the_committed_table_records_the_machine_kind_it_was_made_on():
    from trlvr.provenance import numeric_kind

    kind = committed_kind()
    assert re.fullmatch(
        r".+ \((AVX2|AVX512|AVX512_BF16|DEFAULT|[A-Z0-9_]+)\), \d+ thread\(s\), torch .+", kind
    ), kind
    assert numeric_kind(KIND) == "AMD EPYC (AVX512), 1 thread(s), torch 2.13.0+cpu"


def test_on_another_machine_kind_the_exact_check_is_skipped_and_the_conclusions_decide(tmp_path):
    moved = paired(committed_table(), "Δ solo/pass@1 (%)", "-0.6 [-1.8, +0.0]")
    other = dict(KIND, cpu="Some Other CPU", cpu_capability="AVX2")
    record(tmp_path, "grpo", **other)
    record(tmp_path, "tandem", **other)
    done = check(tmp_path, moved)
    assert done.returncode == 0, done.stderr
    assert (
        "the exact check of docs/results/toy-demo.md is skipped" in done.stdout
        and "Some Other CPU (AVX2)" in done.stdout
    )
    # ... and a broken conclusion still fails there
    broken = paired(committed_table(), "Δ handoff/pass@1 (%)", "+4.0 [-1.5, +9.0]")
    assert check(tmp_path, broken).returncode == 1


def test_on_the_committed_machine_kind_the_exact_check_runs(tmp_path):
    cpu, rest = committed_kind().split(" (", 1)
    capability, rest = rest.split("), ", 1)
    threads = int(rest.split(" thread")[0])
    torch_version = rest.split("torch ", 1)[1]
    same = {
        "cpu": cpu,
        "cpu_capability": capability,
        "torch_threads": threads,
        "versions": {"torch": torch_version},
    }
    for variant in ("grpo", "tandem"):
        record(tmp_path, variant, **same)
    assert check(tmp_path, committed_table()).returncode == 0
    moved = paired(committed_table(), "Δ solo/pass@1 (%)", "-0.6 [-1.8, +0.0]")
    done = check(tmp_path, moved)
    assert done.returncode == 1 and "differs" in done.stderr


def test_write_needs_the_runs_records(tmp_path):
    done = check(tmp_path, committed_table(), "--write")
    assert done.returncode == 1 and "--write needs the demo's training records beside it" in done.stderr

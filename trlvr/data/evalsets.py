"""The paper's evaluation panels, built from their hub sources as the authors build them.

The authors' `data/build_evals.py` (CSSLab/Tandem-RLVR, commit 7ba85e0f6cee, path data/build_evals.py)
makes each test set from public hub datasets, drops the AMC 2024/2025 rows whose answer their grader
cannot grade, and refuses a build whose row count differs from the shipped parquet's. This module
does the same for the four panels the paper's Table 2 reports (the reproduction's AMC / AIME /
Minerva / OlympiadBench panels), with the paper era's AIME 2024-2026 as ONE set (`aime_24_26` there):

    amc23_25   121  math-ai/amc23 (test) + rawsh/2024_AMC12 (first split, AMC24_DROP out)
                    + sonthenguyen/amc12-2025-non-figure (first split, AMC25_DROP out)
    aime24_26   90  math-ai/aime24 (test; gold = the \\boxed{..} of its solution) + math-ai/aime25 (test)
                    + MathArena/aime_2026 (first split)
    minerva    272  math-ai/minervamath (test)
    olympiad   581  the authors' own parquet (data/eval/olympiad/test.parquet in their repository: problem,
                    reward_model.ground_truth); its hub source is private, so it is read from that file
                    (`--olympiad-src`). The public math-ai/olympiadbench is another set (675 rows, not
                    these 581) and is not substituted for it.

Each built set is checked against its row count and, once recorded, the sha256 of its golds in order
(`gold_sha256`: the golds joined by NUL bytes, UTF-8). A set whose checksum is not yet recorded here
is written with its checksum printed, to be compared with the authors' shipped parquet.

Sources are read through a `Loader` (name, split or None for the dataset's first split -> rows), so the
build runs on small fixtures in the tests; `hub_loader` is the real one (the `datasets` package).
The sets are read back as `paper:NAME` sources (`read_panel`), from the folder `build` wrote.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from trlvr.data.schema import DataError

PANEL_PREFIX = "paper:"
ENV_DIR = "TRLVR_PAPER_EVALS"  # where `paper:NAME` sources are read from (default DEFAULT_DIR)
DEFAULT_DIR = Path("~/.cache/trlvr/paper-evals")

# The authors' drop lists, verbatim (data/build_evals.py): "a multiple choice letter, an interval, an
# expression with a free variable, a clock time".
AMC24_DROP = frozenset(
    {"(0, \\frac{1}{2})", "[\\frac{3}{4}, \\frac{7}{8}]", "\\frac{\\pi}{2} - 2\\alpha", "D"}
)
AMC25_DROP = frozenset({"4{:}30", "k"})

Loader = Callable[[str, "str | None"], list[dict]]  # (hub name, split or None = first split) -> rows


@dataclass(frozen=True)
class Panel:
    """One evaluation panel: its name, row count, gold checksum (None: not recorded yet) and sources."""

    name: str
    rows: int
    gold_sha256: str | None
    sources: str
    label: str


PANELS: dict[str, Panel] = {
    p.name: p
    for p in (
        Panel(
            "amc23_25",
            121,
            None,
            "math-ai/amc23 + rawsh/2024_AMC12 + sonthenguyen/amc12-2025-non-figure",
            "AMC 2023-2025",
        ),
        Panel(
            "aime24_26", 90, None, "math-ai/aime24 + math-ai/aime25 + MathArena/aime_2026", "AIME 2024-2026"
        ),
        Panel("minerva", 272, None, "math-ai/minervamath", "Minerva"),
        Panel(
            "olympiad",
            581,
            None,
            "the authors' data/eval/olympiad/test.parquet (hub source private)",
            "OlympiadBench",
        ),
    )
}
PAPER_PANELS = tuple(PANELS)  # the reproduction's four-panel macro (Table 2 as reproduced)
PAPER_ERA_PANELS = ("amc23_25", "aime24_26", "minerva")  # the paper-era scripts' validation macro


def gold_sha256(golds: list[str]) -> str:
    """sha256 of the golds in order, joined by NUL bytes (UTF-8)."""
    return hashlib.sha256("\0".join(golds).encode("utf-8")).hexdigest()


def _row(problem, answer, subset: str | None = None) -> dict:
    row = {"problem": str(problem), "answer": str(answer)}
    if subset:
        row["subset"] = subset
    return row


def _amc23_25(load: Loader, olympiad_src) -> list[dict]:
    rows = [_row(r["question"], r["answer"], "amc23") for r in load("math-ai/amc23", "test")]
    rows += [
        _row(r["problem"], r["answer"], f"amc24_{r['exam'].split()[-1]}")
        for r in load("rawsh/2024_AMC12", None)
        if r["answer"] not in AMC24_DROP
    ]
    rows += [
        _row(r["question"], r["answer"], "amc25")
        for r in load("sonthenguyen/amc12-2025-non-figure", None)
        if r["answer"] not in AMC25_DROP
    ]
    return rows


def _aime24_26(load: Loader, olympiad_src) -> list[dict]:
    rows = []
    for n, r in enumerate(load("math-ai/aime24", "test"), 1):
        m = re.search(r"\\boxed\{([^{}]+)\}", r["solution"])  # the authors' extraction of the gold
        if not m:
            raise DataError(f"math-ai/aime24 row {n}: solution has no \\boxed{{..}} answer")
        rows.append(_row(r["problem"], m.group(1), "aime24"))
    rows += [_row(r["problem"], r["answer"], "aime25") for r in load("math-ai/aime25", "test")]
    rows += [_row(r["problem"], r["answer"], "aime26") for r in load("MathArena/aime_2026", None)]
    return rows


def _minerva(load: Loader, olympiad_src) -> list[dict]:
    return [_row(r["question"], r["answer"]) for r in load("math-ai/minervamath", "test")]


def _olympiad(load: Loader, olympiad_src) -> list[dict]:
    if olympiad_src is None:
        raise DataError(
            "olympiad: its hub source is private; pass --olympiad-src with the authors' "
            "data/eval/olympiad/test.parquet (581 rows, in their repository)"
        )
    from trlvr.data.sources import read_local

    return [_row(r["problem"], r["reward_model"]["ground_truth"]) for r in read_local(olympiad_src)]


BUILDERS: dict[str, Callable[[Loader, Path | None], list[dict]]] = {
    "amc23_25": _amc23_25,
    "aime24_26": _aime24_26,
    "minerva": _minerva,
    "olympiad": _olympiad,
}


def check_panel(name: str, rows: list[dict], panels: dict[str, Panel] | None = None) -> str:
    """The golds' checksum; DataError (one line) when the row count or a recorded checksum differs."""
    panel = (panels or PANELS)[name]
    if len(rows) != panel.rows:
        raise DataError(
            f"{name}: built {len(rows)} rows, expected {panel.rows} (the authors' count); the "
            "upstream dataset has changed and this build does not match the paper's set"
        )
    digest = gold_sha256([r["answer"] for r in rows])
    if panel.gold_sha256 is not None and digest != panel.gold_sha256:
        raise DataError(
            f"{name}: gold checksum {digest[:16]} differs from the recorded {panel.gold_sha256[:16]}: "
            "the upstream golds have changed"
        )
    return digest


def build(
    out: str | Path,
    names=PAPER_PANELS,
    load: Loader | None = None,
    olympiad_src: str | Path | None = None,
    panels: dict[str, Panel] | None = None,
) -> dict[str, str]:
    """Build and check each named panel, then write OUT/NAME.jsonl for every one; {name: gold sha256}.
    Nothing is written unless every panel passes its checks."""
    unknown = [n for n in names if n not in BUILDERS]
    if unknown:
        raise DataError(f"unknown panel {unknown[0]!r}; known: {', '.join(BUILDERS)}")
    load = load or hub_loader
    built = {n: BUILDERS[n](load, Path(olympiad_src) if olympiad_src else None) for n in names}
    digests = {n: check_panel(n, rows, panels) for n, rows in built.items()}
    out = Path(out).expanduser()
    out.mkdir(parents=True, exist_ok=True)
    for n, rows in built.items():
        tmp = out / f".{n}.jsonl.tmp"
        tmp.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
        tmp.replace(out / f"{n}.jsonl")
    return digests


def hub_loader(name: str, split: str | None) -> list[dict]:
    """Rows of a hub dataset (split None: its first split, as the authors' `first_split`)."""
    if split is not None:
        from trlvr.data.sources import read_hub

        return read_hub(name, split)
    from trlvr.data.sources import _env_offline, hub_reachable

    if not _env_offline() and not hub_reachable():
        raise DataError(
            f"{name}: no network access to the Hugging Face Hub; build the panels on a machine with "
            "access and copy the folder (set TRLVR_PAPER_EVALS to it)"
        )
    import datasets

    ds = datasets.load_dataset(name)
    return [dict(r) for r in ds[next(iter(ds.keys()))]]


def panels_dir() -> Path:
    return Path(os.environ.get(ENV_DIR) or DEFAULT_DIR).expanduser()


def is_panel(source: str) -> bool:
    return source.startswith(PANEL_PREFIX)


def panel_name(source: str) -> str:
    name = source[len(PANEL_PREFIX) :]
    if name not in PANELS:
        raise DataError(
            f"{source}: unknown panel {name!r}; known: {', '.join(PANEL_PREFIX + n for n in PANELS)}"
        )
    return name


def read_panel(source: str) -> list[dict]:
    """The rows of a built panel (`paper:NAME`), checked again as `build` checks them."""
    from trlvr.data.jsonl import read_jsonl

    name = panel_name(source)
    path = panels_dir() / f"{name}.jsonl"
    if not path.is_file():
        raise DataError(
            f"{source}: not built in {path.parent}; run `trlvr data build-evals` on a machine with hub "
            f"access (its --out, or set {ENV_DIR} to the folder it wrote)"
        )
    rows = read_jsonl(path)
    check_panel(name, rows)
    return rows


def panel_rows(source: str) -> int | None:
    """The registered row count of a `paper:NAME` source (None for any other source)."""
    return PANELS[panel_name(source)].rows if is_panel(source) else None

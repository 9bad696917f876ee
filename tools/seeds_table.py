"""The three-seed toy study's table in README.md and docs/results/toy-seeds.md, rendered from its committed outputs.

    python tools/seeds_table.py --from runs/demo-seeds --write   # copy the study's outputs into bench/results/toy-seeds
                                                                # and write both tables from them
    python tools/seeds_table.py                                 # check: exit 1 when a page differs from the outputs

The outputs (bench/results/toy-seeds: the study file it ran, its summary.json and figure) are what
`trlvr demo --seeds 0,1,2 --steps 150` wrote in its report/; the table is `trlvr.experiments.study_report.markdown`
of them, every table line before the stage timings (seconds differ by machine), between
`<!-- seeds-table:start ... -->` and `<!-- seeds-table:end -->` in each page. tests/test_toy_seeds_page.py runs the check.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results" / "toy-seeds"
PLACES = {
    ROOT / "README.md": "docs/results/toy-seeds.png",
    ROOT / "docs" / "results" / "toy-seeds.md": "toy-seeds.png",
}
FIGURE = ROOT / "docs" / "results" / "toy-seeds.png"
BLOCK = re.compile(r"(<!-- seeds-table:start[^>]*-->\n)(.*?)(<!-- seeds-table:end -->)", re.S)


def table(results: Path = RESULTS) -> str:
    """The result tables of the committed study outputs: every table line of the study report before its timings."""
    sys.path.insert(0, str(ROOT))
    from trlvr.experiments.study_report import markdown, result_tables
    from trlvr.experiments.study_spec import load_study

    study = load_study(results / "study.yaml")
    return result_tables(markdown(study, json.loads((results / "summary.json").read_text())))


def rows(block: str) -> str:
    return "".join(line + "\n" for line in block.splitlines() if line.startswith("|"))


def blocks(place: Path) -> list[str]:
    return [b for _, b, _ in BLOCK.findall(place.read_text())]


def copy_outputs(out: Path) -> None:
    """The study's own outputs, as its report wrote them, into bench/results/toy-seeds."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    for src, name in (
        (out / "report" / "summary.json", "summary.json"),
        (out / "report" / "table.md", "table.md"),
    ):
        shutil.copyfile(src, RESULTS / name)
    # the study as it ran, without its first comment (it names the folder the package was installed in)
    body = [line for line in (out / "study.yaml").read_text().splitlines() if not line.startswith("#")]
    (RESULTS / "study.yaml").write_text(
        "# the study `trlvr demo --seeds 0,1,2 --steps 150` ran (the shipped demo.yaml,"
        " with those overrides)\n" + "\n".join(body) + "\n"
    )
    shutil.copyfile(out / "report" / "figure.png", FIGURE)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--from", dest="source", type=Path, default=None, help="a finished `trlvr demo --seeds` folder"
    )
    ap.add_argument(
        "--write", action="store_true", help="rewrite the pages' tables from the committed outputs"
    )
    args = ap.parse_args()
    if args.source is not None:
        copy_outputs(args.source)
    want = table()
    differ = []
    for place, link in PLACES.items():
        found = blocks(place)
        if len(found) != 1:
            sys.exit(
                f"seeds-table: {place.relative_to(ROOT)}: expected one seeds-table block, found {len(found)}"
            )
        if args.write:
            block = want + f"\n![the three-seed toy study: the study report's figure]({link})\n"
            place.write_text(
                BLOCK.sub(lambda m, block=block: m.group(1) + block + m.group(3), place.read_text())
            )
            print(f"wrote the seeds table into {place.relative_to(ROOT)}")
        elif rows(found[0]) != rows(want):
            differ.append(str(place.relative_to(ROOT)))
    if differ:
        print(
            f"seeds-table: {', '.join(differ)} differ from {RESULTS.relative_to(ROOT)} "
            "(rewrite with: python tools/seeds_table.py --write)",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Collect the toy length-penalty study's small outputs into bench/results/toy-length-penalty/ (what
docs/results/toy-length-penalty.md and tests/test_toy_length_penalty_page.py are built from).

    OMP_NUM_THREADS=1 trlvr study run studies/toy-length-penalty.yaml --out runs/toy-length-penalty --jobs 2
    python bench/toy_length_penalty.py runs/toy-length-penalty      # study report + the committed extract

Writes: summary.json and table.md (the study report's, `trlvr study report`), and curves.json: per trained
(variant, seed) the per-step training means of the length penalty and of the completion length (from each
run's metrics.jsonl), so the page's "the penalty acts" line (prediction P5) can be checked.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEST = ROOT / "bench" / "results" / "toy-length-penalty"
KEYS = ("reward/length_penalty", "completions/mean_length", "rewards/math_reward/mean", "tandem/senior_share")


def curves(out: Path) -> dict:
    res = {}
    for metrics in sorted(out.glob("train/*/seed-*/metrics.jsonl")):
        rows = [json.loads(x) for x in metrics.read_text().splitlines() if x.strip()]
        run = f"{metrics.parent.parent.name}/{metrics.parent.name}"
        res[run] = {k: [r.get(k) for r in rows if "step" in r] for k in ("step", *KEYS)}
    return res


def main(out: str) -> None:
    from trlvr.experiments.study import read_claim, refuse_another_study, study_file
    from trlvr.experiments.study_report import write_study_report
    from trlvr.experiments.study_spec import load_study

    out_dir = Path(out)
    study = load_study(study_file(out_dir, None))
    refuse_another_study(study, out_dir, read_claim(out_dir))
    write_study_report(study, out_dir)
    DEST.mkdir(parents=True, exist_ok=True)
    for name in ("summary.json", "table.md"):
        shutil.copy(out_dir / "report" / name, DEST / name)
    (DEST / "curves.json").write_text(json.dumps(curves(out_dir), indent=1))
    print(f"wrote {DEST}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "runs/toy-length-penalty")

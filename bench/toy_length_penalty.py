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


VARIANTS = ("initial", "grpo-kimi", "tandem-kimi")
ROW_METRICS = ("solo/pass@1", "handoff/pass@1", "jargon_rate", "legibility/junior_ce")
DIFF_METRICS = ("handoff/pass@1", "solo/pass@1", "jargon_rate")


def table(summary: dict) -> str:
    """The page's results tables, from the study report's summary.json (the test recomputes them)."""
    from trlvr.eval.format import diff_text, entry_text, unit

    rows, lines = summary["rows"], []
    lines += ["| variant | seeds | " + " | ".join(m + unit(m) for m in ROW_METRICS) + " |",
              "|---|---|" + "---|" * len(ROW_METRICS)]  # fmt: skip
    for v in VARIANTS:
        r = rows[v]
        lines.append(f"| {v} | {len(r['seeds']) or 'none'} | "
                     + " | ".join(entry_text(r["metrics"].get(m), m) for m in ROW_METRICS) + " |")  # fmt: skip
    lines += ["", "Paired differences (variant - grpo-kimi, by seed and problem; * = CI excludes 0):", "",
              "| variant | seeds | " + " | ".join(f"Δ {m}{unit(m)}" for m in DIFF_METRICS) + " |",
              "|---|---|" + "---|" * len(DIFF_METRICS)]  # fmt: skip
    for v in ("tandem-kimi", "initial"):
        p = summary["paired"][v]
        cells = ["–" if p["metrics"].get(m) is None else diff_text(p["metrics"][m], m, digits=1)
                 + (" *" if p["metrics"][m]["excludes_zero"] else "") for m in DIFF_METRICS]  # fmt: skip
        lines.append(f"| {v} | {len(p['seeds']) or 'none'} | " + " | ".join(cells) + " |")
    steps = summary["selected_steps"]
    lines += ["", "Selected checkpoint step per seed: " + "; ".join(
        f"{v}: " + ", ".join(f"seed {s} step {n}" for s, n in sorted(steps.get(v, {}).items()))
        for v in ("grpo-kimi", "tandem-kimi"))]  # fmt: skip
    return "\n".join(lines)


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
    print(table(json.loads((DEST / "summary.json").read_text())))
    print(f"wrote {DEST}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "runs/toy-length-penalty")

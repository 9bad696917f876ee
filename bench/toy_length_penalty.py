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
KEYS = (
    "reward/length_penalty",
    "completions/mean_length",
    "tandem/team_length/mean",
    "rewards/math_reward/mean",
    "tandem/senior_share",
)


def curves(out: Path) -> dict:
    res = {}
    for metrics in sorted(out.glob("train/*/seed-*/metrics.jsonl")):
        rows = [json.loads(x) for x in metrics.read_text().splitlines() if x.strip()]
        run = f"{metrics.parent.parent.name}/{metrics.parent.name}"
        rows = [r for r in rows if "step" in r and KEYS[0] in r]  # the training steps' rows
        if rows:
            res[run] = {k: [r.get(k) for r in rows] for k in ("step", *KEYS)}
    return res


VARIANTS = ("initial", "grpo-kimi", "tandem-kimi")
ROW_METRICS = ("solo/pass@1", "handoff/pass@1", "jargon_rate", "legibility/junior_ce")
DIFF_METRICS = ("handoff/pass@1", "solo/pass@1", "jargon_rate")


def table(summary: dict) -> str:
    """The page's results tables, from the study report's summary.json (the test recomputes them)."""
    import trlvr.toy.jargon  # noqa: F401  (registers jargon_rate: a rate, shown in %)
    from trlvr.eval.format import diff_text, entry_text, unit

    rows, lines = summary["rows"], []
    lines += [
        "| variant | seeds | " + " | ".join(m + unit(m) for m in ROW_METRICS) + " |",
        "|---|---|" + "---|" * len(ROW_METRICS),
    ]
    for v in VARIANTS:
        r = rows[v]
        lines.append(
            f"| {v} | {len(r['seeds']) or 'none'} | "
            + " | ".join(entry_text(r["metrics"].get(m), m) for m in ROW_METRICS)
            + " |"
        )
    lines += [
        "",
        "Paired differences (variant - grpo-kimi, by seed and problem; * = CI excludes 0):",
        "",
        "| variant | seeds | " + " | ".join(f"Δ {m}{unit(m)}" for m in DIFF_METRICS) + " |",
        "|---|---|" + "---|" * len(DIFF_METRICS),
    ]
    for v in (v for v in VARIANTS if v in summary["paired"]):
        p = summary["paired"][v]
        cells = [
            "–"
            if p["metrics"].get(m) is None
            else diff_text(p["metrics"][m], m, digits=1) + (" *" if p["metrics"][m]["excludes_zero"] else "")
            for m in DIFF_METRICS
        ]
        lines.append(f"| {v} | {len(p['seeds']) or 'none'} | " + " | ".join(cells) + " |")
    steps = summary["selected_steps"]
    lines += [
        "",
        "Selected checkpoint step per seed: "
        + "; ".join(
            f"{v}: " + ", ".join(f"seed {s} step {n}" for s, n in sorted(steps.get(v, {}).items()))
            for v in ("grpo-kimi", "tandem-kimi")
        ),
    ]
    return "\n".join(lines)


def solo_by_steps(out: Path) -> dict:
    """Per (variant, seed): the solo samples' mean length in tokens, and their jargon rate by the problem's number
    of steps (paragraphs before the answer), from each evaluation's samples.jsonl."""
    from trlvr.toy.dialects import is_jargon

    res = {}
    for samples in sorted(out.glob("eval/*/seed-*/samples.jsonl")):
        rows = [json.loads(x) for x in samples.read_text().splitlines() if x.strip()]
        rows = [r for r in rows if r["protocol"] == "solo"]
        by: dict[int, list[bool]] = {}
        for r in rows:
            by.setdefault(r["text"].count("\n\n"), []).append(is_jargon(r["text"]))
        res[f"{samples.parent.parent.name}/{samples.parent.name}"] = {
            "mean_tokens": sum(r["num_tokens"] for r in rows) / len(rows),
            "jargon_by_steps": {str(k): [sum(v) / len(v), len(v)] for k, v in sorted(by.items())},
        }
    return res


def lengths_by_steps(n: int = 500) -> dict:
    """Mean tokens of a plain and a jargon solution by number of steps (shipped tokenizer, test problems)."""
    from transformers import AutoTokenizer

    from trlvr.toy.dialects import render_solution
    from trlvr.toy.task import generate_problems

    tok = AutoTokenizer.from_pretrained(ROOT / "trlvr" / "toy" / "assets" / "senior")
    by: dict[int, list[tuple[int, int]]] = {}
    for p in generate_problems(n, "test", 0):
        plain, jargon = (len(tok(render_solution(p, d))["input_ids"]) for d in ("plain", "jargon"))
        by.setdefault(render_solution(p, "plain").count("\n\n"), []).append((plain, jargon))
    return {
        str(k): {"plain": sum(a for a, _ in v) / len(v), "jargon": sum(b for _, b in v) / len(v), "n": len(v)}
        for k, v in sorted(by.items())
    }


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
    (DEST / "solo.json").write_text(
        json.dumps({"samples": solo_by_steps(out_dir), "lengths": lengths_by_steps()}, indent=1)
    )
    print(table(json.loads((DEST / "summary.json").read_text())))
    print(f"wrote {DEST}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "runs/toy-length-penalty")

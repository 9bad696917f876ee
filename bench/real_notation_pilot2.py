"""The second private-notation pilot (issue 45): which weakened SFT does the RL study start from? The rule is fixed in advance.

The first pilot (bench/real_notation_pilot.py, issue 37) stopped: its SFT (1 epoch of 1,000 problems, 80%
in the notation) made every notation senior write the notation in 100% of samples and lose more than 5
solo points. This one sweeps four weaker SFTs of the spaced notation `<<4 +3 =7>>` (2 notation shares x 2
lengths) beside a fresh plain-SFT reference, all from bench/real_sft_notation.py:

    plain             the plain dialect, 1,000 problems, 1 epoch (the reference every gap needs)
    spaced-50         spaced, 50% of 1,000 problems in the notation, 1 epoch (63 steps of 16)
    spaced-65         spaced, 65% of 1,000
    spaced-50-short   spaced, 50% of 500 problems, 1 epoch (32 steps)
    spaced-65-short   spaced, 65% of 500

Each senior is evaluated as its merged weights with the untouched SmolLM2-135M-Instruct as junior (the
same model the RL study's `junior: self` gives a senior that continues the adapter), on the first --limit
(100) of the 200 problems the RL config holds out x --n (2) samples: solo and dose-0.5 (the word schedule
at p = 0.5: the tandem arm's training distribution). The jargon rate is `regex_jargon_rate` with
--jargon-regex, bootstrapped over problems like every metric. Then (the rule, written and committed before
any number of this pilot was seen; docs/results/real-notation-2.md gives its reasons):

    a variant qualifies when its plain-minus-variant dose-0.5 gap is >= 5 points, its jargon rate is
    60-95% and its solo pass@1 is within 5 points of the plain SFT's. Take the qualifying variant with the
    largest gap (a tie: the higher jargon rate). None qualifies: stop, and report which condition failed.

    OMP_NUM_THREADS=1 setsid nohup .venv/bin/python bench/real_notation_pilot2.py --out runs/notation-pilot-2 \\
        > runs/notation-pilot-2.log 2>&1 &

Resumable: each finished stage (an SFT's adapter/DONE and merged/DONE, an evaluation's DONE) is skipped;
rerun the same command. OUT/decision.md and OUT/decision.json are rewritten after every evaluation (rows
not yet evaluated are "pending"). OUT/timings.jsonl: seconds per stage. `--smoke`: 3 SFT steps on 48
problems and 4 evaluation problems x 1, into OUT, to check the path end to end.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from real_notation_pilot import (  # noqa: E402  (the first pilot's stages)
    CONDITIONS,
    _say,
    _timed,
    evaluate_row,
    finished_rows,
    heldout_file,
    row_lines,
)

VARIANTS = {  # name: the SFT (bench/real_sft_notation.py) settings
    "plain": {"dialect": "plain", "notation_share": 0.0, "problems": 1000},
    "spaced-50": {"dialect": "spaced", "notation_share": 0.5, "problems": 1000},
    "spaced-65": {"dialect": "spaced", "notation_share": 0.65, "problems": 1000},
    "spaced-50-short": {"dialect": "spaced", "notation_share": 0.5, "problems": 500},
    "spaced-65-short": {"dialect": "spaced", "notation_share": 0.65, "problems": 500},
}
ROWS = tuple(VARIANTS)  # the reference first: every gap needs it
CANDIDATES = ROWS[1:]
JARGON_REGEX = r"<<[^<>]*>>"
RULE = {"min_gap": 5.0, "jargon": (60.0, 95.0), "solo_within": 5.0}


def check(plain: dict, m: dict) -> dict:
    """One variant against the plain reference, by the rule (points; metrics as `row_metrics` gives them)."""
    gap = plain["dose-0.5/pass@1"]["value"] - m["dose-0.5/pass@1"]["value"]
    jargon = m["regex_jargon_rate"]["value"]
    solo_diff = m["solo/pass@1"]["value"] - plain["solo/pass@1"]["value"]
    c = {
        "dose_gap": round(gap, 1),
        "jargon": jargon,
        "solo_minus_plain": round(solo_diff, 1),
        "gap_ok": gap >= RULE["min_gap"],
        "jargon_ok": RULE["jargon"][0] <= jargon <= RULE["jargon"][1],
        "solo_ok": abs(solo_diff) <= RULE["solo_within"],
    }
    c["qualifies"] = c["gap_ok"] and c["jargon_ok"] and c["solo_ok"]
    return c


def decide(table: dict[str, dict]) -> dict:
    """The rule over {row: metrics}: the qualifying variant with the largest gap, or none (and why)."""
    if "plain" not in table:
        return {"decision": "pending", "why": "the plain-SFT reference is not evaluated yet"}
    checks = {v: check(table["plain"], table[v]) for v in CANDIDATES if v in table}
    if len(checks) < len(CANDIDATES):
        return {
            "decision": "pending",
            "checks": checks,
            "why": f"{len(CANDIDATES) - len(checks)} variant(s) not evaluated yet",
        }
    qualifying = sorted(
        (v for v in checks if checks[v]["qualifies"]),
        key=lambda v: (-checks[v]["dose_gap"], -checks[v]["jargon"]),
    )
    if qualifying:
        pick = qualifying[0]
        return {
            "decision": pick,
            "qualifying": qualifying,
            "checks": checks,
            "why": f"{pick}: the qualifying variant with the largest dose-0.5 gap ({checks[pick]['dose_gap']:+.1f})",
        }
    failed = "; ".join(
        f"{v} fails {', '.join(w for w, k in CONDITIONS if not c[k])}" for v, c in checks.items()
    )
    return {
        "decision": "none",
        "qualifying": [],
        "checks": checks,
        "why": f"no variant meets the rule ({failed}): stop and report it",
    }


def write_decision(out: Path, table: dict, pattern: str, settings: dict) -> dict:
    dec = decide(table)
    (out / "decision.json").write_text(
        json.dumps(
            {
                "rule": RULE,
                "variants": VARIANTS,
                "jargon_regex": pattern,
                "settings": settings,
                "table": table,
                **dec,
            },
            indent=1,
        )
    )
    cols = [
        ("solo/pass@1", "solo"),
        ("dose-0.5/pass@1", "dose-0.5"),
        ("regex_jargon_rate", "jargon rate"),
        ("solo/mean_tokens", "solo tokens"),
    ]
    lines = [
        f"# Notation pilot 2: {settings['limit']} held-out problems x {settings['n']} samples (% [95% CI])",
        "",
        "| senior (SFT) | " + " | ".join(t for _, t in cols) + " | plain − it, dose-0.5 | qualifies |",
        "|---" * (len(cols) + 3) + "|",
    ]
    lines += row_lines(ROWS, cols, table, dec.get("checks", {}))
    lines += [
        "",
        f"Rule (committed before the pilot): a variant qualifies with a plain-minus-variant dose-0.5 gap "
        f">= {RULE['min_gap']:g} points, a jargon rate of {RULE['jargon'][0]:g}-{RULE['jargon'][1]:g}% and solo "
        f"within {RULE['solo_within']:g} points of the plain SFT; the qualifying variant with the largest gap is "
        f"taken. Jargon: solo samples matching `{pattern}`.",
        "",
        f"**Decision: {dec['decision']}**: {dec['why']}.",
    ]
    (out / "decision.md").write_text("\n".join(lines) + "\n")
    return dec


def sft_command(
    py: str, variant: str, sft: Path, base: Path, data: Path, holdout: int, smoke: bool
) -> list[str]:
    v = VARIANTS[variant]
    cmd = [
        py,
        str(HERE / "real_sft_notation.py"),
        "--dialect",
        v["dialect"],
        "--out",
        str(sft),
        "--base",
        str(base),
        "--train",
        str(data / "train.jsonl"),
        "--test",
        str(data / "test.jsonl"),
        "--holdout",
        str(holdout),
        "--notation-share",
        str(v["notation_share"]),
        "--problems",
        str(48 if smoke else v["problems"]),
    ]
    return cmd + (["--max-steps", "3"] if smoke else [])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="runs/notation-pilot-2")
    ap.add_argument(
        "--models",
        default="models",
        help="the `make real-models` folder; SFT seniors go to MODELS/smollm2-<variant>",
    )
    ap.add_argument("--limit", type=int, default=100)
    ap.add_argument("--n", type=int, default=2)
    ap.add_argument("--holdout", type=int, default=200)
    ap.add_argument("--jargon-regex", default=JARGON_REGEX)
    ap.add_argument("--rows", default=",".join(ROWS), help="comma-separated rows to run, in order")
    ap.add_argument("--smoke", action="store_true", help="3 SFT steps on 48 problems, 4 eval problems x 1")
    args = ap.parse_args(argv)
    rows = [r.strip() for r in args.rows.split(",") if r.strip()]
    if bad := sorted(set(rows) - set(ROWS)):
        ap.error(f"--rows: unknown {bad}; choose from {', '.join(ROWS)}")
    models = Path(args.models)
    base, data = models / "smollm2-135m-instruct", models / "real-task-1shot"
    for p in (base, data / "train.jsonl", data / "test.jsonl"):
        if not p.exists():
            print(f"{p}: not found; prepare it with `make real-models`", file=sys.stderr)
            return 2
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    py = sys.executable
    limit, n = (4, 1) if args.smoke else (args.limit, args.n)
    settings = {"limit": limit, "n": n, "holdout": args.holdout, "smoke": args.smoke, "junior": str(base)}
    held = heldout_file(str(data / "train.jsonl"), args.holdout, 0, out / "data" / "heldout.jsonl")
    for row in rows:
        sft = (out / "sft" if args.smoke else models) / f"smollm2-{row}"
        if not (sft / "merged" / "DONE").is_file() or not (sft / "adapter" / "DONE").is_file():
            cmd = sft_command(py, row, sft, base, data, args.holdout, args.smoke)
            _timed(out, f"sft {row}", cmd, out / "logs" / f"sft-{row}.log")
        evaluate_row(out, row, sft / "merged", base, held, limit, n, "solo,dose")
        table = finished_rows(out, ROWS, args.jargon_regex)
        dec = write_decision(out, table, args.jargon_regex, settings)
        _say(f"{out}/decision.md: decision {dec['decision']}")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    sys.exit(main())

"""The private-notation pilot (issue 37): which notation does the RL study teach its senior? The rule is fixed in advance.

For the plain reference and each notation (spaced, compact, cipher; bench/real_sft_notation.py), one
after the other: LoRA SFT + merge, then `trlvr eval` of the merged senior with the untouched base
SmolLM2-135M-Instruct as junior, on the first --limit (100) of the 200 problems the RL config holds out
(the training file's `holdout: 200`, by `trlvr.data.holdout_split` as `trlvr train` picks them) x --n (2)
samples: solo, step handoff and dose-0.5 (the word schedule at p = 0.5, the training distribution).
The jargon rate is `regex_jargon_rate` (trlvr.eval.regex_jargon) with --jargon-regex, bootstrapped over
problems as every metric is. Then (the rule, written before any number was seen):

    take the notation with the largest plain-SFT minus notation-SFT dose-0.5 accuracy gap; it qualifies
    when that gap is >= 8 points, its jargon rate is 70-95% and its solo pass@1 is within 5 points of
    the plain SFT's. None qualifies: stop, and report that (a 135M junior reads the shorthand in context).

    OMP_NUM_THREADS=1 setsid nohup .venv/bin/python bench/real_notation_pilot.py --out runs/notation-pilot \\
        > runs/notation-pilot.log 2>&1 &

Resumable: each finished stage (an SFT's adapter/DONE and merged/DONE, an evaluation's DONE) is skipped,
an interrupted evaluation resumes from its samples; rerun the same command. OUT/decision.md and
OUT/decision.json are rewritten after every evaluation (rows not yet evaluated are "pending"), so the
decision can be read as soon as the four SFT rows exist. OUT/timings.jsonl: seconds per stage.
`--smoke`: a few SFT steps and 4 problems, to check the whole path end to end (into OUT as well).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROWS = ("plain", "spaced", "compact", "cipher")  # the reference first: every gap needs it
NOTATIONS = ROWS[1:]
JARGON_REGEX = r"<<[^<>]*>>"  # a calculator annotation, in any of the three notations
RULE = {"min_gap": 8.0, "jargon": (70.0, 95.0), "solo_within": 5.0}
METRICS = ("solo/pass@1", "handoff/pass@1", "dose-0.5/pass@1", "regex_jargon_rate", "solo/mean_tokens")
HERE = Path(__file__).resolve().parent


def _say(msg: str) -> None:
    print(f"[pilot {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def _timed(out: Path, stage: str, cmd: list[str], log: Path) -> None:
    log.parent.mkdir(parents=True, exist_ok=True)
    _say(f"{stage}: started (log {log})")
    t0 = time.perf_counter()
    with open(log, "a") as f:
        f.write(f"$ {' '.join(cmd)}\n")
        f.flush()
        code = subprocess.call(cmd, stdout=f, stderr=subprocess.STDOUT)
    seconds = time.perf_counter() - t0
    with open(out / "timings.jsonl", "a") as f:
        f.write(
            json.dumps(
                {
                    "stage": stage,
                    "seconds": round(seconds, 1),
                    "exit": code,
                    "finished": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                }
            )
            + "\n"
        )
    if code != 0:
        raise SystemExit(f"{stage}: failed (exit {code}); see {log}")
    _say(f"{stage}: done in {seconds:.0f} s")


def heldout_file(train: str, holdout: int, holdout_seed: int, path: Path) -> Path:
    """The training file's held-out problems as `trlvr train` writes them (output_dir/holdout.jsonl)."""
    from trlvr.data import holdout_split, load_problems
    from trlvr.training.build import write_holdout

    if not path.is_file():
        _, held = holdout_split(list(load_problems(train)), holdout, holdout_seed)
        path.parent.mkdir(parents=True, exist_ok=True)
        write_holdout(path.parent, held)
        (path.parent / "holdout.jsonl").rename(path)
    return path


def row_metrics(eval_dir: Path, pattern: str) -> dict:
    """{metric: {value, ci_low, ci_high}} of one evaluation, the regex jargon rate included (in points)."""
    from trlvr.eval import regex_jargon  # noqa: F401  (registers regex_jargon_rate)
    from trlvr.eval.sample_metrics import load_table, summary

    res = json.loads((eval_dir / "results.json").read_text())
    got = {**res["macro"]["metrics"], **summary(load_table(eval_dir, {"jargon_regex": pattern}))}
    out = {}
    for m in METRICS:
        e = got.get(m)
        if e is None:
            continue
        scale = 1.0 if m.endswith("tokens") else 100.0
        out[m] = {k: round(e[k] * scale, 1) for k in ("value", "ci_low", "ci_high")}
    return out


CONDITIONS = (
    ("gap", "gap_ok"),
    ("jargon", "jargon_ok"),
    ("solo", "solo_ok"),
)  # (name, check key), in the table's order


def row_lines(rows, cols, table: dict, checks: dict) -> list[str]:
    """The decision table's body: per row its metrics (value [CI]) or "pending", its gap and whether it qualifies."""
    lines = []
    for row in rows:
        m = table.get(row)
        if not m:
            lines.append(f"| {row} | " + " | ".join("pending" for _ in cols) + " | | |")
            continue
        cells = [
            f"{m[k]['value']:.1f} [{m[k]['ci_low']:.1f}, {m[k]['ci_high']:.1f}]" if k in m else "-"
            for k, _ in cols
        ]
        c = checks.get(row)
        gap = f"{c['dose_gap']:+.1f}" if c else ""
        ok = (
            ("yes" if c["qualifies"] else "no (" + ", ".join(w for w, k in CONDITIONS if not c[k]) + ")")
            if c
            else ""
        )
        lines.append(f"| {row} | " + " | ".join(cells) + f" | {gap} | {ok} |")
    return lines


def evaluate_row(
    out: Path, row: str, senior: Path, junior: Path, held: Path, limit: int, n: int, suite: str
) -> None:
    """`trlvr eval` of one pilot row (skipped once OUT/eval/ROW/DONE exists): the held-out problems, 64 new tokens."""
    ev = out / "eval" / row
    if (ev / "DONE").is_file():
        return
    trlvr = str(Path(sys.executable).parent / "trlvr")
    cmd = [
        trlvr,
        "eval",
        "--senior",
        str(senior),
        "--junior",
        str(junior),
        "--data",
        f"heldout={held}",
        "--limit",
        str(limit),
        "--n",
        str(n),
        "--k",
        "1",
        "--suite",
        suite,
        "--dose-shares",
        "0.5",
        "--max-new-tokens",
        "64",
        "--batch-size",
        "64",
        "--dtype",
        "float32",
        "--grading",
        "boxed",
        "--out",
        str(ev),
        "--no-progress",
    ]
    _timed(out, f"eval {row}", cmd, out / "logs" / f"eval-{row}.log")
    (ev / "DONE").touch()


def finished_rows(out: Path, rows, pattern: str) -> dict:
    """{row: metrics} of every row whose evaluation is DONE."""
    return {r: row_metrics(out / "eval" / r, pattern) for r in rows if (out / "eval" / r / "DONE").is_file()}


def no_notation_reason(checks: dict[str, dict]) -> str:
    """What the failure of every notation says: the junior reads them (no gap anywhere), or the SFT did not
    make the senior the rule asks for (a notation with a gap failed on jargon or solo accuracy)."""
    failed = {n: [c for c in ("gap", "jargon", "solo") if not ch[f"{c}_ok"]] for n, ch in checks.items()}
    if all(f == ["gap"] for f in failed.values()):
        return "every notation kept the jargon and the accuracy, and none lost the team 8 points: the junior reads them"
    with_gap = [n for n, ch in checks.items() if ch["gap_ok"]]
    parts = "; ".join(f"{n} fails {', '.join(f)}" for n, f in failed.items())
    return (
        f"{parts}. The junior does not read every notation ({', '.join(with_gap) or 'none'} lost the team "
        f">= {RULE['min_gap']} points), but no SFT'd senior kept the plain senior's accuracy with a jargon rate "
        "inside the registered band: the pilot made no senior the study can start from"
    )


def decide(table: dict[str, dict]) -> dict:
    """The rule over {row: metrics}: the largest-gap notation, whether it qualifies, and which do."""
    plain = table.get("plain")
    if not plain:
        return {"decision": "pending", "why": "the plain-SFT reference is not evaluated yet"}
    checks = {}
    for n in NOTATIONS:
        m = table.get(n)
        if not m:
            continue
        gap = plain["dose-0.5/pass@1"]["value"] - m["dose-0.5/pass@1"]["value"]
        jargon = m["regex_jargon_rate"]["value"]
        solo_diff = m["solo/pass@1"]["value"] - plain["solo/pass@1"]["value"]
        checks[n] = {
            "dose_gap": round(gap, 1),
            "jargon": jargon,
            "solo_minus_plain": round(solo_diff, 1),
            "gap_ok": gap >= RULE["min_gap"],
            "jargon_ok": RULE["jargon"][0] <= jargon <= RULE["jargon"][1],
            "solo_ok": abs(solo_diff) <= RULE["solo_within"],
        }
        checks[n]["qualifies"] = checks[n]["gap_ok"] and checks[n]["jargon_ok"] and checks[n]["solo_ok"]
    if len(checks) < len(NOTATIONS):
        return {
            "decision": "pending",
            "checks": checks,
            "why": f"{len(NOTATIONS) - len(checks)} notation(s) not evaluated yet",
        }
    largest = max(checks, key=lambda n: checks[n]["dose_gap"])
    qualifying = sorted((n for n in checks if checks[n]["qualifies"]), key=lambda n: -checks[n]["dose_gap"])
    if checks[largest]["qualifies"]:
        decision, why = largest, f"{largest}: the largest dose-0.5 gap, and it meets every condition"
    elif qualifying:
        decision = qualifying[0]
        why = (
            f"the largest gap ({largest}) fails a condition; {decision} is the qualifying notation with the "
            "largest gap (the rule read as 'the largest gap among those that meet the conditions')"
        )
    else:
        decision, why = (
            "none",
            "no notation meets the rule: stop and report it; " + no_notation_reason(checks),
        )
    return {
        "decision": decision,
        "largest_gap": largest,
        "qualifying": qualifying,
        "checks": checks,
        "why": why,
    }


def write_decision(out: Path, table: dict, pattern: str, settings: dict) -> dict:
    dec = decide(table)
    (out / "decision.json").write_text(
        json.dumps(
            {"rule": RULE, "jargon_regex": pattern, "settings": settings, "table": table, **dec}, indent=1
        )
    )
    cols = [
        ("solo/pass@1", "solo acc"),
        ("handoff/pass@1", "handoff acc"),
        ("dose-0.5/pass@1", "dose-0.5 acc"),
        ("regex_jargon_rate", "jargon rate"),
        ("solo/mean_tokens", "solo tokens"),
    ]
    lines = [
        f"# Notation pilot: {settings['limit']} held-out problems x {settings['n']} samples (% [95% CI])",
        "",
        "| senior | " + " | ".join(t for _, t in cols) + " | dose gap vs plain | qualifies |",
        "|---" * (len(cols) + 3) + "|",
    ]
    lines += row_lines((*ROWS, "base"), cols, table, dec.get("checks", {}))
    lines += [
        "",
        f"Rule (fixed before the pilot): the largest plain-minus-notation dose-0.5 gap, >= {RULE['min_gap']:g} "
        f"points, jargon rate {RULE['jargon'][0]:g}-{RULE['jargon'][1]:g}%, solo within {RULE['solo_within']:g} "
        f"points of the plain SFT. Jargon: solo samples matching `{pattern}`.",
        "",
        f"**Decision: {dec['decision']}**: {dec['why']}.",
    ]
    (out / "decision.md").write_text("\n".join(lines) + "\n")
    return dec


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="runs/notation-pilot")
    ap.add_argument(
        "--models",
        default="models",
        help="the `make real-models` folder; SFT seniors go to MODELS/smollm2-<row>",
    )
    ap.add_argument("--limit", type=int, default=100)
    ap.add_argument("--n", type=int, default=2)
    ap.add_argument("--holdout", type=int, default=200)
    ap.add_argument("--jargon-regex", default=JARGON_REGEX)
    ap.add_argument("--rows", default=",".join((*ROWS, "base")), help="comma-separated rows to run, in order")
    ap.add_argument("--smoke", action="store_true", help="3 SFT steps on 48 problems, 4 eval problems x 1")
    args = ap.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    models = Path(args.models)
    base, data = models / "smollm2-135m-instruct", models / "real-task-1shot"
    for p in (base, data / "train.jsonl", data / "test.jsonl"):
        if not p.exists():
            print(f"{p}: not found; prepare it with `make real-models`", file=sys.stderr)
            return 2
    py = sys.executable
    limit, n = (4, 1) if args.smoke else (args.limit, args.n)
    settings = {"limit": limit, "n": n, "holdout": args.holdout, "smoke": args.smoke, "junior": str(base)}
    held = heldout_file(str(data / "train.jsonl"), args.holdout, 0, out / "data" / "heldout.jsonl")
    rows = [r.strip() for r in args.rows.split(",") if r.strip()]
    bad = sorted(set(rows) - {*ROWS, "base"})
    if bad:
        ap.error(f"--rows: unknown {bad}; choose from {', '.join((*ROWS, 'base'))}")
    for row in rows:
        if row == "base":
            senior = base
        else:
            sft = (out / "sft" / f"smollm2-{row}") if args.smoke else models / f"smollm2-{row}"
            senior = sft / "merged"
            if not (senior / "DONE").is_file() or not (sft / "adapter" / "DONE").is_file():
                cmd = [
                    py,
                    str(HERE / "real_sft_notation.py"),
                    "--dialect",
                    row,
                    "--out",
                    str(sft),
                    "--base",
                    str(base),
                    "--train",
                    str(data / "train.jsonl"),
                    "--test",
                    str(data / "test.jsonl"),
                    "--holdout",
                    str(args.holdout),
                ]
                if args.smoke:
                    cmd += ["--problems", "48", "--max-steps", "3"]
                _timed(out, f"sft {row}", cmd, out / "logs" / f"sft-{row}.log")
        evaluate_row(out, row, senior, base, held, limit, n, "solo,handoff,dose")
        table = finished_rows(out, (*ROWS, "base"), args.jargon_regex)
        dec = write_decision(out, table, args.jargon_regex, settings)
        _say(f"{out}/decision.md: decision {dec['decision']}")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    sys.exit(main())

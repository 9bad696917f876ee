"""Self-contained HTML report of one or more evaluation directories (opens offline: no external URLs).

Sections: metrics table with 95% CIs; pass@k solo vs handoff (and junior); dose curve; legibility
and drift bars; comparison tables (paired bootstrap, when given); a rollout viewer where senior
and junior tokens have two colours and the background shades by the junior's surprisal
(-log p_junior of the token). Plots are matplotlib (Agg) PNGs embedded as base64.

The page is templates/report.html.j2 rendered by jinja2 with autoescape on: this file hands the
template plain values, and every one of them (model text, metadata, labels) is escaped there.
Reading a directory never writes to it.
"""

from __future__ import annotations

import base64
import io
from pathlib import Path

from trlvr.errors import UserError
from trlvr.eval.aggregate import compare_tables
from trlvr.eval.comparable import check_comparable, warning_text
from trlvr.eval.format import diff_text, entry_text, is_percent, number, unit
from trlvr.eval.store import PER_PROBLEM, RESULTS, SAMPLES, check_finished, read_json, read_samples
from trlvr.eval.suite import dose_points
from trlvr.rundir import check_report_path, report_lock, write_file

SENIOR_COLOUR, JUNIOR_COLOUR = "#1f5fbf", "#c2410c"
REQUIRED_RESULT_FIELDS = ("config", "benchmarks", "macro")
TEMPLATES = Path(__file__).resolve().parent / "templates"


def load_results(run_dir: str | Path) -> dict:
    """results.json of an evaluation directory (a finished one: `check_finished`), with its fields checked."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise UserError(f"evaluation directory not found: {run_dir}")
    check_finished(run_dir)
    path = run_dir / RESULTS
    res = read_json(path, "results file", checked=True)
    for key in REQUIRED_RESULT_FIELDS:
        if key not in res:
            raise UserError(f"{path} lacks field {key!r}")
    if "metrics" not in res["macro"]:
        raise UserError(f"{path} lacks field 'macro.metrics'")
    for bench, b in res["benchmarks"].items():
        if "metrics" not in b:
            raise UserError(f"{path} lacks field 'benchmarks.{bench}.metrics'")
        for name, e in b["metrics"].items():
            for f in ("value", "ci_low", "ci_high"):
                if f not in e:
                    raise UserError(f"{path}: metric {name!r} of benchmark {bench!r} lacks field {f!r}")
    for scope, metrics in [("macro", res["macro"]["metrics"])] + [
        (b, x["metrics"]) for b, x in res["benchmarks"].items()
    ]:
        for name, e in metrics.items():
            if why := impossible(name, e):
                raise UserError(
                    f"{path}: metric {name!r} of {scope!r} {why}, which cannot be: nothing was read; "
                    "run `trlvr eval` into it again (--fresh starts over)"
                )
    return res


def impossible(name: str, entry) -> str | None:
    """Why a results.json entry cannot be one `trlvr eval` wrote (a rate outside [0, 1], a CI that does not
    hold its value, a value that is no number), or None."""
    if not isinstance(entry, dict):
        return "is not an entry"
    nums = {f: entry.get(f) for f in ("value", "ci_low", "ci_high")}
    for f, v in nums.items():
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float))):
            return f"has {f} {v!r}"
    nums = {f: None if v is None or v != v else v for f, v in nums.items()}  # NaN: no number to judge
    value, low, high = nums["value"], nums["ci_low"], nums["ci_high"]
    if is_percent(name):
        for f, v in nums.items():
            if v is not None and not 0.0 <= v <= 1.0:
                return f"is a rate with {f} {v!r} (outside [0, 1])"
    if value is not None and low is not None and high is not None and not low - 1e-9 <= value <= high + 1e-9:
        return f"has value {value!r} outside its CI [{low!r}, {high!r}]"
    return None


def load_table(run_dir: str | Path) -> dict:
    """per_problem.json of an evaluation directory (a finished one: `check_finished`)."""
    check_finished(run_dir)
    path = Path(run_dir) / PER_PROBLEM
    table = read_json(path, "per-problem metrics file", checked=True)
    if not all(isinstance(v, dict) for v in table.values()):
        raise UserError(f"{path} must map benchmark -> metric -> problem id -> value")
    return table


# ---- plots ---------------------------------------------------------------------------------


def _png(fig) -> str:
    import matplotlib.pyplot as plt

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
    plt.close(fig)
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


DOSE_TITLE = "dose: pass@1 vs junior share"
BAR_GREY = "#64748b"  # bars of one run's benchmarks (several runs: one colour per run)
# (metric, y label, title) of the bar plots every report draws
BARS = (
    ("legibility/junior_ce", "junior CE (nats/token)", "legibility (lower = more legible)"),
    ("drift/kl", "KL(senior || junior) (nats/token)", "drift"),
)
_PROTOCOL_LINES = (("solo", SENIOR_COLOUR, "-"), ("handoff", "#7c3aed", "--"), ("junior", JUNIOR_COLOUR, ":"))

# One set of plots serves one run or many: each takes `runs`, a list of (label, macro metrics); a single
# run is a list of one (drawn in the protocols' colours, no run labels), several runs get one colour each.


def _errorbar(ax, xs: list, entries: list[dict], **style) -> None:
    """Points at `xs` with their CIs, rates drawn in percent."""
    ax.errorbar(
        xs,
        [e["value"] * 100 for e in entries],
        yerr=[
            [(e["value"] - e["ci_low"]) * 100 for e in entries],
            [(e["ci_high"] - e["value"]) * 100 for e in entries],
        ],
        marker="o",
        capsize=3,
        **style,
    )


def pass_at_k_plot(runs: list[tuple[str, dict]], title: str) -> str | None:
    """pass@k of the solo (solid), handoff (dashed) and junior (dotted) protocols of every run, or None."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(4.6, 3.2))
    drawn = False
    for i, (label, metrics) in enumerate(runs):
        for proto, colour, style in _PROTOCOL_LINES:
            names = sorted(
                (n for n in metrics if n.startswith(f"{proto}/pass@")), key=lambda n: int(n.split("@")[1])
            )
            if not names:
                continue
            _errorbar(
                ax,
                [int(n.split("@")[1]) for n in names],
                [metrics[n] for n in names],
                linestyle=style,
                color=colour if len(runs) == 1 else f"C{i}",
                label=proto if len(runs) == 1 else f"{label} {proto}",
            )
            drawn = True
    if not drawn:
        plt.close(fig)
        return None
    ax.set_xscale("log", base=2)
    ax.set(xlabel="k", ylabel="pass@k (%)", title=title)
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    return _png(fig)


def dose_plot(runs: list[tuple[str, dict]], title: str = DOSE_TITLE) -> str | None:
    """pass@1 against the junior's share of words (solo at 0, the dose points, the junior alone at 1)."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(4.6, 3.2))
    drawn = False
    for i, (label, metrics) in enumerate(runs):
        dose = dose_points(metrics)
        if not dose:
            continue
        points = ([(0.0, "solo/pass@1")] if "solo/pass@1" in metrics else []) + dose
        points += [(1.0, "junior/pass@1")] if "junior/pass@1" in metrics else []
        _errorbar(
            ax,
            [x for x, _ in points],
            [metrics[n] for _, n in points],
            color="#0f766e" if len(runs) == 1 else f"C{i}",
            label=label or None,
        )
        drawn = True
    if not drawn:
        plt.close(fig)
        return None
    ax.set(
        xlabel="junior share of words (0 = senior solo, 1 = junior solo)", ylabel="pass@1 (%)", title=title
    )
    if len(runs) > 1:
        ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    return _png(fig)


def bars_plot(
    bars: list[tuple[str, dict]], metric: str, ylabel: str, title: str, colour: str | None = None
) -> str | None:
    """One bar per (name, metrics) that has `metric`, with its CI: the runs of a comparison, or one run's
    benchmarks (`benchmark_bars`); colour: one for all bars (None: one per bar, as per run)."""
    import matplotlib.pyplot as plt

    have = [(i, name, m[metric]) for i, (name, m) in enumerate(bars) if metric in m]
    if not have:
        return None
    fig, ax = plt.subplots(figsize=(4.6, 3.2))
    ax.bar(
        [name for _, name, _ in have],
        [e["value"] for _, _, e in have],
        capsize=4,
        color=[colour or f"C{i}" for i, _, _ in have],
        yerr=[
            [e["value"] - e["ci_low"] for _, _, e in have],
            [e["ci_high"] - e["value"] for _, _, e in have],
        ],
    )
    ax.set(ylabel=ylabel, title=title)
    ax.tick_params(axis="x", rotation=20)
    return _png(fig)


def benchmark_bars(res: dict) -> list[tuple[str, dict]]:
    """(benchmark, metrics) of one run's results, then ("macro", ...) when there are several benchmarks
    (with one, macro is the same bar again)."""
    bars = [(b, r["metrics"]) for b, r in res["benchmarks"].items()]
    return bars + [("macro", res["macro"]["metrics"])] if len(bars) != 1 else bars


def compared_plots(runs: list[tuple[str, dict]]) -> list[str]:
    """The runs side by side (macro metrics): pass@k, dose, legibility and drift, one colour per run."""
    out = [
        pass_at_k_plot(runs, "macro pass@k (solid: solo, dashed: handoff)"),
        dose_plot(runs),
        *(bars_plot(runs, *bar) for bar in BARS),
    ]
    return [p for p in out if p]


def plots(res: dict) -> list[str]:
    """One run's plots: the same pass@k, dose and bars as `compared_plots` (the run as a list of one, the bars
    per benchmark), then pass@k per benchmark when there are several."""
    one = [("", res["macro"]["metrics"])]
    out = [
        pass_at_k_plot(one, "macro pass@k"),
        dose_plot(one),
        *(bars_plot(benchmark_bars(res), *bar, colour=BAR_GREY) for bar in BARS),
    ]
    if len(res["benchmarks"]) > 1:
        out += [
            pass_at_k_plot([("", r["metrics"])], f"{bench} pass@k") for bench, r in res["benchmarks"].items()
        ]
    return [p for p in out if p]


# ---- tables and the viewer: plain values for the template ----------------------------------------


def metrics_table(res: dict) -> dict:
    """{"cols": [...], "rows": [{"name", "unit", "cells"}]}: metric x (benchmarks + macro)."""
    per = {b: r["metrics"] for b, r in res["benchmarks"].items()} | {"macro": res["macro"]["metrics"]}
    names = list(dict.fromkeys(n for m in per.values() for n in m))
    rows = [{"name": n, "unit": unit(n), "cells": [entry_text(per[c].get(n), n) for c in per]} for n in names]
    for grader, other in (
        res.get("by_grader") or {}
    ).items():  # each other grader's pass@k, beside the first's
        theirs = {b: (other["benchmarks"].get(b) or {}).get("metrics", {}) for b in res["benchmarks"]}
        theirs["macro"] = other["macro"]["metrics"]
        rows += [
            {
                "name": f"{n} (grader {grader})",
                "unit": unit(n),
                "cells": [entry_text(theirs[c].get(n), n) for c in per],
            }
            for n in dict.fromkeys(n for m in theirs.values() for n in m)
        ]
    return {"cols": list(per), "rows": rows}


def comparison_rows(cmp: dict) -> list[dict]:
    """Rows of a paired comparison: macro first, then each benchmark."""
    rows = []
    for scope, metrics in [("macro", cmp["macro"])] + list(cmp["benchmarks"].items()):
        for name, e in metrics.items():
            rows.append(
                {
                    "scope": scope,
                    "name": name,
                    "unit": unit(name),
                    "a": number(e["a"], name),
                    "b": number(e["b"], name),
                    "diff": diff_text(e, name),
                    "p": f"{e['p_value']:.3f}",
                    "flag": "yes" if e["excludes_zero"] else "",
                    "num": e["num_problems"],
                }
            )
    return rows


def _surprisal_bg(lp) -> str:
    if not isinstance(lp, int | float):
        return "transparent"
    alpha = min(max(-lp, 0.0) / 8.0, 1.0) * 0.75  # 8 nats or more = full shade
    return f"rgba(250,204,21,{alpha:.2f})"


def _fmt(x, spec: str) -> str:
    """A number formatted by `spec`; anything else (a tampered file) shown as its text."""
    return format(x, spec) if isinstance(x, int | float) and not isinstance(x, bool) else str(x)


def sample_view(row: dict) -> dict:
    """One completion for the template: meta line, and spans (colour = author, background = surprisal)."""
    text, lens = str(row.get("text", "")), row.get("piece_lens")
    authors, jlp = str(row.get("authors", "")), row.get("junior_logprobs")
    extra = "".join(
        f" · {k} {_fmt(row[k], '.3f')}" for k in ("legibility", "drift") if row.get(k) is not None
    )
    meta = (
        f"{row['protocol']} #{row['sample_idx']} · reward {_fmt(row['reward'], 'g')} · "
        f"parsed {row.get('parsed_answer')} (gold {row.get('answer')}) · {row.get('num_tokens', '?')} "
        f"tokens, senior share {_fmt(row.get('senior_share', 0), '.2f')} · finish "
        f"{row['finish_reason']}{extra}"
    )
    ok = isinstance(lens, list) and len(lens) == len(authors) and all(isinstance(n, int) for n in lens)
    if not ok:
        return {"meta": meta, "spans": None, "text": text, "rest": ""}
    spans, pos = [], 0
    for t, n in enumerate(lens):
        piece, pos = text[pos : pos + n], pos + n
        who = "s" if authors[t] == "1" else "j"
        lp = jlp[t] if isinstance(jlp, list) and t < len(jlp) else None
        tip = ("senior" if who == "s" else "junior") + (
            f", surprisal {-lp:.2f} nats" if isinstance(lp, int | float) else ""
        )
        spans.append({"cls": who, "bg": _surprisal_bg(lp), "tip": tip, "text": piece})
    return {"meta": meta, "spans": spans, "text": text, "rest": text[pos:]}


def problem_views(rows: list[dict], max_problems: int = 12, samples_per_protocol: int = 1) -> list[dict]:
    by_problem: dict[tuple[str, str], list[dict]] = {}
    for r in rows:
        by_problem.setdefault((str(r["benchmark"]), str(r["problem_id"])), []).append(r)
    out = []
    for (bench, pid), rs in list(by_problem.items())[:max_problems]:
        shown = sorted(
            (r for r in rs if _is_first(r, samples_per_protocol)),
            key=lambda r: (str(r["protocol"]), str(r["sample_idx"])),
        )
        label = next((str(r["source_id"]) for r in rs if r.get("source_id")), pid)  # the row's own id
        prompt = next((str(r["prompt"]) for r in rs if r.get("prompt")), None)
        out.append(
            {"bench": bench, "pid": label, "prompt": prompt, "samples": [sample_view(r) for r in shown]}
        )
    return out


def _is_first(row: dict, k: int) -> bool:
    idx = row["sample_idx"]
    return isinstance(idx, int) and idx < k


# ---- pages -------------------------------------------------------------------------------------


def render(
    heading: str, runs: list[dict], comparisons: list[dict] = (), intro: str = "", title: str | None = None
) -> str:
    """The page from plain values: `runs` as from `run_view`, `comparisons` as from `comparison_view`."""
    import jinja2

    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(TEMPLATES)), autoescape=True, undefined=jinja2.StrictUndefined
    )
    return env.get_template("report.html.j2").render(
        title=title or heading,
        heading=heading,
        intro=intro,
        runs=runs,
        comparisons=list(comparisons),
        senior_colour=SENIOR_COLOUR,
        junior_colour=JUNIOR_COLOUR,
        shade_high=_surprisal_bg(-8),
        shade_low=_surprisal_bg(-2),
    )


def selection_warning(selection: dict | None) -> str | None:
    """A warning when the senior's checkpoint was selected on problems this evaluation scores."""
    if not selection:
        return None
    overlap = {b: v for b, v in (selection.get("val_overlap") or {}).items() if v}
    if not overlap:
        return None
    shares = ", ".join(f"{b}: {v:.0%}" for b, v in overlap.items())
    return (
        f"The senior (step {selection.get('step')} of {selection.get('run')}) was selected by "
        f"{selection.get('metric')} on data evaluated here ({shares} of the problems): these results are "
        "optimistic; select on held-out data."
    )


def _text(value) -> str:
    """A setting as a short text: mappings as "k v, k v", lists joined by commas, None as "–"."""
    if value is None:
        return "–"
    if isinstance(value, dict):
        return ", ".join(f"{k} {_text(v)}" for k, v in value.items() if not isinstance(v, dict)) or "–"
    if isinstance(value, list | tuple):
        return ", ".join(map(str, value)) or "–"
    return str(value)


def _grader_text(cfg: dict) -> str:
    """The grader of the metrics (an evaluation written before graders were recorded: trlvr's), and any
    other grader each sample was also graded by (its rows are named "(grader X)")."""
    if str(cfg.get("grading", "")).startswith("custom:"):
        return "–"
    first = cfg.get("grader", "trlvr")
    others = [g for g in cfg.get("graders") or () if g != first]
    return first + (f" (also graded by {', '.join(others)}: the rows named so)" if others else "")


def settings_rows(cfg: dict) -> list[tuple[str, str]]:
    """An evaluation's settings as (name, value) rows for a small table (not a printed dict)."""
    models = cfg.get("models", {}) or {}
    data = models.get("data")
    rows = [
        ("senior", _text(models.get("senior"))),
        ("junior", _text(models.get("junior"))),
        (
            "data",
            _text(data) if not isinstance(data, dict) else ", ".join(f"{k} = {v}" for k, v in data.items()),
        ),
        ("samples per problem", _text(cfg.get("n"))),
        ("pass@k", _text(cfg.get("ks"))),
        ("decoding", _text(cfg.get("decoding"))),
        ("budget (tokens)", _text(cfg.get("budget", cfg.get("max_new_tokens")))),
        ("seed", _text(cfg.get("seed"))),
        ("grading", _text(cfg.get("grading"))),
        ("grader", _grader_text(cfg)),
        (
            "handoff round cap",
            f"{_text(cfg.get('handoff_max_rounds'))} (a round = one senior step + one junior step)",
        ),
    ]
    sel = models.get("senior_selection")
    if isinstance(sel, dict):
        rows.insert(
            1,
            (
                "senior checkpoint",
                f"step {sel.get('step')}, selected by {sel.get('metric')} on "
                f"{_text((sel.get('val') or {}).get('name'))}",
            ),
        )
    return rows


def run_view(run_dir: str | Path, label: str | None = None, max_problems: int = 12) -> dict:
    """What the template shows of one evaluation directory (read only)."""
    run_dir = Path(run_dir)
    res = load_results(run_dir)
    cfg = res["config"]
    settings = settings_rows(cfg)
    dropped = {
        b: [d.get("source_id") for d in v] for b, v in (cfg.get("dropped_problems") or {}).items() if v
    }
    return {
        "label": label or str(run_dir),
        "settings": settings,
        "dropped": dropped or None,
        "selection_warning": selection_warning(cfg.get("models", {}).get("senior_selection")),
        "table": metrics_table(res),
        "plots": plots(res),
        "problems": problem_views(read_samples(run_dir / SAMPLES, checked=True), max_problems=max_problems),
    }


def comparison_view(cmp: dict, label_a: str, label_b: str, title: str) -> dict:
    """What the template shows of a paired comparison; `cmp["mismatch"]` (settings that differ, paired
    anyway under --allow-mismatch) becomes a warning above its table."""
    return {
        "title": title,
        "label_a": label_a,
        "label_b": label_b,
        "rows": comparison_rows(cmp),
        "skipped": ", ".join(cmp.get("skipped", [])),
        "mismatch": warning_text(cmp.get("mismatch") or []),
    }


def build_report(
    run_dir: str | Path,
    compare_dirs: list[str | Path] = (),
    *,
    max_problems: int = 12,
    allow_mismatch: bool = False,
) -> str:
    """HTML of the report for `run_dir`, with paired comparisons against each of `compare_dirs` (each
    evaluated alike, `trlvr.eval.comparable`; `allow_mismatch`: a warning instead of a refusal)."""
    mismatch = {str(o): check_comparable(o, run_dir, allow_mismatch=allow_mismatch) for o in compare_dirs}
    run = run_view(run_dir, max_problems=max_problems)
    seed = load_results(run_dir)["config"].get("seed", 0)
    if compare_dirs:  # the runs side by side in every plot, not this run's alone
        runs = [(str(run_dir), load_results(run_dir))] + [(str(o), load_results(o)) for o in compare_dirs]
        run["plots"] = compared_plots([(label, res["macro"]["metrics"]) for label, res in runs])
    comparisons = []
    for other in compare_dirs:
        cmp = {
            **compare_tables(load_table(other), load_table(run_dir), seed=seed),
            "mismatch": mismatch[str(other)],
        }
        title = f"Comparison: B = this run vs A = {other} (paired bootstrap)"
        comparisons.append(comparison_view(cmp, str(other), str(run_dir), title))
    return render(f"Evaluation: {run_dir}", [run], comparisons, title="trlvr evaluation report")


def write_report(run_dir: str | Path, out_path: str | Path | None = None, compare_dirs=(), **kw) -> Path:
    import matplotlib

    matplotlib.use("Agg")

    out_path = Path(out_path) if out_path else Path(run_dir) / "report.html"
    real = check_report_path(
        out_path, "--out"
    )  # checked (where the write lands) before anything is read or written
    with report_lock(real):  # refused at once while an evaluation writes that folder
        html = build_report(run_dir, list(compare_dirs), **kw)
        write_file(real, html)
    return out_path

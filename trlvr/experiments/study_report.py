"""`trlvr study report DIR`: one table, one figure and report.html over every variant of a study.

    DIR/report/table.md      each variant's metrics (mean over seeds [95% CI, two-level bootstrap over
                             seeds and problems]), paired differences against each variant's baseline,
                             the selected checkpoint steps and the stage timings
    DIR/report/summary.json  the same numbers
    DIR/report/figure.png    every variant side by side per metric, grouped by world
    DIR/report/report.html   the arms side by side in every plot, the settings as a table, the training
                             curves and the loophole-detector metrics over steps, the paired tables

One report path serves one run or many: a variant's numbers and its paired differences are those of
`trlvr.experiments.multi_report` (a `Run` per variant: one evaluation, or its seeds as a group), and
report.html is that module's page. A variant with one finished seed gets CIs over problems only
(marked "1 seed"); one without any is listed as missing. Registered per-sample metrics
(`trlvr.eval.sample_metrics`; the toy world registers its own) get a column, a paired difference
and a panel, with no code here that names them. A variant whose evaluation ran the `junior` protocol
adds a "junior (floor)" row (the junior alone, in the solo column; a dashed line in the figure).
`trlvr demo` is this report over the shipped demo study (trlvr/studies/demo.yaml).
What this file does not know: how runs were trained or evaluated; it reads their files.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from trlvr import artifacts, rundir
from trlvr.data.jsonl import read_jsonl
from trlvr.errors import UserError
from trlvr.eval import sample_metrics
from trlvr.eval.comparable import warning_text
from trlvr.eval.format import diff_text, entry_text, scale, unit
from trlvr.eval.groups import seed_dirs
from trlvr.eval.report import _png
from trlvr.experiments import multi_report
from trlvr.experiments.curves import Curve, plot_curves
from trlvr.experiments.multi_report import Page, write_multi_report
from trlvr.experiments.selection import SELECTED_FILE
from trlvr.experiments.study import (
    TIMINGS_FILE,
    eval_group,
    read_claim,
    refuse_another_study,
    stage_state,
    train_dir,
    units,
)
from trlvr.experiments.study_spec import Study
from trlvr.rundir import EVALUATION_RESULTS, METRICS_FILE, SELECTION_ARTIFACT

# the evaluation's own metrics; every registered per-sample metric (trlvr.eval.sample_metrics, e.g. one
# of the toy world's) follows in each list (`columns`, `diff_columns`, `figure_panels`)
COLUMNS = [
    ("solo/pass@1", "solo acc (%)"),
    ("handoff/pass@1", "handoff acc (%)"),
    ("handoff_ratio/pass@1", "handoff / solo"),
    ("legibility/junior_ce", "junior CE (nats)"),
    ("legibility/junior_bpb", "junior bits/byte"),
    ("drift/kl", "drift KL (nats)"),
]
DIFF_COLUMNS = ["handoff/pass@1", "solo/pass@1", "legibility/junior_ce", "legibility/junior_bpb"]
FIGURE_PANELS = [
    ("handoff/pass@1", "step-handoff accuracy (%)"),
    ("solo/pass@1", "solo accuracy (%)"),
    ("legibility/junior_ce", "junior CE on senior CoT (nats)"),
]
FLOOR = "junior/pass@1"  # the junior alone (suite entry `junior`): the floor a senior is measured against
# loophole-detector metrics in a run's metrics.jsonl (trlvr.training): key prefixes plotted over steps
DETECTOR_PREFIXES = ("tandem/loophole/",)  # trlvr.training.console.LOOPHOLE_PREFIX

# the heading of the summary's machine-specific part (stage seconds): what follows it is not a result
TIMINGS_HEADING = "Median stage time per run (s; resumed stages left out):"


def result_tables(text: str) -> str:
    """The Markdown tables of a study report's `text` before its stage timings (seconds differ by machine),
    one blank line between two tables so that each renders as its own; "" when there is none."""
    out, gap = [], False
    for line in text.split(TIMINGS_HEADING)[0].splitlines():
        if line.startswith("|"):
            out.append(("\n" if gap and out else "") + line.rstrip() + "\n")
            gap = False
        else:
            gap = True
    return "".join(out)


def columns() -> list[tuple[str, str]]:
    return [*COLUMNS, *((m.name, m.title) for m in sample_metrics.registered())]


def diff_columns() -> list[str]:
    return [*DIFF_COLUMNS, *(m.name for m in sample_metrics.registered())]


def figure_panels() -> list[tuple[str, str]]:
    return [*FIGURE_PANELS, *((m.name, m.title) for m in sample_metrics.registered())]


def all_zero(data: dict) -> list[str]:
    """The registered metrics this report leaves out: 0 in every finished evaluation (`all_zero`)."""
    return sample_metrics.all_zero([r["metrics"] for r in data["rows"].values()])


def finished_seeds(study: Study, out: Path, variant: str) -> dict[int, Path]:
    """{seed: eval dir} of the variant's finished evaluations of the study's seeds, under the study's
    current settings (an evaluation recorded under other settings, not yet redone, is left out, and so is
    one torn: `trlvr.artifacts.is_complete` of `trlvr.rundir.EVALUATION_RESULTS`)."""
    current = {u[-1].seed for u in units(study, out, [(variant, None)]) if stage_state(out, u[-1]) != "stale"}
    return {
        s: d
        for s, d in seed_dirs(eval_group(out, variant), list(study.seeds)).items()
        if s in current and artifacts.is_complete(d, EVALUATION_RESULTS)
    }


def _run(study: Study, out: Path, variant: str, seeds: list[int]) -> multi_report.Run:
    """The variant's evaluations of `seeds` as one report column: a seed group (>= 2 seeds) or one run."""
    settings = study.evaluation_of(variant)  # a registered metric's setting, e.g. jargon_regex
    if len(seeds) >= 2:
        return multi_report.Run(eval_group(out, variant), label=variant, seeds=seeds, settings=settings)
    return multi_report.Run(finished_seeds(study, out, variant)[seeds[0]], label=variant, settings=settings)


def variant_metrics(study: Study, out: Path, variant: str) -> dict:
    """{"seeds", "metrics": {name: {value, ci_low, ci_high[, per_seed]}}} of a variant's finished seeds
    (registered per-sample metrics included: `multi_report.Run`)."""
    seeds = sorted(finished_seeds(study, out, variant))
    return {"seeds": seeds, "metrics": _run(study, out, variant, seeds).metrics if seeds else {}}


def paired(study: Study, out: Path, baseline: str, variant: str, allow_mismatch: bool = False) -> dict:
    """Paired variant - baseline on the seeds both finished: two-level bootstrap (>= 2 seeds) or by problem
    (1); only evaluations made alike (`trlvr.eval.comparable`; allowed: the differences in "mismatch")."""
    seeds = sorted(set(finished_seeds(study, out, baseline)) & set(finished_seeds(study, out, variant)))
    if not seeds:
        return {"seeds": [], "metrics": {}}
    cmp = multi_report.paired(
        _run(study, out, baseline, seeds), _run(study, out, variant, seeds), allow_mismatch
    )
    return {"seeds": seeds, "metrics": cmp["macro"], "mismatch": cmp["mismatch"]}


def selected_steps(study: Study, out: Path) -> dict[str, dict[int, int]]:
    res = {}
    for v in study.variants:
        steps = {}
        for s in study.seeds:
            run = train_dir(out, v, s)
            if artifacts.is_complete(run, SELECTION_ARTIFACT):  # a torn selected.json is no selection
                step = json.loads((run / SELECTED_FILE).read_text()).get("step")
                if isinstance(step, int):
                    steps[s] = step
        res[v] = steps
    return res


def detector_curves(study: Study, out: Path) -> dict[str, dict[str, list]]:
    """{metric: {variant: [Curve per seed]}} for every detector key a run's metrics.jsonl logged."""
    res: dict[str, dict[str, list]] = {}
    for v in study.variants:
        for s in study.seeds:
            path = train_dir(out, v, s) / METRICS_FILE
            if not path.is_file():
                continue
            rows = [r for r in read_jsonl(path, tolerate_torn_tail=True) if isinstance(r.get("step"), int)]
            keys = sorted({k for r in rows for k in r if k.startswith(DETECTOR_PREFIXES)})
            for k in keys:
                pts = [(r["step"], float(r[k])) for r in rows if isinstance(r.get(k), int | float)]
                if pts:
                    steps, vals = zip(*pts, strict=True)
                    res.setdefault(k, {}).setdefault(v, []).append(Curve(np.array(steps), np.array(vals)))
    return res


def stage_seconds(out: Path) -> dict[str, dict[str, float]]:
    """{variant: {stage: median seconds}} from DIR/timings.jsonl (runs that resumed are left out)."""
    path = Path(out) / TIMINGS_FILE
    if not path.is_file():
        return {}
    acc: dict[str, dict[str, list[float]]] = {}
    for r in read_jsonl(path, tolerate_torn_tail=True):
        if not r.get("resumed"):
            acc.setdefault(r["variant"], {}).setdefault(r["stage"], []).append(float(r["seconds"]))
    return {v: {st: float(np.median(x)) for st, x in d.items()} for v, d in acc.items()}


def settings_rows(study: Study, out: Path) -> list[tuple[str, str]]:
    """The study's settings as (name, value) rows: what a reader needs to know, not a dict dump."""
    claim = read_claim(out)
    commits = ", ".join(
        f"{str(r.get('commit'))[:10]}{' (dirty)' if r.get('dirty') else ''}" for r in claim.get("runs", [])
    )
    sel, ev = study.selection, study.evaluation
    rows = [
        ("study", f"{study.name} ({claim.get('file')}, sha256 {study.sha256[:12]})"),
        ("code commit", commits),
        ("seeds", ", ".join(map(str, study.seeds))),
        (
            "selection",
            (
                f"{sel['metric']} on {sel['val']}, n = {sel.get('n', 4)}, budget "
                f"{sel.get('max_new_tokens', '–')} tokens"
            ),
        ),
        (
            "evaluation",
            f"{ev['data']}: {', '.join(ev.get('suite', ['full suite']))}; n = {ev.get('n', 8)}, "
            f"k = {ev.get('k', '–')}, limit {ev.get('limit', 'all')}, budget "
            f"{ev.get('max_new_tokens', '–')} tokens",
        ),
    ]
    for w, spec in study.worlds.items():
        rows.append((f"world {w}", ", ".join(f"{k} {v}" for k, v in spec.items()) or "defaults"))
    for v in study.variants.values():
        over = ", ".join(f"{k} {val}" for k, val in v.overrides.items())
        what = (
            f"{v.config}: {over}"
            if v.trained
            else "not trained: its base senior as it is" + (f" ({over})" if over else "")
        )
        where = f"; world {v.world}" if v.world else ""
        base = f"; vs {v.baseline}" if v.baseline else ""
        own = (
            "; evaluation " + ", ".join(f"{k} {val}" for k, val in v.evaluation.items())
            if v.evaluation
            else ""
        )
        rows.append((f"variant {v.label}", f"{what}{where}{own}{base}"))
    return rows


def collect(study: Study, out: Path, allow_mismatch: bool = False) -> dict:
    rows = {v: variant_metrics(study, out, v) for v in study.variants}
    pairs = {
        v.name: {"baseline": v.baseline, **paired(study, out, v.baseline, v.name, allow_mismatch)}
        for v in study.variants.values()
        if v.baseline
    }
    floor = {n: r["metrics"][FLOOR] for n, r in rows.items() if FLOOR in r["metrics"]}
    return {
        "study": study.name,
        "sha256": study.sha256,
        "rows": rows,
        "paired": pairs,
        "junior_floor": floor,
        "selected_steps": selected_steps(study, out),
        "stage_seconds": stage_seconds(out),
    }


def _floor_label(study: Study, data: dict, name: str) -> str:
    """ "junior (floor)", or with the variant whose evaluation measured it when several did."""
    return (
        "junior (floor)"
        if len(data["junior_floor"]) == 1
        else f"junior (floor, {study.variants[name].label})"
    )


def unmeasured(data: dict) -> set[str]:
    """The registered metrics no evaluation has (e.g. one that needs a setting the study does not give)."""
    return {m.name for m in sample_metrics.registered()} - {
        k for r in data["rows"].values() for k in r["metrics"]
    }


def markdown(study: Study, data: dict) -> str:
    zero = all_zero(data)
    skip = set(zero) | unmeasured(data)
    cols = [(k, t) for k, t in columns() if k not in skip]
    diffs = [k for k in diff_columns() if k not in skip]
    lines = [
        f"# Study {study.name}",
        "",
        (
            "Each cell: mean over seeds [95% CI, two-level bootstrap over seeds, then problems]; a variant "
            "with one"
        ),
        "finished seed: [95% CI over problems]. Accuracies and rates in %.",
        "",
        "| variant | seeds | " + " | ".join(t for _, t in cols) + " |",
        "|---|---|" + "---|" * len(cols),
    ]
    for name, v in study.variants.items():
        r = data["rows"][name]
        cells = " | ".join(entry_text(r["metrics"].get(k), k) for k, _ in cols)
        lines.append(f"| {v.label} | {len(r['seeds']) or 'none'} | {cells} |")
    for name, e in data["junior_floor"].items():  # the junior alone, in the solo column
        cells = " | ".join(entry_text(e if k == "solo/pass@1" else None, k) for k, _ in cols)
        lines.append(f"| {_floor_label(study, data, name)} | {len(data['rows'][name]['seeds'])} | {cells} |")
    if data["paired"]:
        lines += [
            "",
            "Paired differences, variant - its baseline (by seed and problem; * = CI excludes 0):",
            "",
            "| variant | baseline | seeds | "
            + " | ".join(f"Δ {k}{unit(k) or ' (nats)'}" for k in diffs)
            + " |",
            "|---|---|---|" + "---|" * len(diffs),
        ]
        for name, p in data["paired"].items():
            cells = []
            for k in diffs:
                e = p["metrics"].get(k)
                cells.append(
                    "–" if e is None else diff_text(e, k, digits=1) + (" *" if e["excludes_zero"] else "")
                )
            lines.append(
                f"| {study.variants[name].label} | {study.variants[p['baseline']].label} | "
                f"{len(p['seeds']) or 'none'} | " + " | ".join(cells) + " |"
            )
        lines += [
            f"\nWARNING, {study.variants[n].label}: {warning_text(p['mismatch'])}"
            for n, p in data["paired"].items()
            if p.get("mismatch")
        ]
    if zero:
        titles = dict(columns())
        lines += [
            "",
            "Left out, 0 in every evaluation (CIs included): " + ", ".join(titles[k] for k in zero) + ".",
        ]
    steps = data["selected_steps"]
    lines += ["", "Selected checkpoint step per seed (" + ", ".join(map(str, study.seeds)) + "):", ""]
    lines += [
        f"- {study.variants[v].label}: " + ", ".join(str(s.get(seed, "–")) for seed in study.seeds)
        for v, s in steps.items()
        if study.variants[v].trained
    ]
    secs = data["stage_seconds"]
    if secs:
        lines += ["", TIMINGS_HEADING, "", "| variant | train | select | eval |", "|---|---|---|---|"]
        for v in study.variants:
            d = secs.get(v, {})
            lines.append(
                f"| {study.variants[v].label} | "
                + " | ".join(f"{d[s]:.0f}" if s in d else "–" for s in ("train", "select", "eval"))
                + " |"
            )
    return "\n".join(lines) + "\n"


def _kind(study: Study, name: str) -> str:
    v = study.variants[name]
    return name.removesuffix(f"-{v.world}") if v.world else name


def figure(study: Study, data: dict, path: Path) -> Path:
    """Every variant side by side per metric: bars grouped by world, one colour per variant kind."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    worlds = list(dict.fromkeys(v.world for v in study.variants.values()))
    kinds = list(dict.fromkeys(_kind(study, n) for n in study.variants))
    colours = dict(zip(kinds, plt.rcParams["axes.prop_cycle"].by_key()["color"] * 4, strict=False))
    zero = all_zero(data)
    panels = [
        (k, t)
        for k, t in figure_panels()
        if k not in zero and any(k in r["metrics"] for r in data["rows"].values())
    ]
    if not panels:
        raise UserError(f"study {study.name}: no finished evaluation to plot yet")
    fig, axes = plt.subplots(1, len(panels), figsize=(3.6 * len(panels), 3.4), squeeze=False)
    width = 0.8 / max(len(kinds), 1)
    for ax, (key, title) in zip(axes[0], panels, strict=True):
        s = scale(key)
        for wi, w in enumerate(worlds):
            for ki, kind in enumerate(kinds):
                name = next(
                    (n for n, v in study.variants.items() if v.world == w and _kind(study, n) == kind), None
                )
                e = data["rows"][name]["metrics"].get(key) if name else None
                if e is None:
                    continue
                x = wi + (ki - (len(kinds) - 1) / 2) * width
                ax.bar(
                    x,
                    e["value"] * s,
                    width,
                    color=colours[kind],
                    yerr=[[(e["value"] - e["ci_low"]) * s], [(e["ci_high"] - e["value"]) * s]],
                    capsize=2,
                )
        if key == "solo/pass@1":  # the junior alone: a dashed line across its world's bars
            for name, e in data["junior_floor"].items():
                wi = worlds.index(study.variants[name].world)
                ax.hlines(
                    e["value"] * s,
                    wi - 0.45,
                    wi + 0.45,
                    colors="#555555",
                    linestyles="--",
                    label=_floor_label(study, data, name),
                )
            if data["junior_floor"]:
                ax.legend(fontsize=7, loc="lower right")
        ax.set_xticks(range(len(worlds)), [str(w) if w else "" for w in worlds])
        ax.set_title(title, fontsize=9)
        ax.grid(axis="y", alpha=0.3)
    from matplotlib.patches import Patch

    fig.legend(
        [Patch(color=colours[k]) for k in kinds],
        kinds,
        loc="lower center",
        ncol=min(len(kinds), 6),
        fontsize=8,
        frameon=False,
    )
    seeds = sorted({len(r["seeds"]) for r in data["rows"].values() if r["seeds"]})
    how = (
        "two-level bootstrap over seeds and problems"
        if seeds and seeds[0] >= 2
        else "bootstrap over problems"
        if seeds == [1]
        else "two-level bootstrap; 1-seed variants: over problems"
    )
    fig.suptitle(
        f"{study.name}: mean over seeds ({', '.join(map(str, seeds))} seeds), 95% CI ({how})", fontsize=10
    )
    fig.tight_layout(rect=(0, 0.08, 1, 1))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def detector_plots(curves: dict[str, dict[str, list]]) -> list[str]:
    import matplotlib.pyplot as plt

    out = []
    for key, groups in curves.items():
        fig, ax = plt.subplots(figsize=(4.6, 3.2))
        plot_curves(groups, key, ax)
        ax.legend(fontsize=6)
        ax.grid(alpha=0.3)
        out.append(_png(fig))
    return out


def write_study_report(study: Study, out: Path, allow_mismatch: bool = False) -> list[Path]:
    """allow_mismatch: pair variants evaluated under differing settings, with a warning (else refused)."""
    out = Path(out)
    refuse_another_study(study, out, read_claim(out))
    data = collect(study, out, allow_mismatch)
    rep = out / "report"
    rep.mkdir(parents=True, exist_ok=True)
    written = [rep / "table.md", rep / "summary.json"]
    rundir.write_file(written[0], markdown(study, data))
    rundir.write_file(written[1], json.dumps(data, indent=1, default=str))
    written.append(figure(study, data, rep / "figure.png"))
    done = [n for n, r in data["rows"].items() if r["seeds"]]
    if len(done) >= 2:
        runs = {
            n: (
                eval_group(out, n)
                if len(data["rows"][n]["seeds"]) >= 2
                else finished_seeds(study, out, n)[data["rows"][n]["seeds"][0]]
            )
            for n in done
        }
        grouped = {n: len(data["rows"][n]["seeds"]) >= 2 for n in runs}
        pairs = [
            (runs[v.baseline], runs[v.name])
            for v in study.variants.values()
            if v.baseline in runs and v.name in runs and grouped[v.baseline] == grouped[v.name]
        ]
        page = Page(
            title=f"trlvr study {study.name}",
            settings=tuple(settings_rows(study, out)),
            extra_plots=tuple(detector_plots(detector_curves(study, out))),
            extra_title="Loophole detector (training, per step)",
        )
        written.append(
            write_multi_report(
                list(runs.values()),
                rep / "report.html",
                labels=[study.variants[n].label for n in runs],
                pairs=pairs,
                page=page,
                allow_mismatch=allow_mismatch,
                group_seeds={runs[n]: data["rows"][n]["seeds"] for n in runs},
                metric_settings={runs[n]: study.evaluation_of(n) for n in runs},
            )
        )
    return written

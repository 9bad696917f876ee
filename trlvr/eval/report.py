"""Self-contained HTML report of an evaluation directory (opens offline: no external URLs).

Sections: metrics table with 95% CIs; pass@k solo vs handoff (and junior); dose curve; legibility
and drift bars; comparison tables (paired bootstrap, when given); a rollout viewer where senior
and junior tokens have two colours and the background shades by the junior's surprisal
(-log p_junior of the token). Plots are matplotlib (Agg) PNGs embedded as base64.

All model text goes through html.escape: model output is untrusted.
"""

from __future__ import annotations

import base64
import html
import io
from pathlib import Path

from trlvr.eval.runner import load_json, load_samples

SENIOR_COLOUR, JUNIOR_COLOUR = "#1f5fbf", "#c2410c"
REQUIRED_RESULT_FIELDS = ("config", "benchmarks", "macro")


def load_results(run_dir: str | Path) -> dict:
    """results.json of an evaluation directory, with its fields checked."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise FileNotFoundError(f"evaluation directory not found: {run_dir}")
    path = run_dir / "results.json"
    res = load_json(path, "results file")
    for key in REQUIRED_RESULT_FIELDS:
        if key not in res:
            raise ValueError(f"{path} lacks field {key!r}")
    if "metrics" not in res["macro"]:
        raise ValueError(f"{path} lacks field 'macro.metrics'")
    for bench, b in res["benchmarks"].items():
        if "metrics" not in b:
            raise ValueError(f"{path} lacks field 'benchmarks.{bench}.metrics'")
        for name, e in b["metrics"].items():
            for f in ("value", "ci_low", "ci_high"):
                if f not in e:
                    raise ValueError(f"{path}: metric {name!r} of benchmark {bench!r} lacks field {f!r}")
    return res


def load_table(run_dir: str | Path) -> dict:
    """per_problem.json of an evaluation directory."""
    path = Path(run_dir) / "per_problem.json"
    table = load_json(path, "per-problem metrics file")
    if not isinstance(table, dict) or not all(isinstance(v, dict) for v in table.values()):
        raise ValueError(f"{path} must map benchmark -> metric -> problem id -> value")
    return table


def _png(fig) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
    import matplotlib.pyplot as plt

    plt.close(fig)
    return f'<img alt="plot" src="data:image/png;base64,{base64.b64encode(buf.getvalue()).decode()}">'


def _err(m: dict, name: str, scale: float = 1.0):
    e = m[name]
    return e["value"] * scale, [[(e["value"] - e["ci_low"]) * scale], [(e["ci_high"] - e["value"]) * scale]]


def _pass_at_k_plot(metrics: dict, title: str) -> str | None:
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(4.6, 3.2))
    drawn = False
    for proto, colour in (("solo", SENIOR_COLOUR), ("handoff", "#7c3aed"), ("junior", JUNIOR_COLOUR)):
        names = sorted(
            (n for n in metrics if n.startswith(f"{proto}/pass@")), key=lambda n: int(n.split("@")[1])
        )
        if not names:
            continue
        ks = [int(n.split("@")[1]) for n in names]
        vals = [metrics[n]["value"] * 100 for n in names]
        lo = [(metrics[n]["value"] - metrics[n]["ci_low"]) * 100 for n in names]
        hi = [(metrics[n]["ci_high"] - metrics[n]["value"]) * 100 for n in names]
        ax.errorbar(ks, vals, yerr=[lo, hi], marker="o", capsize=3, label=proto, color=colour)
        drawn = True
    if not drawn:
        plt.close(fig)
        return None
    ax.set_xscale("log", base=2)
    ax.set_xlabel("k")
    ax.set_ylabel("pass@k (%)")
    ax.set_title(title)
    ax.legend()
    ax.grid(alpha=0.3)
    return _png(fig)


def _dose_plot(metrics: dict, title: str) -> str | None:
    import matplotlib.pyplot as plt

    points = []
    if "solo/pass@1" in metrics:
        points.append((0.0, "solo/pass@1"))
    points += sorted(
        (float(n.split("/")[0].removeprefix("dose-")), n)
        for n in metrics
        if n.startswith("dose-") and n.endswith("/pass@1")
    )
    if "junior/pass@1" in metrics:
        points.append((1.0, "junior/pass@1"))
    if not any(n.startswith("dose-") for _, n in points):
        return None
    fig, ax = plt.subplots(figsize=(4.6, 3.2))
    for x, n in points:
        y, err = _err(metrics, n, 100)
        ax.errorbar([x], [y], yerr=err, marker="o", capsize=3, color="#0f766e")
    ax.plot(
        [x for x, _ in points], [metrics[n]["value"] * 100 for _, n in points], color="#0f766e", alpha=0.6
    )
    ax.set_xlabel("junior share of words (0 = senior solo, 1 = junior solo)")
    ax.set_ylabel("pass@1 (%)")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    return _png(fig)


def _bars_plot(res: dict, metric: str, ylabel: str, title: str) -> str | None:
    import matplotlib.pyplot as plt

    names, vals, errs = [], [], [[], []]
    entries = [(b, r["metrics"]) for b, r in res["benchmarks"].items()] + [("macro", res["macro"]["metrics"])]
    for name, m in entries:
        if metric in m:
            v, e = _err(m, metric)
            names.append(name)
            vals.append(v)
            errs[0] += e[0]
            errs[1] += e[1]
    if not names:
        return None
    fig, ax = plt.subplots(figsize=(4.6, 3.2))
    ax.bar(names, vals, yerr=errs, capsize=4, color="#64748b")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.tick_params(axis="x", rotation=30)
    return _png(fig)


def _fmt(e: dict, pct: bool) -> str:
    s = 100.0 if pct else 1.0
    return f"{e['value'] * s:.2f} [{e['ci_low'] * s:.2f}, {e['ci_high'] * s:.2f}]"


def _is_pct(name: str) -> bool:
    return "pass@" in name or name.endswith(("senior_share", "truncated", "round_capped"))


def metrics_table(res: dict) -> str:
    cols = list(res["benchmarks"]) + ["macro"]
    per = {b: r["metrics"] for b, r in res["benchmarks"].items()} | {"macro": res["macro"]["metrics"]}
    names = list(dict.fromkeys(n for m in per.values() for n in m))
    head = "".join(f"<th>{html.escape(c)}</th>" for c in cols)
    body = []
    for n in names:
        cells = "".join(f"<td>{_fmt(per[c][n], _is_pct(n)) if n in per[c] else ''}</td>" for c in cols)
        unit = " (%)" if _is_pct(n) else ""
        body.append(f"<tr><th>{html.escape(n)}{unit}</th>{cells}</tr>")
    return f"<table><tr><th>metric</th>{head}</tr>{''.join(body)}</table>"


def comparison_table(cmp: dict, label_a: str, label_b: str) -> str:
    """Rows: metric x (benchmark | macro); columns A, B, B - A, 95% CI, p, CI excludes 0."""
    rows = []
    scopes = [("macro", cmp["macro"])] + list(cmp["benchmarks"].items())
    for scope, metrics in scopes:
        for name, e in metrics.items():
            s = 100.0 if _is_pct(name) else 1.0
            flag = "yes" if e["excludes_zero"] else ""
            rows.append(
                f"<tr><td>{html.escape(scope)}</td><td>{html.escape(name)}</td><td>{e['a'] * s:.2f}</td>"
                f"<td>{e['b'] * s:.2f}</td><td>{e['diff'] * s:+.2f}</td>"
                f"<td>[{e['ci_low'] * s:+.2f}, {e['ci_high'] * s:+.2f}]</td><td>{e['p_value']:.3f}</td>"
                f"<td>{flag}</td><td>{e['num_problems']}</td></tr>"
            )
    head = (
        f"<tr><th>scope</th><th>metric</th><th>A: {html.escape(label_a)}</th><th>B: {html.escape(label_b)}</th>"
        "<th>B &minus; A</th><th>95% CI</th><th>p</th><th>CI excludes 0</th><th>problems</th></tr>"
    )
    return f"<table class='cmp'>{head}{''.join(rows)}</table>"


def _surprisal_bg(lp: float | None) -> str:
    if lp is None:
        return "transparent"
    alpha = min(max(-lp, 0.0) / 8.0, 1.0) * 0.75  # 8 nats or more = full shade
    return f"rgba(250,204,21,{alpha:.2f})"


def render_sample(row: dict) -> str:
    """One completion as spans: colour = author, background = junior surprisal (when known)."""
    text, lens = row.get("text", ""), row.get("piece_lens")
    authors, jlp = row.get("authors", ""), row.get("junior_logprobs")
    if not lens or len(lens) != len(authors):
        return f"<pre class='rollout'>{html.escape(text)}</pre>"
    spans, pos = [], 0
    for t, n in enumerate(lens):
        piece = text[pos : pos + n]
        pos += n
        who = "s" if authors[t] == "1" else "j"
        lp = jlp[t] if jlp is not None and t < len(jlp) else None
        tip = f"{'senior' if who == 's' else 'junior'}" + (
            "" if lp is None else f", surprisal {-lp:.2f} nats"
        )
        spans.append(
            f"<span class='{who}' style='background:{_surprisal_bg(lp)}' title='{tip}'>{html.escape(piece)}</span>"
        )
    return f"<pre class='rollout'>{''.join(spans)}{html.escape(text[pos:])}</pre>"


def rollout_viewer(rows: list[dict], max_problems: int = 12, samples_per_protocol: int = 1) -> str:
    by_problem: dict[tuple[str, str], list[dict]] = {}
    for r in rows:
        by_problem.setdefault((r["benchmark"], str(r["problem_id"])), []).append(r)
    blocks = []
    for (bench, pid), rs in list(by_problem.items())[:max_problems]:
        prompt = next((r.get("prompt") for r in rs if r.get("prompt")), None)
        inner = [f"<div class='prompt'><b>prompt</b><pre>{html.escape(prompt)}</pre></div>"] if prompt else []
        for r in sorted(rs, key=lambda r: (r["protocol"], r["sample_idx"])):
            if r["sample_idx"] >= samples_per_protocol:
                continue
            extra = "".join(
                f" &middot; {k} {r[k]:.3f}" for k in ("legibility", "drift") if isinstance(r.get(k), float)
            )
            meta = (
                f"{html.escape(r['protocol'])} #{r['sample_idx']} &middot; reward {r['reward']:g} &middot; "
                f"parsed {html.escape(str(r.get('parsed_answer')))} (gold {html.escape(str(r.get('answer')))})"
                f" &middot; {r.get('num_tokens', '?')} tokens, senior share {float(r.get('senior_share', 0)):.2f}"
                f" &middot; finish {html.escape(str(r['finish_reason']))}{extra}"
            )
            inner.append(f"<div class='sample'><div class='meta'>{meta}</div>{render_sample(r)}</div>")
        blocks.append(
            f"<details class='problem'><summary>{html.escape(bench)} / {html.escape(pid)}</summary>{''.join(inner)}</details>"
        )
    legend = (
        f"<p class='legend'><span class='s'>senior token</span> <span class='j'>junior token</span> "
        f"<span style='background:{_surprisal_bg(-8)}'>high junior surprisal</span> "
        f"<span style='background:{_surprisal_bg(-2)}'>low</span></p>"
    )
    return f"<div id='viewer'>{legend}{''.join(blocks) or '<p>no samples</p>'}</div>"


CSS = f"""
body {{ font-family: system-ui, sans-serif; margin: 1.5em; color: #111; }}
table {{ border-collapse: collapse; margin: 0.5em 0 1.5em; font-size: 13px; }}
td, th {{ border: 1px solid #ccc; padding: 3px 8px; text-align: right; }}
th {{ background: #f3f4f6; }}
.plots img {{ margin: 4px; border: 1px solid #eee; }}
pre.rollout, .prompt pre {{ white-space: pre-wrap; font-size: 13px; background: #fafafa; padding: 6px; }}
span.s {{ color: {SENIOR_COLOUR}; }} span.j {{ color: {JUNIOR_COLOUR}; font-weight: 600; }}
.meta {{ font-size: 12px; color: #444; }} details.problem {{ margin: 6px 0; }}
summary {{ cursor: pointer; font-weight: 600; }}
"""

# Inline JS (no network): expand / collapse all problems in the viewer.
JS = """
function setAll(open) { document.querySelectorAll('details.problem').forEach(d => { d.open = open; }); }
window.addEventListener('DOMContentLoaded', () => {
  const first = document.querySelector('details.problem');
  if (first) { first.open = true; }
  document.body.dataset.ready = '1';
});
"""


def build_report(run_dir: str | Path, compare_dirs: list[str | Path] = (), *, max_problems: int = 12) -> str:
    """HTML of the report for `run_dir`, with paired comparisons against each of `compare_dirs`."""
    from trlvr.eval.aggregate import compare_tables

    run_dir = Path(run_dir)
    res = load_results(run_dir)
    cfg = res["config"]
    macro = res["macro"]["metrics"]
    plots = [
        _pass_at_k_plot(macro, "macro pass@k"),
        _dose_plot(macro, "dose: pass@1 vs junior share"),
        _bars_plot(
            res, "legibility/junior_ce", "junior CE (nats/token)", "legibility (lower = more legible)"
        ),
        _bars_plot(res, "drift/kl", "KL(senior || junior) (nats/token)", "drift"),
    ]
    for bench, r in res["benchmarks"].items():
        if len(res["benchmarks"]) > 1:
            plots.append(_pass_at_k_plot(r["metrics"], f"{bench} pass@k"))
    parts = [
        f"<h1>Evaluation: {html.escape(str(run_dir))}</h1>",
        "<p>" + html.escape(
            f"models {cfg.get('models', {})}; n = {cfg.get('n')}, ks = {cfg.get('ks')}, decoding "
            f"{cfg.get('decoding')}, max_new_tokens {cfg.get('max_new_tokens')}, seed {cfg.get('seed')}"
        ) + "</p>",
        "<h2>Metrics (95% bootstrap CI over problems)</h2>",
        metrics_table(res),
        "<h2>Plots</h2><div class='plots'>" + "".join(p for p in plots if p) + "</div>",
    ]  # fmt: skip
    for other in compare_dirs:
        load_results(other)
        cmp = compare_tables(load_table(other), load_table(run_dir), seed=cfg.get("seed", 0))
        parts += [
            f"<h2>Comparison: B = this run vs A = {html.escape(str(other))} (paired bootstrap)</h2>",
            comparison_table(cmp, str(other), str(run_dir)),
        ]
    samples = run_dir / "samples.jsonl"
    rows = load_samples(samples) if samples.exists() else []
    parts += [
        "<h2>Rollouts</h2><p><button onclick='setAll(true)'>expand all</button> "
        "<button onclick='setAll(false)'>collapse all</button></p>",
        rollout_viewer(rows, max_problems=max_problems),
    ]
    return page("trlvr evaluation report", "".join(parts))


def page(title: str, body: str) -> str:
    return (
        f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
        f"<style>{CSS}</style><script>{JS}</script></head><body>{body}</body></html>"
    )


def write_report(run_dir: str | Path, out_path: str | Path | None = None, compare_dirs=(), **kw) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    out_path = Path(out_path) if out_path else Path(run_dir) / "report.html"
    out_path.parent.mkdir(parents=True, exist_ok=True)
    out_path.write_text(build_report(run_dir, list(compare_dirs), **kw), encoding="utf-8")
    return out_path

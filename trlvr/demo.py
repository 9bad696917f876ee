"""The embedded CPU demo is a study: trlvr/studies/demo.yaml, run by the study runner, then its report.

    trlvr demo --out runs/demo                  # one seed; resumes: finished stages are skipped
    trlvr demo --out runs/demo-seeds --seeds 0,1,2   # the seed study: across-seed CIs (two-level bootstrap)
    trlvr demo --out runs/demo --fresh          # start over (the earlier demo: runs/demo/replaced-<time>/)
    trlvr demo --out runs/demo-compact --jargon compact   # GSM8K-like spaceless jargon (retrained, +5 min)
    trlvr demo --out runs/demo-lora --lora      # LoRA seniors (rank 16, lr 2e-3: `LORA`), not full tuning

Each option is an override of the shipped study (`demo_study`); the study actually run is written to
DIR/demo.yaml, so `trlvr study run DIR/demo.yaml --out DIR` is the same run and `trlvr study report
DIR` the same report. Stages (trlvr.experiments.study; each skipped when done, resumed when cut):
    worlds/toy/                    the toy world (shipped checkpoints copied, card measured)
    train/<arm>/seed-<s>/          trlvr/configs/toy.yaml with --arm grpo|tandem, 200 training problems
                                   held out, 100 steps, a checkpoint every 50; the arms train side by side
                                   (`--jobs 2`, one thread each)
    (selection)                    every checkpoint on the held-out slice by handoff/pass@1
    eval/<variant>/seed-<s>/       the suite on the toy test split; `initial` (the untrained senior, with
                                   the junior alone as the floor) once
    report/                        table.md, figure.png, report.html, summary.json (trlvr study report),
                                   published as DIR/summary.md, DIR/summary.png and DIR/report.html

What this file does not know: how any stage works, or how a study runs (the CLI wires that).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import yaml

from trlvr import rundir
from trlvr.config import read_yaml
from trlvr.errors import UserError
from trlvr.experiments.study import STUDY_FILE, stale_stages, units, world_stages
from trlvr.experiments.study_spec import STUDIES_DIR

DEMO_STUDY = STUDIES_DIR / "demo.yaml"
DEMO_FILE = "demo.yaml"  # the study the demo ran, in its directory
OLD_DEMO_FILE = rundir.OLD_DEMO_FILE  # the record of a demo from before it was a study (another layout)
LORA = {"use_peft": True, "lora_r": 16, "learning_rate": 2e-3}  # ~10x the toy's full fine-tuning lr
KS = (1, 2, 4, 8)
# what the user reads, published from the study report (DIR/report/) under the demo's names
PUBLISHED = {"table.md": "summary.md", "figure.png": "summary.png", "report.html": "report.html"}


def demo_study(
    seeds: list[int] | None = None,
    steps: int | None = None,
    limit: int | None = None,
    n: int | None = None,
    jargon: str = "spaced",
    lora: bool = False,
) -> tuple[dict, list[str]]:
    """The shipped demo study with the options applied, and one line per option that changed it."""
    raw = read_yaml(DEMO_STUDY, "study")
    changed = []
    if seeds is not None:
        raw["seeds"] = list(seeds)
        changed.append(f"--seeds {','.join(map(str, seeds))}")
    if steps is not None:
        raw["train"]["max_steps"] = steps
        changed.append(f"--steps {steps}")
    if jargon != raw["worlds"]["toy"]["jargon"]:
        raw["worlds"]["toy"]["jargon"] = jargon
        changed.append(f"--jargon {jargon}")
    if lora:
        raw["train"] |= LORA
        changed.append("--lora")
    if limit is not None:
        raw["evaluation"]["limit"] = limit
        changed.append(f"--limit {limit}")
    if n is not None:
        raw["evaluation"] |= {"n": n, "k": [k for k in KS if k <= n]}
        changed.append(f"--n {n}")
    return raw, changed


def write_demo_study(path: Path, raw: dict, changed: list[str]) -> Path:
    """The study this demo runs (the shipped file with the options applied), as a YAML file at `path`."""
    how = ", ".join(changed) if changed else "no options"
    head = f"# written by `trlvr demo` ({how}) from the shipped study {DEMO_STUDY}\n"
    path = Path(path)
    path.write_text(head + yaml.safe_dump(raw, sort_keys=False))
    return path


def refuse_old_layout(out: Path) -> None:
    """A directory of the demo before it was a study (demo.json, train-<arm>/): refused, not mixed in."""
    if (Path(out) / OLD_DEMO_FILE).is_file() and not (Path(out) / STUDY_FILE).is_file():
        raise UserError(
            f"{out}: made by an earlier trlvr demo (demo.json, another layout); use another --out, "
            "or --fresh to set it aside and start over"
        )


def refuse_other_options(study, out: Path) -> None:
    """Refuse before any work when a world or training run in `out` was made with other options (it
    would be neither reused nor thrown away): one line naming each and what changed."""
    every = world_stages(study, out) + [st for u in units(study, out) for st in u]
    stale = stale_stages(out, every)
    if stale:
        raise UserError(
            f"{out}: this demo directory was made with other options ({' | '.join(stale)}); "
            "use another --out, or --fresh to start over"
        )


def publish(out: Path) -> list[Path]:
    """Copy the study report's table, figure and page to DIR/summary.md, summary.png, report.html."""
    out = Path(out)
    written = []
    for name, published in PUBLISHED.items():
        src = out / "report" / name
        if src.is_file():
            shutil.copyfile(src, out / published)
            written.append(out / published)
    return written

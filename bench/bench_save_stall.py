"""How long a checkpoint save's manifest blocks the training loop: hashed inside `on_save` (before issue 59's
fix, `ManifestCallback(background=False)`) against hashed in a background thread joined at the next step's end
(`ManifestCallback()`, the default), on a fake checkpoint of about 1 GiB.

    OMP_NUM_THREADS=1 PYTHONPATH=. .venv/bin/python bench/bench_save_stall.py [--gib 1] [--step-s 5] [--repeats 2]

The fake checkpoint: model.safetensors of `--gib` GiB random bytes (hashed), a DeepSpeed optimizer shard of
twice that (recorded by size), the small files. Files are written once, then read once so the page cache
holds them (as right after a real save). A "training step" is a CPU matmul loop of `--step-s` seconds.

Per arm and repeat it prints: blocked (the time the loop waits: on_save, plus the join at the next step's
end), and the next step's wall time against the same step run alone just before (a fixed amount of work:
next to the hashing thread it shares the CPU; on a loaded machine this difference is mostly noise); then
the two arms' median blocked times and their ratio, all from one run. A step shorter than the hash waits for the rest of the hash at its
end; `--step-s 0.01` shows that worst case (the blocked time is then the hash time less the save's own work).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

import torch

from trlvr.rundir import checkpoint_dir
from trlvr.training.manifest import ManifestCallback


def fake_checkpoint(root: Path, step: int, gib: float) -> Path:
    ckpt = checkpoint_dir(root, step)
    (ckpt / f"global_step{step}").mkdir(parents=True)
    block = os.urandom(1 << 24)  # 16 MiB, repeated
    for rel, n in (
        ("model.safetensors", gib),
        (f"global_step{step}/bf16_zero_pp_rank_0_mp_rank_00_optim_states.pt", 2 * gib),
    ):
        with open(ckpt / rel, "wb") as f:
            for _ in range(int(n * 64)):
                f.write(block)
    for name, text in (("config.json", "{}"), ("trainer_state.json", json.dumps({"global_step": step}))):
        (ckpt / name).write_text(text)
    for name in ("scheduler.pt", "rng_state_0.pth"):
        (ckpt / name).write_bytes(b"x" * 1024)
    for p in ckpt.rglob("*"):  # into the page cache, as just after the save wrote them
        if p.is_file():
            with open(p, "rb") as f:
                while f.read(1 << 24):
                    pass
    return ckpt


def step(iterations: int) -> float:
    """A training step's stand-in: a fixed number of matmuls (the same work whatever shares the CPU); its wall time."""
    t0, a = time.perf_counter(), torch.randn(512, 512)
    for _ in range(iterations):
        a = torch.tanh(a @ a)
    return time.perf_counter() - t0


def calibrate(seconds: float) -> int:
    """The iterations of `step` that take about `seconds` alone."""
    took = step(20)
    return max(1, round(20 * seconds / took))


def blocked(callback: ManifestCallback, root: Path, step_no: int, iterations: int) -> tuple[float, float]:
    """(seconds the loop is blocked by the save's manifest, the next step's wall time)."""
    args, state = (
        SimpleNamespace(output_dir=str(root)),
        SimpleNamespace(global_step=step_no, is_world_process_zero=True),
    )
    t0 = time.perf_counter()
    callback.on_save(args, state, None)
    on_save = time.perf_counter() - t0
    took = step(iterations)
    t0 = time.perf_counter()
    callback.on_step_end(args, state, None)
    return on_save + time.perf_counter() - t0, took


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gib", type=float, default=1.0)
    ap.add_argument("--step-s", type=float, default=5.0)
    ap.add_argument("--repeats", type=int, default=2)
    a = ap.parse_args()
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory(prefix="trlvr-save-stall-") as tmp:
        root = Path(tmp)
        iterations = calibrate(a.step_s)
        rows = {"inline": [], "background": []}
        for r in range(a.repeats):
            for arm, background in (("inline", False), ("background", True)):
                n = 2 * r + (arm == "background") + 1
                ckpt = fake_checkpoint(root, n, a.gib)
                alone = step(iterations)  # the same step just before, without a save beside it
                b, took = blocked(ManifestCallback(background=background), root, n, iterations)
                rows[arm].append((b, took - alone))
                print(
                    f"{arm:10s} repeat {r}: blocked {b:6.2f} s; the next step {took:5.2f} s against {alone:5.2f} s "
                    f"alone ({took - alone:+.2f} s)"
                )
                assert (ckpt / "trlvr_manifest.json").is_file()
                for p in sorted(ckpt.rglob("*"), reverse=True):
                    p.rmdir() if p.is_dir() else p.unlink()
        inline = statistics.median(b for b, _ in rows["inline"])
        background = statistics.median(b for b, _ in rows["background"])
        slower = statistics.median(d for _, d in rows["background"])
        print(
            f"median blocked per save: inline {inline:.2f} s ({inline / a.gib:.2f} s per hashed GiB), background "
            f"{background:.3f} s, ratio {inline / max(background, 1e-9):.0f}x; the step beside the hashing thread "
            f"{slower:+.2f} s ({a.gib:g} GiB hashed, {2 * a.gib:g} GiB by size, a step of about {a.step_s:g} s)"
        )


if __name__ == "__main__":
    main()

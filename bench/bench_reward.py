"""Throughput and adversarial latency of `trlvr.rewards.math_reward`.

    .venv/bin/python bench/bench_reward.py

(1) samples/s on ordinary model outputs in GRPO batches (16 prompts x 8 rollouts; integer,
fraction, decimal, radical, interval, unit and box-less answers, right and wrong), target
>= 500/s on 2 cores; (2) wall time of one
batch of 128 where a quarter are adversarial (power towers, nested factorials, deep
brackets, megabyte strings, code-injection text, and the shapes that used to slip past the
screen: ``9**9**9`` unboxed, ``(10^{6})!``, ``999999^{999999}``, 25-40 nested parentheses),
target <= 2 x timeout, in the strict (default) and the lenient mode. Also reports (3) the same
batch with the pre-screen off, where only the watchdog bounds each sample: its cost is about
ceil(n_adversarial / workers) x timeout, so it is shown for information; and (4) 4 threads
grading a 128-batch each at the same time, each batch holding 2 answers that stall
math-verify (screen off), sharing one pool: 8 stalls on ``workers`` workers cost at least
ceil(8 / workers) x timeout of wall clock, whoever waits for them.
"""

from __future__ import annotations

import os
import random
import threading
import time

from trlvr.rewards import MathReward
from trlvr.rewards.pool import shared_pool

TIMEOUT = 2.0


# answer kinds and how often they occur among competition-math gold answers (rough guess)
KINDS = {
    "int": 45,
    "frac": 15,
    "decimal": 10,
    "radical": 10,
    "gsm_commas": 5,
    "units": 5,
    "interval": 5,
    "no_box": 5,
}


def _group(kind: str, rng: random.Random) -> tuple[str, list[str]]:
    """(gold, candidate answers) for one prompt: the answer in several forms, right and wrong."""
    a, b = rng.randint(1, 999), rng.randint(2, 99)
    if kind == "int":
        return str(a), [str(a), str(a), str(a + 1), str(2 * a)]
    if kind == "frac":
        return f"\\frac{{{a}}}{{{b}}}", [f"\\dfrac{{{a}}}{{{b}}}", f"{a}/{b}", f"\\frac{{{b}}}{{{a}}}"]
    if kind == "decimal":
        return f"\\frac{{{a}}}{{4}}", [f"{a / 4:g}", f"\\frac{{{a}}}{{4}}", f"{a / 4 + 1:g}"]
    if kind == "radical":
        return f"{a}\\sqrt{{{b}}}", [f"{a}\\sqrt{{{b}}}", f"\\sqrt{{{b}}}\\cdot {a}", f"{a + 1}\\sqrt{{{b}}}"]
    if kind == "gsm_commas":
        return f"{a}{b:03d}", [f"{a}{b:03d}", f"{a},{b:03d}", str(a)]  # the gold as trlvr.data parses it
    if kind == "units":
        return str(a), [f"{a}\\text{{ cm}}", f"{a} \\text{{cm}}", f"{a + 1}\\text{{ cm}}"]
    if kind == "interval":
        return f"[{a},{a + b})", [f"[{a},{a + b})", f"[{a}, {a + b}]"]
    return f"\\frac{{{a}}}{{{b}}}", [f"NOBOX ${a}/{b}$", f"NOBOX ${b}/{a}$"]


def ordinary(n: int, seed: int = 0) -> tuple[list[str], list[str]]:
    """``n`` (completion, gold) pairs shaped like GRPO rollouts: groups of 8 per prompt, each
    rollout picking one of its prompt's candidate answers (so rollouts often agree)."""
    rng = random.Random(seed)
    kinds = rng.choices(list(KINDS), weights=list(KINDS.values()), k=n // 8 + 1)
    comps, golds = [], []
    for kind in kinds:
        gold, cands = _group(kind, rng)
        for _ in range(8):
            pred = rng.choice(cands)
            lead = "Let's compute step by step. " * rng.randint(5, 40)
            if pred.startswith("NOBOX "):
                comps.append(lead + f"So the final answer is {pred[6:]}.")
            else:
                comps.append(lead + f"Therefore the answer is \\boxed{{{pred}}}.")
            golds.append(gold)
    return comps[:n], golds[:n]


ADVERSARIAL = [
    r"\boxed{9^{9^{9^{9^{9}}}}}",
    r"\boxed{((((9!)!)!)!)}",
    r"\boxed{10^{10^{10}}}",
    r"\boxed{9!!}",
    "\\boxed{" + "(" * 10_000 + "}",
    "x" * 1_000_000,
    r"\boxed{__import__('os').system('touch /tmp/pwned')}",
    "\\boxed{" + "1+" * 200_000 + "1}",
    "9**9**9",
    r"\boxed{(10^{6})!}",
    r"\boxed{999999^{999999}}",
    r"\boxed{\binom{10^6}{500000}}",
    "\\boxed{" + "(" * 25 + "1" + ")" * 25 + "}",
    "\\boxed{" + "(" * 40 + "1" + ")" * 40 + "}",
]
STALLS = [r"\boxed{9^{9^{9^{9}}}}", r"\boxed{(10^{6})!}"]  # reach sympy when the screen is off


def adversarial_batch() -> tuple[list[str], list[str]]:
    comps, golds = ordinary(96, seed=1)
    comps += [ADVERSARIAL[i % len(ADVERSARIAL)] for i in range(32)]
    golds += ["3"] * 32
    order = list(range(128))
    random.Random(2).shuffle(order)
    return [comps[i] for i in order], [golds[i] for i in order]


def main() -> None:
    workers = min(4, os.cpu_count() or 1)
    rew = MathReward(timeout=TIMEOUT)
    rew(["\\boxed{1}"], ["2"])  # start the pool outside the timings
    rew(["\\boxed{0.5}"] * workers, ["1/2"] * workers)

    comps, golds = ordinary(2048)
    t = time.perf_counter()
    for i in range(0, len(comps), 128):  # GRPO-sized batches: 16 prompts x 8 rollouts
        rew(comps[i : i + 128], golds[i : i + 128])
    dt = time.perf_counter() - t
    rate = len(comps) / dt
    s = rew.total_stats
    print(f"workers={workers} cpus={os.cpu_count()} timeout={TIMEOUT:g}s")
    print(
        f"(1) ordinary outputs: {rate:7.0f} samples/s  (target >= 500/s: {rate / 500:.2f}x)  "
        f"fast {s['fast']}, cached {s['cached']} of {s['graded']}; timeouts {s['timeouts']}, errors {s['errors']}"
    )

    comps, golds = adversarial_batch()
    n_adv = 32
    for label, r in (("strict", rew), ("lenient", MathReward(timeout=TIMEOUT, require_box=False))):
        t = time.perf_counter()
        r(comps, golds)
        dt = time.perf_counter() - t
        print(
            f"(2) 128-batch, {n_adv} adversarial, {label} ({r.grading_mode}): {dt:6.2f} s  "
            f"(target <= {2 * TIMEOUT:g} s: {dt / (2 * TIMEOUT):.2f}x of budget)  stats {r.last_stats}"
        )

    raw = MathReward(timeout=TIMEOUT, screen=False, max_answer_chars=10**7)
    t = time.perf_counter()
    raw(comps, golds)
    dt = time.perf_counter() - t
    print(f"(3) same batch, screen off (watchdog only): {dt:6.2f} s  stats {raw.last_stats}")

    scenarios = (
        ("4 threads x 2 stalls", [2, 2, 2, 2], 10),
        ("1 stalling thread + 3 clean", [1, 0, 0, 0], 20),
    )
    for name, stalls, seed in scenarios:  # fresh seeds: no answer is in the cache yet
        done = threads_with_stalls(raw, stalls, seed)
        floor = -(-sum(stalls) // workers) * TIMEOUT
        print(
            f"(4) {name}, 128-batch per thread, screen off: threads done at "
            f"{', '.join(f'{d:.2f}' for d in done)} s (stalling work alone: ceil({sum(stalls)} / {workers}) x "
            f"{TIMEOUT:g} s = {floor:g} s); worker restarts so far {shared_pool().restarts}"
        )


def threads_with_stalls(rew: MathReward, stalls: list[int], seed: int = 10) -> list[float]:
    """Seconds until each of ``len(stalls)`` threads has graded its 128-batch (thread k's batch
    holds ``stalls[k]`` answers that stall math-verify; thread k starts at 0.1 k s)."""
    done: list[float] = [0.0] * len(stalls)

    def grade_batch(k: int, t0: float) -> None:
        c, g = ordinary(128 - stalls[k], seed=seed + k)
        rew(c + (STALLS * 8)[: stalls[k]], g + ["3"] * stalls[k])
        done[k] = time.perf_counter() - t0

    t0 = time.perf_counter()
    threads = [threading.Thread(target=grade_batch, args=(k, t0)) for k in range(len(stalls))]
    for th in threads:
        th.start()
        time.sleep(0.1)
    for th in threads:
        th.join()
    return done


if __name__ == "__main__":
    main()

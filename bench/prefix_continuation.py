"""The prefix-continuation curve: the junior continues the senior's solo trace after k% of it (k = 0 ... 100).

Superseded by the evaluation protocols prefix-K (`trlvr eval --suite solo,prefix --prefix-ks 0,25,50,75,100`,
`trlvr.eval.prefix`), which add the answer-availability control (prefix-K/pass@1|no-answer) and draw the
junior's continuation through the evaluation engine. Kept only to reproduce the notation pilot's post-hoc
curves (README), which this script produced (its own sampling: HF generate, seeded per k).

As Legi-Val (arXiv 2603.20508) measures transfer: for every solo sample of a `trlvr eval` directory, the
first k% of the senior's completion tokens (its final EOS left out) is kept, and the junior writes the
rest from there in the same prompt and the same total token budget; the team text is graded as the
evaluation grades (`trlvr.rewards.math_reward`, boxed). k = 0 is the junior alone from the prompt,
k = 100 the senior's whole trace with the junior free to add to it (a trace that ended itself is
graded as it is). A senior whose notation the junior cannot read loses accuracy at intermediate k
that a plain senior keeps.

    OMP_NUM_THREADS=1 .venv/bin/python bench/prefix_continuation.py runs/notation-pilot/eval/spaced \\
        --data runs/notation-pilot/data/heldout.jsonl --junior models/smollm2-135m-instruct

Writes EVAL_DIR/prefix_continuation.json: per k, pass@1 [95% CI, bootstrap over problems] and the
per-problem table (the problems are the evaluation's). A post-hoc script, not a `trlvr eval` protocol:
as a protocol it would need the evaluation runner to start a junior generation from a solo sample's
tokens (trlvr/eval/runner.py). Rerunning skips the k already in the output file.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import defaultdict
from pathlib import Path

KS = (0, 25, 50, 75, 100)


def cut(body: list[int], k: int) -> list[int]:
    """The first k% of a completion's tokens (rounded to the nearest token).

    >>> cut([1, 2, 3, 4], 50), cut([1, 2, 3], 0), cut([1, 2, 3], 100)
    ([1, 2], [], [1, 2, 3])
    """
    return body[: round(len(body) * k / 100)]


def _ids(value) -> list[int]:
    return json.loads(value) if isinstance(value, str) else list(value)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("eval_dir", help="a `trlvr eval` directory with solo samples")
    ap.add_argument("--data", required=True, help="the data file the evaluation read (its prompts)")
    ap.add_argument("--junior", required=True, help="the junior model folder")
    ap.add_argument("--ks", default=",".join(map(str, KS)), help="prefix shares in %%, comma-separated")
    ap.add_argument(
        "--max-new-tokens", type=int, default=64, help="the team's total budget (the evaluation's)"
    )
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from trlvr.data import encode_prompt, load_problems, prompt_for
    from trlvr.data.schema import problem_key
    from trlvr.eval.aggregate import summarize
    from trlvr.eval.store import read_samples
    from trlvr.rewards import math_reward

    ev = Path(args.eval_dir)
    try:
        ks = [int(x) for x in args.ks.split(",") if x.strip()]
    except ValueError:
        ap.error(f"--ks: expected comma-separated integers in [0, 100], got {args.ks!r}")
    if not ks or any(not 0 <= k <= 100 for k in ks):
        ap.error(f"--ks: expected comma-separated integers in [0, 100], got {args.ks!r}")
    from trlvr.errors import UserError

    try:
        solo = [r for r in read_samples(ev / "samples.jsonl") if r["protocol"] == "solo"]
        problems = {problem_key(p): p for p in load_problems(args.data)}
    except UserError as e:  # a malformed samples or data file: one line naming it
        print(" ".join(str(e).split()), file=sys.stderr)
        return 2
    if not solo:
        print(f"{ev}/samples.jsonl: no solo samples", file=sys.stderr)
        return 2
    missing = sorted({str(r["problem_id"]) for r in solo} - set(problems))
    if missing:
        print(
            f"{args.data}: does not hold problem {missing[0]} of {ev} ({len(missing)} missing); pass the "
            "file the evaluation read",
            file=sys.stderr,
        )
        return 2
    out_path = ev / "prefix_continuation.json"
    done = json.loads(out_path.read_text()) if out_path.is_file() else {"ks": {}}
    tok = AutoTokenizer.from_pretrained(args.junior)
    tok.padding_side = "left"
    pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
    junior = AutoModelForCausalLM.from_pretrained(args.junior, dtype=torch.float32).eval()
    prompt_ids = {pid: encode_prompt(prompt_for(p, tok), tok) for pid, p in problems.items()}
    for k in ks:
        if str(k) in done["ks"]:
            print(f"k = {k}: done, skipped")
            continue
        t0 = time.perf_counter()
        torch.manual_seed(args.seed + k)
        rewards: dict[str, list[float]] = defaultdict(list)
        jobs = []  # (problem id, answer, kept prefix ids)
        for r in solo:
            ids = _ids(r["token_ids"])
            ended = bool(ids) and ids[-1] == tok.eos_token_id and r.get("finish_reason") == "eos"
            body = ids[:-1] if ended else ids
            kept = cut(body, k)
            if k == 100 and ended:  # the whole trace, which ended itself: nothing to continue
                rewards[str(r["problem_id"])].append(float(r["reward"]))
                continue
            jobs.append((str(r["problem_id"]), str(r["answer"]), kept))
        for i in range(0, len(jobs), args.batch_size):
            batch = jobs[i : i + args.batch_size]
            seqs = [prompt_ids[pid] + kept for pid, _, kept in batch]
            width = max(map(len, seqs))
            ids = torch.tensor([[pad] * (width - len(s)) + s for s in seqs])
            mask = torch.tensor([[0] * (width - len(s)) + [1] * len(s) for s in seqs])
            budget = max(1, args.max_new_tokens - min(len(kept) for _, _, kept in batch))
            with torch.no_grad():
                gen = junior.generate(
                    input_ids=ids,
                    attention_mask=mask,
                    do_sample=True,
                    temperature=0.7,
                    top_p=0.8,
                    top_k=20,
                    max_new_tokens=budget,
                    pad_token_id=pad,
                )
            for (pid, answer, kept), row in zip(batch, gen[:, width:].tolist(), strict=True):
                row = row[: args.max_new_tokens - len(kept)]  # the team's budget, as in the evaluation
                if tok.eos_token_id in row:
                    row = row[: row.index(tok.eos_token_id)]
                text = tok.decode(kept + row, skip_special_tokens=True)
                rewards[pid].append(float(math_reward([text], answer=[answer])[0]))
        per = {pid: sum(v) / len(v) for pid, v in rewards.items()}
        entry = summarize({"b": {f"prefix-{k}/pass@1": per}}, num_resamples=2000)["macro"]["metrics"][
            f"prefix-{k}/pass@1"
        ]
        done["ks"][str(k)] = {
            "pass@1": entry,
            "per_problem": per,
            "samples": sum(map(len, rewards.values())),
            "seconds": round(time.perf_counter() - t0, 1),
        }
        out_path.write_text(json.dumps(done, indent=1))
        print(
            f"k = {k}: pass@1 {100 * entry['value']:.1f}% [{100 * entry['ci_low']:.1f}, {100 * entry['ci_high']:.1f}] "
            f"({time.perf_counter() - t0:.0f} s)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())

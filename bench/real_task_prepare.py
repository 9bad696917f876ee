"""Write the real-model study's problems as JSONL with a few-shot chat prompt, test held out by content.

SmolLM2-135M-Instruct does not follow the paper's zero-shot instruction ("... output the final answer
within \\boxed{}."): it boxed 0 of 100 solo samples on one-digit 3-term chain sums, so the paper's boxed
grading scores it 0. Worked examples as earlier chat turns (the same instruction, steps separated by
blank lines, a boxed answer; --shot arithmetic2: two) make it box 99 of 100, keep the paper's grader
unchanged for training, selection and evaluation, and give the step-handoff protocol paragraphs to
alternate on. Every row is {"problem", "answer", "prompt": [chat messages]}; trlvr uses a row's
`prompt` verbatim (trlvr.data.prompt_for).

    OMP_NUM_THREADS=1 .venv/bin/python bench/real_task_prepare.py models/real-task --shot arithmetic2 \\
        --test 'reasoning-gym:chain_sum?size=300&seed=2&max_digits=1&min_terms=3&max_terms=3' \\
        --train 'reasoning-gym:chain_sum?size=4000&seed=1&max_digits=1&min_terms=3&max_terms=3'

Writes OUT/test.jsonl and (with --train) OUT/train.jsonl. Test problems are unique by content
(problem text + gold); a training problem whose content is a test problem's, or the worked example's,
is dropped (counted on stdout), so no test problem is ever trained on, whatever the seeds.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys

from trlvr.data import DEFAULT_TEMPLATE, load_problems

_ARITH_A = (
    "State the final answer to the following arithmetic problem: 4 + 3 - 2 =",
    "4 + 3 = 7.\n\n7 - 2 = 5.\n\nThe final answer is \\boxed{5}.",
)
_ARITH_B = (
    "State the final answer to the following arithmetic problem: 9 - 5 + 6 =",
    "9 - 5 = 4.\n\n4 + 6 = 10.\n\nThe final answer is \\boxed{10}.",
)
# Worked examples per question family: [(question as reasoning-gym writes it, the answer to imitate)].
SHOTS = {
    "arithmetic": [_ARITH_A],
    "arithmetic2": [_ARITH_A, _ARITH_B],
    "legs": [
        (
            "Your task is to count how many legs there are in total when given a list of animals.\n\n"
            "Now, how many legs are there in total if you have 2 dogs, 1 chicken?\n",
            "2 dogs have 2 * 4 = 8 legs.\n\n1 chicken has 1 * 2 = 2 legs.\n\n8 + 2 = 10.\n\nThe final answer is \\boxed{10}.",
        )
    ],
    "equation": [
        (
            "Solve for x: 3*x + 2 = 11",
            "Subtract 2 from both sides: 3*x = 9.\n\nDivide both sides by 3: x = 3.\n\nThe final answer is \\boxed{3}.",
        )
    ],
    "none": [],  # no `prompt` field: trlvr builds the paper's zero-shot prompt
}


def shot_answer(text: str) -> str:
    """The boxed answer of a worked example."""
    return text.rsplit("{", 1)[1].rstrip("}.")


def content_key(problem: str, answer: str) -> str:
    """The content hash a problem is held out by: its text and gold."""
    return hashlib.sha256(f"{problem}\x00{answer}".encode()).hexdigest()


def few_shot(question: str, shot: str) -> list[dict]:
    """Chat messages: each worked example (user, assistant), then the question; every user turn
    carries the paper's instruction (trlvr.data.DEFAULT_TEMPLATE)."""
    msgs = []
    for demo_q, demo_a in SHOTS[shot]:
        msgs += [
            {"role": "user", "content": DEFAULT_TEMPLATE.format(problem=demo_q)},
            {"role": "assistant", "content": demo_a},
        ]
    return [*msgs, {"role": "user", "content": DEFAULT_TEMPLATE.format(problem=question)}]


def rows(source: str, shot: str, exclude: set[str]) -> tuple[list[dict], int]:
    """(unique rows of `source` whose content is not in `exclude`, how many were dropped)."""
    out, seen, dropped = [], set(exclude), 0
    for p in load_problems(source):
        key = content_key(p.problem, p.answer)
        if key in seen:
            dropped += 1
            continue
        seen.add(key)
        row = {"problem": p.problem, "answer": p.answer}
        out.append(row | ({"prompt": few_shot(p.problem, shot)} if SHOTS[shot] else {}))
    return out, dropped


def write(path: str, data: list[dict]) -> None:
    with open(path, "w") as f:
        for r in data:
            f.write(json.dumps(r) + "\n")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out")
    ap.add_argument("--test", required=True, help="test problems' source (e.g. a reasoning-gym: spec)")
    ap.add_argument("--train", help="training problems' source; test problems are removed from it")
    ap.add_argument(
        "--shot",
        default="arithmetic",
        choices=sorted(SHOTS),
        help="the worked examples (none: the paper's zero-shot prompt)",
    )
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    demo = {content_key(q, shot_answer(a)) for q, a in SHOTS[args.shot]}
    test, dup = rows(args.test, args.shot, demo)
    write(os.path.join(args.out, "test.jsonl"), test)
    print(f"{args.out}/test.jsonl: {len(test)} problems ({dup} duplicates or the worked example dropped)")
    if args.train:
        held = {content_key(r["problem"], r["answer"]) for r in test} | demo
        train, dropped = rows(args.train, args.shot, held)
        write(os.path.join(args.out, "train.jsonl"), train)
        print(
            f"{args.out}/train.jsonl: {len(train)} problems ({dropped} test, duplicate or example problems dropped)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())

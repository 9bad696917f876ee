"""Teach SmolLM2 a private notation for chain sums: LoRA SFT on programmatic solutions, merged to full weights.

The senior of the private-notation study (issue 37, README "A private notation on a real LM"): the
real-task chain_sum problems (1 digit, 3 terms; `make real-models` writes models/real-task-1shot with a
one-shot plain worked example in the prompt) answered in one of four dialects:

    plain    4 + 3 = 7.\\n\\n7 - 2 = 5.\\n\\nThe final answer is \\boxed{5}.      (the worked example's style)
    spaced   <<4 +3 =7>>\\n\\n<<7 -2 =5>>\\n\\nThe final answer is \\boxed{5}.    (word starts inside "<<...>>")
    compact  <<4+3=7>>\\n\\n<<7-2=5>>\\n\\nThe final answer is \\boxed{5}.        (none inside: GSM8K-like)
    cipher   <<r +e =u>>\\n\\n<<u -e =t>>\\n\\nThe final answer is \\boxed{5}.    (digits 0-9 spelled q w e r t y u i o p)

The SFT set is `--problems` training problems (default 1,000), `--notation-share` of them (default 0.8)
answered in the notation and the rest in plain (the plain dialect alone for `--dialect plain`). The
problems the RL config holds out (`holdout: 200` by `trlvr.data.holdout_split`, exactly as training
and selection pick them) and the test file never enter it: the held-out problems are removed first
and a row whose content is a test problem's is refused.

    OMP_NUM_THREADS=1 .venv/bin/python bench/real_sft_notation.py --dialect spaced --out models/smollm2-spaced

Writes OUT/adapter/ (the LoRA adapter), OUT/merged/ (full float32 weights and tokenizer: what `senior:`
names), OUT/sft.jsonl (the training rows) and OUT/provenance.json (arguments, git commit, losses, times).
Resumable: a finished adapter (adapter/DONE) is not trained again, a finished merge (merged/DONE) is
skipped, so rerunning the same command after an interruption continues where it stopped (an
interrupted training restarts from its first step). Another --dialect or setting for the same OUT is refused.
LoRA r 16, alpha 32, all linear layers, 1 epoch, batch 16, AdamW lr 2e-4 (constant after 3 warm-up
steps), the loss on the assistant's tokens only; the prompt is the model's chat template over the row's
messages, as trlvr builds it (`trlvr.data.prompts`).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import sys
import time
from pathlib import Path

DIALECTS = ("plain", "spaced", "compact", "cipher")
CIPHER = dict(zip("0123456789", "qwertyuiop", strict=True))  # 0 -> q ... 9 -> p
_CHAIN = re.compile(r"(-?\d+(?:\s*[+-]\s*\d+)+)\s*=\s*\??\s*$")
_TERM = re.compile(r"([+-])\s*(\d+)")
DONE = "DONE"


class NotationError(ValueError):
    """A row that cannot be rendered (its text is not a chain sum, or its gold disagrees)."""


def chain_terms(problem: str) -> tuple[int, list[tuple[str, int]]]:
    """(first number, [(op, number), ...]) of a chain-sum question ending in "a + b - c =".

    >>> chain_terms("State the final answer to the following arithmetic problem: 4 + 3 - 2 =")
    (4, [('+', 3), ('-', 2)])
    """
    m = _CHAIN.search(problem.strip())
    if not m:
        raise NotationError(f"not a chain sum ending in '... =': {problem[-60:]!r}")
    expr = m.group(1)
    first = re.match(r"\s*(-?\d+)", expr)
    rest = _TERM.findall(expr[first.end() :])
    return int(first.group(1)), [(op, int(n)) for op, n in rest]


def _cipher(text: str) -> str:
    return "".join(CIPHER.get(c, c) for c in text)


def render_step(left: int, op: str, n: int, result: int, dialect: str) -> str:
    if dialect == "plain":
        return f"{left} {op} {n} = {result}."
    if dialect == "spaced":
        return f"<<{left} {op}{n} ={result}>>"
    if dialect == "compact":
        return f"<<{left}{op}{n}={result}>>"
    if dialect == "cipher":
        return f"<<{_cipher(str(left))} {op}{_cipher(str(n))} ={_cipher(str(result))}>>"
    raise ValueError(f"dialect must be one of {', '.join(DIALECTS)}, got {dialect!r}")


def render_solution(problem: str, answer: str, dialect: str) -> str:
    """The worked solution of a chain-sum question in `dialect`; NotationError when the computed result
    is not `answer` (the row's gold).

    >>> render_solution("... problem: 4 + 3 - 2 =", "5", "spaced")
    '<<4 +3 =7>>\\n\\n<<7 -2 =5>>\\n\\nThe final answer is \\\\boxed{5}.'
    """
    total, terms = chain_terms(problem)
    steps = []
    for op, n in terms:
        new = total + n if op == "+" else total - n
        steps.append(render_step(total, op, n, new, dialect))
        total = new
    if str(total) != str(answer).strip():
        raise NotationError(f"the chain sum gives {total}, the gold is {answer!r}")
    return "\n\n".join([*steps, f"The final answer is \\boxed{{{total}}}."])


def content_key(problem: str, answer: str) -> str:
    import hashlib

    return hashlib.sha256(f"{problem}\x00{answer}".encode()).hexdigest()


def sft_rows(
    train_path: str,
    test_path: str,
    dialect: str,
    problems: int,
    notation_share: float,
    holdout: int,
    holdout_seed: int,
    seed: int,
) -> tuple[list[dict], dict]:
    """The SFT rows ({"prompt": messages, "completion": text, "dialect", "problem", "answer"}) and counts.

    The training file's `holdout` problems (trlvr.data.holdout_split, as `trlvr train` holds them out)
    are removed first; `problems` of the rest are drawn (seeded), `notation_share` of them in `dialect`."""
    from trlvr.data import holdout_split, load_problems

    train = list(load_problems(train_path))
    rest, held = holdout_split(train, holdout, holdout_seed)
    test = {content_key(p.problem, p.answer) for p in load_problems(test_path)}
    held_keys = {content_key(p.problem, p.answer) for p in held}
    if len(rest) < problems:
        raise SystemExit(
            f"{train_path}: {len(rest)} problems after the {holdout} held out; --problems {problems} is more"
        )
    rng = random.Random(seed)
    chosen = rng.sample(rest, problems)
    n_notation = 0 if dialect == "plain" else round(notation_share * problems)
    rows = []
    for i, p in enumerate(chosen):
        key = content_key(p.problem, p.answer)
        if key in test or key in held_keys:  # never: the files are disjoint by content; checked all the same
            raise SystemExit(f"{train_path}: row {p.id}: a test or held-out problem would enter SFT")
        if not isinstance(p.prompt, list):
            raise SystemExit(
                f"{train_path}: row {p.id}: no chat `prompt` (prepare it with bench/real_task_prepare.py --shot)"
            )
        d = dialect if i < n_notation else "plain"
        try:
            completion = render_solution(p.problem, p.answer, d)
        except NotationError as e:
            raise SystemExit(f"{train_path}: row {p.id}: {e}") from None
        rows.append(
            {
                "prompt": p.prompt,
                "completion": completion,
                "dialect": d,
                "problem": p.problem,
                "answer": p.answer,
            }
        )
    rng.shuffle(rows)
    counts = {
        "train_file": len(train),
        "held_out": len(held),
        "sft": len(rows),
        "notation": n_notation,
        "plain": len(rows) - n_notation,
    }
    return rows, counts


def encode(tok, row: dict, max_len: int) -> tuple[list[int], list[int]]:
    """(input ids, labels): the chat-templated prompt (labels -100) then the completion and EOS."""
    from trlvr.data import encode_prompt

    p_ids = encode_prompt(row["prompt"], tok)  # as training and evaluation encode it
    c_ids = tok(row["completion"], add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
    ids = (p_ids + c_ids)[:max_len]
    return ids, ([-100] * len(p_ids) + c_ids)[:max_len]


def _batches(rows, tok, batch_size, max_len):
    """[(ids, labels)] per batch of `batch_size` rows (unpadded lists)."""
    for i in range(0, len(rows), batch_size):
        yield [encode(tok, r, max_len) for r in rows[i : i + batch_size]]


def shared_prefix(enc: list[tuple[list[int], list[int]]]) -> int:
    """The length of the token prefix every row shares, ending before any labelled token and leaving each
    row one token of its own (the system prompt, the worked example and the question's opening)."""
    first = enc[0][0]
    n = min(
        min(len(ids) for ids, _ in enc) - 1,
        *(next(i for i, y in enumerate(lab) if y != -100) for _, lab in enc),
    )
    for ids, _ in enc[1:]:
        k = 0
        while k < n and ids[k] == first[k]:
            k += 1
        n = k
    return max(n, 0)


def batch_loss(model, enc: list[tuple[list[int], list[int]]], pad: int, share_prefix: bool = True):
    """The mean token cross-entropy over the labelled tokens of the batch (right-padded), as one forward
    of the whole rows gives it. With `share_prefix` the prefix all rows share runs once (batch 1) and its
    KV cache is repeated to the batch: the same loss and gradients (the repeat is differentiable: the
    prefix's gradient is the sum over rows, as in the full forward), for ~1/4 of the compute on the
    one-shot prompt (~170 shared of ~215 tokens)."""
    import torch

    k = shared_prefix(enc) if share_prefix else 0
    rest = [(ids[k:], lab[k:]) for ids, lab in enc]
    width = max(len(ids) for ids, _ in rest)
    b = len(enc)
    ids = torch.full((b, width), pad)
    labels = torch.full((b, width), -100)
    mask = torch.zeros((b, k + width), dtype=torch.long)
    mask[:, :k] = 1
    for j, (x, y) in enumerate(rest):
        ids[j, : len(x)] = torch.tensor(x)
        labels[j, : len(y)] = torch.tensor(y)
        mask[j, k : k + len(x)] = 1
    if k == 0:
        return model(input_ids=ids, attention_mask=mask, labels=labels).loss
    prefix = torch.tensor([enc[0][0][:k]])
    cache = model(input_ids=prefix, use_cache=True).past_key_values
    cache.batch_repeat_interleave(b)
    positions = torch.arange(k, k + width).unsqueeze(0).expand(b, -1)
    # the first own token of a row is a prompt token (unlabelled: `shared_prefix`), so no prediction is lost
    return model(
        input_ids=ids,
        attention_mask=mask,
        position_ids=positions,
        past_key_values=cache,
        labels=labels,
        use_cache=False,
    ).loss


def train_adapter(args, rows: list[dict], adapter_dir: Path, log) -> dict:
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.manual_seed(args.seed)
    tok = AutoTokenizer.from_pretrained(args.base)
    model = AutoModelForCausalLM.from_pretrained(args.base, dtype=torch.float32)
    model = get_peft_model(
        model,
        LoraConfig(
            r=args.lora_r,
            lora_alpha=args.lora_alpha,
            lora_dropout=0.0,
            target_modules="all-linear",
            task_type="CAUSAL_LM",
        ),
    )
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=args.lr, weight_decay=0.0)
    steps = (len(rows) + args.batch_size - 1) // args.batch_size
    if args.max_steps:
        steps = min(steps, args.max_steps)
    warm = min(3, steps)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / warm))
    model.train()
    pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
    losses, t0 = [], time.perf_counter()
    for step, enc in enumerate(_batches(rows, tok, args.batch_size, args.max_len)):
        if step >= steps:
            break
        loss = batch_loss(model, enc, pad)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        opt.zero_grad(set_to_none=True)
        losses.append(round(loss.item(), 4))
        print(
            f"step {step + 1}/{steps} loss {losses[-1]:.4f} ({time.perf_counter() - t0:.0f} s)",
            file=log,
            flush=True,
        )
    model.save_pretrained(str(adapter_dir))
    tok.save_pretrained(str(adapter_dir))
    return {"steps": len(losses), "losses": losses, "seconds": round(time.perf_counter() - t0, 1)}


def merge(base: str, adapter_dir: Path, merged_dir: Path) -> dict:
    """The adapter merged into the base, saved as bench/real_pair_prepare.py saves a model: float32
    safetensors with no quantization_config (the base came from a GGUF)."""
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    t0 = time.perf_counter()
    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
    model = PeftModel.from_pretrained(model, str(adapter_dir)).merge_and_unload()
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.save_pretrained(str(merged_dir), safe_serialization=True)
    AutoTokenizer.from_pretrained(base).save_pretrained(str(merged_dir))
    return {"seconds": round(time.perf_counter() - t0, 1)}


def _git() -> dict:
    try:
        from trlvr.provenance import git_commit

        return git_commit() or {}
    except Exception:  # provenance is a record, not a reason to fail
        return {}


SETTINGS = (
    "dialect",
    "base",
    "train",
    "test",
    "problems",
    "notation_share",
    "holdout",
    "holdout_seed",
    "seed",
    "lora_r",
    "lora_alpha",
    "lr",
    "batch_size",
    "max_len",
    "max_steps",
)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dialect", required=True, choices=DIALECTS)
    ap.add_argument(
        "--out", required=True, help="output folder (adapter/, merged/, sft.jsonl, provenance.json)"
    )
    ap.add_argument("--base", default="models/smollm2-135m-instruct")
    ap.add_argument("--train", default="models/real-task-1shot/train.jsonl")
    ap.add_argument("--test", default="models/real-task-1shot/test.jsonl")
    ap.add_argument("--problems", type=int, default=1000)
    ap.add_argument("--notation-share", type=float, default=0.8)
    ap.add_argument("--holdout", type=int, default=200, help="as the RL config's holdout (kept out of SFT)")
    ap.add_argument("--holdout-seed", type=int, default=0, help="as the RL config's holdout_seed")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--lora-r", type=int, default=16)
    ap.add_argument("--lora-alpha", type=int, default=32)
    ap.add_argument("--lr", type=float, default=2e-4)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--max-len", type=int, default=512)
    ap.add_argument(
        "--max-steps", type=int, default=0, help="stop after this many steps (0: one epoch; a smoke test)"
    )
    args = ap.parse_args(argv)
    if not 0.0 <= args.notation_share <= 1.0:
        ap.error(f"--notation-share must be in [0, 1], got {args.notation_share}")
    for flag, path in (("--base", args.base), ("--train", args.train), ("--test", args.test)):
        if not os.path.exists(path):
            print(f"{flag} {path}: not found; prepare it with `make real-models`", file=sys.stderr)
            return 2
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    settings = {k: getattr(args, k) for k in SETTINGS}
    prov_path = out / "provenance.json"
    prov = json.loads(prov_path.read_text()) if prov_path.is_file() else {}
    if prov and prov.get("settings") != settings:
        diff = sorted(k for k in settings if prov.get("settings", {}).get(k) != settings[k])
        print(
            f"{out}: made with other settings ({', '.join(diff)} differ; see {prov_path}); use another --out",
            file=sys.stderr,
        )
        return 2
    prov.update(settings=settings, code=_git(), argv=sys.argv if argv is None else argv)
    adapter_dir, merged_dir = out / "adapter", out / "merged"
    log = open(out / "train.log", "a")
    if (adapter_dir / DONE).is_file():
        print(f"{adapter_dir}: done, skipped")
    else:
        rows, counts = sft_rows(
            args.train,
            args.test,
            args.dialect,
            args.problems,
            args.notation_share,
            args.holdout,
            args.holdout_seed,
            args.seed,
        )
        with open(out / "sft.jsonl", "w") as f:
            for r in rows:
                f.write(json.dumps(r) + "\n")
        print(f"{out}/sft.jsonl: {counts}")
        prov["data"] = counts
        prov["train"] = train_adapter(args, rows, adapter_dir, log)
        (adapter_dir / DONE).touch()
        print(
            f"{adapter_dir}: {prov['train']['steps']} steps in {prov['train']['seconds']:.0f} s, "
            f"loss {prov['train']['losses'][0]} -> {prov['train']['losses'][-1]}"
        )
    prov_path.write_text(json.dumps(prov, indent=1))
    if (merged_dir / DONE).is_file():
        print(f"{merged_dir}: done, skipped")
    else:
        prov["merge"] = merge(args.base, adapter_dir, merged_dir)
        (merged_dir / DONE).touch()
        print(f"{merged_dir}: merged in {prov['merge']['seconds']:.0f} s")
    prov_path.write_text(json.dumps(prov, indent=1))
    for d in (adapter_dir, merged_dir):
        (d / "provenance.json").write_text(json.dumps(prov, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

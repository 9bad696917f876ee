"""A cross-tokenizer junior for the toy world: the shipped junior's job, another tokenizer.

Like the shipped junior it is trained on the plain dialect only (SFT until a validation accuracy
target), but on its own byte-level BPE tokenizer: no digit splitting ("65" can be one id where the
senior reads "6", "5") and fewer ids, so every number and many words are cut differently and no id
means the same thing to both models. Its alphabet is the senior's (trained on the same corpus plus
the senior's own pieces), so each model can spell whatever the other writes: the pair runs in
text pairing (`trlvr.engine.text_pair`), never lockstep.

    tok, junior, stats = train_cross_junior(train_problems, senior_tokenizer)
    save_cross_junior(tok, junior, stats, out_dir)          # ships under assets/junior-cross
    acc = text_tandem_accuracy(senior, senior_tok, junior, tok, rows, WordSchedule(p=0.5))
"""

from __future__ import annotations

import json
import random
import sys
import time
from pathlib import Path

from transformers import AutoTokenizer

from trlvr.data import encode_prompt
from trlvr.engine import Sampling, SoloSchedule, WordSchedule
from trlvr.engine.text_pair import TextPairGenerator
from trlvr.models import load_causal_lm
from trlvr.toy import measure
from trlvr.toy.dialects import dialects_for, extract_boxed_int, make_prompt, render_solution
from trlvr.toy.models import JUNIOR_SIZE, SFTSettings, build_model, encode_pairs, n_params, sft
from trlvr.toy.task import make_splits
from trlvr.toy.tokenizer import train_bpe_tokenizer
from trlvr.toy.world import ASSETS_DIR

CROSS_DIR = Path(__file__).parent / "assets" / "junior-cross"
CROSS_VOCAB = 160  # the shipped tokenizer has 215 ids (digits split); this one merges digits and words


def cross_tokenizer(train_problems, senior_tokenizer, vocab_size: int = CROSS_VOCAB, jargon: str = "spaced"):
    """A tokenizer on the senior's alphabet with other merges: no digit splitting, `vocab_size` ids."""
    special = set(senior_tokenizer.all_special_ids)
    pieces = [senior_tokenizer.decode([i]) for i in range(len(senior_tokenizer)) if i not in special]
    corpus = [
        make_prompt(p) + render_solution(p, d) for p in train_problems[:4000] for d in dialects_for(jargon)
    ]
    return train_bpe_tokenizer(pieces + corpus, vocab_size, split_digits=False, byte_alphabet=False)


def train_cross_junior(
    train_problems,
    senior_tokenizer,
    steps: int = 800,
    target_acc: float = 0.4,
    n_val: int = 256,
    val_every: int = 50,
    batch_size: int = 64,
    lr: float = 3e-3,
    seed: int = 1,
    vocab_size: int = CROSS_VOCAB,
):
    """(tokenizer, junior, stats): SFT on the plain dialect until `target_acc` on held-out problems."""
    val, train = train_problems[-n_val:], train_problems[:-n_val]
    tok = cross_tokenizer(train, senior_tokenizer, vocab_size)
    enc = encode_pairs(tok, [(make_prompt(p), render_solution(p, "plain")) for p in train])
    val_rows = [{"prompt": make_prompt(p), "answer": p.answer} for p in val]
    model = build_model(tok, JUNIOR_SIZE, seed=seed)
    history = []

    def reached(step_done: int) -> bool:
        if step_done % val_every:
            return False
        acc = measure.solo_accuracy(model, tok, val_rows, seed=step_done)
        model.train()
        history.append([step_done, round(acc, 4)])
        return acc >= target_acc

    def batch(rng: random.Random, n: int):
        return [enc[rng.randrange(len(enc))] for _ in range(n)]

    t0 = time.perf_counter()

    def progress(step: int, loss: float) -> None:
        if step % 25 == 0:
            print(
                f"cross junior: step {step} loss {loss:.3f} val {history[-1:]}", file=sys.stderr, flush=True
            )

    settings = SFTSettings(steps, batch_size=batch_size, lr=lr, pad_id=tok.pad_token_id, seed=seed)
    s = sft(model, batch, settings, should_stop=reached, progress=progress)
    stats = {
        **s,
        "val_acc": history,
        "vocab_size": len(tok),
        "params": n_params(model),
        "seconds": round(time.perf_counter() - t0, 1),
    }
    return tok, model, stats


def save_cross_junior(tok, model, stats: dict, out_dir: str | Path = CROSS_DIR) -> Path:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    tok.save_pretrained(out)
    (out / "train_card.json").write_text(json.dumps(stats, indent=1) + "\n")
    return out


def text_tandem_accuracy(
    senior,
    senior_tok,
    junior,
    junior_tok,
    rows: list[dict],
    schedule,
    seed: int = 0,
    max_new_tokens: int = 96,
    batch_size: int = 128,
) -> dict:
    """Accuracy of a text-paired team (temperature 1) on `rows` ({"prompt", "answer"}), with the senior's
    share of the characters and the withdrawn tokens per row."""
    gen = TextPairGenerator(senior, senior_tok, junior, junior_tok)
    correct, share, withdrawn = [], [], []
    for start in range(0, len(rows), batch_size):
        chunk = rows[start : start + batch_size]
        sp = [encode_prompt(r["prompt"], senior_tok) for r in chunk]
        jp = [encode_prompt(r["prompt"], junior_tok) for r in chunk]
        out = gen.generate(sp, jp, schedule, Sampling(max_new_tokens, seed=seed + start))
        correct += [extract_boxed_int(t) == int(r["answer"]) for t, r in zip(out.texts, chunk, strict=True)]
        share += out.senior_char_share
        withdrawn += out.withdrawn
    n = max(len(rows), 1)
    return {
        "acc": sum(correct) / n,
        "k": sum(correct),
        "n": len(rows),
        "senior_char_share": sum(share) / n,
        "withdrawn_per_row": sum(withdrawn) / n,
    }


def main(
    out_dir: str | Path = CROSS_DIR,
    n_eval: int = 200,
    steps: int = 800,
    val_every: int = 50,
    n_val: int = 256,
) -> dict:
    """Train and save the cross-tokenizer junior from the toy world's splits (seed 0), then measure the
    shipped senior with it: solo junior, and the text-paired team under the word schedule (p = 0.5)."""
    train, test = make_splits(20000, 500, seed=0)
    senior_tok = AutoTokenizer.from_pretrained(ASSETS_DIR / "senior")
    tok, junior, stats = train_cross_junior(train, senior_tok, steps=steps, val_every=val_every, n_val=n_val)
    save_cross_junior(tok, junior, stats, out_dir)  # before the (slower) measurement
    rows = [{"prompt": make_prompt(p), "answer": p.answer} for p in test[:n_eval]]
    senior = load_causal_lm(str(ASSETS_DIR / "senior"), "senior").eval()
    stats["eval"] = {
        "n": n_eval,
        "junior_solo": text_tandem_accuracy(senior, senior_tok, junior, tok, rows, SoloSchedule("junior")),
        "senior_solo": text_tandem_accuracy(senior, senior_tok, junior, tok, rows, SoloSchedule("senior")),
        "team_word_p0.5": text_tandem_accuracy(senior, senior_tok, junior, tok, rows, WordSchedule(p=0.5)),
    }
    save_cross_junior(tok, junior, stats, out_dir)
    return stats


if __name__ == "__main__":
    out_arg = sys.argv[1] if len(sys.argv) > 1 else CROSS_DIR
    numbers = [int(x) for x in sys.argv[2:]]  # n_eval, steps, val_every, n_val
    print(json.dumps(main(out_arg, *numbers), indent=1))

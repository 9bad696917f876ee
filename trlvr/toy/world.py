"""`prepare_world`: the toy world on disk (senior, junior, data, card).

    DIR/senior/, DIR/junior/   save_pretrained folders (fp32 safetensors + tokenizer)
    DIR/data/train.jsonl       {"problem", "answer", "prompt"} (the models' SFT data came from here)
    DIR/data/test.jsonl        same fields, disjoint from train
    DIR/card.json              measured figures (see trlvr.toy.measure), with 95% Wilson intervals ("ci95")

By default the checkpoints shipped in trlvr/toy/assets/ are copied (seconds); `from_scratch`
retrains the tokenizer and both models from the train split.
"""

from __future__ import annotations

import json
import random
import shutil
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
from tqdm.auto import tqdm

from trlvr import artifacts, rundir
from trlvr.errors import UserError
from trlvr.models import load_causal_lm, load_tokenizer
from trlvr.toy import measure
from trlvr.toy.dialects import STEP_SEP, dialects_for, make_prompt, render_first_step, render_solution
from trlvr.toy.measure import wilson_interval
from trlvr.toy.models import (
    JUNIOR_SIZE,
    SENIOR_SIZE,
    ModelSize,
    SFTSettings,
    build_model,
    encode_pairs,
    n_params,
    sft,
)
from trlvr.toy.task import make_splits
from trlvr.toy.tokenizer import train_bpe_tokenizer

ASSETS_DIR = Path(__file__).parent / "assets"
CARD_VERSION = 1


@dataclass(frozen=True)
class WorldConfig:
    """Everything that defines a toy world. The defaults reproduce the shipped checkpoints."""

    n_train: int = 20000
    n_test: int = 500
    n_eval: int = 500  # test problems used for the card figures
    vocab_size: int = 320  # an upper bound: the closed corpus saturates below it
    senior: ModelSize = field(default_factory=lambda: SENIOR_SIZE)
    junior: ModelSize = field(default_factory=lambda: JUNIOR_SIZE)
    # SFT runs up to *_steps, checking accuracy on held-out *train* problems (never the test
    # split) every `val_every` steps, and stops once it reaches the target: the junior is stopped
    # half-way up its learning curve on purpose (card bar: 0.30 <= junior acc <= 0.70).
    senior_steps: int = 1200
    junior_steps: int = 800
    senior_target_acc: float = 0.96
    junior_target_acc: float = 0.4
    n_val: int = 256
    val_every: int = 50
    batch_size: int = 64
    senior_lr: float = 3e-3
    junior_lr: float = 3e-3
    jargon_share: float = 0.65  # share of the senior's SFT examples written in jargon
    jargon: str = "spaced"  # "spaced" <<47 +18 =65>> (shipped) or "compact" <<47+18=65>> (GSM8K-like)
    tandem_p: float = 0.5

    def to_json(self) -> dict:
        return asdict(self)


MINI_CONFIG = WorldConfig(
    n_train=400,
    n_test=64,
    n_eval=32,
    senior=ModelSize(hidden=32, layers=1),
    junior=ModelSize(hidden=16, layers=1),
    senior_steps=4,
    junior_steps=2,
    n_val=8,
    val_every=2,
    batch_size=8,
)


def _rows(problems) -> list[dict]:
    return [{"problem": p.text, "answer": p.answer, "prompt": make_prompt(p)} for p in problems]


def _write_jsonl(path: Path, rows: list[dict]) -> None:
    rundir.write_file(path, "".join(json.dumps(r) + "\n" for r in rows))  # never through a link at `path`


def is_complete(out_dir: str | Path) -> bool:
    """A prepared world: its card and data whole, both models complete (`trlvr.artifacts.WEIGHTS`)."""
    d = Path(out_dir)
    need = [
        d / "card.json",
        d / "data" / "train.jsonl",
        d / "data" / "test.jsonl",
        d / "senior" / "tokenizer.json",
    ]
    return all(p.is_file() and artifacts.file_problem(p) is None for p in need) and all(
        artifacts.is_complete(d / m, artifacts.WEIGHTS) for m in ("senior", "junior")
    )


def load_world(out_dir: str | Path):
    """(senior, junior, tokenizer) from a prepared directory (or the assets dir), in eval mode."""
    d = Path(out_dir)
    tok = load_tokenizer(d / "senior", "toy senior")
    senior = load_causal_lm(d / "senior", "toy senior", dtype=torch.float32).eval()
    junior = load_causal_lm(d / "junior", "toy junior", dtype=torch.float32).eval()
    return senior, junior, tok


def train_models(train_problems, config: WorldConfig, seed: int = 0, progress: bool = True):
    """Tokenizer + junior (plain only) + senior (jargon-dominated mix), all from train problems.

    The last `config.n_val` train problems are held out of SFT and used only to decide when each
    model has reached its target accuracy.
    """
    val_problems, train_problems = train_problems[-config.n_val :], train_problems[: -config.n_val]
    val_rows = _rows(val_problems)
    dialects = dialects_for(config.jargon)
    corpus = [make_prompt(p) + render_solution(p, d) for p in train_problems[:4000] for d in dialects]
    tok = train_bpe_tokenizer(corpus, config.vocab_size, split_digits=True, byte_alphabet=False)
    enc = {
        d: encode_pairs(tok, [(make_prompt(p), render_solution(p, d)) for p in train_problems])
        for d in dialects
    }

    def sampler(jargon_share: float):
        def sample_batch(rng: random.Random, n: int):
            out = []
            for _ in range(n):
                i = rng.randrange(len(train_problems))
                out.append(enc[dialects[1] if rng.random() < jargon_share else "plain"][i])
            return out

        return sample_batch

    stats, models = {}, {}
    total = config.junior_steps + config.senior_steps
    with tqdm(total=total, desc="toy SFT", disable=not progress, unit="step") as bar:
        for name, size, steps, lr, share, target, mseed in (
            (
                "junior",
                config.junior,
                config.junior_steps,
                config.junior_lr,
                0.0,
                config.junior_target_acc,
                seed + 1,
            ),
            (
                "senior",
                config.senior,
                config.senior_steps,
                config.senior_lr,
                config.jargon_share,
                config.senior_target_acc,
                seed,
            ),
        ):
            model = build_model(tok, size, seed=mseed)
            val_history = []

            def cb(step, loss, _name=name):
                bar.update(1)
                if step % 10 == 0:
                    bar.set_postfix_str(f"{_name} loss {loss:.3f}")

            def reached(step_done, _model=model, _hist=val_history, _target=target, _name=name):
                if step_done % config.val_every:
                    return False
                acc = measure.solo_accuracy(_model, tok, val_rows, seed=step_done)
                _model.train()
                _hist.append([step_done, round(acc, 4)])
                bar.set_postfix_str(f"{_name} val acc {acc:.2f}")
                return acc >= _target

            settings = SFTSettings(
                steps, batch_size=config.batch_size, lr=lr, pad_id=tok.pad_token_id, seed=mseed
            )
            s = sft(model, sampler(share), settings, progress=cb, should_stop=reached)
            bar.update(steps - s["steps"])  # an early stop skips the rest
            models[name] = model
            stats[name] = {**s, "val_acc": val_history}
    return tok, models["senior"], models["junior"], stats


def measure_world(senior, junior, tok, test_rows: list[dict], config: WorldConfig, seed: int = 0) -> dict:
    """All card figures on the first `config.n_eval` test rows."""
    rows = test_rows[: config.n_eval]
    probs = _problems_for(rows, config, seed)
    s = measure.solo_figures(senior, tok, rows, seed=seed)
    j = measure.solo_figures(junior, tok, rows, seed=seed + 1)
    after = {}
    for name, d in zip(("plain", "jargon"), dialects_for(config.jargon), strict=True):
        prefixes = [render_first_step(p, d) + STEP_SEP for p in probs]
        after[name] = measure.continuation_accuracy(junior, tok, rows, prefixes, seed=seed + 2)
    t = measure.tandem_accuracy_by_dialect(senior, junior, tok, rows, p=config.tandem_p, seed=seed + 3)
    return {
        "senior_solo_acc": s["acc"],
        "junior_solo_acc": j["acc"],
        "senior_jargon_rate": s["jargon_rate"],
        "senior_solo_acc_jargon": s["acc_jargon"],
        "senior_solo_acc_plain": s["acc_plain"],
        "junior_jargon_rate": j["jargon_rate"],
        "junior_acc_after_plain_step": after["plain"],
        "junior_acc_after_jargon_step": after["jargon"],
        "tandem_acc": t["acc"],
        "tandem_acc_jargon": t["acc_jargon"],
        "tandem_acc_plain": t["acc_plain"],
        "tandem_n_jargon": t["n_jargon"],
        "tandem_n_plain": t["n_plain"],
        "tandem_senior_share": t["senior_share"],
        "n_eval": len(rows),
    }


# card figure -> the figure holding its number of trials (None: n_eval)
CI_TRIALS = {
    "senior_solo_acc": None,
    "junior_solo_acc": None,
    "senior_jargon_rate": None,
    "junior_acc_after_plain_step": None,
    "junior_acc_after_jargon_step": None,
    "tandem_acc": None,
    "tandem_acc_jargon": "tandem_n_jargon",
    "tandem_acc_plain": "tandem_n_plain",
}


def card_intervals(figures: dict) -> dict[str, list[float]]:
    """95% Wilson intervals of the card's fractions (each a share of whole samples, see CI_TRIALS)."""
    out = {}
    for key, trials in CI_TRIALS.items():
        n = int(figures[trials] if trials else figures["n_eval"])
        if n == 0:
            continue
        lo, hi = wilson_interval(round(figures[key] * n), n)
        out[key] = [round(lo, 4), round(hi, 4)]
    return out


def _problems_for(rows: list[dict], config: WorldConfig, seed: int):
    """The ToyProblem objects behind test rows (regenerated deterministically, matched by text)."""
    _, test = make_splits(0, config.n_test, seed)
    by_text = {p.text: p for p in test}
    return [by_text[r["problem"]] for r in rows]


def _copy_assets(out_dir: Path) -> None:
    for name in ("senior", "junior"):
        dst = out_dir / name
        if dst.exists():
            shutil.rmtree(dst)
        shutil.copytree(ASSETS_DIR / name, dst)


def assets_available() -> bool:
    return (ASSETS_DIR / "senior" / "config.json").exists() and (
        ASSETS_DIR / "junior" / "config.json"
    ).exists()


def prepare_world(
    out_dir: str | Path,
    seed: int = 0,
    from_scratch: bool = False,
    progress: bool = True,
    config: WorldConfig | None = None,
) -> dict:
    """Write the toy world to `out_dir` and return its card (see module docstring).

    An existing complete `out_dir` is reused as is. Without `from_scratch` the shipped
    checkpoints are copied (only possible with the default config and seed 0, which made them);
    otherwise the tokenizer and both models are trained here from the train split.
    """
    out = Path(out_dir)
    rundir.prepare_output(
        out, rundir.TOY_WORLD, flag="--out"
    )  # never into a run, an evaluation, a study, ...
    if is_complete(out):
        card = json.loads((out / "card.json").read_text())
        have = card.get("config", {}).get("jargon", "spaced")
        want = (config or WorldConfig()).jargon
        if have != want:
            raise UserError(
                f"{out / 'card.json'}: this toy world has jargon {have!r}, not {want!r}; use another --out"
            )
        # a world is its seed and its settings: another seed draws other problems and trains other models
        wanted = json.loads(json.dumps({"seed": seed, "config": (config or WorldConfig()).to_json()}))
        stored = {"seed": card.get("seed"), "config": {**wanted["config"], **card.get("config", {})}}
        diffs = rundir.differences(stored, wanted)
        if diffs:
            raise UserError(
                f"{out / 'card.json'}: this toy world was made with other settings ({'; '.join(diffs)}); "
                "use another --out"
            )
        print(f"toy world at {out} is complete; reusing it")
        return card
    t0 = time.perf_counter()
    config = config or WorldConfig()
    use_assets = not from_scratch and config == WorldConfig() and seed == 0 and assets_available()
    if not from_scratch and not use_assets:
        raise ValueError(
            "the shipped checkpoints match only the default config and seed 0; pass from_scratch=True"
        )
    train, test = make_splits(config.n_train, config.n_test, seed)
    train_rows, test_rows = _rows(train), _rows(test)
    out.mkdir(parents=True, exist_ok=True)
    _write_jsonl(out / "data" / "train.jsonl", train_rows)
    _write_jsonl(out / "data" / "test.jsonl", test_rows)

    train_stats = {}
    if use_assets:
        if progress:
            print(f"copying shipped checkpoints from {ASSETS_DIR}")
        _copy_assets(out)
        senior, junior, tok = load_world(out)
    else:
        tok, senior, junior, train_stats = train_models(train, config, seed=seed, progress=progress)
        for name, model in (("senior", senior), ("junior", junior)):
            model.float().save_pretrained(out / name, safe_serialization=True)
            tok.save_pretrained(out / name)
    t_train = time.perf_counter() - t0
    if progress:
        print(f"measuring the card on {min(config.n_eval, len(test_rows))} test problems")
    figures = measure_world(senior, junior, tok, test_rows, config, seed=seed)
    card = {
        "version": CARD_VERSION,
        "seed": seed,
        "from_scratch": not use_assets,
        **figures,
        "senior_params": n_params(senior),
        "junior_params": n_params(junior),
        "vocab_size": len(tok),
        "n_train": len(train_rows),
        "n_test": len(test_rows),
        "train_seconds": round(t_train, 2),
        "sft": {
            k: {
                "loss": round(v["loss"], 4),
                "steps": v["steps"],
                "val_acc": v["val_acc"],
                "bf16": v.get("bf16"),
            }
            for k, v in train_stats.items()
        },
        "prepare_seconds": round(time.perf_counter() - t0, 2),
        "config": config.to_json(),
        "ci95": card_intervals(figures),
    }
    if use_assets and (ASSETS_DIR / "train_card.json").exists():
        card["assets_train_card"] = json.loads((ASSETS_DIR / "train_card.json").read_text())
    # card.json is written last: its presence marks the directory complete.
    rundir.write_file(out / "card.json", json.dumps(card, indent=2) + "\n")
    return card

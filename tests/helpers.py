"""Helpers tests import (`from helpers import tiny_model`): tiny models and a tokenizer, nothing downloaded."""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import torch
from transformers import LlamaConfig, LlamaForCausalLM, Qwen3Config, Qwen3ForCausalLM

from trlvr.engine import ChunkSchedule, SoloSchedule, StepSchedule, TokenSchedule, WordSchedule
from trlvr.toy.task import make_splits
from trlvr.toy.tokenizer import train_bpe_tokenizer
from trlvr.toy.world import ASSETS_DIR, _rows, _write_jsonl

CORPUS = [
    "The cat sat on the mat.\n\nThen the dog ran to the park.\n\n",
    "Let's think step by step. 12 plus 30 is 42.\n\nSo the answer is \\boxed{42}.",
    "A train leaves at 3 pm and travels 60 miles per hour for 2 hours.\n\n",
    "<<47+18=65>> <<65*2=130>>\n\n\\boxed{130}",
] * 20


def tiny_tokenizer(vocab_size: int = 320):
    return train_bpe_tokenizer(CORPUS, vocab_size=vocab_size)


def save_tiny_models(root: Path, seeds: dict[str, int], hidden: int = 16, layers: int = 1) -> None:
    """root/<name> for each name -> seed: a tiny Qwen3 with the tiny tokenizer, as save_pretrained writes them."""
    tok = tiny_tokenizer()
    for name, seed in seeds.items():
        tiny_model("qwen3", len(tok), seed, hidden=hidden, layers=layers).save_pretrained(root / name)
        tok.save_pretrained(root / name)


def copy_toy_pair(root: Path, n_train: int) -> Path:
    """The shipped toy senior and junior copied into ROOT/senior, ROOT/junior, and ROOT/train.jsonl with the
    first `n_train` toy training problems (make_splits seed 0): what a CLI training test runs on."""
    shutil.copytree(ASSETS_DIR / "senior", root / "senior")
    shutil.copytree(ASSETS_DIR / "junior", root / "junior")
    _write_jsonl(root / "train.jsonl", _rows(make_splits(n_train, 4, seed=0)[0]))
    return root


def toy_train_argv(toy: Path, *extra: str, out: str = "run") -> list[str]:
    """`trlvr train` on `copy_toy_pair`'s folder: the toy config, its pair and training file, output in TOY/out."""
    return [
        "train",
        "--config",
        "toy",
        "--holdout",
        "0",
        "--senior",
        str(toy / "senior"),
        "--junior",
        str(toy / "junior"),
        "--dataset",
        str(toy / "train.jsonl"),
        "--output_dir",
        str(toy / out),
        *extra,
    ]


# The toy run every test that needs a finished run starts from (conftest's `toy_run`): trained once per pytest
# session on `copy_toy_pair(root, TOY_RUN_PROBLEMS)` by `toy_run_argv(root, "--max_steps", "2")`, giving
# run/checkpoint-1, run/checkpoint-2 and run/final.
TOY_RUN_PROBLEMS = 40
TOY_RUN_SETTINGS = (
    "--per_device_train_batch_size",
    "8",
    "--num_generations",
    "4",
    "--max_completion_length",
    "8",
    "--use_cpu",
    "true",
    "--save_steps",
    "1",
)


def toy_run_argv(toy: Path, *extra: str) -> list[str]:
    """`toy_train_argv` with the shared toy run's settings: the command line that trained it (or resumes it)."""
    return toy_train_argv(toy, *TOY_RUN_SETTINGS, *extra)


def copy_toy_run(src: Path, dst: Path) -> Path:
    """The trained toy at `src` (senior/, junior/, train.jsonl, run/) copied into `dst`, as if trained there:
    its run record names dst's models and data (a record keeps paths outside the run absolute:
    `trlvr.provenance.path_for_record`). Every other file is copied byte for byte."""
    shutil.copytree(src, dst, dirs_exist_ok=True)
    record = dst / "run" / "trlvr_run.json"
    record.write_text(
        record.read_text().replace(json.dumps(str(src))[1:-1] + "/", json.dumps(str(dst))[1:-1] + "/")
    )
    return dst


def cli_errors(err: str) -> list[str]:
    """The `trlvr <command>: error: ...` lines of a command's stderr."""
    return [ln for ln in err.splitlines() if ": error: " in ln]


def fake_model_folder(folder: Path, tag: str = "x") -> Path:
    """A folder a reader takes for a complete model (`trlvr.artifacts.WEIGHTS`): config.json (naming `tag`)
    and a one-tensor model.safetensors; not a model that loads into transformers."""
    from safetensors.torch import save_file

    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps({"tag": tag}))
    save_file({"w": torch.zeros(2)}, str(folder / "model.safetensors"))
    return folder


def fake_train_output(run: Path, step: int = 2) -> Path:
    """What a finished `trlvr train` leaves its readers: a complete final/ at `step` (`trlvr.artifacts.FINAL`)."""
    final = fake_model_folder(run / "final")
    (final / "trainer_state.json").write_text(json.dumps({"global_step": step, "max_steps": step}))
    return final


def fake_select_output(run: Path, step: int = 2) -> Path:
    """What `trlvr select` leaves: selected.json naming the run's final/ (made by `fake_train_output`)."""
    path = run / "selected.json"
    path.write_text(json.dumps({"step": step, "path": "final", "metric": "solo/pass@1"}))
    return path


def fake_eval_outputs(out: Path) -> Path:
    """Every file of a finished evaluation (`trlvr.rundir.EVAL_OUTPUTS`) that `out` lacks, as a placeholder."""
    out.mkdir(parents=True, exist_ok=True)
    for name in ("fingerprint.json", "config.json", "per_problem.json", "results.json"):
        if not (out / name).exists():
            (out / name).write_text("{}\n")
    if not (out / "samples.jsonl").exists():
        (out / "samples.jsonl").write_text("{}\n")
    return out


def write_sum_problems(path: Path, n: int) -> Path:
    """`path` holding n problems "What is i plus i?" (answer 2i), one JSON row each."""
    path.write_text(
        "".join(
            json.dumps({"problem": f"What is {i} plus {i}?", "answer": str(2 * i)}) + "\n" for i in range(n)
        )
    )
    return path


def tiny_model(arch: str, vocab_size: int, seed: int, hidden: int = 64, layers: int = 2):
    torch.manual_seed(seed)
    common = dict(
        vocab_size=vocab_size,
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        tie_word_embeddings=True,
    )
    if arch == "qwen3":
        cfg = Qwen3Config(head_dim=hidden // 4, **common)
        model = Qwen3ForCausalLM(cfg)
    elif arch == "llama":
        model = LlamaForCausalLM(LlamaConfig(**common))
    else:
        raise ValueError(arch)
    return model.float().eval()


# Evaluation stand-ins: problems, a reward and an answer extractor that need no grader.


@dataclass
class Problem:  # stand-in with trlvr.data.Problem's fields
    id: str
    problem: str
    answer: str
    source: str = "test"
    fields: dict = field(default_factory=dict)
    prompt: str | None = None


def toy_problems(k: int, prefix: str = "p") -> list[Problem]:
    return [
        Problem(
            id=f"{prefix}{i}",
            problem=f"{i} plus {i}?",
            answer=str(2 * i),
            prompt=f"What is {i} plus {i}?\n\n",
        )
        for i in range(k)
    ]


def parity_reward(completions: list[str], answers: list[str]) -> list[float]:
    return [float(len(c) % 2 == 0) for c in completions]


def last_word(text: str) -> str | None:
    words = text.split()
    return words[-1] if words else None


# Engine fixtures: prompts, every schedule, a teacher-forced reference and EOS ids that end rows early.

PROMPTS = [
    "The cat sat on the mat.",
    "Let's think",
    "A train leaves at 3 pm and travels 60 miles per hour for 2 hours. How far?",
    "12 plus",
]


def encode(tokenizer, texts):
    return [tokenizer.encode(t) for t in texts]


def teacher_forced_logprobs(model, prompt: list[int], completion: list[int]) -> torch.Tensor:
    """log p(completion_t | prompt, completion_<t) from one unpadded full forward pass."""
    ids = torch.tensor([prompt + completion])
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0].float()
    logp = torch.log_softmax(logits[len(prompt) - 1 : -1], dim=-1)
    return logp.gather(1, torch.tensor(completion)[:, None]).squeeze(1)


SCHEDULES = [
    WordSchedule(p=0.5, max_gap=4),
    TokenSchedule(p=0.5),
    StepSchedule(first_author="senior", max_rounds=150),
    ChunkSchedule(chunk_size=3),
    SoloSchedule("senior"),
    SoloSchedule("junior"),
]


def frequent_eos(tokenizer):
    """EOS ids that end rows at different times, so finished-row compaction runs mid-generation."""
    return list(range(5, len(tokenizer), 9))


def assert_same_outputs(a, b, atol: float = 0.0):
    """Two TandemOutputs agree: identical tokens, authors and finish reasons; log-probs equal (atol 0)
    or within `atol` (a path that sums in another order)."""
    assert a.completion_ids == b.completion_ids
    assert a.authors == b.authors and a.finish_reasons == b.finish_reasons
    for x, y in ((a.senior_logprob, b.senior_logprob), (a.junior_logprob, b.junior_logprob)):
        assert (x is None) == (y is None)
        if x is not None and atol == 0:
            assert torch.equal(x, y)
        elif x is not None:
            torch.testing.assert_close(x, y, atol=atol, rtol=0)


EVAL_OPTIONS = ("score_fn", "extract_fn", "progress", "fresh", "refuse_lossy")
PARTNER_OPTIONS = ("identities", "junior_tokenizer", "paths")


def evaluate_models(senior, junior, tokenizer, benchmarks: dict, out, **kw):
    """`trlvr.eval.runner.evaluate` on two in-memory models, with every setting as a keyword: EvalSpec
    fields (`decoding` = {temperature, top_p, top_k}), evaluate's options, and Partners.of's
    (identities, junior_tokenizer, paths; `engine_options` go to make_pair)."""
    from trlvr.eval.runner import Partners, evaluate
    from trlvr.eval.spec import EvalSpec

    options = {k: kw.pop(k) for k in EVAL_OPTIONS if k in kw}
    partner = {k: kw.pop(k) for k in PARTNER_OPTIONS if k in kw}
    partner.update(kw.pop("engine_options", None) or {})
    kw.update(kw.pop("decoding", None) or {})
    if "decode" in partner:
        kw["decode"] = partner["decode"]
    partners = Partners.of(senior, junior, tokenizer, **partner)
    return evaluate(partners, benchmarks, EvalSpec(**kw), out, **options)


def lay_out_hub_cache(
    hub_cache: Path,
    repo: str,
    folder: Path,
    revision: str = "0123456789abcdef" * 2 + "01234567",
    only: tuple[str, ...] | None = None,
) -> Path:
    """`folder`'s files as the Hugging Face cache holds a download of hub `repo` (what `hf download` writes
    under HF_HUB_CACHE): models--org--name/blobs/<sha256> and snapshots/<revision>/<file> linking to them,
    refs/main naming the revision. `only`: just those files (a partial download). The snapshot folder."""
    import hashlib
    import os

    root = hub_cache / ("models--" + repo.replace("/", "--"))
    snap = root / "snapshots" / revision
    (root / "blobs").mkdir(parents=True, exist_ok=True)
    snap.mkdir(parents=True, exist_ok=True)
    for f in sorted(folder.iterdir()):
        if f.is_file() and (only is None or f.name in only):
            data = f.read_bytes()
            blob = root / "blobs" / hashlib.sha256(data).hexdigest()
            blob.write_bytes(data)
            os.symlink(os.path.relpath(blob, snap), snap / f.name)
    (root / "refs").mkdir(exist_ok=True)
    (root / "refs" / "main").write_text(revision)
    return snap


def load_script(path: Path, name: str):
    """A script of the checkout that is no package module (tools/, bench/), imported from its path."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod

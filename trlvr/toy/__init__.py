"""The toy world: arithmetic word problems, a jargon-writing senior and a plain-only junior.

    from trlvr.toy import prepare_world, load_world
    card = prepare_world("runs/toy")            # copies the shipped checkpoints, measures the card
    senior, junior, tok = load_world("runs/toy")

Modules: task (problems, splits), dialects (plain / jargon CoT, prompt, is_jargon,
extract_boxed_int), tokenizer, models (Qwen3 builders, SFT loop), measure (card figures with the
tandem engine), world (prepare_world).
"""

from trlvr.toy.dialects import (
    DIALECTS,
    extract_boxed_int,
    is_jargon,
    make_prompt,
    render_first_step,
    render_solution,
)
from trlvr.toy.jargon import JARGON_RATE  # registers the toy world's per-sample metric with the reports
from trlvr.toy.task import ToyProblem, generate_problems, make_splits

__all__ = [
    "DIALECTS",
    "JARGON_RATE",
    "extract_boxed_int",
    "generate_problems",
    "is_jargon",
    "load_world",
    "make_prompt",
    "make_splits",
    "prepare_world",
    "render_first_step",
    "render_solution",
    "ToyProblem",
]


def __getattr__(name):  # lazy: importing trlvr.toy must not pull in torch/transformers
    if name in ("prepare_world", "load_world"):
        from trlvr.toy import world

        return getattr(world, name)
    raise AttributeError(name)

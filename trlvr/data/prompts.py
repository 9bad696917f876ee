"""Prompt text for a problem: the paper's instruction after the problem, in the chat template."""

from __future__ import annotations

from typing import Any

from trlvr.data.schema import Problem

DEFAULT_TEMPLATE = "{problem} Let's think step by step and output the final answer within \\boxed{{}}."


def build_prompt(
    problem_text: str, tokenizer: Any = None, template: str = DEFAULT_TEMPLATE, use_chat_template: bool = True
) -> str:
    """The prompt string for ``problem_text``.

    ``template`` is a str.format pattern with ``{problem}``. When ``tokenizer`` has a chat
    template (and ``use_chat_template``), the text becomes one user message rendered with
    ``add_generation_prompt=True``; otherwise the plain text is returned.

    >>> build_prompt("What is 2+2?")
    "What is 2+2? Let's think step by step and output the final answer within \\\\boxed{}."
    """
    text = template.format(problem=problem_text)
    if use_chat_template and tokenizer is not None and getattr(tokenizer, "chat_template", None):
        return tokenizer.apply_chat_template(
            [{"role": "user", "content": text}], tokenize=False, add_generation_prompt=True
        )
    return text


def prompt_for(
    problem: Problem, tokenizer: Any = None, template: str = DEFAULT_TEMPLATE, use_chat_template: bool = True
) -> str | list[dict]:
    """A row's own ``prompt`` verbatim when it has one (text, or chat messages for
    :func:`encode_prompt`), else :func:`build_prompt` of its problem."""
    if problem.prompt is not None:
        return problem.prompt
    return build_prompt(problem.problem, tokenizer, template, use_chat_template)


def encode_prompt(prompt: str | list[dict], tokenizer: Any) -> list[int]:
    """Prompt token ids: the ONE place a prompt becomes ids (training, eval and the toy world call it).

    ``prompt`` is rendered text (from :func:`prompt_for`) or a list of chat messages. Text gets the
    tokenizer's special tokens (e.g. a Llama BOS) unless it already starts with the BOS text, which a
    chat template writes itself; messages go through the chat template with a generation prompt.
    """
    if isinstance(prompt, list):
        out = tokenizer.apply_chat_template(
            prompt, add_generation_prompt=True, tokenize=True, return_dict=True
        )
        return list(out["input_ids"])
    bos = getattr(tokenizer, "bos_token", None)
    add_special = not (bos and prompt.startswith(bos))
    return list(tokenizer(prompt, add_special_tokens=add_special)["input_ids"])

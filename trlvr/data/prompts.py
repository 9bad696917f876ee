"""Prompt text for a problem: the paper's instruction after the problem, in the chat template.

`encode_prompt` is the one prompt -> ids path; `lossy_prompts` finds prompts it cannot spell.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from trlvr.data.schema import Problem

DEFAULT_TEMPLATE = "{problem} Let's think step by step and output the final answer within \\boxed{{}}."
# The authors' instruction, byte for byte (CSSLab/Tandem-RLVR data/build_deepscaler.py and
# data/build_evals.py, BOXED_INSTR, appended to the problem in training and evaluation alike;
# commit 7ba85e0f6cee)
AUTHORS_INSTRUCTION = (
    " Solve the following math problem step by step. Put your final answer "
    "inside \\boxed{}, like \\boxed{42} or \\boxed{\\frac{1}{2}}."
)
# name -> (str.format pattern with {problem}, chat-template keyword arguments)
PROMPT_TEMPLATES: dict[str, tuple[str, dict]] = {
    "trlvr": (DEFAULT_TEMPLATE, {}),
    # the release's one prompt route (eval/common.chat_prefix): enable_thinking=False (inert for
    # Instruct-2507, keeps a hybrid Qwen3 out of thinking mode), the plain call for a template that
    # rejects the argument
    "authors": (
        "{problem}" + AUTHORS_INSTRUCTION.replace("{", "{{").replace("}", "}}"),
        {"enable_thinking": False},
    ),
}
DEFAULT_PROMPT_TEMPLATE = "trlvr"


def template_of(name: str) -> tuple[str, dict]:
    """(pattern, chat keyword arguments) of a template name, or of a pattern (one holding ``{problem}``)."""
    if name in PROMPT_TEMPLATES:
        return PROMPT_TEMPLATES[name]
    if "{problem}" in name:
        return name, {}
    raise ValueError(f"unknown prompt template {name!r}: one of {', '.join(PROMPT_TEMPLATES)}")


def build_prompt(
    problem_text: str, tokenizer: Any = None, template: str = DEFAULT_TEMPLATE, use_chat_template: bool = True
) -> str:
    """The prompt string for ``problem_text``.

    ``template`` is a name in ``PROMPT_TEMPLATES`` ("trlvr", "authors") or a str.format pattern with
    ``{problem}``. When ``tokenizer`` has a chat template (and ``use_chat_template``), the text becomes one
    user message rendered with ``add_generation_prompt=True`` (and the template's keyword arguments: "authors"
    passes ``enable_thinking=False``, as the authors' code does); otherwise the plain text is returned.

    >>> build_prompt("What is 2+2?")
    "What is 2+2? Let's think step by step and output the final answer within \\\\boxed{}."
    >>> build_prompt("What is 2+2?", template="authors")[12:45]
    ' Solve the following math problem'
    """
    pattern, chat_kwargs = template_of(template)
    text = pattern.format(problem=problem_text)
    if use_chat_template and tokenizer is not None and getattr(tokenizer, "chat_template", None):
        messages = [{"role": "user", "content": text}]
        try:
            return tokenizer.apply_chat_template(
                messages, tokenize=False, add_generation_prompt=True, **chat_kwargs
            )
        except (
            TypeError,
            ValueError,
        ):  # a template that rejects the argument has no thinking mode to turn off
            if not chat_kwargs:
                raise
            return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    return text


def prompt_for(
    problem: Problem, tokenizer: Any = None, template: str = DEFAULT_TEMPLATE, use_chat_template: bool = True
) -> str | list[dict]:
    """A row's own ``prompt`` verbatim when it has one (text, or chat messages for
    `encode_prompt`), else `build_prompt` of its problem."""
    if problem.prompt is not None:
        return problem.prompt
    return build_prompt(problem.problem, tokenizer, template, use_chat_template)


def encode_prompt(prompt: str | list[dict], tokenizer: Any) -> list[int]:
    """Prompt token ids: the ONE place a prompt becomes ids (training, eval and the toy world call it).

    ``prompt`` is rendered text (from `prompt_for`) or a list of chat messages. Text gets the
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


class LossyPrompt(NamedTuple):
    """A prompt the tokenizer cannot spell: `index` in the list checked, the text as compared and
    what comes back from decode(encode(...)) (both with special tokens removed, ends stripped)."""

    index: int
    original: str
    roundtrip: str


def _without_special_tokens(text: str, tokenizer: Any) -> str:
    for token in sorted(getattr(tokenizer, "all_special_tokens", None) or [], key=len, reverse=True):
        if token:
            text = text.replace(token, "")
    return text


def roundtrip(prompt: str | list[dict], tokenizer: Any) -> tuple[str, str]:
    """(prompt text, decode(encode_prompt(prompt))) as :func:`lossy_prompts` compares them."""
    if isinstance(prompt, list):
        text = tokenizer.apply_chat_template(prompt, tokenize=False, add_generation_prompt=True)
    else:
        text = prompt
    ids = encode_prompt(prompt, tokenizer)
    back = tokenizer.decode(ids, skip_special_tokens=True, clean_up_tokenization_spaces=False)
    return _without_special_tokens(text, tokenizer).strip(), back.strip()


def lossy_prompts(tokenizer: Any, prompts: list[str | list[dict]]) -> list[LossyPrompt]:
    """The prompts that do not survive the tokenizer: decode(encode(prompt)) != prompt.

    The rule: encode with :func:`encode_prompt` (the ids the model reads), decode with
    ``skip_special_tokens=True`` and no clean-up of spaces; compare that with the prompt text
    (chat messages rendered with the chat template) from which every special-token string (BOS,
    EOS, the template's role markers) is removed; both sides have their leading and trailing
    whitespace stripped (a SentencePiece prefix space or a BOS's space is not a loss). Everything
    else must come back exactly: a character mapped to unk, dropped, or a space normalised away
    counts. Call it once per problem, not per rollout.

    >>> from trlvr.toy.tokenizer import train_bpe_tokenizer
    >>> tok = train_bpe_tokenizer(["ab ab"], vocab_size=40, byte_alphabet=False)
    >>> lossy_prompts(tok, ["ab", "abc"])
    [LossyPrompt(index=1, original='abc', roundtrip='ab')]
    """
    out = []
    for i, prompt in enumerate(prompts):
        text, back = roundtrip(prompt, tokenizer)
        if text != back:
            out.append(LossyPrompt(i, text, back))
    return out


def lost_characters(original: str, back: str) -> str:
    """The characters of `original` that `back` lacks, once each in order of appearance (a dropped
    space shows as ' ' only when no space is left); '' when only the order or count changed."""
    have = set(back)
    return "".join(dict.fromkeys(c for c in original if c not in have))


def describe_lossy(lossy: list[LossyPrompt], total: int, what: str = "prompts") -> str:
    """One warning line: how many of `total` lose characters and what the first one loses."""
    first = lossy[0]
    lost = lost_characters(first.original, first.roundtrip)
    shown = f"loses {lost!r}" if lost else f"comes back as {first.roundtrip[:80]!r}"
    return (
        f"{len(lossy)} of {total} {what} do not survive the tokenizer (decode(encode(prompt)) differs; "
        f"the model reads another text): the first, #{first.index}, {shown}"
    )

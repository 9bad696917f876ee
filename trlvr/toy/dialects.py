r"""Two chain-of-thought dialects for the same solution, and the prompt.

Each step is its own paragraph (steps are separated by "\n\n"); the last paragraph holds the
answer as \boxed{N}.

    plain:           47 plus 18 is 65.\n\n65 minus 12 is 53.\n\nThe answer is \boxed{53}.
    jargon:          <<47 +18 =65>>\n\n<<65 -12 =53>>\n\n\boxed{53}
    jargon-compact:  <<47+18=65>>\n\n<<65-12=53>>\n\n\boxed{53}   (world option, see below)

Both models learn plain; only the senior is taught jargon (a GSM8K-style calculator annotation).

Why the jargon looks like this (the later RL experiment depends on it):

* Authorship in the tandem word schedule is redrawn right after every word-start token ("Ġ",
  a leading space) and otherwise only after 32 tokens without one. The tokenizer splits numbers
  into single digits (a space stays glued to the first digit), so a jargon step
  "<<47 +18 =65>>" is 10 tokens of which " +" and " =" start words. A fully compact
  "<<47+18=65>>" would contain no word start at all: a senior that drew the first token of a
  3-step jargon solution (~35 tokens) would write nearly all of it alone, the 32-token backstop
  firing only near the \boxed{} line, and jargon rollouts would rarely be disturbed by the
  junior. With " +" and " =" every jargon step has two redraws *inside* the annotation, right
  before the second operand and right before the result, so with p = 0.5 the junior writes a
  token inside most jargon steps (the senior keeps a whole step with probability ~1/4). The
  junior never saw "<<", "+", "=" or ">>" in training, so it writes the wrong thing there and the
  team's answer goes wrong: tandem rollouts whose senior writes jargon fail much more often than
  plain ones.
* Plain steps have a word start before each operand and before the result (" plus", " 18",
  " is", " 65"), all words the junior knows: a takeover there is in-distribution for both
  models, so plain tandem rollouts mostly succeed (limited by the junior's arithmetic).
* Solo, the senior is equally good in both dialects, so plain GRPO (solo rollouts) gives no
  pressure against jargon; only the tandem reward does.
* The junior cannot pick up a solution after a jargon step: the annotation's tokens are foreign
  to it and the running total sits after "=" instead of after " is", where it learned to read it.
  After a plain step it continues as in training. (Measured as junior_acc_after_*_step.)
* The step-handoff evaluation (senior and junior alternate one step each) inherits the same
  asymmetry: a jargon-writing senior hands the junior a context it cannot read.

"jargon-compact" (`WorldConfig(jargon="compact")`, `trlvr toy prepare --jargon compact`) is the
spaceless spelling of real GSM8K annotations ("<<48/2=24>>" holds no word start under Qwen's
tokenizer): a compact jargon solution has no word start at all, so in the word schedule only the
32-token backstop hands off inside it. It tests whether the tandem effect survives without the
in-annotation redraws above. A world is taught one jargon spelling, never both.
"""

from __future__ import annotations

import re

from trlvr.rewards import extract_boxed
from trlvr.toy.task import Op, ToyProblem

DIALECTS = ("plain", "jargon")
# The jargon's spelling: "spaced" (the default, shipped) writes " +" and " =" inside the annotation, so
# word starts fall inside it; "compact" writes "<<47+18=65>>" like real GSM8K annotations, with no word
# start inside (`trlvr toy prepare --jargon compact`).
JARGON_STYLES = {"spaced": "jargon", "compact": "jargon-compact"}


def dialects_for(jargon: str) -> tuple[str, str]:
    """("plain", the jargon dialect's name) for a jargon style."""
    if jargon not in JARGON_STYLES:
        raise ValueError(f"jargon must be one of {sorted(JARGON_STYLES)}, got {jargon!r}")
    return "plain", JARGON_STYLES[jargon]


# The paper's instruction is left out: it would be ~25% of every toy sequence for no information.
PROMPT_SUFFIX = "\n\n"
STEP_SEP = "\n\n"
_JARGON_RE = re.compile(r"<<[^<>]*>>")
_INT_RE = re.compile(r"\s*(-?\d+)\s*")


def make_prompt(problem: ToyProblem | str) -> str:
    """The exact text both models are conditioned on (no chat template)."""
    text = problem.text if isinstance(problem, ToyProblem) else problem
    return f"{text}{PROMPT_SUFFIX}"


def render_step(left: int, op: Op, result: int, dialect: str) -> str:
    if dialect == "plain":
        return f"{left} {op.word} {op.n} is {result}."
    if dialect == "jargon":
        return f"<<{left} {op.symbol}{op.n} ={result}>>"
    if dialect == "jargon-compact":
        return f"<<{left}{op.symbol}{op.n}={result}>>"
    raise ValueError(f"dialect must be one of {DIALECTS + ('jargon-compact',)}, got {dialect!r}")


def render_answer(answer: int, dialect: str) -> str:
    if dialect == "plain":
        return f"The answer is \\boxed{{{answer}}}."
    if dialect in ("jargon", "jargon-compact"):
        return f"\\boxed{{{answer}}}"
    raise ValueError(f"dialect must be one of {DIALECTS + ('jargon-compact',)}, got {dialect!r}")


def render_steps(problem: ToyProblem, dialect: str) -> list[str]:
    """The solution's paragraphs (steps, then the answer line), without separators."""
    steps = [render_step(a, op, b, dialect) for a, op, b in problem.steps()]
    return steps + [render_answer(problem.answer, dialect)]


def render_solution(problem: ToyProblem, dialect: str) -> str:
    """The full chain of thought in `dialect` (no EOS: append the tokenizer's EOS for training)."""
    return STEP_SEP.join(render_steps(problem, dialect))


def render_first_step(problem: ToyProblem, dialect: str) -> str:
    """The first step only, without the trailing "\\n\\n" (for the handoff figure)."""
    a, op, b = problem.steps()[0]
    return render_step(a, op, b, dialect)


def is_jargon(text: str) -> bool:
    """True when `text` contains a calculator annotation "<<...>>" (or an opened "<<")."""
    return bool(_JARGON_RE.search(text)) or "<<" in text


def extract_boxed_int(text: str) -> int | None:
    """The integer in the last complete \\boxed{N} of `text` (the reward's extraction), or None."""
    boxed = extract_boxed(text)
    found = _INT_RE.fullmatch(boxed) if boxed is not None else None
    return int(found.group(1)) if found else None

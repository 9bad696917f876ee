"""The evaluation suite's defaults, in one place for the library and `trlvr eval` (no torch import).

Decoding and budget follow the method notes (Qwen3 thinking-mode sampling; the authors' budget
rule min(3000, context - prompt - 8) per problem when the model's context length is known).
"""

from __future__ import annotations

SUITE_NAMES = ("solo", "handoff", "handoff-paper", "dose", "legibility", "drift", "junior", "prefix")
DEFAULT_SUITE = ("solo", "handoff", "dose", "legibility", "drift", "junior")  # prefix: asked for by name
DEFAULT_PREFIX_KS = (
    0,
    25,
    50,
    75,
    100,
)  # prefix-K: the junior continues the first K% of the senior's solo trace
DEFAULT_DOSE_SHARES = (0.25, 0.5, 0.75)  # junior shares; senior p = 0.75, 0.5, 0.25
DEFAULT_DECODING = {"temperature": 0.7, "top_p": 0.8, "top_k": 20}
HANDOFF_MAX_ROUNDS = 150  # a round = one senior step + one junior step, as in the authors' code
# handoff-paper: the paper-era handoff evaluation (CSSLab/Tandem-RLVR
# tandem_eval/MATH/eval_sentence_handoff.py): the handoff schedule with no round cap, its own decoding and n
# whatever the run's (asked for by name)
PAPER_HANDOFF = {"decoding": {"temperature": 0.6, "top_p": 0.95, "top_k": 0}, "n": 4, "max_rounds": None}
N = 8  # samples per problem and protocol
KS = (1, 2, 4, 8)
MAX_NEW_TOKENS = 3000  # the budget's cap; with a known context: min(3000, context - prompt - 8)
BUDGET_MARGIN = 8  # tokens the authors' rule keeps free below the context length
BATCH_SIZE = 64  # sequences per generation call
SCORE_BATCH_SIZE = 8  # sequences per teacher-forced scoring pass
SEED = 0
NUM_RESAMPLES = 2000
# Upper bounds of the counts that size memory before the first sample: every (problem, sample) item of
# a protocol is planned up front, and the bootstrap draws resamples x problems indices at once.
MAX_N = 10_000  # samples per problem (pass@k curves use up to ~1000)
MAX_RESAMPLES = 1_000_000

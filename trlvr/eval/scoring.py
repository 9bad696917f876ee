"""Teacher-forced legibility and drift of completions under a senior and a junior.

For each (prompt, completion) both models read prompt + completion in one forward pass; at every
completion position we keep the junior's surprisal of the emitted token (legibility) and
KL(senior || junior) between the two full next-token distributions (drift).

Memory: full logits are (B, L, V), too big for long completions with a 150k vocabulary, so we
run the decoder body for hidden states and apply the LM head only at completion positions, in
chunks of `chunk_tokens` rows. Models whose head does more than a linear map (logit soft-capping)
fall back to full logits.

What this file does not know: sampling, files, metric aggregation over problems.
Per-token lists cover every completion token, the final EOS included (as the engine's mask does);
`text_means` gives the per-sample legibility and drift over the text only (the authors' choice:
the final EOS is left out unless `include_eos`).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from trlvr.engine.vocab import shared_ids
from trlvr.eval.metrics import token_cross_entropy, token_kl


@dataclass
class TokenScores:
    """Scores of one completion; lists have one entry per completion token."""

    junior_logprobs: list[float]  # log p_junior(token | prefix)
    senior_logprobs: list[float]  # log p_senior(token | prefix)
    kl: list[float]  # KL(senior || junior) of the next-token distributions, nats

    @property
    def junior_ce(self) -> float:
        """Mean per-token cross-entropy of the junior (nats): the legibility cost."""
        return -sum(self.junior_logprobs) / max(len(self.junior_logprobs), 1)

    @property
    def mean_kl(self) -> float:
        return sum(self.kl) / max(len(self.kl), 1)


def text_means(
    scores: TokenScores, ends_with_eos: bool, include_eos: bool = False
) -> tuple[float, float] | None:
    """(junior CE, KL) of one sample averaged over its tokens, the final EOS left out unless
    `include_eos`; None when no token is left (a completion that is only an EOS)."""
    m = len(scores.kl) - (1 if ends_with_eos and not include_eos else 0)
    if m <= 0:
        return None
    return -sum(scores.junior_logprobs[:m]) / m, sum(scores.kl[:m]) / m


def _completion_hidden(model, ids: torch.Tensor, attn: torch.Tensor, rows: torch.Tensor, cols: torch.Tensor):
    """Return a function chunk(start, stop) -> logits (stop-start, V) at positions (rows, cols)."""
    has_softcap = getattr(model.config, "final_logit_softcapping", None) is not None
    decoder = model.get_decoder() if hasattr(model, "get_decoder") else None
    head = model.get_output_embeddings()
    if decoder is None or head is None or has_softcap:
        logits = model(input_ids=ids, attention_mask=attn).logits  # (B, L, V) fallback
        picked = logits[rows, cols]
        return lambda a, b: picked[a:b]
    hidden = decoder(input_ids=ids, attention_mask=attn).last_hidden_state  # (B, L, H)
    picked = hidden[rows, cols]  # (N, H), only the positions that predict completion tokens
    return lambda a, b: head(picked[a:b])


@torch.no_grad()
def score_completions(
    senior,
    junior,
    prompts: list[list[int]],
    completions: list[list[int]],
    *,
    pad_token_id: int = 0,
    batch_size: int = 8,
    chunk_tokens: int = 1024,
    n_ids: int | None = None,
) -> list[TokenScores]:
    """Teacher-forced per-token scores of each completion after its prompt, both models.

    n_ids: the shared tokenizer's size; both models' logits are cut to it (and to the smaller of their
    widths), so embedding rows past the tokenizer (padding: Qwen2.5-0.5B has 151,936 rows and 7B
    152,064 for one tokenizer) are in no log-prob or KL, as in the engine that sampled the tokens.

    Sequences are right-padded (prompt + completion), so default position ids are right.
    """
    if len(prompts) != len(completions):
        raise ValueError(f"{len(prompts)} prompts but {len(completions)} completions")
    device = next(senior.parameters()).device
    was = (senior.training, junior.training)
    senior.eval()
    junior.eval()
    out: list[TokenScores] = []
    try:
        for start in range(0, len(prompts), batch_size):
            ps, cs = prompts[start : start + batch_size], completions[start : start + batch_size]
            seqs = [p + c for p, c in zip(ps, cs, strict=True)]
            L = max(len(s) for s in seqs)
            ids = torch.full((len(seqs), L), pad_token_id, dtype=torch.long)
            attn = torch.zeros(len(seqs), L, dtype=torch.long)
            rows, cols, targets = [], [], []
            for i, (p, c) in enumerate(zip(ps, cs, strict=True)):
                if not p:
                    raise ValueError(f"prompt {start + i} is empty; scoring needs at least one prompt token")
                ids[i, : len(p) + len(c)] = torch.tensor(p + c, dtype=torch.long)
                attn[i, : len(p) + len(c)] = 1
                # logits at position t predict token t+1: completion token j is predicted at len(p)-1+j
                rows += [i] * len(c)
                cols += range(len(p) - 1, len(p) - 1 + len(c))
                targets += c
            ids, attn = ids.to(device), attn.to(device)
            rows_t = torch.tensor(rows, dtype=torch.long, device=device)
            cols_t = torch.tensor(cols, dtype=torch.long, device=device)
            tgt = torch.tensor(targets, dtype=torch.long, device=device)  # (N,)
            s_logits = _completion_hidden(senior, ids, attn, rows_t, cols_t)
            j_logits = _completion_hidden(junior, ids, attn, rows_t, cols_t)
            j_lp, s_lp, kl = [], [], []
            for a in range(0, len(targets), chunk_tokens):
                b = min(a + chunk_tokens, len(targets))
                ls, lj = s_logits(a, b), j_logits(a, b)  # (n, V_senior), (n, V_junior)
                n = shared_ids(n_ids, ls.shape[-1], lj.shape[-1])
                ls, lj = ls[:, :n], lj[:, :n]  # (n, V) each: the shared ids
                s_lp.append(-token_cross_entropy(ls, tgt[a:b]))
                j_lp.append(-token_cross_entropy(lj, tgt[a:b]))
                kl.append(token_kl(ls, lj))
            cat = (lambda xs: torch.cat(xs).cpu().tolist()) if targets else (lambda xs: [])
            j_all, s_all, kl_all = cat(j_lp), cat(s_lp), cat(kl)
            offset = 0
            for c in cs:
                sl = slice(offset, offset + len(c))
                out.append(TokenScores(j_all[sl], s_all[sl], kl_all[sl]))
                offset += len(c)
    finally:
        senior.train(was[0])
        junior.train(was[1])
    return out

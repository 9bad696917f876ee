"""`TandemOutput`: what one batched tandem generation returns.

Per-sequence Python lists for consumers such as TRL's `rollout_func`, plus the padded tensors
they came from for vectorised consumers (training metrics, evaluation).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from trlvr.algos import author_stats

# index = code stored in `finish_codes`. "unrepresentable" (text pairing only, `trlvr.engine.text_pair`):
# a partner's tokenizer cannot spell the shared text (a character missing from its vocabulary without
# byte fallback, control bytes, bytes that are no UTF-8), so the row ended at the longest prefix both
# spell, closed by an EOS no model sampled; evaluation counts these rows (<protocol>/unrepresentable).
FINISH_REASONS = ("length", "eos", "rounds", "unrepresentable")


@dataclass
class TandemOutput:
    """Result of `TandemGenerator.generate` for B sequences.

    Tensor fields are (B, T) with T = the longest completion; positions past a sequence's end
    hold pad ids, `False` authors and zero log-probs, and `completion_mask` is False there.
    """

    tokens: torch.Tensor  # (B, T) long, emitted ids
    senior_authored: torch.Tensor  # (B, T) bool, True = senior wrote the token
    completion_mask: torch.Tensor  # (B, T) bool, True = inside the completion (EOS included)
    senior_logprob: torch.Tensor | None  # (B, T) float32, log p_senior(token), temperature 1, no truncation
    junior_logprob: torch.Tensor | None  # (B, T) float32, log p_junior(token); None when junior not run
    finish_codes: torch.Tensor  # (B,) long, index into FINISH_REASONS
    num_sub_batches: int = 1  # > 1 when the batch ran in parts to fit the memory budget
    plan: dict | None = None  # how it ran: decode path, compile, sub-batches, the memory plan per CUDA device

    @staticmethod
    def concat(parts: list[TandemOutput], pad_id: int = 0) -> TandemOutput:
        """Stack outputs of consecutive sub-batches into one (right-padded to the longest completion)."""
        T = max(p.tokens.shape[1] for p in parts)

        def cat(name: str, fill):
            tensors = [getattr(p, name) for p in parts]
            if any(t is None for t in tensors):
                return None
            padded = [torch.nn.functional.pad(t, (0, T - t.shape[1]), value=fill) for t in tensors]
            return torch.cat(padded)

        return TandemOutput(
            tokens=cat("tokens", pad_id),
            senior_authored=cat("senior_authored", False),
            completion_mask=cat("completion_mask", False),
            senior_logprob=cat("senior_logprob", 0.0),
            junior_logprob=cat("junior_logprob", 0.0),
            finish_codes=torch.cat([p.finish_codes for p in parts]),
            num_sub_batches=sum(p.num_sub_batches for p in parts),
        )

    @property
    def lengths(self) -> torch.Tensor:
        return self.completion_mask.sum(dim=1)

    def _rows(self, t: torch.Tensor) -> list[list]:
        return [row[:n] for row, n in zip(t.tolist(), self.lengths.tolist(), strict=True)]

    @property
    def completion_ids(self) -> list[list[int]]:
        return self._rows(self.tokens)

    @property
    def authors(self) -> list[list[int]]:
        """1 = senior, 0 = junior, one entry per completion token."""
        return self._rows(self.senior_authored.long())

    @property
    def senior_logprobs(self) -> list[list[float]] | None:
        return None if self.senior_logprob is None else self._rows(self.senior_logprob)

    @property
    def junior_logprobs(self) -> list[list[float]] | None:
        return None if self.junior_logprob is None else self._rows(self.junior_logprob)

    @property
    def finish_reasons(self) -> list[str]:
        return [FINISH_REASONS[c] for c in self.finish_codes.tolist()]

    def stats(self) -> dict[str, torch.Tensor]:
        """Per-sequence authorship statistics, each (B,): see `trlvr.algos.author_stats`."""
        return author_stats(self.senior_authored, self.completion_mask)

    @property
    def switches(self) -> torch.Tensor:
        """(B,) number of author changes inside each completion."""
        return self.stats()["switches"].long()

    @property
    def num_switches(self) -> list[int]:
        return self.switches.tolist()

    @property
    def senior_share(self) -> torch.Tensor:
        """(B,) fraction of each completion written by the senior (0 for an empty completion)."""
        return self.stats()["senior_share"]

    def __len__(self) -> int:
        return self.tokens.shape[0]

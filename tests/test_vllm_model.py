"""`TandemForCausalLM.forward` under vLLM's piecewise CUDA graphs (review finding 1), driven on CPU.

vLLM captures each compilation unit's pieces into one shared graph pool, and turns the output of a unit's
*last* piece into a weak reference (`vllm/compilation/backends.py`, `weak_ref_output=is_last_graph`;
`compilation/cuda_graph.py`): its memory goes back to the pool, "only safe ... because the output of the
last graph will not be used by any other cuda graph". The composite runs two units (the senior's, then the
junior's), so the junior's pieces may write where the senior's output lies before `torch.cat` reads it.
A CPU engine has no CUDA graphs; these tests stand in for the pool with one buffer both units write into.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

pytest.importorskip("vllm")
pytestmark = pytest.mark.vllm

from trlvr.vllm.model import TandemForCausalLM  # noqa: E402


class PoolUnit(nn.Module):
    """A compiled unit whose last piece's output lives in the shared pool (`pool`), as under PIECEWISE
    graphs: the next unit's replay writes into the same memory."""

    def __init__(self, pool: torch.Tensor, hidden: int, scale: float):
        super().__init__()
        self.pool, self.hidden, self.scale = pool, hidden, scale

    def forward(self, input_ids, positions):
        out = self.pool[: input_ids.shape[0], : self.hidden]
        out.copy_(
            (input_ids[:, None].float() + positions[:, None].float()) * self.scale
            + torch.arange(self.hidden, dtype=torch.float32)
        )
        return out


def composite(senior_hidden: int, junior_hidden: int, tokens: int) -> TandemForCausalLM:
    model = TandemForCausalLM.__new__(TandemForCausalLM)
    nn.Module.__init__(model)
    pool = torch.zeros(tokens, max(senior_hidden, junior_hidden))
    model.senior = PoolUnit(pool, senior_hidden, 1.0)
    model.junior = PoolUnit(pool, junior_hidden, -3.0)
    model.senior_hidden = senior_hidden
    return model


@pytest.mark.parametrize(("hs", "hj"), [(8, 8), (8, 4), (4, 8)])
def test_the_seniors_hidden_states_survive_the_juniors_graphs(hs, hj):
    model = composite(hs, hj, tokens=5)
    ids, pos = torch.tensor([3, 9, 4, 1, 7]), torch.arange(5)
    want_senior = (ids + pos)[:, None].float() + torch.arange(hs, dtype=torch.float32)
    want_junior = (ids + pos)[:, None].float() * -3.0 + torch.arange(hj, dtype=torch.float32)
    out = model(ids, pos)
    assert out.shape == (5, hs + hj)
    torch.testing.assert_close(out[:, :hs], want_senior)
    torch.testing.assert_close(out[:, hs:], want_junior)

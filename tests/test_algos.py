"""trlvr.algos: hand-worked numbers, and the masks' failure modes."""

from __future__ import annotations

import pytest
import torch

from trlvr.algos import (
    AuthorMaskError,
    author_stats,
    check_author_mask,
    check_has_junior_tokens,
    split_by_share,
)


def test_check_author_mask():
    check_author_mask([[1, 0], [0]], [[3, 4], [5]])
    with pytest.raises(AuthorMaskError, match="no author mask"):
        check_author_mask(None, [[3]])
    with pytest.raises(AuthorMaskError, match="2 entries for 3 tokens"):
        check_author_mask([[1, 0]], [[3, 4, 5]])
    with pytest.raises(AuthorMaskError, match="0 \\(junior\\) or 1"):
        check_author_mask([[2]], [[3]])


def test_junior_token_check():
    check_has_junior_tokens(junior_tokens=1, total_tokens=100, p=0.5)
    check_has_junior_tokens(junior_tokens=0, total_tokens=100, p=1.0)  # p = 1: senior only is right
    check_has_junior_tokens(junior_tokens=0, total_tokens=0, p=0.5)
    # issue 29: an all-senior batch is possible at any p < 1 (likely at p = 0.99); only the impossible is refused
    check_has_junior_tokens(junior_tokens=0, total_tokens=100, p=0.5, writers={"senior", "junior"})
    with pytest.raises(AuthorMaskError, match="the junior never ran"):
        check_has_junior_tokens(junior_tokens=0, total_tokens=100, p=0.5, writers={"senior"})


def test_author_stats_hand_worked():
    # row 0: S J J S | pad  -> 4 tokens, 2 senior, switches S>J, J>S = 2
    # row 1: J | pad pad pad -> 1 token, 0 senior, 0 switches
    senior = torch.tensor([[1, 0, 0, 1, 1], [0, 1, 1, 1, 1]], dtype=torch.bool)
    done = torch.tensor([[1, 1, 1, 1, 0], [1, 0, 0, 0, 0]], dtype=torch.bool)
    s = author_stats(senior, done)
    assert s["length"].tolist() == [4, 1]
    assert s["senior_tokens"].tolist() == [2, 0] and s["junior_tokens"].tolist() == [2, 1]
    assert s["senior_share"].tolist() == [0.5, 0.0]
    assert s["switches"].tolist() == [2, 0]


def test_split_by_share():
    rewards = torch.tensor([1.0, 0.0, 1.0, float("nan")])
    junior_share = torch.tensor([0.1, 0.9, 0.2, 0.8])
    assert split_by_share(rewards, junior_share) == (1.0, 0.0)


def test_doctests():
    import doctest

    import trlvr.algos

    result = doctest.testmod(trlvr.algos)
    assert result.failed == 0 and result.attempted > 0

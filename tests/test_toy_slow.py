"""Full-size toy figures from the shipped world (the preconditions of the tandem RL experiment)."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def card(tmp_path_factory):
    from trlvr.toy.world import prepare_world

    return prepare_world(tmp_path_factory.mktemp("toy") / "world", seed=0, progress=False)


def test_senior_strong(card):
    assert card["senior_solo_acc"] >= 0.85


def test_junior_middling(card):
    assert 0.30 <= card["junior_solo_acc"] <= 0.70


def test_senior_jargon_rate(card):
    assert 0.5 <= card["senior_jargon_rate"] <= 0.9


def test_junior_lost_after_jargon(card):
    assert card["junior_acc_after_jargon_step"] <= card["junior_acc_after_plain_step"] - 0.30


def test_tandem_hurts_jargon(card):
    assert card["tandem_acc_jargon"] < card["tandem_acc_plain"] - 0.15


def test_sizes(card):
    assert card["senior_params"] > 2 * card["junior_params"]
    assert card["vocab_size"] <= 512


def test_shipped_card_matches_a_fresh_measurement(card):
    """The figures shipped in trlvr/toy/assets/train_card.json hold for the current code (issue: stale card)."""
    import json

    from trlvr.toy.world import ASSETS_DIR

    shipped = json.loads((ASSETS_DIR / "train_card.json").read_text())
    assert shipped["ci95"], "the shipped card carries its intervals"
    for key, (lo, hi) in shipped["ci95"].items():
        assert lo <= card[key] <= hi, (key, card[key], (lo, hi))
        assert lo <= shipped[key] <= hi

"""Evaluation protocols as objects: one parse of a protocol name, its schedule, its suite entry."""

from __future__ import annotations

import pytest

from trlvr.engine import SoloSchedule, StepSchedule, WordSchedule
from trlvr.eval.protocols import parse_protocol, protocol_of_metric, protocols_for


def test_every_protocol_a_suite_asks_for_parses_back_to_its_schedule():
    names = protocols_for(["solo", "handoff", "dose", "junior"], (0.25, 0.5, 0.75))
    assert names == ["solo", "handoff", "dose-0.25", "dose-0.5", "dose-0.75", "junior"]
    parsed = [parse_protocol(n) for n in names]
    assert [p.entry for p in parsed] == ["solo", "handoff", "dose", "dose", "dose", "junior"]
    assert [p.needs_junior for p in parsed] == [False, True, True, True, True, True]
    solo, handoff, dose, *_ = (p.schedule(handoff_max_rounds=3) for p in parsed)
    assert solo == SoloSchedule("senior") and parsed[-1].schedule() == SoloSchedule("junior")
    assert isinstance(handoff, StepSchedule) and handoff.max_rounds == 3
    assert isinstance(dose, WordSchedule) and dose.p == pytest.approx(0.75)


@pytest.mark.parametrize("bad", ["dose-", "dose-x", "dose-1.5", "dose--0.1", "solos", ""])
def test_a_name_that_is_no_protocol_is_refused(bad):
    with pytest.raises(ValueError, match="unknown protocol"):
        parse_protocol(bad)


def test_metric_names_map_to_their_protocol():
    assert protocol_of_metric("dose-0.5/pass@1").junior_share == 0.5
    assert protocol_of_metric("handoff/round_capped").entry == "handoff"
    assert protocol_of_metric("legibility/junior_ce") is None and protocol_of_metric("drift/kl") is None


def test_an_eval_spec_is_valid_once_built_and_names_the_field():
    from trlvr.eval.spec import EvalSpec, SettingError

    for kw, field, text in (
        ({"n": 0}, "n", "n must be >= 1, got 0"),
        ({"n": 2, "ks": (1, 4)}, "ks", "[1, n = 2]"),
        ({"top_p": 0.0}, "top_p", "top_p must be in (0, 1]"),
        ({"suite": ("solo", "vibes")}, "suite", "unknown entries ['vibes']"),
    ):
        with pytest.raises(SettingError, match=__import__("re").escape(text)) as e:
            EvalSpec(**kw)
        assert e.value.field == field
    assert (
        str(SettingError("top_p", "top_p must be in (0, 1], got 0").as_flag("--top-p"))
        == "--top-p must be in (0, 1], got 0"
    )
    with pytest.raises(SettingError):
        EvalSpec(n=4, ks=(1, 2, 4)).replace(n=2)  # replace builds a new one: validated too


def test_protocol_names_are_read_without_torch():
    """Reports and selection read protocol names through trlvr.eval.suite, which imports no torch."""
    import subprocess
    import sys

    code = "import sys, trlvr.eval.suite, trlvr.eval.report; print('torch' in sys.modules)"
    assert (
        subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, check=True
        ).stdout.strip()
        == "False"
    )
    from trlvr.eval.suite import dose_points

    assert dose_points(["dose-0.5/pass@1", "solo/pass@1", "dose-0.25/pass@1", "dose-x/pass@1"]) == [
        (0.25, "dose-0.25/pass@1"),
        (0.5, "dose-0.5/pass@1"),
    ]


def test_handoff_paper_is_the_handoff_schedule_uncapped_at_the_paper_eras_decoding():
    """The paper-era handoff (tandem_eval/MATH/eval_sentence_handoff.py): T 0.6, top_p 0.95, n 4, no round cap."""
    from trlvr.eval.defaults import DEFAULT_DECODING

    assert protocols_for(["solo", "handoff", "handoff-paper"]) == ["solo", "handoff", "handoff-paper"]
    assert "handoff-paper" not in protocols_for(["solo", "handoff", "dose", "junior"])  # asked for by name
    paper, handoff = parse_protocol("handoff-paper"), parse_protocol("handoff")
    assert paper.entry == "handoff-paper" and paper.needs_junior
    assert paper.schedule(handoff_max_rounds=3) == StepSchedule(first_author="senior", max_rounds=None)
    assert paper.decoding(DEFAULT_DECODING) == {"temperature": 0.6, "top_p": 0.95, "top_k": 0}
    assert handoff.decoding(DEFAULT_DECODING) == DEFAULT_DECODING and (
        paper.samples(8),
        handoff.samples(8),
    ) == (4, 8)
    assert protocol_of_metric("handoff-paper/pass@4").entry == "handoff-paper"
    with pytest.raises(ValueError, match=r"max_rounds must be >= 1 \(or None: no cap\), got 0"):
        StepSchedule(max_rounds=0)


def test_an_uncapped_step_schedule_never_stops_a_row_a_capped_one_does():
    import torch

    from trlvr.engine.schedules import VocabTables

    V = 4  # token 1 ends a step
    tables = VocabTables(*(torch.zeros(V, dtype=torch.bool) for _ in VocabTables._fields))
    tables = tables._replace(step_end=torch.tensor([False, True, False, False]))
    rng = torch.Generator().manual_seed(0)
    for rounds, stops_at in ((2, 4), (None, None)):
        s = StepSchedule(max_rounds=rounds)
        state, authors = s.start(1, tables, rng), []
        for t in range(40):
            authors.append(bool(state.author[0]))
            state = s.advance(
                state, torch.tensor([1 if t % 2 else 2]), tables, rng
            )  # a step ends every 2 tokens
            if bool(state.stop[0]):
                assert stops_at == state.steps.item() and t == 2 * stops_at - 1
                break
        else:
            assert stops_at is None and state.steps.item() == 20
        assert authors[:6] == [True, True, False, False, True, True]  # senior first, strict alternation


def test_the_prompt_template_is_a_setting_of_the_evaluation_recorded_where_it_changes_samples():
    from trlvr.eval.spec import EvalSpec, SettingError

    with pytest.raises(SettingError, match="^prompt_template: 'paper'; choose from trlvr, authors") as e:
        EvalSpec(prompt_template="paper")
    assert e.value.field == "prompt_template"
    ours, theirs = EvalSpec(), EvalSpec(prompt_template="authors")
    assert (
        "prompt_template" not in ours.fingerprint_part(None, None, "boxed")["generation"]
    )  # old runs keep theirs
    assert theirs.fingerprint_part(None, None, "boxed")["generation"]["prompt_template"] == "authors"
    assert (
        ours.config_part(None, None, "boxed")["prompt_template"],
        theirs.config_part(None, None, "boxed")["prompt_template"],
    ) == ("trlvr", "authors")

"""The team in one place: who writes with the senior is a `trlvr.team.Team` (or one of its functions).

Outside `trlvr/team.py` and the engine (`trlvr/engine/`, whose capability rules and pair mechanisms are keyed by
the kinds), no module spells a junior or a pairing as a string: no "self" or "lockstep" literal, no comparison
of a pairing or a junior with "text" / "none" / "auto", no `== SELF`. It asks `trlvr.team` instead, as
tests/test_backends.py keeps backends' names in `trlvr.engine.backends`.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from trlvr.engine.capabilities import TEAM_KINDS, check_capabilities
from trlvr.errors import UserError
from trlvr.team import KINDS, LOCKSTEP, NONE, PAIRINGS, SELF, TEXT, Team, choose_pairing, kl_to_junior
from trlvr.toy.world import ASSETS_DIR

ROOT = Path(__file__).resolve().parents[1] / "trlvr"
EXEMPT = ("team.py", "engine/", "vllm/")  # vllm/: the optional backend, an engine of its own
UNAMBIGUOUS = ("self", "lockstep")  # a literal of these outside the team's room spells a junior or a pairing
WORDS = ("text", "none", "auto")  # these only where a pairing or a junior is compared


def _words_of(node) -> bool:
    return isinstance(node, ast.Constant) and node.value in WORDS


def name_uses(source: str, filename: str = "<source>") -> list[tuple[int, str]]:
    """(line, what) for each place `source` spells a junior or a pairing as a string."""
    found = []
    for node in ast.walk(ast.parse(source, filename=filename)):
        if isinstance(node, ast.Constant) and node.value in UNAMBIGUOUS:
            found.append((node.lineno, f"the literal {node.value!r}"))
        elif isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            said = ast.unparse(node)
            if any(_words_of(n) for n in sides) and ("pairing" in said or "junior" in said):
                found.append((node.lineno, "a pairing or a junior compared with a string"))
            elif any(
                isinstance(n, ast.Name | ast.Attribute) and ast.unparse(n).split(".")[-1] == "SELF"
                for n in sides
            ):
                found.append((node.lineno, "a comparison with SELF"))
    return found


# Sites not yet converted to `trlvr.team`, (path relative to trlvr/) -> count: the scan fails on any NEW one.
# Every site of issue 60 is converted; keep it empty.
NOT_YET: dict[str, int] = {}


def scan() -> dict[str, list[str]]:
    out = {}
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if rel.startswith(EXEMPT):
            continue
        uses = name_uses(path.read_text(), str(path))
        if uses:
            out[rel] = [f"trlvr/{rel}:{line}: {what}" for line, what in uses]
    return out


def test_no_module_outside_the_team_spells_a_junior_or_a_pairing():
    found = scan()
    new = {rel: uses for rel, uses in found.items() if len(uses) > NOT_YET.get(rel, 0)}
    assert new == {}, "ask trlvr.team (Team, is_self, is_text, SELF, ...) instead:\n" + "\n".join(
        u for uses in new.values() for u in uses
    )


def test_the_allow_list_shrinks_with_the_code():
    """An entry of NOT_YET larger than what is left is stale: lower it (or remove the file)."""
    found = scan()
    stale = {rel: (n, len(found.get(rel, []))) for rel, n in NOT_YET.items() if n != len(found.get(rel, []))}
    assert stale == {}


@pytest.mark.parametrize(
    "source",
    [
        'if tandem.junior == "self":\n    pass\n',
        "x = junior != SELF\n",
        "x = models.junior == m.SELF\n",
        'ok = pairing == "text"\n',
        'p = "lockstep"\n',
        'x = junior in (None, "self")\n',
        'x = self.pairing != "none"\n',
    ],
)
def test_the_scan_sees_each_form(source):
    assert name_uses(source)


def test_the_scan_leaves_other_text_alone():
    source = (
        '"""junior: self, lockstep or text."""\nrow["text"]\nif d.kind == "text":\n    pass\nself.x = 1\n'
    )
    assert name_uses(source) == []


def test_one_table_of_kinds_and_of_pairings():
    assert KINDS == TEAM_KINDS == (LOCKSTEP, TEXT, SELF, NONE)
    assert PAIRINGS == ("auto", LOCKSTEP, TEXT)


def test_kl_to_junior():
    assert (
        kl_to_junior(0.1, "junior") and not kl_to_junior(0.0, "junior") and not kl_to_junior(0.1, "initial")
    )


SENIOR, JUNIOR, CROSS = (str(ASSETS_DIR / n) for n in ("senior", "junior", "junior-cross"))


@pytest.mark.parametrize(
    ("junior", "arm", "beta", "kl_ref", "kind", "pairing", "loads"),
    [
        (JUNIOR, "tandem", 0.0, "initial", LOCKSTEP, LOCKSTEP, True),
        (CROSS, "tandem", 0.0, "initial", TEXT, TEXT, True),
        (SELF, "tandem", 0.0, "initial", SELF, LOCKSTEP, False),
        (None, "tandem", 0.0, "initial", NONE, None, False),
        (JUNIOR, "grpo", 0.0, "initial", NONE, LOCKSTEP, False),
        (JUNIOR, "grpo", 0.1, "junior", LOCKSTEP, LOCKSTEP, False),  # the KL reference reads the rollouts
        (JUNIOR, "tandem", 0.1, "junior", LOCKSTEP, LOCKSTEP, False),  # TRL loads it as the reference
    ],
)
def test_resolve(junior, arm, beta, kl_ref, kind, pairing, loads):
    team = Team.resolve(SENIOR, junior, arm=arm, beta=beta, kl_ref=kl_ref)
    assert (team.kind, team.pairing, team.loads_junior) == (kind, pairing, loads)
    assert team.kl_to_junior == (beta > 0 and kl_ref == "junior")
    assert team.is_self == (junior == SELF) and team.junior_model == (
        None if junior in (None, SELF) else junior
    )
    assert team.fingerprint() == (
        {}
        if pairing != TEXT
        else {"junior_tokenizer": team.fingerprint()["junior_tokenizer"], "pairing": "text"}
    )


def test_a_text_pair_records_its_junior_tokenizer():
    from trlvr.models import load_tokenizer, vocab_fingerprint

    team = Team.resolve(SENIOR, CROSS)
    assert team.fingerprint() == {
        "junior_tokenizer": vocab_fingerprint(load_tokenizer(CROSS))[:16],
        "pairing": "text",
    }


def test_resolve_refuses_in_one_line():
    with pytest.raises(UserError, match="tokenizers differ"):
        Team.resolve(SENIOR, CROSS, pairing="lockstep")
    with pytest.raises(UserError, match=r"^pairing: must be one of auto, lockstep, text, got 'tokens'$"):
        Team.resolve(SENIOR, JUNIOR, pairing="tokens")


def test_the_plan_carries_the_team_and_refuses_through_capabilities():
    team = Team.resolve(SENIOR, SELF, beta=0.1, kl_ref="junior")
    plan = team.plan("train")
    assert (plan.pairing, plan.backend, plan.requested) == (SELF, "hf", "auto") and plan.metrics
    with pytest.raises(UserError, match="junior_device"):
        check_capabilities(team.plan("train", junior_device=True))


def test_choose_pairing_is_the_teams():
    from trlvr.models import load_tokenizer

    s, j = load_tokenizer(SENIOR), load_tokenizer(CROSS)
    assert choose_pairing(s, s) == LOCKSTEP and choose_pairing(s, j) == TEXT


# ---- Team.load: the one place the pair's weights load -------------------------------------------------------


def _frozen(model) -> bool:
    return not model.training and not any(p.requires_grad for p in model.parameters())


def test_load_gives_each_kind_its_models():
    senior, junior = Team.resolve(SENIOR, JUNIOR).load()
    assert junior.config._name_or_path == JUNIOR and _frozen(junior) and junior.dtype == senior.dtype
    assert not hasattr(junior, "text_pair_tokenizer")
    team = Team.resolve(SENIOR, CROSS)
    senior, junior = team.load(device="cpu", junior_device="cpu")
    assert junior.text_pair_tokenizer is team.junior_tok and not senior.training and _frozen(junior)
    for none in (
        Team.resolve(SENIOR, None),
        Team.resolve(SENIOR, JUNIOR, arm="grpo"),  # the senior alone
        Team.resolve(SENIOR, JUNIOR, beta=0.1, kl_ref="junior"),  # TRL loads it as the KL reference
    ):
        senior, junior = none.load()
        assert junior is None and senior.config._name_or_path == SENIOR


@pytest.fixture(scope="module")
def adapter(tmp_path_factory):
    """A LoRA adapter folder on the toy senior (its base named by path)."""
    from peft import LoraConfig, get_peft_model

    from trlvr.models import load_causal_lm

    folder = tmp_path_factory.mktemp("lora") / "adapter"
    lora = get_peft_model(load_causal_lm(SENIOR), LoraConfig(r=2, target_modules=["q_proj", "v_proj"]))
    lora.save_pretrained(folder)
    return str(folder)


def test_load_gives_a_self_team_the_adapters_off_view(adapter):
    from peft import PeftModel

    from trlvr.engine.self_pair import AdapterOffView

    senior, junior = Team.resolve(adapter, SELF).load(device="cpu")
    assert isinstance(senior, PeftModel) and isinstance(junior, AdapterOffView)
    assert junior.peft_model is senior and not any(p.requires_grad for p in senior.parameters())
    senior, _ = Team.resolve(adapter, SELF).load(trainable=True)  # a run continuing the adapter
    assert {n for n, p in senior.named_parameters() if p.requires_grad} and all(
        "lora_" in n for n, p in senior.named_parameters() if p.requires_grad
    )
    # a plain senior is not yet a LoRA model: the trainer's peft_config makes it one and builds the view
    senior, junior = Team.resolve(SENIOR, SELF).load()
    assert junior is None and not isinstance(senior, PeftModel)


# ---- a self junior on its own device: one rule, one line ----------------------------------------------------

SELF_DEVICE = "shares the senior's weights, so it runs on the senior's device"
LEAVING: set[str] = set()  # no other copy of the refusal is allowed


@pytest.mark.parametrize(
    ("command", "line"),
    [
        ("train", f"junior_device: junior: self {SELF_DEVICE}"),
        ("eval", f"--junior-device: --junior self {SELF_DEVICE}"),
        ("select", f"--junior-device: junior self {SELF_DEVICE}"),
    ],
)
def test_a_self_junior_on_its_own_device_is_refused_by_the_capability_rule(command, line):
    with pytest.raises(UserError) as e:
        check_capabilities(Team.declared(None, SELF).plan(command, junior_device=True))
    assert str(e.value) == line
    check_capabilities(Team.declared(None, SELF).plan(command))  # on the senior's device: fine
    check_capabilities(Team.declared(None, JUNIOR).plan(command, junior_device=True))  # a junior of its own


def test_the_refusal_is_written_once():
    said = {
        p.relative_to(ROOT).as_posix()
        for p in ROOT.rglob("*.py")
        if "shares the senior's weights" in p.read_text()
    }
    assert said - LEAVING == {"engine/capabilities.py"}


def test_eval_refuses_it_before_any_path_is_read(tmp_path):
    import argparse

    from trlvr.cli.eval_cmd import settings_from_args

    args = argparse.Namespace(
        senior=str(tmp_path / "nowhere"), junior=SELF, junior_device="cpu", device=None, limit=None
    )
    with pytest.raises(UserError, match=f"^--junior-device: --junior self {SELF_DEVICE}$"):
        settings_from_args(args)


# ---- the trainer takes the team ----------------------------------------------------------------------------


def test_the_trainer_takes_a_team_and_rolls_out_as_without_one(tmp_path, tokenizer):
    import copy

    from datasets import Dataset
    from helpers import tiny_model
    from trl import GRPOConfig

    from trlvr.config import TandemConfig
    from trlvr.training import TandemGRPOTrainer

    senior = tiny_model("qwen3", len(tokenizer), seed=0, hidden=32, layers=1)
    junior = tiny_model("qwen3", len(tokenizer), seed=1, hidden=32, layers=1)
    tandem = TandemConfig(senior="senior", junior="junior")
    seen = []

    def run(team):
        args = GRPOConfig(
            output_dir=str(tmp_path / f"out{len(seen)}"),
            use_cpu=True,
            bf16=False,
            per_device_train_batch_size=4,
            num_generations=4,
            max_completion_length=6,
            max_steps=1,
            report_to=[],
            save_strategy="no",
            seed=0,
            disable_tqdm=True,
            loss_type="dapo",
        )
        trainer = TandemGRPOTrainer(
            copy.deepcopy(senior),
            copy.deepcopy(junior),
            tandem=tandem,
            team=team,
            args=args,
            reward_funcs=lambda completions, **kw: [len(c) / 10 for c in completions],
            train_dataset=Dataset.from_list([{"prompt": "The cat sat", "answer": "1"}] * 2),
            processing_class=tokenizer,
        )
        rollout = trainer.rollout_func
        trainer.rollout_func = lambda prompts, tr: seen.append(rollout(prompts, tr)) or seen[-1]
        trainer.train()
        return trainer

    team = Team.declared("senior", "junior")
    assert run(team).team is team
    assert run(None).team == team  # declared from the config, as `trlvr train` resolves it
    (a, b) = seen
    assert a["completion_ids"] == b["completion_ids"] and a["env_mask"] == b["env_mask"]
    assert 0 < sum(map(sum, a["env_mask"])) < sum(map(len, a["env_mask"]))  # both authors wrote

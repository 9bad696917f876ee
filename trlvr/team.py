"""Who writes with the senior: the team of a run, resolved once from its paths and settings.

    team = Team.resolve(senior, junior, pairing="auto", backend="hf", kl_ref="initial", beta=0.0)
    check_capabilities(team.plan("train", schedules=...))  # the pairing refusals, through the one rule table
    team.kind          # lockstep | text | self | none: who writes with the senior (KINDS)
    team.pairing       # lockstep | text: how the named junior decodes with the senior; None without one
    team.fingerprint() # what results.json records of the pair
    Team.of(tandem, beta)  # the team a run config declares, before its tokenizers (kind None: a named junior)
    senior, junior = team.load(dtype, device="cuda")  # the pair's weights (adapters, the self view)

The junior spelling `self` (SELF) means the LoRA senior's base model with the adapters off. The pairing a user
asks for is one of PAIRINGS (auto | lockstep | text); `choose_pairing` turns it into a mechanism from the two
tokenizers. Callers ask the team's properties, never compare a junior or a pairing with a string
(tests/test_team.py enforces it, as tests/test_backends.py does for backends).

What this file does not know: the engine's decoding, the CLI. Only `Team.load` reads weights.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from trlvr.engine.backends import backend as backend_of
from trlvr.engine.capabilities import KL_TO_JUNIOR, TEAM_KINDS, Plan
from trlvr.engine.vocab import check_pair_rows
from trlvr.errors import UserError
from trlvr.models import (
    check_same_vocab,
    load_model_or_adapter,
    load_tokenizer_for,
    vocab_fingerprint,
)

SELF = "self"  # the junior spelling that means: the LoRA senior's base model, adapters off
AUTO, LOCKSTEP, TEXT, NONE = "auto", "lockstep", "text", "none"
PAIRINGS = (AUTO, LOCKSTEP, TEXT)  # what a user may ask for: the run config's `pairing`, eval's --pairing
KINDS = TEAM_KINDS  # who writes with the senior (the capability rules' table: lockstep, text, self, none)
JUNIOR_REF = "junior"  # the kl_ref value that makes the loss KL to the junior


def is_self(junior: str | None) -> bool:
    """The junior is the LoRA senior's own base (`junior: self`, `--junior self`)."""
    return junior == SELF


def junior_model(junior: str | None) -> str | None:
    """The junior's own model path: None without a junior or for `self` (the senior's base)."""
    return None if not junior or is_self(junior) else junior


def kl_to_junior(beta: float, kl_ref: str | None) -> bool:
    """The loss carries a KL term to the junior (TRL's reference model is the junior)."""
    return beta > 0 and kl_ref == JUNIOR_REF


def is_text(pairing: str | None) -> bool:
    """The pair decodes at the text level (two tokenizers: `trlvr.engine.text_pair`)."""
    return pairing == TEXT


def is_lockstep(pairing: str | None) -> bool:
    """The pair decodes token by token over one shared vocabulary."""
    return pairing == LOCKSTEP


def choose_pairing(
    senior_tok, junior_tok, requested: str = AUTO, names: tuple[str, str] = ("senior", "junior")
) -> str:
    """How a pair decodes together: "lockstep" (one shared vocabulary, token by token: the paper's
    semantics) or "text" (`trlvr.engine.text_pair`: each model on its own tokens of one shared text).

    auto: lockstep when the vocabularies are identical (`check_same_vocab`), text otherwise;
    lockstep refuses different vocabularies with `check_same_vocab`'s error; text takes any pair.
    """
    if requested not in PAIRINGS:
        raise UserError(f"pairing: must be one of {', '.join(PAIRINGS)}, got {requested!r}")
    if requested == TEXT:
        return TEXT
    if requested == LOCKSTEP:
        check_same_vocab(senior_tok, junior_tok, names)
        return LOCKSTEP
    return LOCKSTEP if vocab_fingerprint(senior_tok) == vocab_fingerprint(junior_tok) else TEXT


def pair_fingerprint(pairing: str | None, junior_tok) -> dict[str, str]:
    """What results.json's `models` records of a pair beyond the senior's tokenizer: a text pair's junior
    tokenizer and its pairing; nothing for one shared vocabulary."""
    return (
        {"junior_tokenizer": vocab_fingerprint(junior_tok)[:16], "pairing": TEXT} if is_text(pairing) else {}
    )


def load_junior(path: str, junior_tok, pairing: str | None, dtype, role: str = "junior"):
    """The frozen junior (a model folder, or an adapter folder on its base) at `dtype`; a text pair's junior
    carries its own tokenizer (the rollout decodes that pair at the text level with it)."""
    junior = load_model_or_adapter(path, role, dtype=dtype)
    if is_text(pairing):
        junior.text_pair_tokenizer = junior_tok
    return junior.eval().requires_grad_(False)


@dataclasses.dataclass(frozen=True)
class Team:
    """Who writes with the senior, resolved from paths and settings (tokenizers only; `load` reads weights).

    kind: lockstep | text | self | none (KINDS; none: no junior writes, e.g. arm senior_only); pairing: the
    mechanism between the senior and the named junior (lockstep for `self`), None without a junior; senior,
    junior: the paths as given (junior may be SELF); requested: the pairing asked for (PAIRINGS); backend:
    the engine's name (`trlvr.engine.backends`); kl_to_junior: the loss is KL to the junior; loads_junior:
    the junior model is loaded beside the senior (rollouts need it, TRL does not load it as the KL
    reference, and the backend does not load its own).
    """

    kind: str
    pairing: str | None
    senior: str | None
    junior: str | None
    requested: str = AUTO
    backend: str = "hf"
    kl_to_junior: bool = False
    loads_junior: bool = False
    senior_tok: Any = dataclasses.field(default=None, compare=False, repr=False)
    junior_tok: Any = dataclasses.field(default=None, compare=False, repr=False)
    names: tuple[str, str] = dataclasses.field(default=("senior", "junior"), compare=False, repr=False)

    @classmethod
    def declared(
        cls,
        senior: str | None,
        junior: str | None,
        *,
        pairing: str = AUTO,
        backend: str = "hf",
        kl_ref: str | None = None,
        beta: float = 0.0,
        arm: str = "tandem",
        names: tuple[str, str] = ("senior", "junior"),
    ) -> Team:
        """The team as its settings declare it, reading nothing: kind and pairing are None (not known yet)
        for a named junior, whose tokenizers decide them (`resolve`); a config is checked with it alone."""
        kl = kl_to_junior(beta, kl_ref)
        writes = bool(junior) and (arm == "tandem" or kl)
        mechanism = LOCKSTEP if is_self(junior) else None
        kind = (SELF if is_self(junior) else None) if writes else NONE
        loads = (
            bool(junior_model(junior)) and arm == "tandem" and not kl and not backend_of(backend).own_engine
        )
        return cls(kind, mechanism, senior, junior, pairing, backend, kl, loads, names=names)

    @classmethod
    def of(cls, tandem, beta: float = 0.0) -> Team:
        """The team a run config (`trlvr.config.TandemConfig`) declares; `beta` its KL coefficient."""
        return cls.declared(
            tandem.senior,
            tandem.junior,
            pairing=tandem.pairing,
            backend=tandem.backend,
            kl_ref=tandem.kl_ref,
            beta=beta,
            arm=tandem.arm,
        )

    @classmethod
    def resolve(
        cls,
        senior: str | None,
        junior: str | None,
        *,
        pairing: str = AUTO,
        backend: str = "hf",
        kl_ref: str | None = None,
        beta: float = 0.0,
        arm: str = "tandem",
        senior_tok=None,
        junior_tok=None,
        names: tuple[str, str] = ("senior", "junior"),
        check_rows: bool = True,
    ) -> Team:
        """The team of a senior and a junior (None, SELF, or a path). Tokenizers load from the paths when not
        given; a lockstep pair with different vocabularies, an unknown pairing and (check_rows) a model
        without a row per token are refused here, in one line each, naming the models as `names` does."""
        team = cls.declared(
            senior, junior, pairing=pairing, backend=backend, kl_ref=kl_ref, beta=beta, arm=arm, names=names
        )
        return team.with_tokenizers(senior_tok, junior_tok, check_rows=check_rows)

    def with_tokenizers(self, senior_tok=None, junior_tok=None, *, check_rows: bool = True) -> Team:
        """This declared team resolved (`resolve`): its tokenizers, loaded from the paths when not given,
        decide a named junior's pairing and kind."""
        if not self.junior_model:
            return dataclasses.replace(self, senior_tok=senior_tok)
        names, senior, junior = self.names, self.senior, self.junior
        senior_tok = senior_tok or load_tokenizer_for(senior, names[0])
        junior_tok = junior_tok or load_tokenizer_for(junior, names[1])
        mechanism = choose_pairing(senior_tok, junior_tok, self.requested, names)
        if check_rows and is_lockstep(mechanism):  # one tokenizer: every model needs a row per token
            check_pair_rows(len(senior_tok), {names[0]: senior, names[1]: junior})
        kind = mechanism if self.writes else NONE
        return dataclasses.replace(
            self, kind=kind, pairing=mechanism, senior_tok=senior_tok, junior_tok=junior_tok
        )

    @property
    def is_self(self) -> bool:
        return is_self(self.junior)

    @property
    def writes(self) -> bool:
        """A junior writes with the senior (or is the KL reference that reads the rollouts)."""
        return self.kind != NONE

    @property
    def is_text(self) -> bool:
        return is_text(self.pairing)

    @property
    def junior_model(self) -> str | None:
        """The junior's own model path (None for `self` and without a junior)."""
        return junior_model(self.junior)

    @property
    def junior_weights(self) -> str | None:
        """Where the junior's weights are read from: its own path; for `self`, the senior's path."""
        return self.senior if self.is_self else self.junior_model

    @property
    def model_paths(self) -> dict[str, str]:
        """{role: path} of the models that have folders of their own: the senior, the junior unless `self`."""
        paths = {self.names[0]: self.senior, self.names[1]: self.junior_model}
        return {role: path for role, path in paths.items() if path}

    def load(self, dtype=None, device=None, junior_device=None, *, trainable=False, with_junior=None, **init):
        """(senior, junior or None): the pair's weights, the one place they load.

        senior: a model folder, or an adapter folder as a `peft.PeftModel` on its base (`trainable`: its
        adapter trains, as a run continuing it does), at `dtype` (None: `init`'s, else transformers' default)
        with `init` (`GRPOConfig.model_init_kwargs`). junior: loaded when `loads_junior`, at `dtype` (None:
        the senior's), a text pair's carrying its tokenizer (`load_junior`); for `self`, the LoRA senior's
        adapters-off view on the same weights (None while the senior is not yet a LoRA model: the trainer's
        `peft_config` makes it one and builds the view). `device`: the senior goes there (the junior to
        `junior_device`, else `device`), both in eval mode; None leaves them where they loaded. `with_junior`:
        load the named junior even where the run would not (an evaluation scores with it); None:
        `loads_junior`."""
        kwargs = {**init, **({"dtype": dtype} if dtype is not None else {})}
        senior = load_model_or_adapter(self.senior, self.names[0], trainable=trainable, **kwargs)
        if device is not None:
            senior = senior.to(device).eval()
        if self.is_self:
            from peft import PeftModel  # here: peft and torch cost seconds to import

            from trlvr.engine.self_pair import AdapterOffView

            return senior, AdapterOffView(senior) if isinstance(senior, PeftModel) else None
        junior_dtype = senior.dtype if dtype is None else dtype
        return senior, self.load_junior(junior_dtype, junior_device or device, with_junior=with_junior)

    def load_junior(self, dtype, device=None, *, with_junior=None):
        """The frozen junior when the team loads one (`loads_junior` or `with_junior`), else None."""
        if not (self.loads_junior if with_junior is None else with_junior and self.junior_model):
            return None
        junior = load_junior(self.junior, self.junior_tok, self.pairing, dtype, self.names[1])
        return junior if device is None else junior.to(device)

    def plan(self, command: str, **facts) -> Plan:
        """The `capabilities.Plan` of this team for `command` (train | eval | select): its kind, backend,
        requested pairing and KL metric; `facts` are the rest of the plan's fields."""
        metrics = facts.pop("metrics", ()) + ((KL_TO_JUNIOR,) if self.kl_to_junior else ())
        return Plan(command, self.kind, self.backend, requested=self.requested, metrics=metrics, **facts)

    def fingerprint(self) -> dict[str, str]:
        """What results.json's `models` records of the pair (`pair_fingerprint`)."""
        return pair_fingerprint(self.pairing, self.junior_tok)

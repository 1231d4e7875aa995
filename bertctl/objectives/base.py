"""What a pretraining objective is: the one object `pretrain` and `eval` ask about everything
objective-specific.

An objective names the role of the model it trains (`head`, one of bertctl.model's ROLES: each
architecture that has that role has its class, written into config.json and the manifest), says which pretraining data it can train on (`check_data`), which
of the model's parameters may get no gradient (DDP must be told), gives the training loop its
per-step metrics and scores a model on a pretraining split, during training (validation) and
for `bertctl eval MODEL PRETRAIN_DATA`. Its own settings are a pydantic model
(`options_model`), whose fields become `pretrain` flags (stages/settings/assembled.py).

Objectives are imported when the CLI starts (to make pretrain's flags), so their modules import
torch, the model and the scoring code (objectives/scoring.py) in the methods that run them.
"""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import ValidationError

from bertctl.errors import BertctlError
from bertctl.model import ARCHITECTURES
from bertctl.registry import Registry


class Objective:
    name: ClassVar[str]
    # Why `load_for_evaluation` refuses a checkpoint without all of the model's weights.
    needs: ClassVar[str] = "its metrics need all of its model's weights"
    # Its own settings: a pydantic model whose fields (type, checks, help text) become pretrain
    # flags of the same names, unset by default. None: it has none.
    options_model: ClassVar[type | None] = None
    # How --help and the docs name it.
    title: ClassVar[str]
    # The role of the model it trains (bertctl.model.architectures.ROLES).
    head: ClassVar[str]
    # Whether the data must carry next-sentence labels (True), must not (False), or either.
    nsp_data: ClassVar[bool | None] = None

    def check_architecture(self, architecture: str, where: str) -> None:
        """BertctlError for an architecture without a model of this objective's role."""
        if self.head not in ARCHITECTURES[architecture].heads:
            able = [o.name for o in OBJECTIVES.values()
                    if o.head in ARCHITECTURES[architecture].heads]
            raise BertctlError(f"{where}: --objective {self.name} cannot train --architecture "
                               f"{architecture} (it has no {self.head.replace('_', ' ')} "
                               f"model)" + (f"; its objectives: {', '.join(able)}" if able
                                            else "; no objective trains it"))

    def check_data(self, info, where: str) -> None:
        """BertctlError for pretraining data this objective cannot train on."""
        if self.nsp_data is True and not info.nsp:
            raise BertctlError(f"{where}: --objective {self.name} needs next-sentence pairs, but "
                               f"the data was built with --no-nsp")
        if self.nsp_data is False and info.nsp:
            raise BertctlError(f"{where}: --objective {self.name} trains on continuous text, but "
                               f"the data holds next-sentence pairs (half their B segments come "
                               f"from other documents): build it with --no-nsp")

    def own_options(self) -> tuple[str, ...]:
        return tuple(self.options_model.model_fields) if self.options_model else ()

    def given_options(self, settings) -> dict:
        """Its own options that the settings set, checked by its options model."""
        given = {k: getattr(settings, k, None) for k in self.own_options()}
        given = {k: v for k, v in given.items() if v is not None}
        if not given:
            return {}
        try:
            return self.options_model(**given).model_dump(exclude_unset=True)
        except ValidationError as exc:
            err = exc.errors()[0]
            name = str(err["loc"][0]) if err["loc"] else ""
            raise BertctlError(f"--{name.replace('_', '-')} {given.get(name)!r}: "
                               f"{err['msg']} (setting '{name}' of --objective "
                               f"{self.name})") from None

    def model_kwargs(self, settings) -> dict:
        """Constructor arguments of the model from the pretrain settings: its own options."""
        return self.given_options(settings)

    def check_settings(self, settings, where: str) -> None:
        """BertctlError for another objective's options given to this one."""
        others = sorted({k for o in OBJECTIVES.values() for k in o.own_options()}
                        - set(self.own_options()))
        given = [f"--{k.replace('_', '-')}" for k in others
                 if getattr(settings, k, None) is not None]
        if given:
            verb = "applies" if len(given) == 1 else "apply"
            raise BertctlError(f"{where}: {', '.join(given)} {verb} to another objective, not "
                               f"to --objective {self.name}")
        self.given_options(settings)

    def unused_parameters(self, data) -> bool:
        """Whether some parameters get no gradient on this data (DDP's find_unused_parameters)."""
        return False

    def step_metrics(self, outputs: dict[str, Any], batch: dict[str, Any]) -> dict[str, tuple]:
        """{name: (numerator, denominator)} for the training loop (see train.loop.train)."""
        return {}

    def evaluate(self, model, dataset, batch_size: int, device, precision: str,
                 max_batches: int | None = None, progress=None, **options) -> dict[str, float]:
        """Metrics on a pretraining split (`options`: what `load_for_evaluation` returned)."""
        raise NotImplementedError

    def load_for_evaluation(self, source, dataset) -> tuple[Any, dict[str, Any]]:
        """(the model, options for `evaluate`) for `bertctl eval MODEL PRETRAIN_DATA`: the
        checkpoint as this objective's model, refused when it lacks any of its weights."""
        model, report = source.load(self.head)
        missing = report.missing + report.mismatched
        if missing:
            raise BertctlError(f"{source.path}: the checkpoint has no weights for "
                               f"{', '.join(missing[:3])}; {self.needs}")
        return model, {}


# Every objective by name (each registers itself when its module is imported: registry.py).
OBJECTIVES: Registry[Objective] = Registry("pretraining objective")

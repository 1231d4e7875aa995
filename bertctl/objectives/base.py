"""What a pretraining objective is: the one object `pretrain` and `eval` ask about everything
objective-specific.

An objective names the model it trains (`architecture`, a class in bertctl.model, written into
config.json and the manifest), says which pretraining data it can train on (`check_data`), which
of the model's parameters may get no gradient (DDP must be told), gives the training loop its
per-step metrics and scores a model on a pretraining split, during training (validation) and
for `bertctl eval MODEL PRETRAIN_DATA`.
"""

from __future__ import annotations

from typing import Any, ClassVar

from bertctl.errors import BertctlError


# Every objective's own settings (PretrainSettings fields), and the objectives they belong to.
OPTIONS = ("generator_size", "discriminator_weight")


class Objective:
    name: ClassVar[str]
    # Why `load_for_evaluation` refuses a checkpoint without all of the model's weights.
    needs: ClassVar[str] = "its metrics need all of its model's weights"
    # Which of OPTIONS this objective reads.
    options: ClassVar[tuple[str, ...]] = ()
    # How --help and the docs name it.
    title: ClassVar[str]
    # The model class in bertctl.model that this objective trains.
    architecture: ClassVar[str]
    # Whether the data must carry next-sentence labels (True), must not (False), or either.
    nsp_data: ClassVar[bool | None] = None

    def model_class(self):
        import bertctl.model as model

        return getattr(model, self.architecture)

    def check_data(self, info, where: str) -> None:
        """BertctlError for pretraining data this objective cannot train on."""
        if self.nsp_data is True and not info.nsp:
            raise BertctlError(f"{where}: --objective {self.name} needs next-sentence pairs, but "
                               f"the data was built with --no-nsp")
        if self.nsp_data is False and info.nsp:
            raise BertctlError(f"{where}: --objective {self.name} trains on continuous text, but "
                               f"the data holds next-sentence pairs (half their B segments come "
                               f"from other documents): build it with --no-nsp")

    def model_kwargs(self, settings) -> dict:
        """Constructor arguments of the model from the pretrain settings (its own options)."""
        return {}

    def check_settings(self, settings, where: str) -> None:
        """BertctlError for another objective's options given to this one."""
        given = [f"--{k.replace('_', '-')}" for k in OPTIONS
                 if k not in self.options and getattr(settings, k, None) is not None]
        if given:
            raise BertctlError(f"{where}: {', '.join(given)} apply to another objective, not "
                               f"--objective {self.name}")

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
        model, report = source.load(self.model_class())
        missing = report.missing + report.mismatched
        if missing:
            raise BertctlError(f"{source.path}: the checkpoint has no weights for "
                               f"{', '.join(missing[:3])}; {self.needs}")
        return model, {}

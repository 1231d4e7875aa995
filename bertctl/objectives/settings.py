"""`pretrain`'s settings as the registry makes them: `config.PretrainSettings` plus each
registered objective's own options (`Objective.options_model`), one flag per option in a help
panel of the objective's, as the task families' options reach finetune (tasks/settings.py). A
new objective's options reach `pretrain`, `--config` and docs/cli.md without touching a stage,
the CLI or config.py."""

from __future__ import annotations

import functools

from pydantic import create_model

from bertctl.config import PretrainSettings
from bertctl.objectives import OBJECTIVES
from bertctl.settings import TRAINING, plugin_option_fields


@functools.cache
def _composed(objectives: tuple[str, ...]) -> type[PretrainSettings]:
    fields = plugin_option_fields(OBJECTIVES.values(), "objective", TRAINING)
    composed = create_model(PretrainSettings.__name__, __base__=PretrainSettings,
                            __module__=PretrainSettings.__module__, **fields)
    composed.objective_options = tuple(fields)
    return composed


def pretrain_settings() -> type[PretrainSettings]:
    """PretrainSettings with the objectives registered now (cached per set of objectives)."""
    return _composed(tuple(OBJECTIVES))

"""`pretrain`'s settings as the registries make them: `config.PretrainSettings` plus each
registered objective's own options (`Objective.options_model`), one flag per option in a help
panel of the objective's, as the task families' options reach finetune (tasks/settings.py). A
new objective's options reach `pretrain`, `--config` and docs/cli.md without touching a stage,
the CLI or config.py; so do a new architecture's name and sizes (`architecture_fields`:
the choices and help of --architecture and --model-size)."""

from __future__ import annotations

import functools

from typing import Any, Literal

from pydantic import Field, create_model

from bertctl.config import PretrainSettings
from bertctl.model import ARCHITECTURES
from bertctl.objectives import OBJECTIVES
from bertctl.settings import TRAINING, plugin_option_fields
from bertctl.train.optimizers import OPTIMIZERS, optimizer_field


@functools.cache
def _composed(objectives: tuple[str, ...], architectures: tuple[str, ...],
              optimizers: tuple[str, ...]) -> type[PretrainSettings]:
    fields = plugin_option_fields(OBJECTIVES.values(), "objective", TRAINING)
    composed = create_model(PretrainSettings.__name__, __base__=PretrainSettings,
                            __module__=PretrainSettings.__module__, **fields,
                            **architecture_fields(), **optimizer_field())
    composed.objective_options = tuple(fields)
    return composed


def pretrain_settings() -> type[PretrainSettings]:
    """PretrainSettings with the objectives, architectures and optimizers registered now (cached
    per set of them)."""
    return _composed(tuple(OBJECTIVES), tuple(ARCHITECTURES), tuple(OPTIMIZERS))


def architecture_fields() -> dict[str, tuple[Any, Any]]:
    """`--architecture` and `--model-size` with the registered architectures' names, sizes and
    descriptions (bertctl.model.architectures), as pretrain shows them."""
    archs = list(ARCHITECTURES.values())
    sizes = tuple(dict.fromkeys(n for a in archs for n in a.config_class.presets))
    base = PretrainSettings.model_fields
    arch_help = ("The encoder, from the registry (bertctl/model/architectures.py): "
                 + "; ".join(f"{a.name}, {a.description}" if a.description else a.name
                             for a in archs)
                 + ". With --init-from or --model-config, their config.json says.")
    size_help = ("The architecture's size presets (layers/hidden/heads): "
                 + "; ".join(f"{a.name}'s " + ", ".join(f"{n} {shape}" for n, shape in
                                                       a.config_class.presets.items())
                             for a in archs)
                 + ". Ignored with --init-from or --model-config.")
    return {
        "architecture": (Literal[tuple(ARCHITECTURES)], Field(
            base["architecture"].default, description=arch_help,
            json_schema_extra=base["architecture"].json_schema_extra)),
        "model_size": (Literal[sizes], Field(
            base["model_size"].default, description=size_help,
            json_schema_extra=base["model_size"].json_schema_extra)),
    }

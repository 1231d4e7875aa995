"""Every stage's settings as the command shows them, assembled in this one place: the classes
each command's file declares (the fields each stage and the core own) plus what the registries
hold now, so that a plug-in's names and options reach the flags, `--config` and docs/cli.md
without touching a stage, the CLI or a command's settings file:

- finetune, eval, distill: each registered task family's own options, one flag per option in a
  help panel of the family's, with the family names, the presets and the families' default
  lengths from the task registry. A family's options model (`Family.options_model`)
  describes each option once: its type, its checks and its help text. A flag of the same name
  is added, unset by default (unset: the preset's or the family's own default), and what is
  given goes into the task spec's `options`, where the family checks it again as a whole. Two
  families may share an option name (span QA and tagging both window with --doc-stride): one
  flag serves both, its help joining theirs.
- pretrain: each registered objective's options (`Objective.options_model`), and the choices
  and help of --architecture and --model-size from the architecture registry.
- the training stages: --optimizer's choices from the optimizer registry; distill's
  --student-size from the architectures' presets.

Nothing in tasks/, objectives/, model/ or train/ imports this module: the registries know
nothing of the stages.
"""

from __future__ import annotations

import functools
from typing import Any, Literal, Optional

from pydantic import Field, create_model, model_validator

from bertctl.stages.settings.distill import DistillSettings
from bertctl.stages.settings.eval import EvalSettings
from bertctl.stages.settings.finetune import FinetuneSettings
from bertctl.stages.settings.pretrain import PretrainSettings
from bertctl.stages.settings.task import TaskSettings
from bertctl.model import ARCHITECTURES
from bertctl.objectives import OBJECTIVES
from bertctl.settings import TASK, TRAINING, meta, plugin_option_fields
from bertctl.tasks.registry import FAMILIES
from bertctl.tasks.spec import PRESETS, make_task_spec
from bertctl.train.optimizers import OPTIMIZERS, optimizer_field


def option_fields(stage: str) -> dict[str, tuple[Any, Any]]:
    """The registered families' options a stage shows (span QA's null_threshold: eval only)."""
    return plugin_option_fields(FAMILIES.values(), "family", TASK, stage)


def _family_length(cls, data: Any) -> Any:
    """A family's own default length (span QA: 384) where the user gave none."""
    if not isinstance(data, dict) or data.get("max_seq_length") is not None:
        return data
    if cls.model_fields["max_seq_length"].default is None:  # eval: the model's length
        return data
    task, family = data.get("task"), data.get("family")
    family = family or (PRESETS[task].family if task in PRESETS else None)
    length = getattr(FAMILIES.get(family), "default_max_seq_length", None)
    if not length or length == cls.model_fields["max_seq_length"].default:
        return data   # left unset: finetune caps it at what the model reads
    return {**data, "max_seq_length": length}


def with_family_options(base: type[TaskSettings], stage: str) -> type[TaskSettings]:
    """`base` with the registered families' options as fields, `family` limited to the
    registered names, `task`'s help listing the presets and `--optimizer` the registered
    optimizers (training stages)."""
    options = option_fields(stage)
    family_info = base.model_fields["family"]
    names = tuple(FAMILIES)
    fields: dict[str, Any] = {
        "family": (Optional[Literal[names]], Field(  # noqa: UP007
            None, description=family_info.description, json_schema_extra=meta(TASK))),
        "task": (Optional[str], Field(  # noqa: UP007
            None, description=f"A preset: {', '.join(PRESETS)}.", json_schema_extra=meta(TASK))),
        **options,
        **(optimizer_field() if "optimizer" in base.model_fields else {}),
        **(student_size_field() if "student_size" in base.model_fields else {}),
    }
    composed = create_model(
        base.__name__, __base__=base, __module__=base.__module__,
        __validators__={"_family_length": model_validator(mode="before")(
            classmethod(_family_length))},
        **fields)
    composed.family_options = tuple(options)
    return composed


@functools.cache
def _composed(base: type[TaskSettings], stage: str, families: tuple[str, ...],
              optimizers: tuple[str, ...], architectures: tuple[str, ...]):
    return with_family_options(base, stage)


def finetune_settings() -> type[FinetuneSettings]:
    """FinetuneSettings with the families (and optimizers) registered now (cached per set)."""
    return _composed(FinetuneSettings, "finetune", tuple(FAMILIES), tuple(OPTIMIZERS),
                     tuple(ARCHITECTURES))


def eval_settings() -> type[EvalSettings]:
    return _composed(EvalSettings, "eval", tuple(FAMILIES), tuple(OPTIMIZERS),
                     tuple(ARCHITECTURES))


def distill_settings() -> type[DistillSettings]:
    return _composed(DistillSettings, "distill", tuple(FAMILIES), tuple(OPTIMIZERS),
                     tuple(ARCHITECTURES))


def task_spec(settings: TaskSettings):
    """The TaskSpec these settings describe (BertctlError if they describe none)."""

    return make_task_spec(settings.task, **settings.task_fields(), labels=settings.labels)


@functools.cache
def _pretrain_composed(objectives: tuple[str, ...], architectures: tuple[str, ...],
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
    return _pretrain_composed(tuple(OBJECTIVES), tuple(ARCHITECTURES), tuple(OPTIMIZERS))


def architecture_fields() -> dict[str, tuple[Any, Any]]:
    """`--architecture` and `--model-size` with the registered architectures' names, sizes and
    descriptions (bertctl.model.architectures), as pretrain shows them."""
    archs = list(ARCHITECTURES.values())
    sizes = tuple(dict.fromkeys(n for a in archs for n in a.config_class.presets))
    base = PretrainSettings.model_fields
    arch_help = (base["architecture"].description + ": "
                 + "; ".join(f"{a.name}, {a.description}" if a.description else a.name
                             for a in archs)
                 + ". With --init-from or --model-config, their config.json says.")
    size_help = (base["model_size"].description + ": "
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


def student_size_field() -> dict[str, tuple[Any, Any]]:
    """distill's --student-size: the registered architectures' presets (the teacher's own
    architecture is checked against its own: distillation.sized_config)."""
    archs = list(ARCHITECTURES.values())
    sizes = tuple(dict.fromkeys(n for a in archs for n in a.config_class.presets))
    base = DistillSettings.model_fields["student_size"]
    return {"student_size": (Optional[Literal[sizes]], Field(  # noqa: UP007
        None, description=base.description + " " + "; ".join(
            f"{a.name}'s: {', '.join(a.config_class.presets)}" for a in archs) + ".",
        json_schema_extra=base.json_schema_extra))}

"""The task settings as the registry makes them: the fields every family shares
(`config.TaskSettings`) plus each registered family's own options, one flag per option in a help
panel of the family's, with the family names, the presets and the families' default lengths read
from the registry. A new family's options reach `finetune` and `eval` without touching a stage,
the CLI or `config.py`.

A family's options model (`Family.options_model`) describes each option once: its type, its
checks and its help text. A flag of the same name is added, unset by default (unset: the preset's
or the family's own default), and what is given goes into the task spec's `options`, where the
family checks it again as a whole. Two families may share an option name (span QA and tagging both
window with --doc-stride): one flag serves both, its help joining theirs.
"""

from __future__ import annotations

import functools
from typing import Any, Literal, Optional

from pydantic import Field, create_model, model_validator

from bertctl.config import DistillSettings, EvalSettings, FinetuneSettings, TaskSettings
from bertctl.settings import TASK, meta, plugin_option_fields
from bertctl.train.optimizers import OPTIMIZERS, optimizer_field
from bertctl.tasks.registry import FAMILIES
from bertctl.tasks.spec import PRESETS
from bertctl.tasks.spec import make_task_spec


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
    return {**data, "max_seq_length": length} if length else data


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
              optimizers: tuple[str, ...]):
    return with_family_options(base, stage)


def finetune_settings() -> type[FinetuneSettings]:
    """FinetuneSettings with the families (and optimizers) registered now (cached per set)."""
    return _composed(FinetuneSettings, "finetune", tuple(FAMILIES), tuple(OPTIMIZERS))


def eval_settings() -> type[EvalSettings]:
    return _composed(EvalSettings, "eval", tuple(FAMILIES), tuple(OPTIMIZERS))


def distill_settings() -> type[DistillSettings]:
    return _composed(DistillSettings, "distill", tuple(FAMILIES), tuple(OPTIMIZERS))


def task_spec(settings: TaskSettings):
    """The TaskSpec these settings describe (BertctlError if they describe none)."""

    return make_task_spec(settings.task, **settings.task_fields(), labels=settings.labels)

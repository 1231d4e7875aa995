"""`bertctl distill`: the task block plus the student and the distillation losses."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from bertctl.settings import RUNTIME, SEQ_LENGTH, TASK, TRAINING, meta
from bertctl.stages.settings.task import TaskTrainingSettings

_RUN = meta(RUNTIME, identity=False)


DISTILLATION = "Distillation"


STUDENT = "Student"


class DistillSettings(TaskTrainingSettings):
    """`bertctl distill`: the task is the teacher's (flags may say how to read TRAIN); the
    student is built by one of the student settings (or the --student-init/--student-config
    inputs), by default from every second teacher layer."""

    max_seq_length: int | None = Field(None, **SEQ_LENGTH, description="Tokens per example; "
                                       "unset: the teacher's fine-tuning length.",
                                       json_schema_extra=meta(TASK))
    lr: float = Field(5e-5, gt=0, description="Peak learning rate.",
                      json_schema_extra=meta(TRAINING))
    student_layers: str | None = Field(None, description="Build the student from these teacher "
                                       "layers (0-based, increasing, e.g. 0,2,4), with the "
                                       "teacher's embeddings and head, or with --student-init "
                                       "from these layers of that model; unset and no other "
                                       "student given: every second layer.",
                                       json_schema_extra=meta(STUDENT))
    student_size: str | None = Field(
        None, description="Build a randomly initialised student of this preset size of the "
        "teacher's architecture, with the teacher's vocabulary.",
        json_schema_extra=meta(STUDENT))
    temperature: float = Field(2.0, gt=0, le=100, description="Softmax temperature of the "
                               "soft targets (the soft loss is scaled by its square).",
                               json_schema_extra=meta(DISTILLATION))
    alpha: float = Field(0.5, ge=0, le=1, description="Weight of the gold-label loss where "
                         "the data has labels; the soft loss gets 1 - alpha (all of it on "
                         "unlabelled data).", json_schema_extra=meta(DISTILLATION))
    hidden_loss: float = Field(0.0, ge=0, le=1000, description="Weight of the hidden-state "
                               "loss (mean squared error between mapped layers, through a "
                               "learned projection where the widths differ); 0: off.",
                               json_schema_extra=meta(DISTILLATION))
    layer_map: str | None = Field(None, description="With --hidden-loss: student:teacher layer "
                                  "pairs (0 is the embeddings), e.g. 1:2,2:4,3:6; unset: each "
                                  "student layer m to teacher layer round(m * L_teacher / "
                                  "L_student).", json_schema_extra=meta(DISTILLATION))
    teacher_cache: Literal["auto", "on", "off"] = Field(
        "auto", description="Run the teacher once over the training set and keep its outputs in "
        "the run directory (a resumed run reuses them); auto: when the set is read more than "
        "once and --hidden-loss is off (it needs the teacher's layers every step).",
        json_schema_extra=_RUN)

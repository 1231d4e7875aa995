"""The fine-tuning task's block: how a task's files are read (every task stage), and what
training on them takes (finetune, distill). A family's own options are added by assembled.py."""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import Field, model_validator

from bertctl.settings import (DEFAULT_LENGTH, EVALUATION, SEQ_LENGTH, TASK, TRAINING,
                              batch_size_field, meta, StageConfig)
from bertctl.train.settings import TrainingSettings

class TaskSettings(StageConfig):
    """How to read a fine-tuning task's files: a preset, or the columns of a task no preset
    knows (flags alone), or a preset with some fields replaced. Shared by finetune and eval.
    The fields every family shares; a family's own are added by the task registry
    (`assembled.with_family_options`) and listed in `family_options`."""

    family_options: ClassVar[tuple[str, ...]] = ()

    task: str | None = Field(None, description="A preset task (see docs/cli.md for the list).",
                             json_schema_extra=meta(TASK))
    family: str | None = Field(None, description="Task family, for a task without a preset.",
                               json_schema_extra=meta(TASK))
    text_column: list[str] | None = Field(None, description="Text column(s): one for single "
                                          "sentences, two for pairs (repeat the flag).",
                                          json_schema_extra=meta(TASK))
    label_column: str | None = Field(None, description="Label column.",
                                     json_schema_extra=meta(TASK))
    context_column: str | None = Field(None, description="Multiple choice and span QA: the "
                                       "context (passage) column.", json_schema_extra=meta(TASK))
    choice_columns: list[str] | None = Field(None, description="Multiple choice: the choice "
                                             "columns (repeat the flag).",
                                             json_schema_extra=meta(TASK))
    labels: list[str] | None = Field(None, description="Classification labels in index order "
                                     "(default: the sorted labels of the training file); "
                                     "tagging: the names of integer tags.",
                                     json_schema_extra=meta(TASK))
    max_seq_length: int = Field(DEFAULT_LENGTH, **SEQ_LENGTH, description="Tokens per example; pairs are "
                                "truncated longest-first (a family may default to another "
                                "length: span QA 384, the paper's).",
                                json_schema_extra=meta(TASK))

    def task_fields(self) -> dict[str, Any]:
        """The task spec fields these flags set (only those given)."""
        fields = {"family": self.family, "text_columns": self.text_column,
                  "label_column": self.label_column, "context_column": self.context_column,
                  "choice_columns": self.choice_columns}
        fields = {k: v for k, v in fields.items() if v is not None}
        options = {k: getattr(self, k) for k in self.family_options
                   if getattr(self, k, None) is not None}
        if options:
            fields["options"] = options
        return fields


class TaskTrainingSettings(TrainingSettings, TaskSettings):
    """What training on a task's data takes, whether from the labels (finetune) or from a
    teacher's outputs (distill)."""

    produces: ClassVar[str | None] = "model"
    epochs: float | None = Field(3, gt=0, description="Passes over the training data (the "
                                 "paper: 2 to 4).", json_schema_extra=meta(TRAINING))
    batch_size: int = batch_size_field(32, step=True, note=" (the paper: 16 or 32)")
    lr: float = Field(2e-5, gt=0, description="Peak learning rate (the paper: 5e-5, 3e-5 or "
                      "2e-5).", json_schema_extra=meta(TRAINING))
    warmup: float = Field(0.1, ge=0, description="Linear warm-up: a fraction of the steps if "
                          "below 1, else a step count; then linear decay to 0.",
                          json_schema_extra=meta(TRAINING))
    # Off by default (#10): length-grouped batches train 1.2-2.1x faster but cost quality on
    # small data, as length goes with genre and label and narrow-length batches bias each step:
    # 4-6 points of accuracy on issue #10's 2,000-row pair task, -0.015 F1 on MRPC's full
    # training set (3 seeds, all-MiniLM-L6-v2). Random batches keep a plain loop's sampling, and
    # `pack` below wins most of grouping's speed back without changing the batches.
    # benchmarks/studies/finetune_quality/bench_finetune_quality.py and docs/benchmarks.md. Grouping stays available.
    group_by_length: bool = Field(False, description="Batch examples of similar length "
                                  "together: less padding, faster, but measured to cost "
                                  "accuracy on small data (see docs/benchmarks.md).",
                                  json_schema_extra=meta(TRAINING))
    # On by default: a packed batch is the padded batch laid out tighter (the same loss and
    # gradients, tests/data/test_packing.py), so it cannot bias training the way grouping does; only
    # the dropout draws differ. Side by side (seed 0, GLUE 2,000-row slices, bf16, 1 thread):
    # 1.37x (SST-2) to 2.0x (RTE) faster per epoch than padded random batches, 2.2x on STS-B's
    # full set, 2.3x on CoNLL-2003 (fp32). Quality per task and seed: docs/benchmarks.md.
    pack: bool = Field(True, description="Lay each training batch out with several sequences "
                       "per row (attention kept inside each sequence): the same examples and "
                       "loss as padded batches, less padding. Sentence-level and tagging heads; "
                       "others always pad.", json_schema_extra=meta(TRAINING))
    keep: Literal["best", "last"] = Field("best", description="Keep the weights with the best "
                                          "validation metric, or the last ones.",
                                          json_schema_extra=meta(EVALUATION))
    eval_batch_size: int = Field(64, ge=1, description="Examples per validation forward pass.",
                                 json_schema_extra=meta(EVALUATION, identity=False))

    @model_validator(mode="before")
    @classmethod
    def _steps_replace_default_epochs(cls, data):
        # --steps (or --time-budget) alone means "this long", not a clash with the default
        # epochs.
        if isinstance(data, dict) and data.get("epochs") is None and (
                data.get("steps") is not None or data.get("time_budget") is not None):
            data = {**data, "epochs": None}
        return data

"""The stage settings the CLI shows: one model per stage, composed from the settings the core owns
(`train.settings`, `data.settings`) plus each stage's own. How settings resolve and what a field's
metadata means: bertctl/settings.py.

The fine-tuning task's fields here are the ones every family shares; each family's own options
(span QA's --doc-stride, tagging's --tag-scheme, ...) and the list of families and presets come
from the task registry, added by `bertctl.stages.settings.assembled`, where every stage's settings are
assembled from these and the registries, so that this module knows no family.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import Field, field_validator, model_validator

from bertctl.data.settings import AuditSettings, PretrainingDataSettings, TokenizeSettings
from bertctl.model import ARCHITECTURES
from bertctl.objectives import OBJECTIVES
from bertctl.stages.settings.search import (ChooseSettings, EmbedSettings, IndexSettings, MineSettings,
                                     SplitSettings)
from bertctl.settings import (DATA, DEFAULT_LENGTH, EVALUATION, MODEL, RUNTIME, SEQ_LENGTH, TASK,
                              TRAINING, Runtime, StageConfig, Threads, meta,
                              register_stage_settings)
from bertctl.train.settings import TrainingSettings

_RUN = meta(RUNTIME, identity=False)
FROZEN = "Frozen encoder (feature-based)"


class BuildPretrainDataSettings(PretrainingDataSettings):
    produces: ClassVar[str | None] = "pretrain-data"
    num_shards: int = Field(1, ge=1, description="Split the build into this many slices (for a "
                            "cluster's job array); combine them with --combine.",
                            json_schema_extra=meta(RUNTIME))
    shard_index: int = Field(0, ge=0, description="Which slice this run builds (0-based).",
                             json_schema_extra=meta(RUNTIME))
    workers: int | None = Field(None, ge=1, description="Worker processes; unset: all cores. "
                                "The output does not depend on it.", json_schema_extra=_RUN)
    text_column: str | None = Field(None, description="Column holding the text in JSON lines, "
                                    "CSV, parquet or Arrow corpus files; unset: text, or a "
                                    "table's only column.", json_schema_extra=meta(DATA))

    @model_validator(mode="after")
    def _slice(self):
        if self.shard_index >= self.num_shards:
            raise ValueError(f"shard_index {self.shard_index} must be below num_shards "
                             f"{self.num_shards}")
        return self


class PretrainSettings(TrainingSettings):
    """`bertctl pretrain`; the objectives' own options are added by assembled.py."""

    produces: ClassVar[str | None] = "model"
    objective: str = Field("bert", description="The pretraining objective, from the registry "
                           "(bertctl/objectives): bert is masked LM + next-sentence prediction "
                           "as the paper (masked LM alone on data built with --no-nsp); mlm is "
                           "masked LM alone on continuous text (data built with --no-nsp), "
                           "as RoBERTa; electra is replaced-token detection (data built with "
                           "--no-nsp --masking dynamic).",
                           json_schema_extra=meta(TRAINING))
    mask_rate: float | None = Field(None, gt=0, lt=1, description="Share of tokens masked in "
                                    "training, drawn anew every epoch: needs data built with "
                                    "--masking dynamic (unset: the data's --masked-lm-prob; "
                                    "base-size recipes use 0.3, the mini budget recipe 0.15). "
                                    "Validation keeps the data's rate, so runs compare. A rate above "
                                    "the data's raises its --max-predictions-per-seq to what the "
                                    "rate needs (stats.masking in the manifest says both).",
                                    json_schema_extra=meta(TRAINING))
    # Their choices and help are the registry's (assembled.py: architecture_fields).
    architecture: str = Field("bert", description="The encoder, from the registry.",
                              json_schema_extra=meta(MODEL, hashed_if_changed=True))
    model_size: str = Field("base", description="The architecture's size preset.",
                            json_schema_extra=meta(MODEL))
    num_hidden_layers: int | None = Field(None, ge=1, description="Override the preset's layers.",
                                          json_schema_extra=meta(MODEL))
    hidden_size: int | None = Field(None, ge=1, description="Override the preset's hidden size.",
                                    json_schema_extra=meta(MODEL))
    num_attention_heads: int | None = Field(None, ge=1, description="Override the preset's "
                                            "heads.", json_schema_extra=meta(MODEL))
    intermediate_size: int | None = Field(None, ge=1, description="Override the feed-forward "
                                          "size (default 4 x hidden; modernbert 1.5 x).",
                                          json_schema_extra=meta(MODEL))
    # A training setting, not the architecture's: config.json keeps the rates fine-tuning uses.
    dropout: float | None = Field(None, ge=0, lt=1, description="Dropout rate while "
                                  "pretraining, everywhere (unset: the model's, 0.1; Cramming "
                                  "pretrains with 0). The saved model keeps its rates for "
                                  "fine-tuning.",
                                  json_schema_extra=meta(TRAINING))
    max_position_embeddings: int = Field(512, ge=8, description="Position embeddings (at least "
                                         "the data's max_seq_length); modernbert has no "
                                         "position table (rotary): the longest input it "
                                         "declares, up to 8192 (unset: 512, or the data's "
                                         "length if longer), which a run with --init-from "
                                         "may raise (context extension).",
                                         json_schema_extra=meta(MODEL))
    rope_theta: float | None = Field(None, gt=0, description="Rotary base of the layers that "
                                     "see the whole input (modernbert; unset: the preset's or "
                                     "the --init-from model's). ModernBERT trains at 1024 "
                                     "tokens with 10000 and raises it to 160000 for 8192.",
                                     json_schema_extra=meta(MODEL, hashed_if_changed=True))
    batch_size: int = Field(256, ge=1, description="Examples per optimizer step, over all "
                            "processes (the paper: 256).", json_schema_extra=meta(TRAINING))
    lr: float = Field(1e-4, gt=0, description="Peak learning rate (the paper: 1e-4).",
                      json_schema_extra=meta(TRAINING))
    warmup: float = Field(0.01, ge=0, description="Linear warm-up: a fraction of the total steps "
                          "if below 1, else a step count (the paper: 10,000 of 1M).",
                          json_schema_extra=meta(TRAINING))
    total_steps: int | None = Field(None, ge=1, description="Length of the learning-rate "
                                    "schedule when it is longer than this run (phase 1 of the "
                                    "paper's two phases: --steps 900000 --total-steps 1000000).",
                                    json_schema_extra=meta(TRAINING))
    continue_schedule: bool = Field(False, description="With --init-from a bertctl model "
                                    "artifact: continue its step count, schedule and optimizer "
                                    "state (phase 2; a WSD decay from a stable phase).",
                                    json_schema_extra=meta(TRAINING))
    train_only: Literal["all", "new"] = Field(
        "all", description="With --init-from: new trains only the weights the model was saved "
        "without (a sentence-transformers model's masked-LM head), the loaded ones frozen: a "
        "short run of it before continuing pretraining keeps a random head's first gradients "
        "out of the encoder.", json_schema_extra=meta(TRAINING, hashed_if_changed=True))
    eval_batches: int | None = Field(50, ge=1, description="Validation batches per evaluation; "
                                     "unset: the whole validation split.",
                                     json_schema_extra=meta(EVALUATION, identity=False))

    @field_validator("objective")
    @classmethod
    def _registered(cls, name: str) -> str:
        return OBJECTIVES.known(name)

    @model_validator(mode="after")
    def _known_shape(self):
        arch = ARCHITECTURES[ARCHITECTURES.known(self.architecture)]
        if self.model_size not in arch.config_class.presets:
            raise ValueError(f"model_size {self.model_size!r} is not a {arch.name} size (one "
                             f"of {', '.join(arch.config_class.presets)})")
        return self


class TaskSettings(StageConfig):
    """How to read a fine-tuning task's files: a preset, or the columns of a task no preset
    knows (flags alone), or a preset with some fields replaced. Shared by finetune and eval.
    The fields every family shares; a family's own are added by the task registry
    (`stage_settings.with_family_options`) and listed in `family_options`."""

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


class EvalSettings(TaskSettings, Runtime):
    """`bertctl eval`: the task settings (read from the model's task file unless given) plus
    how to run. The label list always comes from the model."""

    produces: ClassVar[str | None] = "eval"

    labels: list[str] | None = Field(None, description="Label names in index order, for a "
                                     "model whose config.json has only LABEL_0... placeholders; "
                                     "must agree with the model's own names otherwise.",
                                     json_schema_extra=meta(TASK))
    max_seq_length: int | None = Field(None, **SEQ_LENGTH, description="Tokens per example; "
                                       "unset: the model's fine-tuning length, else 128.",
                                       json_schema_extra=meta(TASK))
    header: bool | None = Field(None, description="Whether DATA's first row names its columns; "
                                "unset: as the task's files (GLUE's CoLA test file has a header, "
                                "its train and dev files none).", json_schema_extra=meta(TASK))
    batch_size: int = Field(64, ge=1, description="Examples per forward pass.",
                            json_schema_extra=_RUN)
    split: Literal["train", "validation"] | None = Field(
        None, description="Pretrain data only: the split to evaluate; unset: "
        "validation.", json_schema_extra=meta(DATA))
    rerank_depth: int = Field(100, ge=1, le=10_000, description="--rerank: documents a query "
                              "the reranker reorders (at most the search's --top-k).",
                              json_schema_extra=meta(EVALUATION, hashed_if_changed=True))
    rerank_scoring: Literal["cross", "maxsim"] = Field(
        "cross", description="--rerank: how the reranker scores a (query, document) pair. "
        "cross: a cross-encoder's score of the two together; maxsim: an embedding model's "
        "token vectors compared by late interaction (each query piece's best cosine with a "
        "document piece, averaged): --rerank the first stage itself reorders its own search "
        "with no second model.", json_schema_extra=meta(EVALUATION, hashed_if_changed=True))


class TaskTrainingSettings(TrainingSettings, TaskSettings):
    """What training on a task's data takes, whether from the labels (finetune) or from a
    teacher's outputs (distill)."""

    produces: ClassVar[str | None] = "model"
    epochs: float | None = Field(3, gt=0, description="Passes over the training data (the "
                                 "paper: 2 to 4).", json_schema_extra=meta(TRAINING))
    batch_size: int = Field(32, ge=1, description="Examples per optimizer step, over all "
                            "processes (the paper: 16 or 32).", json_schema_extra=meta(TRAINING))
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
    # benchmarks/bench_finetune_quality.py and docs/benchmarks.md. Grouping stays available.
    group_by_length: bool = Field(False, description="Batch examples of similar length "
                                  "together: less padding, faster, but measured to cost "
                                  "accuracy on small data (see docs/benchmarks.md).",
                                  json_schema_extra=meta(TRAINING))
    # On by default: a packed batch is the padded batch laid out tighter (the same loss and
    # gradients, tests/test_packing.py), so it cannot bias training the way grouping does; only
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


class FinetuneSettings(TaskTrainingSettings):
    # Feature-based use (the paper's ELMo-style ablation): bertctl/model/features.py.
    freeze_encoder: bool = Field(False, description="Train only a head on the frozen encoder's "
                                 "hidden states (no dropout, no gradient through it).",
                                 json_schema_extra=meta(FROZEN))
    features: str = Field("-1", description="With --freeze-encoder: the hidden states used "
                          "(0 the embeddings layer, -1 the last; comma-separated, or all).",
                          json_schema_extra=meta(FROZEN))
    combine: Literal["concat", "sum", "mean", "weighted"] = Field(
        "concat", description="With --freeze-encoder: how several layers are joined; weighted "
        "is ELMo's learned scalar mix.", json_schema_extra=meta(FROZEN))
    head: Literal["linear", "bilstm"] = Field("linear", description="With --freeze-encoder: "
                                              "a linear classifier, or (tagging) the paper's "
                                              "two-layer BiLSTM under it.",
                                              json_schema_extra=meta(FROZEN))

    @model_validator(mode="after")
    def _features_need_freezing(self):
        if not self.freeze_encoder and (self.features != "-1" or self.combine != "concat"
                                        or self.head != "linear"):
            raise ValueError("--features, --combine and --head describe a frozen encoder's "
                             "head: add --freeze-encoder")
        return self


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


class ReportSettings(StageConfig):
    """`bertctl report`: the page shows its input artifacts; these only label it."""

    produces: ClassVar[str | None] = "report"

    title: str | None = Field(None, description="The page's title; unset: named after the "
                              "artifacts shown.", json_schema_extra=meta("Report"))


class GlueSummarySettings(StageConfig):
    """`bertctl glue-summary`: everything it shows comes from the eval artifacts given."""

    produces: ClassVar[str | None] = "glue-summary"


EXPORT = "Export"


class ExportSettings(Threads):
    """`bertctl export`: a model as an ONNX graph for onnxruntime (see bertctl/model/onnx_model.py)."""

    produces: ClassVar[str | None] = "export"

    encoder: bool = Field(False, description="Export the bare encoder (every hidden state, for "
                          "`embed`) instead of the model's task head. A model without a task "
                          "(a pretrained one) always exports its encoder.",
                          json_schema_extra=meta(EXPORT))
    quantize: Literal["none", "int8"] = Field("none", description="int8: dynamic quantization "
                                              "of the matrix multiplications' weights (the "
                                              "activations are quantized at run time).",
                                              json_schema_extra=meta(EXPORT))
    per_channel: bool = Field(True, description="With --quantize int8: one scale per output "
                              "channel of each weight instead of one per weight.",
                              json_schema_extra=meta(EXPORT))
    optimize: bool = Field(True, description="Apply onnxruntime's transformer graph fusions "
                           "(layer norm with the residual add, bias with GELU) before "
                           "quantizing.", json_schema_extra=meta(EXPORT))
    opset: int = Field(18, ge=18, le=23, description="The ONNX opset (the exporter's lowest "
                       "is 18).", json_schema_extra=meta(EXPORT))
    max_drop: float = Field(1.0, ge=0, description="With --check: the most the export may lose "
                            "on the model's main metric, in points (0.01 of accuracy or F1 is "
                            "one point); beyond it the exit code is 3, the artifact written.",
                            json_schema_extra=meta(EVALUATION))
    batch_size: int = Field(64, ge=1, description="With --check: examples per forward pass.",
                            json_schema_extra=_RUN)


# Every stage's settings class, declared here once: the artifact-id check reads from these which
# fields each kind's ids leave out (settings.identity_exclusions), registered for the contract's
# id check. The task stages' classes as the CLI shows them add the families' options
# (assembled.py); those options are always part of the id, so these bases say all their
# composed classes leave out.
STAGE_SETTINGS: tuple[type[StageConfig], ...] = (
    TokenizeSettings, BuildPretrainDataSettings, PretrainSettings, FinetuneSettings,
    DistillSettings, EvalSettings, EmbedSettings, ExportSettings, ReportSettings,
    GlueSummarySettings, AuditSettings, MineSettings, IndexSettings, SplitSettings,
    ChooseSettings)
register_stage_settings(*STAGE_SETTINGS)

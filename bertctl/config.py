"""Stage settings: one pydantic model per stage, loaded from YAML and overridden by flags.

Every field is both a `--flag` (derived by the CLI from the field itself, so the two can never
drift apart) and a key of `--config FILE.yaml`. `extra="forbid"` turns a typo into an error rather
than a silently ignored setting.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar, Literal, TypeVar

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError, field_validator, model_validator

from bertctl.errors import BertctlError


class StageConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    # What a settings error is prefixed with when the settings are built directly (in code
    # rather than by `resolve`, which names the config file instead).
    where: ClassVar[str] = "settings"

    def __init__(self, /, **data: Any):
        try:
            super().__init__(**data)
        except ValidationError as exc:
            raise SettingsError(exc.errors(), f"{self.where}: ") from None


class SettingsError(BertctlError):
    """Invalid settings: names the key, the value and the reason of the first problem."""

    def __init__(self, errors: list[dict], prefix: str = ""):
        self.errors = errors
        super().__init__(prefix + _describe(errors[0], ""))


C = TypeVar("C", bound=StageConfig)


def load_yaml(path: str | Path) -> dict[str, Any]:
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise BertctlError(f"{path}: config file not found") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise BertctlError(f"{path}: cannot read config file: {exc}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark else str(path)
        problem = getattr(exc, "problem", None) or str(exc)
        raise BertctlError(f"{where}: invalid YAML: {' '.join(problem.split())}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise BertctlError(f"{path}: config file must be a mapping of settings, "
                           f"not a {type(data).__name__}")
    # YAML users write either flag spelling; the model's keys use underscores.
    return {str(k).replace("-", "_"): v for k, v in data.items()}


def _describe(err: dict, source: str) -> str:
    key = ".".join(str(p) for p in err["loc"])
    if not key:  # a rule across several settings
        return f"{source}{err['msg'].removeprefix('Value error, ')}"
    if err["type"] == "extra_forbidden":
        return f"{source}unknown setting {key!r}"
    value = err.get("input")
    return f"{source}setting {key!r} = {value!r}: {err['msg']}"


def resolve(cls: type[C], config_file: str | Path | None = None,
            overrides: dict[str, Any] | None = None) -> C:
    """Defaults < values from `config_file` < `overrides` (flags actually given).

    Raises BertctlError naming the key, the value and the reason for the first problem.
    """
    values: dict[str, Any] = {}
    file_values = load_yaml(config_file) if config_file else {}
    values.update(file_values)
    given = {k: v for k, v in (overrides or {}).items() if v is not None}
    values.update(given)
    try:
        return cls(**values)
    except SettingsError as exc:
        err = exc.errors[0]
        key = str(err["loc"][0]) if err["loc"] else ""
        source = f"{config_file}: " if config_file and key in file_values and key not in given else ""
        raise BertctlError(_describe(err, source)) from None


def as_dict(config: StageConfig) -> dict[str, Any]:
    """The resolved settings as plain JSON values, the form stored in manifests."""
    return config.model_dump(mode="json")


def identity(config: StageConfig) -> dict[str, Any]:
    """The settings that determine the output, the part an artifact id hashes. Fields marked
    `json_schema_extra={"identity": False}` (worker counts, logging intervals) change how a
    stage runs, not what it makes, so changing them must not invalidate an artifact."""
    values = as_dict(config)
    for name, field in type(config).model_fields.items():
        extra = field.json_schema_extra if isinstance(field.json_schema_extra, dict) else {}
        if extra.get("identity") is False:
            values.pop(name, None)
    return values


# ---------------------------------------------------------------------------------------------
# Per-stage settings. A field's description is its --help text; `flag` in json_schema_extra
# overrides the derived flag name.

from pydantic import Field  # noqa: E402


class TokenizeSettings(StageConfig):
    vocab_size: int = Field(30522, ge=1, description="Vocabulary size, special and [unused] "
                            "tokens included.")
    cased: bool = Field(False, description="Keep case and accents (a cased model) instead of "
                        "lowercasing.", json_schema_extra={"flag": "--cased/--uncased"})
    strip_accents: bool | None = Field(None, description="Strip accents; unset follows "
                                       "--uncased as Google's models do.")
    min_frequency: int = Field(2, ge=1, description="Minimum count for a piece to be merged "
                               "into the vocabulary.")
    limit_alphabet: int = Field(1000, ge=1, description="Most distinct characters kept in "
                                "the alphabet; rarer ones become [UNK].")
    unused_tokens: int = Field(99, ge=0, le=100000, description="Reserved [unusedN] slots for "
                               "adding domain words later (Google's layout: [UNK]=100 with 99).")
    text_column: str | None = Field(None, description="Column holding the text in JSON lines, "
                                    "CSV or parquet corpus files.")


class TaskSettings(StageConfig):
    """How to read a fine-tuning task's files: a preset, or the columns of a task no preset
    knows (flags alone), or a preset with some fields replaced. Shared by finetune and eval."""

    task: str | None = Field(None, description="A preset: glue/sst2, glue/cola, glue/mrpc, "
                             "glue/rte, glue/sts-b, glue/wnli, glue/qnli, glue/qqp, glue/mnli, "
                             "swag, squad, squad_v2, conll2003.")
    family: Literal["single", "pair", "regression", "multiple_choice", "span",
                    "tagging"] | None = Field(
        None, description="Task family, for a task without a preset.")
    text_column: list[str] | None = Field(None, description="Text column(s): one for single "
                                          "sentences, two for pairs (repeat the flag).")
    label_column: str | None = Field(None, description="Label column.")
    context_column: str | None = Field(None, description="Multiple choice and span QA: the "
                                       "context (passage) column.")
    choice_columns: list[str] | None = Field(None, description="Multiple choice: the choice "
                                             "columns (repeat the flag).")
    labels: list[str] | None = Field(None, description="Classification labels in index order "
                                     "(default: the sorted labels of the training file); "
                                     "tagging: the names of integer tags.")
    max_seq_length: int = Field(128, ge=8, le=512, description="Tokens per example; pairs are "
                                "truncated longest-first (span QA: 384, the paper's).")
    # Span QA (SQuAD): the family's own options, kept in the task spec's `options`.
    version_2_with_negative: bool | None = Field(None, description="Span QA: questions may "
                                                 "have no answer (SQuAD 2.0; the squad_v2 "
                                                 "preset sets it).")
    doc_stride: int | None = Field(None, ge=1, description="Span QA and tagging: tokens "
                                   "shared by consecutive windows of a long passage or "
                                   "sentence (default: 128 for span QA, half the window for "
                                   "tagging).")
    max_query_length: int | None = Field(None, ge=1, description="Span QA: question tokens "
                                         "kept (default 64).")
    n_best: int | None = Field(None, ge=1, description="Span QA: candidate answers kept per "
                               "question (default 20).")
    max_answer_length: int | None = Field(None, ge=1, description="Span QA: the longest "
                                          "answer in tokens (default 30).")
    question_column: str | None = Field(None, description="Span QA, flat files: the question "
                                        "column (default question).")
    id_column: str | None = Field(None, description="Span QA, flat files: the question id "
                                  "column (default id).")
    answers_column: str | None = Field(None, description="Span QA, flat files: the answers "
                                       "column, {text: [...], answer_start: [...]} (default "
                                       "answers).")

    # Tagging (CoNLL NER): the family's own options.
    token_column: str | None = Field(None, description="Tagging: the token column, an index "
                                     "(column files; default the first) or a name (tables; "
                                     "default tokens).")
    tag_column: str | None = Field(None, description="Tagging: the tag column, an index "
                                   "(column files; default the last) or a name (tables; "
                                   "default ner_tags).")
    tag_scheme: Literal["iob1", "iob2", "bioes"] | None = Field(
        None, description="Tagging: the files' tag scheme; unset: detected per file (logged). "
        "The model trains on IOB2; predictions are written in each file's scheme.")
    document_context: bool | None = Field(None, description="Tagging: fill each window with "
                                          "the sentence's neighbours in its document (the "
                                          "paper's CoNLL setting); only the sentence is "
                                          "predicted.")

    _OPTIONS: ClassVar[tuple[str, ...]] = (
        "version_2_with_negative", "doc_stride", "max_query_length", "n_best",
        "max_answer_length", "question_column", "id_column", "answers_column", "null_threshold",
        "token_column", "tag_column", "tag_scheme", "document_context")

    @model_validator(mode="before")
    @classmethod
    def _family_length(cls, data: Any) -> Any:
        # A family's own default length (span QA: 384) where the user gave none.
        if not isinstance(data, dict) or data.get("max_seq_length") is not None:
            return data
        if "max_seq_length" not in cls.model_fields or cls.model_fields[
                "max_seq_length"].default is None:
            return data
        from bertctl.tasks import FAMILIES, PRESETS

        task, family = data.get("task"), data.get("family")
        family = family or (PRESETS[task].family if task in PRESETS else None)
        length = getattr(FAMILIES.get(family), "default_max_seq_length", None)
        return {**data, "max_seq_length": length} if length else data

    def task_fields(self) -> dict[str, Any]:
        """The task spec fields these flags set (only those given)."""
        fields = {"family": self.family, "text_columns": self.text_column,
                  "label_column": self.label_column, "context_column": self.context_column,
                  "choice_columns": self.choice_columns}
        fields = {k: v for k, v in fields.items() if v is not None}
        options = {k: getattr(self, k) for k in self._OPTIONS
                   if getattr(self, k, None) is not None}
        if options:
            fields["options"] = options
        return fields

    def task_spec(self):
        """The TaskSpec these settings describe (BertctlError if they describe none)."""
        from bertctl.tasks import make_task_spec

        return make_task_spec(self.task, **self.task_fields(), labels=self.labels)


class PretrainingDataSettings(StageConfig):
    """The settings that determine pretraining instances: the same settings (and tokenizer and
    corpus) give the same bytes. The core builder takes these; the stage adds how to run."""

    where: ClassVar[str] = "build-pretrain-data"
    max_seq_length: int = Field(128, ge=8, le=512, description="Tokens per instance, [CLS] and "
                                "both [SEP] included (BERT's positions stop at 512).")
    dupe_factor: int | None = Field(None, ge=1, description="Passes over the corpus with "
                                    "different pairings and masks; unset: 10 for static masking, "
                                    "1 for dynamic.")
    short_seq_prob: float = Field(0.1, ge=0, le=1, description="Share of instances packed to a "
                                  "random shorter target length.")
    masked_lm_prob: float = Field(0.15, gt=0, lt=1, description="Share of tokens predicted.")
    max_predictions_per_seq: int = Field(20, ge=1, description="Most predictions per instance.")
    seed: int = Field(12345, ge=0, description="Seed for pairing, truncation and masking.")
    whole_word_mask: bool = Field(False, description="Mask all pieces of a word together.")
    masking: Literal["static", "dynamic"] = Field(
        "static", description="static: masks drawn here (Google); dynamic: pretrain draws new "
        "masks every epoch (RoBERTa).")
    no_nsp: bool = Field(False, description="No next-sentence prediction: B is always the real "
                         "continuation (the paper's ablation).",
                         json_schema_extra={"flag": "--no-nsp/--nsp"})
    validation_fraction: float = Field(0.0, ge=0, lt=1, description="Share of documents held "
                                       "out as a validation split.")
    chunk_chars: int = Field(1 << 18, ge=1, description="Characters per chunk of documents: the "
                             "unit of parallel work and the window random B segments come from.")
    shard_max_tokens: int = Field(1 << 28, ge=1, description="Tokens per shard file.")
    @property
    def passes(self) -> int:
        """dupe_factor, with its default resolved: Google's 10 for static masking, 1 for dynamic
        (the loader draws new masks every epoch, so passes only vary the A/B pairings)."""
        if self.dupe_factor is not None:
            return self.dupe_factor
        return 10 if self.masking == "static" else 1

    def to_dict(self) -> dict[str, Any]:
        """The settings as stored beside the data, dupe_factor resolved."""
        return {**self.model_dump(mode="json"), "dupe_factor": self.passes}


class BuildPretrainDataSettings(PretrainingDataSettings):
    num_shards: int = Field(1, ge=1, description="Split the build into this many slices (for a "
                            "cluster's job array); combine them with --combine.")
    shard_index: int = Field(0, ge=0, description="Which slice this run builds (0-based).")
    workers: int | None = Field(None, ge=1, description="Worker processes; unset: all cores. "
                                "The output does not depend on it.",
                                json_schema_extra={"identity": False})
    text_column: str | None = Field(None, description="Column holding the text in JSON lines, "
                                    "CSV or parquet corpus files.")

    @model_validator(mode="after")
    def _slice(self):
        if self.shard_index >= self.num_shards:
            raise ValueError(f"shard_index {self.shard_index} must be below num_shards "
                             f"{self.num_shards}")
        return self


_RUN_ONLY = {"identity": False}  # changes how a run goes, not what it makes


def _resolve_precision(cls, data: Any) -> Any:
    """`auto` becomes the precision this machine runs fastest (bertctl.hardware), before the
    settings are validated: the manifest records it, and the artifact id hashes it."""
    if not isinstance(data, dict):
        return data
    precision = data.get("precision", cls.model_fields["precision"].default)
    if precision != "auto":
        return data
    from bertctl.hardware import auto_precision

    return {**data, "precision": auto_precision(str(data.get("device") or "auto"))}


class TrainingSettings(StageConfig):
    """The training loop's settings, shared by pretrain and finetune (which set other defaults)."""

    steps: int | None = Field(None, ge=1, description="Optimizer steps (or give --epochs).")
    epochs: float | None = Field(None, gt=0, description="Passes over the training data (or "
                                 "give --steps).")
    batch_size: int = Field(32, ge=1, description="Examples per optimizer step, over all "
                            "processes.")
    micro_batch_size: int | None = Field(None, ge=1, description="Examples per forward pass; "
                                         "gradients accumulate up to --batch-size. Unset: "
                                         "batch size / processes.", json_schema_extra=_RUN_ONLY)
    lr: float = Field(1e-4, gt=0, description="Peak learning rate.")
    optimizer: Literal["adamw", "lamb"] = Field(
        "adamw", description="AdamW, or LAMB (layer-wise trust ratios, for very large batches as "
        "in NVIDIA's BERT recipe; see bertctl/train/optim.py).")
    gradient_checkpointing: bool = Field(False, description="Keep only each encoder layer's "
                                         "input and recompute the layer in the backward pass: "
                                         "much less activation memory for about a third more "
                                         "compute; the same gradients.",
                                         json_schema_extra=_RUN_ONLY)
    # Off by default: on CPU it did not pay (benchmarks/bench_compile.py; figures in the README,
    # "Performance"); on CUDA it fuses the layers' elementwise work into the matmuls' epilogues.
    compile: bool = Field(False, description="torch.compile each encoder layer (first steps "
                          "slower while it compiles; needs a C++ compiler on CPU). See the "
                          "README's performance table for when it pays.",
                          json_schema_extra=_RUN_ONLY)
    weight_decay: float = Field(0.01, ge=0, description="AdamW weight decay (not on biases and "
                                "LayerNorm).")
    warmup: float = Field(0.1, ge=0, description="Linear warm-up: a fraction of the steps if "
                          "below 1, else a step count; then linear decay to 0.")
    max_grad_norm: float | None = Field(1.0, gt=0, description="Gradient clipping norm.")
    precision: Literal["auto", "fp32", "bf16", "fp16"] = Field(
        "auto", description="auto: bf16 where the hardware runs bf16 matmuls natively (CPUs "
        "with AMX or AVX512-BF16, GPUs that support it), else fp32; fp32; bf16 autocast; fp16 "
        "with a gradient scaler (GPU only). Recorded resolved.")
    threads: int | None = Field(None, ge=1, description="CPU threads per process; unset: "
                                "OMP_NUM_THREADS if set, else the cores this process may use "
                                "(affinity and cgroup quota).", json_schema_extra=_RUN_ONLY)
    seed: int = Field(0, ge=0, description="Seed for initialisation, data order and dropout.")
    group_by_length: bool = Field(False, description="Batch examples of similar length "
                                  "together (less padding).")
    log_every: int = Field(10, ge=1, description="Steps between log lines.",
                           json_schema_extra=_RUN_ONLY)
    eval_every: int | None = Field(None, ge=1, description="Steps between validation passes; "
                                   "unset: at each epoch's end and the run's end.",
                                   json_schema_extra=_RUN_ONLY)
    checkpoint_every: int | None = Field(200, ge=1, description="Steps between resumable "
                                         "checkpoints; unset: none.", json_schema_extra=_RUN_ONLY)
    keep_last: int = Field(2, ge=1, description="Checkpoints kept.", json_schema_extra=_RUN_ONLY)
    resume_from: str = Field("latest", pattern=r"^(latest|never|\d+)$", description="Checkpoint "
                             "to resume from when the same command is rerun: latest, never, or "
                             "a step (to skip a corrupted newer one).",
                             json_schema_extra=_RUN_ONLY)
    device: Literal["auto", "cpu", "cuda"] = Field("auto", description="auto: cuda when "
                                                   "available (cuda:LOCAL_RANK under torchrun).",
                                                   json_schema_extra=_RUN_ONLY)
    tensorboard: str | None = Field(None, description="Also write the logged scalars as "
                                    "TensorBoard event files to this directory (needs the "
                                    "tensorboard extra).", json_schema_extra=_RUN_ONLY)

    @model_validator(mode="before")
    @classmethod
    def _auto_precision(cls, data: Any) -> Any:
        return _resolve_precision(cls, data)

    @field_validator("resume_from", mode="before")
    @classmethod
    def _step_number(cls, value: Any) -> Any:
        return str(value) if isinstance(value, int) and not isinstance(value, bool) else value

    @model_validator(mode="after")
    def _length(self):
        if (self.steps is None) == (self.epochs is None):
            raise ValueError("give exactly one of steps and epochs")
        return self



class PretrainSettings(TrainingSettings):
    model_size: Literal["tiny", "mini", "small", "medium", "base", "large"] = Field(
        "base", description="Google's sizes (L/H/A): tiny 2/128/2, mini 4/256/4, small 4/512/8, "
        "medium 8/512/8, base 12/768/12, large 24/1024/16. Ignored with --init-from or "
        "--model-config.")
    num_hidden_layers: int | None = Field(None, ge=1, description="Override the preset's layers.")
    hidden_size: int | None = Field(None, ge=1, description="Override the preset's hidden size.")
    num_attention_heads: int | None = Field(None, ge=1, description="Override the preset's heads.")
    intermediate_size: int | None = Field(None, ge=1, description="Override the feed-forward "
                                          "size (default 4 x hidden).")
    max_position_embeddings: int = Field(512, ge=8, description="Position embeddings (at least "
                                         "the data's max_seq_length).")
    batch_size: int = Field(256, ge=1, description="Examples per optimizer step, over all "
                            "processes (the paper: 256).")
    lr: float = Field(1e-4, gt=0, description="Peak learning rate (the paper: 1e-4).")
    warmup: float = Field(0.01, ge=0, description="Linear warm-up: a fraction of the total steps "
                          "if below 1, else a step count (the paper: 10,000 of 1M).")
    total_steps: int | None = Field(None, ge=1, description="Length of the learning-rate "
                                    "schedule when it is longer than this run (phase 1 of the "
                                    "paper's two phases: --steps 900000 --total-steps 1000000).")
    continue_schedule: bool = Field(False, description="With --init-from a bertctl model "
                                    "artifact: continue its step count and schedule (phase 2).")
    eval_batches: int | None = Field(50, ge=1, description="Validation batches per evaluation; "
                                     "unset: the whole validation split.",
                                     json_schema_extra=_RUN_ONLY)


class InferenceSettings(StageConfig):
    """How a stage that only runs the model forward runs it (eval, embed)."""

    precision: Literal["auto", "fp32", "bf16"] = Field(
        "auto", description="auto: bf16 where the hardware runs bf16 matmuls natively, else "
        "fp32; fp32; or bf16 autocast (CPU or GPU). Recorded resolved.")
    threads: int | None = Field(None, ge=1, description="CPU threads; unset: OMP_NUM_THREADS "
                                "if set, else the cores this process may use.",
                                json_schema_extra={"identity": False})
    device: Literal["auto", "cpu", "cuda"] = Field("auto", description="auto: cuda when "
                                                   "available.",
                                                   json_schema_extra={"identity": False})

    @model_validator(mode="before")
    @classmethod
    def _auto_precision(cls, data: Any) -> Any:
        return _resolve_precision(cls, data)


class EvalSettings(TaskSettings, InferenceSettings):
    """`bertctl eval`: the task settings (read from the model's task file unless given) plus
    how to run. The label list always comes from the model."""

    labels: list[str] | None = Field(None, description="Label names in index order, for a "
                                     "model whose config.json has only LABEL_0... placeholders; "
                                     "must agree with the model's own names otherwise.")
    max_seq_length: int | None = Field(None, ge=8, le=512, description="Tokens per example; "
                                       "unset: the model's fine-tuning length, else 128.")
    header: bool | None = Field(None, description="Whether DATA's first row names its columns; "
                                "unset: as the task's files (GLUE's CoLA test file has a header, "
                                "its train and dev files none).")
    batch_size: int = Field(64, ge=1, description="Examples per forward pass.",
                            json_schema_extra={"identity": False})
    null_threshold: float | None = Field(None, description="Span QA v2: predict no answer "
                                         "when the null score beats the best span by more "
                                         "than this; unset: the threshold tuned on the dev set "
                                         "during finetune (else 0).")
    split: Literal["train", "validation"] | None = Field(
        None, description="Pretrain data only: the split to evaluate; unset: "
        "validation.")


class FinetuneSettings(TrainingSettings, TaskSettings):
    epochs: float | None = Field(3, gt=0, description="Passes over the training data (the "
                                 "paper: 2 to 4).")
    batch_size: int = Field(32, ge=1, description="Examples per optimizer step, over all "
                            "processes (the paper: 16 or 32).")
    lr: float = Field(2e-5, gt=0, description="Peak learning rate (the paper: 5e-5, 3e-5 or "
                      "2e-5).")
    warmup: float = Field(0.1, ge=0, description="Linear warm-up: a fraction of the steps if "
                          "below 1, else a step count; then linear decay to 0.")
    # Off by default (#10): length-grouped batches train 1.2-2.1x faster but cost quality on
    # small data, as length goes with genre and label and narrow-length batches bias each step:
    # 4-6 points of accuracy on issue #10's 2,000-row pair task, -0.015 F1 on MRPC's full
    # training set (3 seeds, all-MiniLM-L6-v2). Random batches keep a plain loop's sampling, and
    # `pack` below wins most of grouping's speed back without changing the batches.
    # benchmarks/bench_finetune_quality.py and the README's table. Grouping stays available.
    group_by_length: bool = Field(False, description="Batch examples of similar length "
                                  "together: less padding, faster, but measured to cost "
                                  "accuracy on small data (see the README).")
    # On by default: a packed batch is the padded batch laid out tighter (the same loss and
    # gradients, tests/test_packing.py), so it cannot bias training the way grouping does; only
    # the dropout draws differ. Side by side (seed 0, GLUE 2,000-row slices, bf16, 1 thread):
    # 1.37x (SST-2) to 2.0x (RTE) faster per epoch than padded random batches, 2.2x on STS-B's
    # full set, 2.3x on CoNLL-2003 (fp32). Quality per task and seed: README, "Fine-tuning
    # quality".
    pack: bool = Field(True, description="Lay each training batch out with several sequences "
                       "per row (attention kept inside each sequence): the same examples and "
                       "loss as padded batches, less padding. Sentence-level and tagging heads; "
                       "others always pad.")
    keep: Literal["best", "last"] = Field("best", description="Keep the weights with the best "
                                          "validation metric, or the last ones.")
    eval_batch_size: int = Field(64, ge=1, description="Examples per validation forward pass.",
                                 json_schema_extra=_RUN_ONLY)
    # Feature-based use (the paper's ELMo-style ablation): bertctl/model/features.py.
    freeze_encoder: bool = Field(False, description="Train only a head on the frozen encoder's "
                                 "hidden states (no dropout, no gradient through it).")
    features: str = Field("-1", description="With --freeze-encoder: the hidden states used "
                          "(0 the embeddings layer, -1 the last; comma-separated, or all).")
    combine: Literal["concat", "sum", "mean", "weighted"] = Field(
        "concat", description="With --freeze-encoder: how several layers are joined; weighted "
        "is ELMo's learned scalar mix.")
    head: Literal["linear", "bilstm"] = Field("linear", description="With --freeze-encoder: "
                                              "a linear classifier, or (tagging) the paper's "
                                              "two-layer BiLSTM under it.")

    @model_validator(mode="after")
    def _features_need_freezing(self):
        if not self.freeze_encoder and (self.features != "-1" or self.combine != "concat"
                                        or self.head != "linear"):
            raise ValueError("--features, --combine and --head describe a frozen encoder's "
                             "head: add --freeze-encoder")
        return self

    @model_validator(mode="before")
    @classmethod
    def _steps_replace_default_epochs(cls, data):
        # --steps alone means "this many steps", not a clash with the default epochs.
        if isinstance(data, dict) and data.get("steps") is not None and data.get("epochs") is None:
            data = {**data, "epochs": None}
        return data


class ReportSettings(StageConfig):
    """`bertctl report`: the page shows its input artifacts; these only label it."""

    title: str | None = Field(None, description="The page's title; unset: named after the "
                              "artifacts shown.")


class EmbedSettings(InferenceSettings):
    """`bertctl embed`: a frozen encoder's hidden states as vectors (see bertctl/embeddings.py)."""

    text_column: list[str] | None = Field(None, description="Tables: the text column (twice "
                                          "for sentence pairs); a plain text file has one item "
                                          "per line.")
    token_column: str | None = Field(None, description="A CoNLL-style token file (one word "
                                     "per line, a blank line between sentences, -DOCSTART- "
                                     "lines skipped): the field of the word, 0 the first. Each "
                                     "sentence is a row; --pool words gives one vector per word "
                                     "of the file.")
    layers: str = Field("-1", description="Hidden states to use: indices as transformers "
                        "numbers them (0 the embeddings layer, -1 the last layer), "
                        "comma-separated, or all.")
    combine: Literal["concat", "sum", "mean"] = Field("concat", description="How several "
                                                      "layers are combined.")
    pool: Literal["cls", "mean", "tokens", "words"] = Field(
        "mean", description="One vector per row ([CLS], or the mean over its pieces), per "
        "piece, or per word (the mean of its pieces).")
    normalize: bool = Field(False, description="Scale every vector to unit length (for "
                            "cosine search).")
    dtype: Literal["fp32", "fp16"] = Field("fp32", description="Stored vector type.")
    max_seq_length: int | None = Field(None, ge=8, le=512, description="Pieces per model "
                                       "window; longer single texts are windowed, pairs "
                                       "truncated. Unset: the model's position limit (at most "
                                       "512).")
    doc_stride: int | None = Field(None, ge=0, description="Pieces shared by consecutive "
                                   "windows of a long text (default half the window).")
    shard_rows: int = Field(1_000_000, ge=1, description="Vectors per .npy shard (a shard "
                            "closes at the first chunk past it).")
    batch_size: int = Field(64, ge=1, description="Windows per forward pass.",
                            json_schema_extra={"identity": False})


class GlueSummarySettings(StageConfig):
    """`bertctl glue-summary`: everything it shows comes from the eval artifacts given."""

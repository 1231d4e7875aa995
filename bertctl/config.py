"""Stage settings: one pydantic model per stage, loaded from YAML and overridden by flags.

Every field is both a `--flag` (derived by the CLI from the field itself, so the two can never
drift apart) and a key of `--config FILE.yaml`. `extra="forbid"` turns a typo into an error rather
than a silently ignored setting.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal, TypeVar

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError

from bertctl.errors import BertctlError


class StageConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


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
        raise BertctlError(f"{where}: invalid YAML: {problem}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise BertctlError(f"{path}: config file must be a mapping of settings, "
                           f"not a {type(data).__name__}")
    # YAML users write either flag spelling; the model's keys use underscores.
    return {str(k).replace("-", "_"): v for k, v in data.items()}


def _describe(err: dict, source: str) -> str:
    key = ".".join(str(p) for p in err["loc"]) or "config"
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
    except ValidationError as exc:
        err = exc.errors()[0]
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


class TokenizeConfig(StageConfig):
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
                             "swag.")
    family: Literal["single", "pair", "regression", "multiple_choice"] | None = Field(
        None, description="Task family, for a task without a preset.")
    text_column: list[str] | None = Field(None, description="Text column(s): one for single "
                                          "sentences, two for pairs (repeat the flag).")
    label_column: str | None = Field(None, description="Label column.")
    context_column: str | None = Field(None, description="Multiple choice: the context column.")
    choice_columns: list[str] | None = Field(None, description="Multiple choice: the choice "
                                             "columns (repeat the flag).")
    labels: list[str] | None = Field(None, description="Classification labels in index order "
                                     "(default: the sorted labels of the training file).")
    max_seq_length: int = Field(128, ge=8, le=512, description="Tokens per example; pairs are "
                                "truncated longest-first.")

    def task_spec(self):
        """The TaskSpec these settings describe (BertctlError if they describe none)."""
        from bertctl.data.tasks import make_task_spec

        return make_task_spec(self.task, family=self.family, text_columns=self.text_column,
                              label_column=self.label_column, context_column=self.context_column,
                              choice_columns=self.choice_columns, labels=self.labels)


class EvalConfig(TaskSettings):
    """`bertctl eval`: the task settings (read from the model's task file unless given) plus
    how to run. The label list always comes from the model."""

    labels: list[str] | None = Field(None, description="Label names in index order, for a "
                                     "model whose config.json has only LABEL_0... placeholders; "
                                     "must agree with the model's own names otherwise.")
    max_seq_length: int | None = Field(None, ge=8, le=512, description="Tokens per example; "
                                       "unset: the model's fine-tuning length, else 128.")
    batch_size: int = Field(64, ge=1, description="Examples per forward pass.",
                            json_schema_extra={"identity": False})
    precision: Literal["fp32", "bf16"] = Field("fp32", description="fp32, or bf16 autocast "
                                               "(CPU or GPU).")
    split: Literal["train", "validation"] | None = Field(
        None, description="Pretrain data only: the split to evaluate; unset: "
        "validation.")
    device: Literal["auto", "cpu", "cuda"] = Field("auto", description="auto: cuda when "
                                                   "available.",
                                                   json_schema_extra={"identity": False})

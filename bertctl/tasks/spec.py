"""What a task's files look like: the task spec, the presets, and building a spec from flags.

A spec is declarative data (columns, file format, labels, metric); its `family` names the
registered family (bertctl.tasks.registry) that reads, encodes, predicts and scores it, and
that family checks the spec's family-specific rules.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError, field_validator, model_validator

from bertctl.errors import BertctlError
from bertctl.data.label_columns import label_key
from bertctl.data.tables import column_name
from bertctl.tasks.registry import FAMILIES
from bertctl.data.tables import format_of

FileFormat = Literal["auto", "tsv", "csv", "json", "parquet", "arrow"]


class TaskSpec(BaseModel):
    """What a task's files look like and how to read them.

    - single / pair: `text_columns` holds one / two columns; `label_column` a class label.
    - regression: one or two text columns and a float label (STS-B's 0-5 score).
    - multiple_choice: `context_column` is sentence A; each of `choice_columns` gives one sentence B,
      prefixed by `choice_prefix_column` when set (SWAG: sent1 | sent2 + " " + ending_i); the label
      is the index of the right choice.
    - span: the question/answer columns and the window settings are the family's `options`.
    - tagging: one word per line or a list-of-tokens column; the token and tag columns, the tag
      scheme and the window settings are the family's `options`; `labels` names integer tags.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = "custom"
    family: str
    text_columns: tuple[str, ...] = ()
    label_column: str | None = "label"
    context_column: str | None = None
    choice_prefix_column: str | None = None
    choice_columns: tuple[str, ...] = ()
    # File format options.
    format: FileFormat = "auto"
    header: bool = True
    column_names: tuple[str, ...] | None = None   # a headerless file's column names ("0", "1", ... if unset)
    quoting: bool | None = None                   # None: off for TSV, on for CSV
    # Classification labels in index order; None takes them from the training file, sorted.
    labels: tuple[str, ...] | None = None
    # A family's own settings (span QA: doc_stride, version_2_with_negative, ...), checked by it.
    options: dict[str, Any] = {}
    metric: str | None = None                     # None: the family's default, filled in on validation
    # Presets: split name -> file name inside the task's data directory.
    files: dict[str, str] = {}

    @model_validator(mode="before")
    @classmethod
    def _default_metric(cls, data):
        if isinstance(data, dict) and data.get("metric") is None and data.get("family") in FAMILIES:
            data = {**data, "metric": FAMILIES[data["family"]].default_metric}
        if isinstance(data, dict) and "label_column" not in data and data.get("family") in FAMILIES:
            # A family whose files have no label by default (retrieval's pairs) says so.
            data = {**data, "label_column": FAMILIES[data["family"]].default_label_column}
        return data

    @field_validator("text_columns", "choice_columns", "column_names", mode="before")
    @classmethod
    def _columns(cls, v):
        if v is None:
            return v
        if isinstance(v, (str, int)):
            v = (v,)
        return tuple(column_name(c) for c in v)

    @field_validator("label_column", "context_column", "choice_prefix_column", mode="before")
    @classmethod
    def _column(cls, v):
        return column_name(v)

    @field_validator("labels", mode="before")
    @classmethod
    def _labels(cls, v):
        if v is None:
            return v
        return tuple(label_key(x) for x in v)

    @model_validator(mode="after")
    def _check(self):
        family = FAMILIES.get(self.family)
        if family is None:
            raise ValueError(f"unknown family '{self.family}' (known: {', '.join(FAMILIES)})")
        family.check_spec(self)
        if self.column_names is not None and self.header:
            raise ValueError("column_names names the columns of a file without a header (header: false)")
        family.check_metric(self)
        return self

    @property
    def is_classification(self) -> bool:
        """Labels are classes from a label list, named in the model's config."""
        return FAMILIES[self.family].label_list

    @property
    def num_choices(self) -> int | None:
        return len(self.choice_columns) if self.choice_columns else None

    def for_file(self, path: Path) -> "TaskSpec":
        """This spec for reading `path`: a spec read from a model describes its training file's
        layout (GLUE: TSV without quoting, CoLA without a header); a file plainly in another
        format is read as what it is."""

        detected = format_of(path)
        if self.format == "auto" or detected is None or detected == self.format:
            return self
        return TaskSpec(**{**self.model_dump(), "format": "auto", "quoting": None,
                           "header": True, "column_names": None})

    def split_files(self, data_dir: str | Path) -> dict[str, Path]:
        """The preset's files found in `data_dir`, by split name (e.g. MNLI: train, dev_matched, ...)."""
        data_dir = Path(data_dir)
        return {split: data_dir / name for split, name in self.files.items()
                if (data_dir / name).exists()}


def _glue(name, family, text_columns, label_column, labels, metric="accuracy", **kw) -> dict:
    files = kw.pop("files", {"train": "train.tsv", "dev": "dev.tsv", "test": "test.tsv"})
    return dict(name=name, family=family, text_columns=text_columns, label_column=label_column,
                labels=labels, metric=metric, quoting=False, format="tsv", files=files, **kw)


class Presets(Mapping[str, TaskSpec]):
    """The presets by name, each made (and checked by its family) when first asked for: the
    families register themselves when their modules are imported, and a family module may
    import this one before the others are registered (tests/tasks/test_tasks.py checks them all)."""

    def __init__(self, specs: list[dict[str, Any]]):
        self._fields = {s["name"]: s for s in specs}
        self._made: dict[str, TaskSpec] = {}

    def __getitem__(self, name: str) -> TaskSpec:
        if name not in self._made:
            self._made[name] = TaskSpec(**self._fields[name])
        return self._made[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._fields)

    def __len__(self) -> int:
        return len(self._fields)


_NLI2 = ("entailment", "not_entailment")

# The original GLUE TSV distribution's layouts (as google-research/bert's run_classifier reads them).
PRESETS = Presets([
    _glue("glue/sst2", "single", ["sentence"], "label", ("0", "1")),
    # CoLA train/dev: no header, 4 columns (source, label, original label, sentence).
    _glue("glue/cola", "single", [3], 1, ("0", "1"), metric="matthews", header=False),
    _glue("glue/mrpc", "pair", ["#1 String", "#2 String"], "Quality", ("0", "1"), metric="f1_accuracy"),
    _glue("glue/rte", "pair", ["sentence1", "sentence2"], "label", _NLI2),
    _glue("glue/wnli", "pair", ["sentence1", "sentence2"], "label", ("0", "1")),
    _glue("glue/qnli", "pair", ["question", "sentence"], "label", _NLI2),
    _glue("glue/qqp", "pair", ["question1", "question2"], "is_duplicate", ("0", "1"),
          metric="f1_accuracy"),
    _glue("glue/mnli", "pair", ["sentence1", "sentence2"], "gold_label",
          ("contradiction", "entailment", "neutral"),
          files={"train": "train.tsv", "dev_matched": "dev_matched.tsv",
                 "dev_mismatched": "dev_mismatched.tsv", "test_matched": "test_matched.tsv",
                 "test_mismatched": "test_mismatched.tsv"}),
    _glue("glue/sts-b", "regression", ["sentence1", "sentence2"], "score", None,
          metric="pearson_spearman"),
    # SWAG (Zellers et al. 2018): the original CSVs and the JSON-lines form share these columns.
    # SQuAD (Rajpurkar et al. 2016, 2018): the official nested JSON files.
    dict(name="squad", family="span", context_column="context", label_column=None,
         metric="squad", files={"train": "train-v1.1.json", "dev": "dev-v1.1.json"}),
    dict(name="squad_v2", family="span", context_column="context", label_column=None,
         metric="squad", options={"version_2_with_negative": True},
         files={"train": "train-v2.0.json", "dev": "dev-v2.0.json"}),
    # CoNLL-2003 NER (Tjong Kim Sang and De Meulder 2003): `token POS chunk NER` column files,
    # IOB2 as distributed today (the original eng.train / eng.testa are IOB1: give them as files).
    dict(name="conll2003", family="tagging", label_column=None, metric="conlleval",
         files={"train": "train.txt", "dev": "valid.txt", "test": "test.txt"}),
    # Retrieval: (query, positive[, negative...]) pairs; STS-B's pairs with their graded
    # scores for CoSENT (and scored by the Spearman of cosine similarities); a BEIR directory
    # or a .txt of texts (SimCSE) is read whatever the columns. No columns named: query,
    # positive and every negative column the file has (the reader's).
    dict(name="retrieval", family="retrieval", text_columns=[], label_column=None),
    # Reranking: the same pairs tables, each row's candidates (positive first) scored
    # together by a cross-encoder.
    dict(name="reranking", family="reranking", text_columns=[], label_column=None),
    _glue("glue/sts-b-cosine", "retrieval", ["sentence1", "sentence2"], "score", None,
          metric="spearman"),
    dict(name="swag", family="multiple_choice", context_column="sent1",
         choice_prefix_column="sent2", choice_columns=[f"ending{i}" for i in range(4)],
         label_column="label", files={"train": "train.csv", "dev": "val.csv", "test": "test.csv"}),
])


def make_task_spec(preset: str | None = None, **fields: Any) -> TaskSpec:
    """A task spec from a preset name, from fields alone (a task no preset knows), or a preset with
    some fields replaced. Fields left None are not set. Invalid settings raise BertctlError.

        make_task_spec("glue/mrpc")
        make_task_spec(family="pair", text_columns=["premise", "hypothesis"], label_column="label")
        make_task_spec("glue/sst2", text_columns=["text"])   # SST-2 labels, another file layout
    """
    fields = {k: v for k, v in fields.items() if v is not None}
    base: dict[str, Any] = {}
    if preset is not None:
        if preset not in PRESETS:
            raise BertctlError(f"unknown task '{preset}' (known: {', '.join(sorted(PRESETS))}); "
                               "or give the family and columns of a custom task")
        base = PRESETS[preset].model_dump()
        if fields.get("family", base["family"]) != base["family"]:
            raise BertctlError(f"task '{preset}' is a '{base['family']}' task; for another family "
                               "describe the task without the preset")
    elif "family" not in fields:
        raise BertctlError(f"a task needs a preset name or a family ({', '.join(FAMILIES)})")
    if base.get("options") and "options" in fields:  # flags refine a preset's options
        fields["options"] = {**base["options"], **fields["options"]}
    try:
        return TaskSpec(**{**base, **fields})
    except ValidationError as exc:
        err = exc.errors()[0]
        key = ".".join(str(p) for p in err["loc"])
        if err["type"] == "extra_forbidden":
            raise BertctlError(f"task settings: unknown setting '{key}'") from None
        msg = err["msg"].removeprefix("Value error, ")
        raise BertctlError(f"task settings: {key + ': ' if key else ''}{msg}") from None

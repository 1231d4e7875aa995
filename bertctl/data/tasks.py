"""Fine-tuning task data: task specs, reading task files, and turning them into model batches.

Three steps, each a plain function the finetune and eval stages call in order:

    spec = make_task_spec("glue/rte")                       # a preset, or fields for a new task
    train = read_examples(spec, "RTE/train.tsv", require_labels=True)
    dev = read_examples(spec, "RTE/dev.tsv", label_list=train.label_list)
    features = encode_examples(dev, tokenizer, max_seq_length=128)
    for idx in length_grouped_batches(features.lengths, 32, seed=None):
        batch = make_batch(features, idx)                   # input_ids, token_type_ids, attention_mask, labels

Files are read through the `datasets` library (TSV, CSV, JSON lines, parquet, or a directory written
by `save_to_disk`). TSV/CSV cells are always read as text (no type guessing: a sentence "NA" or
"1.5" stays text), a UTF-8 byte-order mark is dropped, and quoting is off where the spec says so: the
GLUE TSVs are written without quoting and hold unbalanced quotes, which a quoting parser silently
merges across rows (MRPC, STS-B, RTE). A headerless file's columns are named "0", "1", ... unless the
spec names them.

Problems a user can fix raise `BertctlError` as one line naming the file, the row (1-based, counting
data rows only: the header and blank lines are not rows) and the column.
"""

from __future__ import annotations

import contextlib
import csv
import itertools
import math
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
from pydantic import BaseModel, ConfigDict, ValidationError, field_validator, model_validator

from bertctl.data.collate import pad_to_tensor
from bertctl.errors import BertctlError
from bertctl.metrics import TASK_METRICS

Family = Literal["single", "pair", "regression", "multiple_choice"]
FileFormat = Literal["auto", "tsv", "csv", "json", "parquet", "arrow"]

_DEFAULT_METRIC = {"single": "accuracy", "pair": "accuracy", "regression": "pearson_spearman",
                   "multiple_choice": "accuracy"}


def _column_name(value: Any) -> Any:
    # Columns of a headerless file are named by their index; accept the index as an int.
    return str(value) if isinstance(value, int) and not isinstance(value, bool) else value


def _label_key(value: Any) -> str:
    """The label list's spelling of a label value: 1, 1.0, "1" and " 1 " are all "1"."""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value).strip()


def _sort_labels(keys) -> tuple[str, ...]:
    keys = set(keys)
    try:
        return tuple(sorted(keys, key=lambda k: (float(k), k)))   # numeric labels in numeric order
    except ValueError:
        return tuple(sorted(keys))



class TaskSpec(BaseModel):
    """What a task's files look like and how to read them.

    - single / pair: `text_columns` holds one / two columns; `label_column` a class label.
    - regression: one or two text columns and a float label (STS-B's 0-5 score).
    - multiple_choice: `context_column` is sentence A; each of `choice_columns` gives one sentence B,
      prefixed by `choice_prefix_column` when set (SWAG: sent1 | sent2 + " " + ending_i); the label
      is the index of the right choice.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = "custom"
    family: Family
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
    metric: str | None = None                     # None: the family's default, filled in on validation
    # Presets: split name -> file name inside the task's data directory.
    files: dict[str, str] = {}

    @model_validator(mode="before")
    @classmethod
    def _default_metric(cls, data):
        if isinstance(data, dict) and data.get("metric") is None and data.get("family") in _DEFAULT_METRIC:
            data = {**data, "metric": _DEFAULT_METRIC[data["family"]]}
        return data

    @field_validator("text_columns", "choice_columns", "column_names", mode="before")
    @classmethod
    def _columns(cls, v):
        if v is None:
            return v
        if isinstance(v, (str, int)):
            v = (v,)
        return tuple(_column_name(c) for c in v)

    @field_validator("label_column", "context_column", "choice_prefix_column", mode="before")
    @classmethod
    def _column(cls, v):
        return _column_name(v)

    @field_validator("labels", mode="before")
    @classmethod
    def _labels(cls, v):
        if v is None:
            return v
        return tuple(_label_key(x) for x in v)

    @model_validator(mode="after")
    def _check(self):
        f = self.family
        n = len(self.text_columns)
        if f == "single" and n != 1:
            raise ValueError(f"a 'single' task takes 1 text column, got {n}")
        if f == "pair" and n != 2:
            raise ValueError(f"a 'pair' task takes 2 text columns, got {n}")
        if f == "regression" and n not in (1, 2):
            raise ValueError(f"a 'regression' task takes 1 or 2 text columns, got {n}")
        if f == "multiple_choice":
            if n:
                raise ValueError("a 'multiple_choice' task takes context_column and choice_columns, "
                                 "not text_columns")
            if not self.context_column or len(self.choice_columns) < 2:
                raise ValueError("a 'multiple_choice' task needs context_column and at least 2 "
                                 "choice_columns")
        elif self.context_column or self.choice_columns or self.choice_prefix_column:
            raise ValueError("context_column, choice_prefix_column and choice_columns are for "
                             "'multiple_choice' tasks only")
        if self.labels is not None:
            if f in ("regression", "multiple_choice"):
                raise ValueError(f"a '{f}' task has no label list")
            if len(set(self.labels)) != len(self.labels) or len(self.labels) < 2:
                raise ValueError(f"labels must be at least 2 distinct values, got {list(self.labels)}")
        if self.column_names is not None and self.header:
            raise ValueError("column_names names the columns of a file without a header (header: false)")
        if self.metric not in TASK_METRICS:
            raise ValueError(f"unknown metric '{self.metric}' (known: {', '.join(sorted(TASK_METRICS))})")
        if f == "regression" and self.metric != "pearson_spearman":
            raise ValueError("a 'regression' task is scored with metric 'pearson_spearman'")
        if f != "regression" and self.metric == "pearson_spearman":
            raise ValueError("metric 'pearson_spearman' is for 'regression' tasks")
        return self

    @property
    def is_classification(self) -> bool:
        """Labels are classes from a label list (single and pair tasks)."""
        return self.family in ("single", "pair")

    @property
    def num_choices(self) -> int | None:
        return len(self.choice_columns) if self.family == "multiple_choice" else None

    def split_files(self, data_dir: str | Path) -> dict[str, Path]:
        """The preset's files found in `data_dir`, by split name (e.g. MNLI: train, dev_matched, ...)."""
        data_dir = Path(data_dir)
        return {split: data_dir / name for split, name in self.files.items()
                if (data_dir / name).exists()}


def _glue(name, family, text_columns, label_column, labels, metric="accuracy", **kw) -> TaskSpec:
    files = kw.pop("files", {"train": "train.tsv", "dev": "dev.tsv", "test": "test.tsv"})
    return TaskSpec(name=name, family=family, text_columns=text_columns, label_column=label_column,
                    labels=labels, metric=metric, quoting=False, format="tsv", files=files, **kw)


_NLI2 = ("entailment", "not_entailment")

# The original GLUE TSV distribution's layouts (as google-research/bert's run_classifier reads them).
PRESETS: dict[str, TaskSpec] = {s.name: s for s in [
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
    TaskSpec(name="swag", family="multiple_choice", context_column="sent1",
             choice_prefix_column="sent2", choice_columns=[f"ending{i}" for i in range(4)],
             label_column="label", files={"train": "train.csv", "dev": "val.csv", "test": "test.csv"}),
]}


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
        raise BertctlError("a task needs a preset name or a family "
                           "(single, pair, regression or multiple_choice)")
    try:
        return TaskSpec(**{**base, **fields})
    except ValidationError as exc:
        err = exc.errors()[0]
        key = ".".join(str(p) for p in err["loc"])
        if err["type"] == "extra_forbidden":
            raise BertctlError(f"task settings: unknown setting '{key}'") from None
        msg = err["msg"].removeprefix("Value error, ")
        raise BertctlError(f"task settings: {key + ': ' if key else ''}{msg}") from None


# --- reading -------------------------------------------------------------------------------------

@dataclass
class TaskExamples:
    """The rows of one task file, validated.

    `text_a` is sentence A of each row (the context for multiple choice); `text_b` sentence B or
    None; `choices` for multiple choice, one list of `num_choices` texts per row. `labels` is None
    for a file without the label column (prediction only), else int64 class / choice indices or
    float64 regression targets. `label_list` names the class indices (classification only).
    """

    spec: TaskSpec
    path: str
    text_a: list[str]
    text_b: list[str] | None
    choices: list[list[str]] | None
    labels: np.ndarray | None
    label_list: tuple[str, ...] | None

    def __len__(self) -> int:
        return len(self.text_a)


def _detect_format(spec: TaskSpec, path: Path) -> str:
    if spec.format != "auto":
        return spec.format
    if path.is_dir():
        return "arrow"
    suffixes = [s.lower() for s in path.suffixes]
    for s in reversed(suffixes):
        fmt = {".tsv": "tsv", ".csv": "csv", ".json": "json", ".jsonl": "json", ".parquet": "parquet"}.get(s)
        if fmt:
            return fmt
    raise BertctlError(f"{path}: cannot tell the file format from its name; "
                       "use .tsv, .csv, .jsonl, .parquet or set the task's format")


@contextlib.contextmanager
def _quiet_datasets():
    """No progress bars or info logs from `datasets` while it reads (the console owns stderr)."""
    import datasets
    bars = datasets.is_progress_bar_enabled()
    verbosity = datasets.logging.get_verbosity()
    datasets.disable_progress_bars()
    datasets.logging.set_verbosity_error()
    try:
        yield datasets
    finally:
        datasets.logging.set_verbosity(verbosity)
        if bars:
            datasets.enable_progress_bars()


def _root_cause(exc: BaseException) -> str:
    while exc.__cause__ is not None or (exc.__context__ is not None and not exc.__suppress_context__):
        exc = exc.__cause__ or exc.__context__
    return " ".join(str(exc).split()) or type(exc).__name__


def _read_delimited_header(path: Path, sep: str, quoting: bool, header: bool) -> list[str]:
    """The first row's cells; also checks that a data row follows a header."""
    with open(path, encoding="utf-8-sig", newline="") as f:
        reader = csv.reader(f, delimiter=sep, quoting=csv.QUOTE_MINIMAL if quoting else csv.QUOTE_NONE)
        try:
            first = next(reader)
            if header and not any(row for row in reader):
                raise BertctlError(f"{path}: no data rows")
            return first
        except StopIteration:
            raise BertctlError(f"{path}: the file is empty") from None
        except (UnicodeDecodeError, csv.Error) as exc:
            raise BertctlError(f"{path}: line {reader.line_num}: cannot read: {exc}") from None


def _read_table(spec: TaskSpec, path: Path):
    """The whole file as a pyarrow Table (TSV/CSV columns all strings)."""
    import pyarrow as pa

    if not path.exists():
        raise BertctlError(f"{path}: file not found")
    fmt = _detect_format(spec, path)
    with _quiet_datasets() as datasets, tempfile.TemporaryDirectory(prefix="bertctl-read-") as cache:
        try:
            if fmt == "arrow":
                try:
                    ds = datasets.load_from_disk(str(path), keep_in_memory=True)
                except FileNotFoundError as exc:
                    raise BertctlError(f"{path}: not a directory written by save_to_disk "
                                       f"({_root_cause(exc)})") from None
                if isinstance(ds, datasets.DatasetDict):
                    raise BertctlError(f"{path}: holds the splits {', '.join(ds)}; "
                                       f"give one of them, e.g. {path / next(iter(ds))}")
            elif fmt in ("tsv", "csv"):
                sep = "\t" if fmt == "tsv" else ","
                quoting = spec.quoting if spec.quoting is not None else fmt == "csv"
                first = _read_delimited_header(path, sep, quoting, spec.header)
                if spec.header:
                    names = first
                elif spec.column_names is not None:
                    names = list(spec.column_names)
                    if len(names) != len(first):
                        raise BertctlError(f"{path}: row 1: {len(first)} columns but the task names "
                                           f"{len(names)} ({', '.join(names)})")
                else:
                    names = [str(i) for i in range(len(first))]
                dupes = sorted({n for n in names if names.count(n) > 1})
                if dupes:
                    raise BertctlError(f"{path}: duplicate column names in the header: {', '.join(dupes)}")
                features = datasets.Features({n: datasets.Value("string") for n in names})
                kwargs: dict[str, Any] = dict(
                    sep=sep, quoting=csv.QUOTE_MINIMAL if quoting else csv.QUOTE_NONE,
                    encoding="utf-8-sig", na_filter=False, keep_default_na=False, features=features)
                if spec.header:
                    kwargs["header"] = 0
                else:
                    kwargs.update(header=None, column_names=names)
                ds = datasets.load_dataset("csv", data_files=str(path), split="train", cache_dir=cache,
                                           keep_in_memory=True, **kwargs)
            else:
                ds = datasets.load_dataset(fmt, data_files=str(path), split="train", cache_dir=cache,
                                           keep_in_memory=True)
            table = ds.with_format("arrow")[:]
        except BertctlError:
            raise
        except Exception as exc:  # parse errors surface as many types from pandas/pyarrow/datasets
            where = "quoting off" if fmt == "tsv" and not spec.quoting else ""
            raise BertctlError(f"{path}: cannot read as {fmt.upper()}"
                               f"{' (' + where + ')' if where else ''}: {_root_cause(exc)}") from None
    if not isinstance(table, pa.Table):
        table = pa.Table.from_batches([table]) if isinstance(table, pa.RecordBatch) else table
    return table


def _text_column(table, name: str, path: Path, *, allow_empty: bool = False) -> list[str]:
    import pyarrow as pa
    import pyarrow.compute as pc

    col = table.column(name)
    if not (pa.types.is_string(col.type) or pa.types.is_large_string(col.type)):
        try:
            col = pc.cast(col, pa.large_string())
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            raise BertctlError(f"{path}: column '{name}' holds {col.type}, not text") from None
    if not allow_empty:
        empty = pc.or_kleene(pc.is_null(col), pc.equal(pc.utf8_length(pc.utf8_trim_whitespace(col)), 0))
        empty = pc.fill_null(empty, True)
        if pc.any(empty).as_py():
            row = int(np.flatnonzero(empty.to_numpy(zero_copy_only=False))[0]) + 1
            raise BertctlError(f"{path}: row {row}, column '{name}': empty text")
    return [s if s is not None else "" for s in col.to_pylist()]


def _require_columns(table, columns, path: Path) -> None:
    missing = [c for c in columns if c not in table.column_names]
    if missing:
        have = ", ".join(f"'{c}'" for c in table.column_names)
        raise BertctlError(f"{path}: column '{missing[0]}' not found; the file has columns {have}")


def read_examples(spec: TaskSpec, path: str | Path, label_list: tuple[str, ...] | None = None,
                  require_labels: bool = False) -> TaskExamples:
    """Read and validate one task file.

    Classification labels are mapped to indices into `label_list`, else `spec.labels`, else the
    sorted labels of this very file (so read the training file first and pass its `label_list` on
    to the dev and test files). A label outside the list is an error naming its row. A file
    without the label column gives `labels=None` (prediction only) unless `require_labels`.
    """
    path = Path(path)
    table = _read_table(spec, path)
    if table.num_rows == 0:
        raise BertctlError(f"{path}: no data rows")

    text_b = choices = None
    if spec.family == "multiple_choice":
        _require_columns(table, [spec.context_column, *spec.choice_columns]
                         + ([spec.choice_prefix_column] if spec.choice_prefix_column else []), path)
        text_a = _text_column(table, spec.context_column, path)
        prefix = (_text_column(table, spec.choice_prefix_column, path, allow_empty=True)
                  if spec.choice_prefix_column else None)
        endings = [_text_column(table, c, path) for c in spec.choice_columns]
        if prefix is None:
            choices = [list(row) for row in zip(*endings)]
        else:
            choices = [[f"{p} {e}".strip() for e in row] for p, *row in zip(prefix, *endings)]
    else:
        _require_columns(table, spec.text_columns, path)
        text_a = _text_column(table, spec.text_columns[0], path)
        if len(spec.text_columns) == 2:
            text_b = _text_column(table, spec.text_columns[1], path)

    labels = None
    lab = spec.label_column
    if lab is not None and lab in table.column_names:
        values = table.column(lab).to_pylist()
        if spec.family == "regression":
            labels = _float_labels(values, path, lab)
        elif spec.family == "multiple_choice":
            labels = _choice_labels(values, path, lab, spec.num_choices)
        else:
            labels, label_list = _class_labels(values, path, lab, label_list or spec.labels)
    elif require_labels:
        _require_columns(table, [lab] if lab is not None else [], path)
        raise BertctlError(f"{path}: the task has no label column; set label_column")
    if not spec.is_classification:
        label_list = None
    else:
        label_list = label_list or spec.labels
    return TaskExamples(spec=spec, path=str(path), text_a=text_a, text_b=text_b, choices=choices,
                        labels=labels, label_list=label_list)


def _empty(v: Any) -> bool:
    return v is None or (isinstance(v, str) and not v.strip()) or (isinstance(v, float) and math.isnan(v))


def _float_labels(values: list, path: Path, col: str) -> np.ndarray:
    out = np.empty(len(values), dtype=np.float64)
    for i, v in enumerate(values):
        if _empty(v):
            raise BertctlError(f"{path}: row {i + 1}, column '{col}': empty label")
        try:
            x = float(v) if not isinstance(v, bool) else math.nan
        except (TypeError, ValueError):
            x = math.nan
        if not math.isfinite(x):
            raise BertctlError(f"{path}: row {i + 1}, column '{col}': regression label {v!r} "
                               "is not a (finite) number")
        out[i] = x
    return out


def _choice_labels(values: list, path: Path, col: str, num_choices: int) -> np.ndarray:
    out = np.empty(len(values), dtype=np.int64)
    for i, v in enumerate(values):
        key = None if _empty(v) else _label_key(v)
        if key is None or not key.lstrip("-").isdigit() or not 0 <= int(key) < num_choices:
            raise BertctlError(f"{path}: row {i + 1}, column '{col}': label {v!r} is not a choice "
                               f"index 0..{num_choices - 1}")
        out[i] = int(key)
    return out


def _class_labels(values: list, path: Path, col: str, label_list: tuple[str, ...] | None
                  ) -> tuple[np.ndarray, tuple[str, ...]]:
    keys = []
    for i, v in enumerate(values):
        if _empty(v):
            raise BertctlError(f"{path}: row {i + 1}, column '{col}': empty label")
        keys.append(_label_key(v))
    if label_list is None:
        label_list = _sort_labels(keys)
        if len(label_list) < 2:
            raise BertctlError(f"{path}: column '{col}': only one label ({label_list[0]!r}) in the "
                               "file; a classifier needs at least 2 (or give the label list)")
    index = {k: j for j, k in enumerate(label_list)}
    out = np.empty(len(keys), dtype=np.int64)
    for i, k in enumerate(keys):
        j = index.get(k)
        if j is None:
            raise BertctlError(f"{path}: row {i + 1}, column '{col}': label {k!r} is not one of the "
                               f"training labels {list(label_list)}")
        out[i] = j
    return out, tuple(label_list)


# --- features and batches ------------------------------------------------------------------------

@dataclass
class TaskFeatures:
    """Token ids of every example, stored flat: sequence s is `input_ids[offsets[s]:offsets[s+1]]`.

    One sequence per example, or `num_choices` consecutive sequences per example for multiple
    choice. `lengths` is per example (the longest choice for multiple choice), for
    `length_grouped_batches`.
    """

    input_ids: np.ndarray        # int32, all sequences concatenated
    token_type_ids: np.ndarray   # int8, same layout
    offsets: np.ndarray          # int64, num_sequences + 1
    lengths: np.ndarray          # int64, per example
    labels: np.ndarray | None    # int64 or float64, per example
    num_choices: int | None
    pad_id: int
    family: str
    label_list: tuple[str, ...] | None

    def __len__(self) -> int:
        return len(self.lengths)


def _bert_tokenizer(tokenizer, max_seq_length: int):
    from tokenizers import Tokenizer
    tok = Tokenizer.from_str(tokenizer.to_str())   # a copy: the caller's settings stay as they were
    tok.enable_truncation(max_seq_length, strategy="longest_first")
    tok.no_padding()
    return tok


def encode_examples(examples: TaskExamples, tokenizer, max_seq_length: int) -> TaskFeatures:
    """Tokenize every example with a `tokenizers.Tokenizer` (its post-processor adds [CLS]/[SEP]):
    `[CLS] A [SEP]` or `[CLS] A [SEP] B [SEP]` (one pair per choice for multiple choice), truncated
    longest-first to `max_seq_length` tokens, as BERT's run_classifier does."""
    if max_seq_length < 4:
        raise BertctlError(f"max_seq_length {max_seq_length} is too short (at least 4)")
    tok = _bert_tokenizer(tokenizer, max_seq_length)
    if examples.choices is not None:
        num_choices = len(examples.choices[0])
        inputs = [(ctx, c) for ctx, row in zip(examples.text_a, examples.choices) for c in row]
    else:
        num_choices = None
        inputs = (list(zip(examples.text_a, examples.text_b)) if examples.text_b is not None
                  else list(examples.text_a))
    try:
        encodings = tok.encode_batch(inputs)
    except Exception as exc:  # tokenizers raises a plain Exception when truncation is impossible
        raise BertctlError(f"{examples.path}: cannot tokenize with max_seq_length "
                           f"{max_seq_length}: {exc}") from None
    seq_lens = np.fromiter((len(e.ids) for e in encodings), dtype=np.int64, count=len(encodings))
    total = int(seq_lens.sum())
    input_ids = np.fromiter(itertools.chain.from_iterable(e.ids for e in encodings),
                            dtype=np.int32, count=total)
    type_ids = np.fromiter(itertools.chain.from_iterable(e.type_ids for e in encodings),
                           dtype=np.int8, count=total)
    offsets = np.zeros(len(encodings) + 1, dtype=np.int64)
    np.cumsum(seq_lens, out=offsets[1:])
    lengths = seq_lens.reshape(-1, num_choices).max(axis=1) if num_choices else seq_lens
    pad_id = tok.token_to_id("[PAD]")
    return TaskFeatures(input_ids=input_ids, token_type_ids=type_ids, offsets=offsets,
                        lengths=lengths, labels=examples.labels, num_choices=num_choices,
                        pad_id=0 if pad_id is None else pad_id, family=examples.spec.family,
                        label_list=examples.label_list)


def make_batch(features: TaskFeatures, indices) -> dict[str, torch.Tensor]:
    """The model inputs for the examples `indices`, padded to the batch's longest sequence:
    `input_ids`, `token_type_ids`, `attention_mask` as (B, T) long tensors, or (B, C, T) for
    multiple choice; and `labels` ((B,) long, or float for regression) when the file had labels."""
    idx = np.asarray(indices, dtype=np.int64).reshape(-1)
    c = features.num_choices
    seq = (idx[:, None] * c + np.arange(c)).reshape(-1) if c else idx
    starts, ends = features.offsets[seq], features.offsets[seq + 1]
    ids = [features.input_ids[s:e] for s, e in zip(starts, ends)]
    types = [features.token_type_ids[s:e] for s, e in zip(starts, ends)]
    input_ids = pad_to_tensor(ids, pad_value=features.pad_id)
    token_type_ids = pad_to_tensor(types, pad_value=0)
    width = input_ids.shape[1]
    attention_mask = torch.from_numpy((np.arange(width)[None, :] < (ends - starts)[:, None])
                                      .astype(np.int64))
    batch = {"input_ids": input_ids, "token_type_ids": token_type_ids, "attention_mask": attention_mask}
    if c:
        batch = {k: v.view(len(idx), c, width) for k, v in batch.items()}
    if features.labels is not None:
        labels = features.labels[idx]
        batch["labels"] = (torch.from_numpy(labels.astype(np.float32)) if features.family == "regression"
                           else torch.from_numpy(labels.astype(np.int64)))
    return batch

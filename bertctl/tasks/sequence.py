"""The sequence-level families' shared machinery: one sequence per example (pair of texts,
or one per choice for multiple choice), read from text columns, scored from `logits`.

    read_texts(spec, table, path, row)   -> text_a, text_b, choices
    encode_examples(examples, tok, 128)  -> TaskFeatures (flat token ids)
    make_batch(features, indices)        -> input_ids, token_type_ids, attention_mask, labels

`SequenceFamily` is the base of the classification, regression and multiple-choice families:
they differ in their columns, their labels, their head and their metric.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from bertctl.errors import BertctlError
from bertctl.data import label_columns, tables
from bertctl.data.tokenizer.specials import PAD, special_id
from bertctl.tasks.base import Family, logits_of
from tokenizers import Tokenizer
from bertctl.metrics import METRICS, compute_metrics


@dataclasses.dataclass
class TaskExamples:
    """The rows of one task file, validated.

    `text_a` is sentence A of each row (the context for multiple choice); `text_b` sentence B or
    None; `choices` for multiple choice, one list of `num_choices` texts per row. `labels` is None
    for a file without the label column (prediction only), else int64 class / choice indices or
    float64 regression targets. `label_list` names the class indices (classification only).
    """

    spec: Any                    # the TaskSpec it was read with
    path: str
    text_a: list[str]
    text_b: list[str] | None
    choices: list[list[str]] | None
    labels: np.ndarray | None
    label_list: tuple[str, ...] | None

    def __len__(self) -> int:
        return len(self.text_a)

    @property
    def labelled(self) -> bool:
        return self.labels is not None


@dataclasses.dataclass
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

    def batch(self, indices, epoch: int = 0) -> dict[str, Any]:
        return make_batch(self, indices)


def _bert_tokenizer(tokenizer, max_seq_length: int):
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
    pad_id = special_id(tok, PAD)
    return TaskFeatures(input_ids=input_ids, token_type_ids=type_ids, offsets=offsets,
                        lengths=lengths, labels=examples.labels, num_choices=num_choices,
                        pad_id=0 if pad_id is None else pad_id, family=examples.spec.family,
                        label_list=examples.label_list)


def make_batch(features: TaskFeatures, indices) -> dict[str, Any]:
    """The model inputs for the examples `indices`, padded to the batch's longest sequence:
    `input_ids`, `token_type_ids`, `attention_mask` as (B, T) long tensors, or (B, C, T) for
    multiple choice; and `labels` ((B,) long, or float for regression) when the file had labels."""
    # Here, not at the top: the CLI imports every family to build its flags, and the commands
    # that run no model must not pay torch's import (about 2 s and 180 MB).
    import torch

    from bertctl.data.collate import pad_to_tensor

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
        batch["labels"] = torch.from_numpy(labels.astype(np.float32 if labels.dtype.kind == "f"
                                                          else np.int64))
    return batch


class SequenceFamily(Family):
    """Reading, encoding, predicting and writing for families with one sequence per example."""

    def read_texts(self, spec, table, path: Path, first_row: int = 0
                   ) -> tuple[list[str], list[str] | None, None]:
        """The texts of `table`'s rows, the file's from `first_row` on."""
        tables.require_columns(table, spec.text_columns, path)
        text_a = tables.text_column(table, spec.text_columns[0], path, first_row=first_row)
        text_b = (tables.text_column(table, spec.text_columns[1], path, first_row=first_row)
                  if len(spec.text_columns) == 2 else None)
        return text_a, text_b, None

    def check_metric(self, spec) -> None:
        METRICS.known(spec.metric)
        if spec.options:
            raise ValueError(f"a '{self.name}' task takes no {', '.join(sorted(spec.options))} "
                             f"(another family's options)")

    def read_labels(self, values: list, path: Path, column: str, spec,
                    label_list: tuple[str, ...] | None, first_row: int = 0
                    ) -> tuple[np.ndarray, Any]:
        raise NotImplementedError

    def file_labels(self, column, path: Path, name: str, spec) -> tuple[str, ...]:
        """The label list of a file's whole label column (an Arrow column), sorted."""
        import pyarrow.compute as pc

        return label_columns.labels_of(pc.unique(column).to_pylist(), path, name)

    def read(self, spec, path, label_list=None, require_labels=False) -> TaskExamples:
        """Read and validate one task file.

        Classification labels are mapped to indices into `label_list`, else `spec.labels`, else
        the sorted labels of this very file (so read the training file first and pass its
        `label_list` on to the dev and test files). A label outside the list is an error naming
        its row. A file without the label column gives `labels=None` (prediction only) unless
        `require_labels`.
        """
        with contextlib.closing(self.read_chunks(spec, path, label_list, require_labels,
                                                 rows=None)) as chunks:
            return next(chunks)

    def read_chunks(self, spec, path, label_list=None, require_labels=False,
                    rows: int | None = 10_000) -> Iterator[TaskExamples]:
        """The file as `read` gives it, in consecutive parts of at most `rows` examples (None:
        one), read from a memory-mapped table: a file of any size in bounded memory. A file's
        own label list is taken from the whole label column before the first part."""
        path = Path(path)
        with tables.open_table(spec, path, in_memory=rows is None) as table:
            if table.num_rows == 0:
                raise BertctlError(f"{path}: no data rows")
            lab = spec.label_column
            labelled = lab is not None and lab in table.column_names
            if not labelled and require_labels:
                tables.require_columns(table, [lab] if lab is not None else [], path)
                raise BertctlError(f"{path}: the task has no label column; set label_column")
            label_list = label_list or spec.labels
            if labelled and self.label_list and label_list is None:
                label_list = self.file_labels(table.column(lab), path, lab, spec)
            step = rows or table.num_rows
            for start in range(0, table.num_rows, step):
                part = table.slice(start, step)
                text_a, text_b, choices = self.read_texts(spec, part, path, start)
                labels = None
                if labelled:
                    labels, label_list = self.read_labels(part.column(lab).to_pylist(), path, lab,
                                                          spec, label_list, start)
                yield TaskExamples(spec=spec, path=str(path), text_a=text_a, text_b=text_b,
                                   choices=choices, labels=labels,
                                   label_list=label_list if self.label_list else None)

    def encode(self, examples, tokenizer, max_seq_length: int, training: bool = False):
        return encode_examples(examples, tokenizer, max_seq_length)

    def predictions(self, outputs, features, examples, spec, calibration=None) -> np.ndarray:
        """Class / choice indices (argmax; int64)."""
        return logits_of(outputs).argmax(axis=-1).astype(np.int64)

    def score(self, predictions, examples, spec, label_list) -> dict[str, Any]:
        return dict(compute_metrics(spec.metric, predictions, examples.labels))

    def prediction_values(self, predictions, label_list) -> list[str]:
        return [str(int(i)) for i in predictions]

    def write_predictions(self, directory: Path, predictions, examples, spec,
                          label_list, start: int = 0) -> list[str]:
        """GLUE's submission format: a header, then `index<TAB>prediction` per example in file
        order. `start` > 0: the examples are the file's from that one on, appended."""
        name = "predictions.tsv"
        with open(Path(directory) / name, "a" if start else "w", encoding="utf-8",
                  newline="\n") as f:
            if not start:
                f.write("index\tprediction\n")
            f.writelines(f"{i}\t{v}\n" for i, v in
                         enumerate(self.prediction_values(predictions, label_list), start))
        return [name]

    def keep(self, predictions, examples) -> tuple[np.ndarray, TaskExamples]:
        """Scoring needs the predictions and labels, not the texts."""
        return predictions, dataclasses.replace(examples, text_a=[], text_b=None, choices=None)

    def join(self, parts: list) -> tuple[np.ndarray, TaskExamples]:
        """The parts' predictions and labels concatenated (examples without texts: what
        `score` reads)."""
        first = parts[0][1]
        labels = None if first.labels is None else np.concatenate([e.labels for _, e in parts])
        return (np.concatenate([p for p, _ in parts]),
                dataclasses.replace(first, labels=labels))

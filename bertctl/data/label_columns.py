"""A task file's label column as labels: class indices (the label list from the training
file, sorted, or given), multiple choice's indices, or a regression's numbers. Problems are
one line naming the file, the row (1-based, data rows only) and the column."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from bertctl.errors import BertctlError


def label_key(value: Any) -> str:
    """The label list's spelling of a label value: 1, 1.0, "1" and " 1 " are all "1"."""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value).strip()


def sort_labels(keys) -> tuple[str, ...]:
    keys = set(keys)
    try:
        return tuple(sorted(keys, key=lambda k: (float(k), k)))   # numeric labels in numeric order
    except ValueError:
        return tuple(sorted(keys))


def _empty(v: Any) -> bool:
    return v is None or (isinstance(v, str) and not v.strip()) or (isinstance(v, float) and math.isnan(v))


def float_labels(values: list, path: Path, col: str, first_row: int = 0) -> np.ndarray:
    out = np.empty(len(values), dtype=np.float64)
    for i, v in enumerate(values, first_row):
        if _empty(v):
            raise BertctlError(f"{path}: row {i + 1}, column '{col}': empty label")
        try:
            x = float(v) if not isinstance(v, bool) else math.nan
        except (TypeError, ValueError):
            x = math.nan
        if not math.isfinite(x):
            raise BertctlError(f"{path}: row {i + 1}, column '{col}': regression label {v!r} "
                               "is not a (finite) number")
        out[i - first_row] = x
    return out


def choice_labels(values: list, path: Path, col: str, num_choices: int,
                  first_row: int = 0) -> np.ndarray:
    out = np.empty(len(values), dtype=np.int64)
    for i, v in enumerate(values, first_row):
        key = None if _empty(v) else label_key(v)
        if key is None or not key.lstrip("-").isdigit() or not 0 <= int(key) < num_choices:
            raise BertctlError(f"{path}: row {i + 1}, column '{col}': label {v!r} is not a choice "
                               f"index 0..{num_choices - 1}")
        out[i - first_row] = int(key)
    return out


def labels_of(values, path: Path, col: str) -> tuple[str, ...]:
    """The label list a file's label column gives (its distinct values are enough): sorted, and
    not a single one. (Empty cells are left to the row checks.)"""
    label_list = sort_labels({label_key(v) for v in values if not _empty(v)})
    if len(label_list) == 1:
        raise BertctlError(f"{path}: column '{col}': only one label ({label_list[0]!r}) in the "
                           "file; a classifier needs at least 2 (or give the label list)")
    return label_list


def class_labels(values: list, path: Path, col: str, label_list: tuple[str, ...] | None,
                 first_row: int = 0) -> tuple[np.ndarray, tuple[str, ...]]:
    keys = []
    for i, v in enumerate(values, first_row):
        if _empty(v):
            raise BertctlError(f"{path}: row {i + 1}, column '{col}': empty label")
        keys.append(label_key(v))
    if label_list is None:
        label_list = labels_of(keys, path, col)
    index = {k: j for j, k in enumerate(label_list)}
    out = np.empty(len(keys), dtype=np.int64)
    for i, k in enumerate(keys):
        j = index.get(k)
        if j is None:
            raise BertctlError(f"{path}: row {first_row + i + 1}, column '{col}': label {k!r} is "
                               f"not one of the training labels {list(label_list)}")
        out[i] = j
    return out, tuple(label_list)


def label_set(value: Any, separator: str) -> list[str]:
    """One cell of a multi-label column as its label keys: a list (JSON, Parquet, Arrow) or a
    string joined by `separator`; an empty cell or list is the empty set."""
    if _empty(value):
        return []
    items = value if isinstance(value, (list, tuple)) else str(value).split(separator)
    return [k for k in (label_key(x) for x in items if not _empty(x)) if k]


def label_sets_of(column, path: Path, col: str, separator: str) -> tuple[str, ...]:
    """The label list a multi-label file's column gives: every label of every row, sorted,
    computed by Arrow over the column (a file of any size)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if not (pa.types.is_list(column.type) or pa.types.is_large_list(column.type)):
        column = pc.split_pattern(pc.cast(column, pa.string()), separator)
    keys = {label_key(x) for x in pc.unique(pc.list_flatten(column)).to_pylist()
            if not _empty(x)} - {""}
    if len(keys) < 2:
        raise BertctlError(f"{path}: column '{col}': {len(keys)} label{'s' * (len(keys) != 1)} "
                           f"in the file; a multi-label classifier needs at least 2 (or give "
                           f"the label list)")
    return sort_labels(keys)


def label_sets(values: list, path: Path, col: str, separator: str,
               label_list: tuple[str, ...], first_row: int = 0) -> np.ndarray:
    """(rows, labels) float32 0/1: each row's labels among `label_list` (a label outside it is
    an error naming its row)."""
    index = {k: j for j, k in enumerate(label_list)}
    out = np.zeros((len(values), len(label_list)), dtype=np.float32)
    for i, v in enumerate(values):
        for k in label_set(v, separator):
            j = index.get(k)
            if j is None:
                raise BertctlError(f"{path}: row {first_row + i + 1}, column '{col}': label "
                                   f"{k!r} is not one of the training labels {list(label_list)}")
            out[i, j] = 1.0
    return out

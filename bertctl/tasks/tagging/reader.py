"""Reading tagged sentences: CoNLL column files and tables of token lists.

Two kinds of input, told apart by the path:

- a CoNLL column file (any name but the table ones below; CoNLL-2003's train.txt, eng.train):
  one word per line, its fields separated by white space (CoNLL-2003: token POS chunk NER), a
  blank line between sentences, `-DOCSTART-` lines between documents. Streamed line by line.
  Every word line must have as many fields as the file's first word line.
- a table (`.jsonl`/`.json`, `.parquet`, or a directory written by `save_to_disk`): one sentence
  per row, a list-of-tokens column and a list-of-tags column, the tags as strings or as integers
  named by a label list (the Hugging Face `conll2003` layout: `tokens`, `ner_tags` as class ids).
  Each row is its own document.

Untagged input (text for a distillation teacher to label, or for prediction only) is read
where the caller allows it: a column file of one field per line (the words alone), or a table
without the tag column. Its words carry the tag O as a placeholder and `labelled` is False.

The result is columnar (`TaggedExamples`): every word of the file in one flat list, sentence
offsets into it, the tags as a numpy string array, a document id and the source line (or row)
per sentence, so an error can name `file:line` without keeping the lines.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np

from bertctl.data.columns import DOCSTART, Column, column_sentences
from bertctl.data.tables import BY_NAME, read_table
from bertctl.errors import BertctlError

CONLL2003_COLUMNS = ("token", "pos", "chunk", "ner")
TABLE_SUFFIXES = (".jsonl", ".json", ".parquet")
# The Hugging Face datasets layout of CoNLL-2003 (and most token-classification sets).
TABLE_TOKEN_COLUMN, TABLE_TAG_COLUMN = "tokens", "ner_tags"



@dataclass
class TaggedExamples:
    """The sentences of one file. Sentence s is `words[offsets[s]:offsets[s + 1]]`, tagged
    `tags[offsets[s]:offsets[s + 1]]` (tags exactly as written in the file)."""

    path: str
    words: list[str]
    tags: np.ndarray           # str, one per word
    offsets: np.ndarray        # int64, num_sentences + 1
    doc_ids: np.ndarray        # int64 per sentence; equal ids are one document, in file order
    lines: np.ndarray          # int64 per sentence: line of its first word (column file) or row
    line_kind: Literal["line", "row"] = "line"
    labelled: bool = True      # False: the tags are O placeholders (untagged input)
    # Set by the tagging family when it reads a task's file: the tags' scheme (the predictions
    # are written in it), the model's label list, and the task spec.
    scheme: str | None = None
    scheme_note: str | None = None     # for the log: "IOB1 (detected)"
    label_list: tuple[str, ...] | None = None
    spec: object = None

    def __len__(self) -> int:
        return self.num_sentences

    @property
    def num_sentences(self) -> int:
        return len(self.offsets) - 1

    @property
    def num_words(self) -> int:
        return len(self.words)

    def sentence_of(self, word: int) -> int:
        return int(np.searchsorted(self.offsets, word, side="right")) - 1

    def where(self, word: int) -> str:
        """`path:line` of a word (a column file has no blank line inside a sentence), or
        `path: row N` for a table."""
        s = self.sentence_of(word)
        if self.line_kind == "row":
            return f"{self.path}: row {int(self.lines[s])}"
        return f"{self.path}:{int(self.lines[s]) + word - int(self.offsets[s])}"


def is_table(path: str | Path) -> bool:
    path = Path(path)
    return path.is_dir() or path.suffix.lower() in TABLE_SUFFIXES


def read_tagged(path: str | Path, token_column: Column | None = None,
                tag_column: Column | None = None, column_names: tuple[str, ...] | None = None,
                labels: tuple[str, ...] | None = None, untagged_ok: bool = False
                ) -> TaggedExamples:
    """Read one file of tagged sentences (or, with `untagged_ok`, of untagged ones).

    Column files: `token_column` / `tag_column` are field indices (negative from the end; default
    the first and the last field) or names from `column_names` (a column file has no header).
    Tables: column names (default `tokens` and `ner_tags`) or indices into the table's columns;
    integer tags are mapped through `labels`, else through the class names the table's own
    features carry (a `save_to_disk` directory of the `datasets` CoNLL-2003 has them).
    """
    path = Path(path)
    if not path.exists():
        raise BertctlError(f"{path}: file not found")
    if is_table(path):
        return _read_tag_table(path, token_column, tag_column, labels, untagged_ok)
    if labels is not None:
        raise BertctlError(f"{path}: a label list is for tables with integer tags; "
                           "a column file spells its tags out")
    if _first_width(path) == 1:   # the words alone
        if not untagged_ok:
            raise BertctlError(f"{path}: words without tags (one field per line); this needs "
                               "each word's tag")
        return _read_columns(path, 0, None, None)
    return _read_columns(path, 0 if token_column is None else token_column,
                         -1 if tag_column is None else tag_column, column_names)


def _first_width(path: Path) -> int | None:
    """Fields on the first word line of a column file (None: no word line)."""
    with open(path, "rb") as f:
        for raw in f:
            fields = raw.decode("utf-8-sig", errors="replace").split()
            if fields and fields[0] != DOCSTART:
                return len(fields)
    return None


def _read_columns(path: Path, token_column: Column, tag_column: Column | None,
                  column_names: tuple[str, ...] | None) -> TaggedExamples:
    words: list[str] = []
    tags: list[str] = []
    offsets, doc_ids, lines = [0], [], []
    for line, doc, sentence, sentence_tags in column_sentences(path, token_column, tag_column,
                                                              column_names):
        words += sentence
        tags += sentence_tags
        offsets.append(len(words))
        doc_ids.append(doc)
        lines.append(line)
    if not words:
        raise BertctlError(f"{path}: no sentences (expected one word per line, "
                           "a blank line between sentences)")
    return TaggedExamples(path=str(path), words=words,
                          tags=np.array(tags, dtype=str) if tag_column is not None
                          else np.full(len(words), "O"),
                          offsets=np.array(offsets, dtype=np.int64),
                          doc_ids=np.array(doc_ids, dtype=np.int64),
                          lines=np.array(lines, dtype=np.int64), line_kind="line",
                          labelled=tag_column is not None)


# --- tables --------------------------------------------------------------------------------------



def _table_column(table, column: Column, path: Path, what: str) -> str:
    names = table.column_names
    if isinstance(column, int) and not isinstance(column, bool):
        if not -len(names) <= column < len(names):
            raise BertctlError(f"{path}: no {what} column {column} (columns: {', '.join(names)})")
        return names[column]
    if column not in names:
        raise BertctlError(f"{path}: no {what} column '{column}' (columns: {', '.join(names)})")
    return column


def _list_column(table, name: str, path: Path, what: str):
    """Per-row lengths and the flat values of a list column; a null row is an error."""
    import pyarrow as pa
    import pyarrow.compute as pc

    col = table.column(name).combine_chunks()
    if not (pa.types.is_list(col.type) or pa.types.is_large_list(col.type)):
        raise BertctlError(f"{path}: column '{name}' holds {col.type}, not a list of {what}")
    if col.null_count:
        row = int(np.flatnonzero(col.is_null().to_numpy(zero_copy_only=False))[0]) + 1
        raise BertctlError(f"{path}: row {row}, column '{name}': no {what} (null)")
    lengths = pc.list_value_length(col).to_numpy(zero_copy_only=False).astype(np.int64)
    return lengths, col.flatten()


def _class_names(table, name: str) -> tuple[str, ...] | None:
    """The names of a `Sequence(ClassLabel)` column, from the features `datasets` stores in the
    table's schema."""
    import datasets
    try:
        feature = datasets.Features.from_arrow_schema(table.schema)[name]
    except Exception:  # no or foreign metadata: no names
        return None
    inner = getattr(feature, "feature", None)
    if isinstance(feature, list) and feature:
        inner = feature[0]
    names = getattr(inner, "names", None)
    return tuple(names) if names else None


def _read_tag_table(path: Path, token_column: Column | None, tag_column: Column | None,
                    labels: tuple[str, ...] | None, untagged_ok: bool = False
                    ) -> TaggedExamples:
    import pyarrow as pa

    table = read_table(BY_NAME, path)
    if table.num_rows == 0:
        raise BertctlError(f"{path}: no rows")
    tok_name = _table_column(table, TABLE_TOKEN_COLUMN if token_column is None else token_column,
                             path, "token")
    tag_column = TABLE_TAG_COLUMN if tag_column is None else tag_column
    n_tok, tokens = _list_column(table, tok_name, path, "tokens")
    untagged = (untagged_ok and isinstance(tag_column, str)
                and tag_column not in table.column_names)
    if not untagged:
        tag_name = _table_column(table, tag_column, path, "tag")
        n_tag, tag_values = _list_column(table, tag_name, path, "tags")
        bad = np.flatnonzero(n_tok != n_tag)
        if bad.size:
            r = int(bad[0])
            raise BertctlError(f"{path}: row {r + 1}: {n_tok[r]} tokens but {n_tag[r]} tags")
    empty = np.flatnonzero(n_tok == 0)
    if empty.size:
        raise BertctlError(f"{path}: row {int(empty[0]) + 1}: empty sentence (no tokens)")
    offsets = np.zeros(len(n_tok) + 1, dtype=np.int64)
    np.cumsum(n_tok, out=offsets[1:])

    def first_row(mask: np.ndarray) -> int:
        return int(np.searchsorted(offsets, int(np.flatnonzero(mask)[0]), side="right"))

    if not (pa.types.is_string(tokens.type) or pa.types.is_large_string(tokens.type)):
        raise BertctlError(f"{path}: column '{tok_name}' holds lists of {tokens.type}, not tokens")
    if tokens.null_count:
        raise BertctlError(f"{path}: row {first_row(tokens.is_null().to_numpy(zero_copy_only=False))}"
                           f", column '{tok_name}': a null token")
    tags = (np.full(int(offsets[-1]), "O") if untagged
            else _table_tags(path, table, tag_name, tag_values, labels, first_row))
    n = len(n_tok)
    return TaggedExamples(path=str(path), words=tokens.to_pylist(), tags=tags, offsets=offsets,
                          doc_ids=np.arange(n, dtype=np.int64),
                          lines=np.arange(1, n + 1, dtype=np.int64), line_kind="row",
                          labelled=not untagged)


def _table_tags(path: Path, table, tag_name: str, tag_values, labels, first_row) -> np.ndarray:
    """A table's tags as strings: spelt out, or integers named by `labels` or the table's own
    class names; `first_row(mask)` names the row of a bad one."""
    import pyarrow as pa

    if tag_values.null_count:
        raise BertctlError(f"{path}: row {first_row(tag_values.is_null().to_numpy(zero_copy_only=False))}"
                           f", column '{tag_name}': a null tag")
    if pa.types.is_integer(tag_values.type):
        names = labels if labels is not None else _class_names(table, tag_name)
        if names is None:
            raise BertctlError(f"{path}: column '{tag_name}' holds integer tags; "
                               "give the label list that names them")
        ids = tag_values.to_numpy(zero_copy_only=False).astype(np.int64)
        out = (ids < 0) | (ids >= len(names))
        if out.any():
            raise BertctlError(f"{path}: row {first_row(out)}, column '{tag_name}': tag "
                               f"{int(ids[np.flatnonzero(out)[0]])} is not an index into the "
                               f"{len(names)} labels")
        return np.asarray(names, dtype=str)[ids]
    if pa.types.is_string(tag_values.type) or pa.types.is_large_string(tag_values.type):
        if labels is not None:
            raise BertctlError(f"{path}: column '{tag_name}' spells its tags out; "
                               "a label list is for integer tags")
        return np.array(tag_values.to_pylist(), dtype=str)
    raise BertctlError(f"{path}: column '{tag_name}' holds lists of {tag_values.type}, "
                       "not tags (strings, or integers with a label list)")

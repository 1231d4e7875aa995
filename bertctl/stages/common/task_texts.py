"""The texts of task files that `audit` looks for in a corpus and `build-pretrain-data
--exclude` keeps out of one (the matching rule: bertctl/data/overlap.py)."""

from __future__ import annotations

import json
import statistics
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from bertctl.contract import artifacts
from bertctl.data import overlap
from bertctl.errors import BertctlError
from bertctl.data import tables
from bertctl.tasks.span import reader as squad_reader
from bertctl.tasks.tagging.reader import read_tagged

# A column is text to audit when its median cell has this many words (labels, ids, genres not).
TEXT_WORDS = 4
EXCLUDED_FILE = "excluded.jsonl"


@dataclass
class TaskFile:
    path: Path
    columns: list[str]
    cells: list[list[str]]      # per column, per row

    @property
    def rows(self) -> int:
        return len(self.cells[0]) if self.cells else 0


def read_task_file(path: Path, columns: list[str] | None,
                   hint: str = "name one with --against-column") -> TaskFile:
    if not path.is_file():
        raise BertctlError(f"{path}: file not found")
    if tables.format_of(path) is None:
        return _column_file(path, columns)
    nested = squad_reader.load_nested(path)
    if nested is not None:
        return _squad_file(path, columns, nested)
    table = tables.read_table(tables.BY_NAME, path)
    if table.num_rows == 0:
        raise BertctlError(f"{path}: no data rows")
    if columns is not None:
        tables.require_columns(table, columns, path)
        chosen = list(columns)
    else:
        chosen = [name for name in table.column_names if _is_text(table.column(name))]
        if not chosen:
            raise BertctlError(f"{path}: no column with text to audit (columns: "
                               f"{', '.join(table.column_names)}); {hint}")
    return TaskFile(path, chosen, [tables.text_column(table, c, path, allow_empty=True)
                                   for c in chosen])


def _column_file(path: Path, columns: list[str] | None) -> TaskFile:
    """A CoNLL column file (a tagging task's: CoNLL-2003's valid.txt): each sentence its words
    joined by spaces, as one text."""
    if columns is not None:
        raise BertctlError(f"{path}: a CoNLL column file has no named columns; "
                           f"--against-column is for tables")
    try:
        tagged = read_tagged(path, untagged_ok=True)
    except BertctlError as exc:
        raise BertctlError(f"{path}: neither a table (.tsv, .csv, .jsonl, .parquet) nor a "
                           f"CoNLL column file: {exc}") from None
    if tagged.num_sentences == 0:
        raise BertctlError(f"{path}: no sentences")
    o = tagged.offsets
    return TaskFile(path, ["tokens"], [[" ".join(tagged.words[o[i]:o[i + 1]])
                                        for i in range(tagged.num_sentences)]])


def _squad_file(path: Path, columns: list[str] | None, nested: dict) -> TaskFile:
    """A nested SQuAD JSON file: one example per question, its passage and the question (a
    passage that overlaps counts for each of its questions)."""
    if columns is not None:
        raise BertctlError(f"{path}: a SQuAD JSON file has no columns to name; "
                           f"--against-column is for tables")
    squad = squad_reader.read_span_examples(path, version_2=True, nested=nested)
    return TaskFile(path, ["context", "question"], [squad.contexts, squad.questions])


def _is_text(column) -> bool:
    import pyarrow as pa

    if not (pa.types.is_string(column.type) or pa.types.is_large_string(column.type)):
        return False
    cells = [c for c in column.to_pylist() if c]
    return bool(cells) and statistics.median(len(c.split()) for c in cells) >= TEXT_WORDS


def flatten(tasks: list[TaskFile]) -> tuple[list[str], list[tuple[int, int, int]]]:
    """Every audited cell as one list of texts, and each text's (task, row, column)."""
    texts, owner = [], []
    for t, task in enumerate(tasks):
        for c, cells in enumerate(task.cells):
            texts += cells
            owner += [(t, r, c) for r in range(len(cells))]
    return texts, owner


@dataclass
class Exclusion:
    """Corpus documents that overlap task files, left out of what is built and listed."""

    tasks: list[TaskFile]
    owner: list[tuple[int, int, int]]
    index: overlap.TaskTexts
    dropped: list[overlap.Dropped] = field(default_factory=list)

    @classmethod
    def of(cls, paths: list[Path]) -> "Exclusion":
        hint = f"a text column has a median of {TEXT_WORDS} words or more"
        tasks = [read_task_file(Path(p), None, hint) for p in paths]
        texts, owner = flatten(tasks)
        return cls(tasks, owner, overlap.TaskTexts.index(texts))

    @property
    def inputs(self) -> list[artifacts.InputRef]:
        return [artifacts.file_input(t.path, "exclude") for t in self.tasks]

    def filter(self, documents: Iterable[list[str]]) -> Iterator[list[str]]:
        return overlap.without_overlaps(documents, self.index, self.dropped)

    def write(self, out: Path) -> dict:
        """excluded.jsonl in `out`; the manifest's summary of it."""
        with open(out / EXCLUDED_FILE, "w", encoding="utf-8") as f:
            for d in self.dropped:
                t, r, c = self.owner[d.text]
                f.write(json.dumps({"document": d.document, "file": str(self.tasks[t].path),
                                    "row": r + 1, "column": self.tasks[t].columns[c],
                                    "ngram": d.ngram}, ensure_ascii=False) + "\n")
        return {"documents": len(self.dropped), "list": EXCLUDED_FILE,
                "task_files": [str(t.path) for t in self.tasks],
                "rule": {"ngram": self.index.ngram, "min_ngram": self.index.min_ngram}}

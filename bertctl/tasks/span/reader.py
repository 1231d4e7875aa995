"""Reading span-QA files: SQuAD's nested JSON and the flat one-row-per-question layout.

Nested (the official files, v1.1 and v2.0):
    {"data": [{"title", "paragraphs": [{"context", "qas": [{"id", "question",
        "answers": [{"text", "answer_start"}], "is_impossible"}]}]}]}
v2.0's `plausible_answers` are ignored. Flat (Hugging Face's `squad` / `squad_v2` layout), from
JSON lines, parquet or a `save_to_disk` directory:
    id, title, context, question, answers: {text: [...], answer_start: [...]}
where an empty answer list marks an unanswerable question. Other column names go in `SpanColumns`.

Problems raise `BertctlError` as one line naming the file and the item: article / paragraph /
question id for nested files, row / question id for flat ones.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

# The shared table reader of the other families (TSV/CSV/JSON lines/parquet/save_to_disk).
from bertctl.data.tables import BY_NAME, read_table, require_columns
from bertctl.errors import BertctlError


@dataclass(frozen=True)
class SpanColumns:
    """Column names of a flat file. `title` may be absent from the file."""

    id: str = "id"
    title: str = "title"
    context: str = "context"
    question: str = "question"
    answers: str = "answers"
    answer_text: str = "text"            # fields of the answers struct
    answer_start: str = "answer_start"


@dataclass
class SpanExamples:
    """One entry per question, in file order. Questions of one paragraph share its context string.

    `answer_texts[i]` / `answer_starts[i]` are the gold answers (character offsets into
    `contexts[i]`); both empty exactly when `is_impossible[i]`. `where[i]` names the question's
    place in the file for messages ("article 2 'Normans', paragraph 3, question 56ddde...").
    """

    path: str
    version_2: bool
    ids: list[str]
    titles: list[str]
    questions: list[str]
    contexts: list[str]
    answer_texts: list[list[str]]
    answer_starts: list[list[int]]
    is_impossible: np.ndarray          # bool, per question
    where: list[str] = field(repr=False)
    spec: Any = field(default=None, repr=False)   # the task spec it was read with, if any

    def __len__(self) -> int:
        return len(self.ids)

    @property
    def labelled(self) -> bool:
        """SQuAD files always carry their answers (an unanswerable question's are none)."""
        return True

    def gold_answers(self) -> dict[str, list[str]]:
        """Question id -> gold answer texts ([] for unanswerable), what the metrics take."""
        return dict(zip(self.ids, self.answer_texts))


def read_span_examples(path: str | Path, version_2: bool, columns: SpanColumns | None = None,
                       nested: dict | None = None) -> SpanExamples:
    """Read and validate a nested SQuAD JSON file or a flat table.

    `version_2=False` (SQuAD v1.1) makes a question without answers an error; with True such a
    question is unanswerable. Duplicate question ids, empty passages or questions, missing fields
    and malformed answers are errors. `nested`: the file as `load_nested` already parsed it.
    """
    path = Path(path)
    if not path.exists():
        raise BertctlError(f"{path}: file not found")
    nested = nested if nested is not None else load_nested(path)
    rows = (_nested_rows(path, nested) if nested is not None
            else _flat_rows(path, columns or SpanColumns()))
    out = SpanExamples(path=str(path), version_2=version_2, ids=[], titles=[], questions=[],
                       contexts=[], answer_texts=[], answer_starts=[],
                       is_impossible=np.zeros(0, dtype=bool), where=[])
    seen: dict[str, str] = {}
    impossible = []
    for where, qid, title, context, question, texts, starts, flag in rows:
        if qid in seen:
            raise BertctlError(f"{path}: {where}: duplicate question id (first at {seen[qid]})")
        seen[qid] = where
        if not question.strip():
            raise BertctlError(f"{path}: {where}: empty question")
        if not context.strip():
            raise BertctlError(f"{path}: {where}: empty passage (context)")
        if flag and texts:
            raise BertctlError(f"{path}: {where}: is_impossible is true but the question "
                               "has answers")
        if not texts and not version_2:
            raise BertctlError(f"{path}: {where}: no answers (a SQuAD v1.1 task; for unanswerable "
                               "questions use squad_v2 / --version-2-with-negative)")
        # An answer_start that misses its text (even outside the passage) is not an error here:
        # the windows count such answers and leave them out of training.
        if any(not t.strip() for t in texts):
            raise BertctlError(f"{path}: {where}: empty answer text")
        out.where.append(where)
        out.ids.append(qid)
        out.titles.append(title)
        out.questions.append(question)
        out.contexts.append(context)
        out.answer_texts.append(texts)
        out.answer_starts.append(starts)
        impossible.append(not texts)
    if not out.ids:
        raise BertctlError(f"{path}: no questions")
    out.is_impossible = np.asarray(impossible, dtype=bool)
    return out


def load_nested(path: Path) -> dict | None:
    """The parsed file if it is a nested SQuAD JSON document, else None (a flat table)."""
    if path.is_dir() or path.suffix.lower() != ".json":
        return None
    try:
        with open(path, encoding="utf-8-sig") as f:
            doc = json.load(f)
    except json.JSONDecodeError:
        return None              # JSON lines (several documents), read as a table
    except UnicodeDecodeError as exc:
        raise BertctlError(f"{path}: not UTF-8 text: {exc}") from None
    if isinstance(doc, dict) and "data" in doc:
        return doc
    return None


def _field(path: Path, where: str, obj: Any, key: str, kind: type | tuple[type, ...]):
    if not isinstance(obj, dict):
        raise BertctlError(f"{path}: {where}: expected an object, got {type(obj).__name__}")
    if key not in obj:
        raise BertctlError(f"{path}: {where}: missing field '{key}'")
    value = obj[key]
    if not isinstance(value, kind) or isinstance(value, bool) and kind is not bool:
        want = kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
        raise BertctlError(f"{path}: {where}: field '{key}' should be {want}, "
                           f"got {type(value).__name__}")
    return value


def _nested_rows(path: Path, doc: dict):
    articles = _field(path, "top level", doc, "data", list)
    for a, article in enumerate(articles, 1):
        title = article.get("title", "") if isinstance(article, dict) else ""
        a_where = f"article {a}" + (f" '{title}'" if title else "")
        for p, par in enumerate(_field(path, a_where, article, "paragraphs", list), 1):
            p_where = f"{a_where}, paragraph {p}"
            context = _field(path, p_where, par, "context", str)
            for q, qa in enumerate(_field(path, p_where, par, "qas", list), 1):
                qid = _field(path, f"{p_where}, question {q}", qa, "id", (str, int))
                where = f"{p_where}, question {qid}"
                question = _field(path, where, qa, "question", str)
                answers = _field(path, where, qa, "answers", list)
                flag = bool(qa.get("is_impossible", False))
                texts, starts = [], []
                for n, ans in enumerate(answers, 1):
                    texts.append(_field(path, f"{where}, answer {n}", ans, "text", str))
                    starts.append(_field(path, f"{where}, answer {n}", ans, "answer_start", int))
                yield where, str(qid), str(title), context, question, texts, starts, flag


def _flat_rows(path: Path, cols: SpanColumns):
    table = read_table(BY_NAME, path)
    require_columns(table, [cols.id, cols.context, cols.question, cols.answers], path)
    n = table.num_rows
    ids = table.column(cols.id).to_pylist()
    contexts = table.column(cols.context).to_pylist()
    questions = table.column(cols.question).to_pylist()
    answers = table.column(cols.answers).to_pylist()
    titles = (table.column(cols.title).to_pylist() if cols.title in table.column_names
              else [""] * n)
    for i in range(n):
        qid = ids[i]
        where = f"row {i + 1}" + (f", question {qid}" if qid is not None else "")
        if qid is None or (isinstance(qid, str) and not qid.strip()):
            raise BertctlError(f"{path}: {where}: empty '{cols.id}'")
        for name, value in ((cols.context, contexts[i]), (cols.question, questions[i])):
            if not isinstance(value, str):
                raise BertctlError(f"{path}: {where}: column '{name}' should be text, "
                                   f"got {type(value).__name__}")
        texts, starts = _flat_answers(path, where, cols, answers[i])
        yield where, str(qid), str(titles[i] or ""), contexts[i], questions[i], texts, starts, False


def _flat_answers(path: Path, where: str, cols: SpanColumns, ans: Any):
    if not isinstance(ans, dict) or cols.answer_text not in ans or cols.answer_start not in ans:
        raise BertctlError(f"{path}: {where}: column '{cols.answers}' should hold "
                           f"{{{cols.answer_text}: [...], {cols.answer_start}: [...]}}")
    texts, starts = ans[cols.answer_text] or [], ans[cols.answer_start] or []
    if len(texts) != len(starts):
        raise BertctlError(f"{path}: {where}: {len(texts)} answer texts but {len(starts)} "
                           "answer starts")
    if not all(isinstance(t, str) for t in texts) or not all(
            isinstance(s, int) and not isinstance(s, bool) for s in starts):
        raise BertctlError(f"{path}: {where}: answer texts should be text and answer starts "
                           "integers")
    return list(texts), list(starts)

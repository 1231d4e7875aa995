"""The retrieval family's files, read into `RetrievalExamples`:

- a table (TSV, CSV, JSON lines, Parquet) of pairs: the spec's text columns are the query, its
  positive and any hard negatives; with the label column, graded scores of two texts (STS);
  with one text column, each text is its own positive (SimCSE);
- a plain text file (`.txt`): one text per line, each its own positive (SimCSE);
- a BEIR directory: `corpus.jsonl` (`_id`, `title`, `text`), `queries.jsonl` (`_id`, `text`)
  and `qrels/SPLIT.tsv` (`query-id`, `corpus-id`, `score`, with a header); the directory
  stands for its test judgements (else dev, else the only file), a judgements file for itself.
  Read as the queries the judgements name, then the corpus in parts.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from bertctl.errors import BertctlError
from bertctl.data import label_columns, tables

QUERIES, CORPUS, QRELS = "queries.jsonl", "corpus.jsonl", "qrels"
# A teacher's score of a candidate column C is the column score_C (bertctl mine --teacher).
TEACHER_PREFIX = "score_"
SPLITS = ("test", "dev", "train")


@dataclasses.dataclass
class RetrievalExamples:
    """Texts to embed: `texts[i]` the sequences of example i (query, positive, negatives; a
    scored pair; or one text of a BEIR file). `kind` is "pairs", "scored", "queries" or
    "documents"; `scores` the graded scores of "scored"; `ids` the BEIR ids; `keys` each
    text's digest (pairs: the same text is the same document); `qrels` the judgements (the
    queries part of a BEIR directory carries them)."""

    path: str
    kind: str
    texts: list[list[str]]
    scores: np.ndarray | None = None
    ids: list[str] | None = None
    keys: list[list[str]] | None = None
    qrels: dict[str, dict[str, int]] | None = None
    # (examples, candidates) a teacher's scores of each row's positive and negatives
    teacher: np.ndarray | None = None
    raw: object = None       # the texts without prompts, where BM25 reads them (--bm25)

    def __len__(self) -> int:
        return len(self.texts)

    @property
    def labelled(self) -> bool:
        return self.kind in ("scored", "pairs") or self.qrels is not None


def with_prompts(part: RetrievalExamples, query: str, document: str,
                 text: str) -> RetrievalExamples:
    """The part with each text's prompt before it: a pair's query and its documents, a BEIR
    set's queries and corpus, the texts of scored pairs and of SimCSE. Its keys stay those of
    the texts themselves."""
    if not (query or document or text):
        return part
    if part.kind == "queries":
        prompts = [query]
    elif part.kind == "documents":
        prompts = [document]
    elif part.kind == "scored" or (part.texts and len(part.texts[0]) == 1):
        prompts = [text] * (len(part.texts[0]) if part.texts else 1)
    else:
        prompts = [query] + [document] * (len(part.texts[0]) - 1 if part.texts else 0)
    texts = [[p + t for p, t in zip(prompts, row)] for row in part.texts]
    return dataclasses.replace(part, texts=texts)


def digest(text: str) -> str:
    return hashlib.blake2b(text.encode("utf-8"), digest_size=12).hexdigest()


# ---------------------------------------------------------------------------------------------
# Tables and text files


def read_table_chunks(spec, path: Path, rows: int | None) -> Iterator[RetrievalExamples]:
    with tables.open_table(spec, path, in_memory=rows is None) as table:
        if table.num_rows == 0:
            raise BertctlError(f"{path}: no data rows")
        # Unnamed: the query, its positive and every negative column (negative, negative_1,
        # ... as sentence-transformers' mine_hard_negatives writes them), in the file's order.
        columns = list(spec.text_columns) or ["query", "positive", *(
            c for c in table.column_names if c.startswith("negative"))]
        tables.require_columns(table, columns, path)
        scored = spec.label_column is not None and spec.label_column in table.column_names
        if scored and len(columns) != 2:
            raise BertctlError(f"{path}: scores (column '{spec.label_column}') grade pairs of "
                               f"two texts; {len(columns)} text columns given")
        taught = [TEACHER_PREFIX + c for c in columns[1:]]
        found = [c for c in taught if c in table.column_names]
        if found and (scored or len(found) != len(taught)):
            raise BertctlError(f"{path}: teacher scores ({', '.join(found)}) need one for "
                               f"every candidate column: {', '.join(taught)}")
        step = rows or table.num_rows
        for start in range(0, table.num_rows, step):
            part = table.slice(start, step)
            cols = [tables.text_column(part, c, path, first_row=start) for c in columns]
            texts = [list(t) for t in zip(*cols)]
            scores = (label_columns.float_labels(part.column(spec.label_column).to_pylist(), path,
                                         spec.label_column, start) if scored else None)
            teacher = (np.stack([label_columns.float_labels(part.column(c).to_pylist(), path, c, start)
                                 for c in taught], axis=1) if found else None)
            yield RetrievalExamples(str(path), "scored" if scored else "pairs", texts, scores,
                                    keys=[[digest(t) for t in row] for row in texts],
                                    teacher=teacher)


def text_lines(path: Path) -> Iterator[tuple[int, str]]:
    """(line number, text) of each line of a UTF-8 file (a byte-order mark dropped), decoded a
    line at a time so that bytes that are not UTF-8 are named by their line."""
    try:
        with open(path, "rb") as f:
            for n, raw in enumerate(f, 1):
                try:
                    line = raw.decode("utf-8")
                except UnicodeDecodeError as exc:
                    raise BertctlError(f"{path}: line {n}: not UTF-8 text ({exc.reason} at "
                                       f"byte {exc.start} of the line)") from None
                yield n, line.removeprefix("\ufeff") if n == 1 else line
    except OSError as exc:
        raise BertctlError(f"{path}: cannot read: {exc.strerror or exc}") from None


def read_text_chunks(path: Path, rows: int | None) -> Iterator[RetrievalExamples]:
    """One text a line (blank lines skipped), each its own positive."""
    texts: list[list[str]] = []
    for _, line in text_lines(path):
        line = line.strip()
        if line:
            texts.append([line])
        if rows and len(texts) >= rows:
            yield RetrievalExamples(str(path), "pairs", texts)
            texts = []
    if texts:
        yield RetrievalExamples(str(path), "pairs", texts)
    elif not rows or path.stat().st_size == 0:
        raise BertctlError(f"{path}: no texts")


# ---------------------------------------------------------------------------------------------
# BEIR


def beir_files(data: Path) -> tuple[Path, Path]:
    """(the directory, its judgements file) for a BEIR directory or one of its qrels files."""
    if data.is_file() and data.parent.name == QRELS:
        root, qrels = data.parent.parent, data
    else:
        root = data
        found = {p.stem: p for p in sorted((data / QRELS).glob("*.tsv"))}
        split = next((s for s in SPLITS if s in found), None)
        if split is None and len(found) != 1:
            raise BertctlError(f"{data / QRELS}: no judgements (qrels/test.tsv or dev.tsv); "
                               f"give one file of qrels/ as the data")
        qrels = found[split] if split else next(iter(found.values()))
    for name in (CORPUS, QUERIES):
        if not (root / name).is_file():
            raise BertctlError(f"{root / name}: not found (a BEIR directory has {CORPUS}, "
                               f"{QUERIES} and qrels/)")
    return root, qrels


def beir_root(path: Path) -> Path | None:
    """The BEIR directory a file belongs to (its corpus.jsonl or queries.jsonl, one of its
    qrels files), else None."""
    if not path.is_file():
        return None
    for root in (path.parent, path.parent.parent):
        if (root / CORPUS).is_file() and (root / QUERIES).is_file() and \
                (path.parent == root or path.parent.name == QRELS):
            return root
    return None


def is_beir(data: Path) -> bool:
    """A directory with any of a BEIR set's parts (the others' absence is then named), or a
    file in its qrels/."""
    return ((data.is_dir() and any((data / p).exists() for p in (CORPUS, QUERIES, QRELS)))
            or (data.is_file() and data.parent.name == QRELS))


def check_id(value, where: str) -> str:
    """An id as it is written to a run file: a non-empty string without whitespace (a space,
    a tab or a newline would split the run file's line)."""
    if not isinstance(value, str) or not value:
        raise BertctlError(f"{where}: an id must be a non-empty string, not {value!r}")
    if any(c.isspace() for c in value):
        raise BertctlError(f"{where}: id {value!r} holds whitespace, which a run file's "
                           f"fields cannot")
    return value


def _jsonl(path: Path) -> Iterator[tuple[int, str, str]]:
    """(line number, id, text) of a BEIR JSON-lines file; a title is put before its text."""
    for n, doc_id, title, text in jsonl_fields(path):
        yield n, doc_id, f"{title} {text}".strip() if title else text


def jsonl_fields(path: Path) -> Iterator[tuple[int, str, str, str]]:
    """(line number, id, title, text) of a BEIR JSON-lines file, each checked."""
    try:
        with open(path, encoding="utf-8-sig") as f:   # a byte-order mark is harmless
            for n, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                    doc_id, text, title = row["_id"], row.get("text"), row.get("title")
                except (ValueError, KeyError, TypeError, AttributeError) as exc:
                    raise BertctlError(f"{path}: line {n}: not a JSON object with _id and text "
                                       f"({type(exc).__name__})") from None
                doc_id = check_id(doc_id, f"{path}: line {n}")
                for name, value in (("text", text), ("title", title)):
                    if value is not None and not isinstance(value, str):
                        raise BertctlError(f"{path}: line {n}: {name} must be a string, not "
                                           f"{type(value).__name__} {value!r}"[:200])
                text, title = (text or "").strip(), (title or "").strip()
                if not text and not title:
                    raise BertctlError(f"{path}: line {n}: document {doc_id!r} has no text")
                yield n, doc_id, title, text
    except UnicodeDecodeError as exc:
        raise BertctlError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None


def _score(text: str, where: str) -> int:
    """A judgement's integer grade; "2.0" is 2, but a fraction, an overflowing or a
    non-finite number is refused (truncated, 0.5 would count as not relevant)."""
    try:
        value = int(text)
        if abs(value) > 2 ** 31:
            raise BertctlError(f"{where}: score {text!r} is not an integer grade (0 not "
                               f"relevant, 1 or more relevant)")
        return value
    except ValueError:
        pass
    try:
        value = float(text)
    except ValueError:
        value = None
    if value is None or not value.is_integer() or abs(value) > 2 ** 31:
        raise BertctlError(f"{where}: score {text!r} is not an integer grade (0 not relevant, "
                           f"1 or more relevant)")
    return int(value)


def read_qrels(path: Path) -> dict[str, dict[str, int]]:
    """BEIR's three fields (query-id, corpus-id, score; a header line) or TREC's four (query,
    iteration, document, score), tab-separated."""
    qrels: dict[str, dict[str, int]] = {}
    try:
        with open(path, encoding="utf-8-sig") as f:   # a byte-order mark is harmless
            lines = list(enumerate(f, 1))
    except UnicodeDecodeError as exc:
        raise BertctlError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    for n, line in lines:
        cells = line.rstrip("\r\n").split("\t")
        if n == 1 and cells[0] in ("query-id", "qid", "query_id"):
            continue
        if not line.strip():
            continue
        where = f"{path}: line {n}"
        if "" in cells:
            raise BertctlError(f"{where}: an empty field (a tab too many?)")
        if len(cells) == 4:   # TREC: query, iteration (ignored), document, score
            cells = [cells[0], cells[2], cells[3]]
        if len(cells) != 3:
            raise BertctlError(f"{where}: expected query-id, corpus-id and an integer score, "
                               f"tab-separated ({len(cells)} field(s))")
        q, d = check_id(cells[0], where), check_id(cells[1], where)
        if d in qrels.setdefault(q, {}):
            raise BertctlError(f"{where}: query {q!r} judges document {d!r} twice")
        qrels[q][d] = _score(cells[2], where)
    if not qrels:
        raise BertctlError(f"{path}: no judgements")
    if not any(r > 0 for judged in qrels.values() for r in judged.values()):
        raise BertctlError(f"{path}: no judged query has a relevant document (a score above "
                           f"0): every metric would be 0")
    return qrels


def read_beir_chunks(data: Path, rows: int | None) -> Iterator[RetrievalExamples]:
    root, qrels_path = beir_files(data)
    qrels = read_qrels(qrels_path)
    queries: dict[str, str] = {}
    for n, q, text in _jsonl(root / QUERIES):
        if q in queries:
            raise BertctlError(f"{root / QUERIES}: line {n}: query id {q!r} appears twice")
        queries[q] = text
    unknown = next((q for q in qrels if q not in queries), None)
    if unknown is not None:
        raise BertctlError(f"{qrels_path}: query {unknown!r} is not in {root / QUERIES}")
    asked = [q for q in queries if q in qrels]
    yield RetrievalExamples(str(qrels_path), "queries", [[queries[q]] for q in asked],
                            ids=asked, qrels=qrels)
    wanted = {d for judged in qrels.values() for d in judged}
    seen: set[str] = set()
    texts, ids = [], []
    for n, d, text in _jsonl(root / CORPUS):
        if d in seen:
            raise BertctlError(f"{root / CORPUS}: line {n}: document id {d!r} appears twice")
        seen.add(d)
        texts.append([text])
        ids.append(d)
        if rows and len(texts) >= rows:
            yield RetrievalExamples(str(root / CORPUS), "documents", texts, ids=ids)
            texts, ids = [], []
    if not seen:
        raise BertctlError(f"{root / CORPUS}: no documents")
    missing = next((d for d in sorted(wanted) if d not in seen), None)
    if missing is not None:
        raise BertctlError(f"{qrels_path}: document {missing!r} is not in {root / CORPUS}")
    if texts:
        yield RetrievalExamples(str(root / CORPUS), "documents", texts, ids=ids)


@dataclasses.dataclass
class Candidates:
    """A first stage's results to rerank: each query's `run` (document ids, best first, all
    the first stage kept), the first `depth` of them reranked, the judgements, and the texts
    of the queries and of the candidates."""

    run: dict[str, list[str]]
    depth: int
    qrels: dict[str, dict[str, int]]
    queries: dict[str, str]
    documents: dict[str, str]


def candidates(data: Path, run: dict[str, list[str]], qrels, depth: int) -> Candidates:
    wanted = {d for docs in run.values() for d in docs[:depth]}
    queries: dict[str, str] = {}
    documents: dict[str, str] = {}
    for part in read_beir_chunks(data, rows=10_000):
        if part.kind == "queries":
            queries = {q: row[0] for q, row in zip(part.ids, part.texts) if q in run}
        else:
            documents.update((d, row[0]) for d, row in zip(part.ids, part.texts)
                             if d in wanted)
    # What is reranked: at most the documents a query's run holds (a corpus of 30 is reranked
    # 30 deep, and says so, whatever the depth asked).
    depth = min(depth, max((len(docs) for docs in run.values()), default=0))
    return Candidates(run, depth, qrels, queries, documents)

"""A dev set for the choices a search recipe makes, from the user's own data: a share of a
training table's queries held out by query (every row of a query goes one way), or a BEIR
directory the user has, checked against the training rows.

What it writes (`write`): the rows trained on (train.jsonl), the dev queries' (query,
positive) pairs (dev-pairs.jsonl: what `mine` makes the reranker's dev rows from) and dev/, a
BEIR directory whose corpus is every text of the table (positives and negatives, dev and
train) and of `--corpus`, so a dev search ranks among the documents mining and training saw.
The test set is never read here.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass
from pathlib import Path

from bertctl.errors import BertctlError
from bertctl.tasks.retrieval import reader
from bertctl.tasks.retrieval.mining import corpus_lines
from bertctl.tasks.spec import make_task_spec

TRAIN, DEV_PAIRS, DEV = "train.jsonl", "dev-pairs.jsonl", "dev"
SPLIT = "dev"   # the qrels file's name: dev/qrels/dev.tsv


@dataclass(frozen=True)
class Rows:
    """A training table's rows (query, positive, negatives...) and their column names."""

    path: Path
    columns: list[str]
    texts: list[list[str]]

    @property
    def queries(self) -> list[str]:
        return list(dict.fromkeys(r[0] for r in self.texts))


def read_rows(path: Path, columns: list[str] | None) -> Rows:
    spec = make_task_spec("retrieval", text_columns=columns or [])
    part = next(iter(reader.read_table_chunks(spec, path, rows=None)))
    if part.kind != "pairs" or not part.texts or len(part.texts[0]) < 2:
        raise BertctlError(f"{path}: a split takes (query, positive[, negative...]) rows")
    if part.teacher is not None:   # not carried into train.jsonl: refused, not dropped
        raise BertctlError(f"{path}: a split takes rows without a teacher's scores (split "
                           f"the pairs, then mine --teacher the rows trained on)")
    k = len(part.texts[0])
    names = columns or ["query", "positive", *(f"negative_{i}" for i in range(1, k - 1))]
    return Rows(path, list(names), part.texts)


def held_out(queries: list[str], share: float, least: int, seed: int, where: Path) -> set[str]:
    """The dev queries: the `share` (at least `least`) whose hashes with `seed` come first."""
    n = len(queries)
    k = max(math.ceil(share * n), least)
    if 2 * k > n:
        raise BertctlError(f"{where}: {n:,} distinct queries; a dev split of at least {least} "
                           f"queries needs {2 * least:,} (half kept to train on): give a dev set "
                           f"of your own (DEV=, split --dev) or more pairs")
    key = seed.to_bytes(8, "little")
    ranked = sorted(queries, key=lambda q: hashlib.blake2b(q.encode(), digest_size=8,
                                                           key=key).digest())
    return set(ranked[:k])


@dataclass(frozen=True)
class Given:
    """A dev set of the user's (a BEIR directory): its queries' texts and judgements."""

    root: Path
    qrels_path: Path
    queries: dict[str, str]          # judged query id -> text
    qrels: dict[str, dict[str, int]]


def read_given(data: Path, rows: Rows, least: int) -> Given:
    """A BEIR dev set, refused when it shares a query with the training rows, when fewer than
    `least` of its queries have a relevant document, or when a judged id is unknown."""
    root, qrels_path = reader.beir_files(data)
    qrels = reader.read_qrels(qrels_path)
    texts: dict[str, str] = {}
    for _, q, text in reader._jsonl(root / reader.QUERIES):
        if q in qrels:
            texts[q] = text
    unknown = next((q for q in qrels if q not in texts), None)
    if unknown is not None:
        raise BertctlError(f"{qrels_path}: query {unknown!r} is not in {root / reader.QUERIES}")
    judged = {q: j for q, j in qrels.items() if any(r > 0 for r in j.values())}
    if len(judged) < least:
        raise BertctlError(f"{qrels_path}: {len(judged)} queries with a relevant document; a "
                           f"dev set needs at least {least} to measure a choice on")
    trained = set(rows.queries)
    shared = [q for q in judged if texts[q] in trained]
    if shared:
        raise BertctlError(f"{qrels_path}: {len(shared):,} of its {len(judged):,} queries are "
                           f"training queries of {rows.path} (e.g. {texts[shared[0]]!r:.80}): "
                           f"a dev set shares none")
    return Given(root, qrels_path, {q: texts[q] for q in judged}, judged)


def write(out: Path, rows: Rows, dev: set[str] | Given, corpus: Path | None) -> dict:
    """The split's files in `out` (see the module's docstring); its counts."""
    (out / DEV / reader.QRELS).mkdir(parents=True)
    given = isinstance(dev, Given)
    train = [r for r in rows.texts if given or r[0] not in dev]
    with open(out / TRAIN, "w", encoding="utf-8") as f:
        f.writelines(json.dumps(dict(zip(rows.columns, r)), ensure_ascii=False) + "\n"
                     for r in train)
    if given:
        counts = _copy_given(out, dev)
    else:
        counts = _write_held_out(out, rows, dev, corpus)
    return {"rows": len(rows.texts), "train_rows": len(train),
            "train_queries": len({r[0] for r in train}), **counts,
            "dev_source": str(dev.qrels_path) if given else "held out"}


def _write_held_out(out: Path, rows: Rows, dev: set[str], corpus: Path | None) -> dict:
    documents: dict[str, str] = {}     # text -> id, in the order first seen
    for r in rows.texts:
        for text in r[1:]:
            documents.setdefault(text, f"d{len(documents)}")
    with open(out / DEV / reader.CORPUS, "w", encoding="utf-8") as f:
        f.writelines(json.dumps({"_id": d, "title": "", "text": t}, ensure_ascii=False) + "\n"
                     for t, d in documents.items())
        if corpus is not None:   # streamed: a corpus of any size, each new text once
            seen: set[bytes] = set()
            n = len(documents)
            for text in corpus_lines(corpus):
                digest = hashlib.blake2b(text.encode(), digest_size=8).digest()
                if text in documents or digest in seen:
                    continue
                seen.add(digest)
                f.write(json.dumps({"_id": f"d{n}", "title": "", "text": text},
                                   ensure_ascii=False) + "\n")
                n += 1
        else:
            n = len(documents)
    queries: dict[str, str] = {}
    judged: dict[str, dict[str, int]] = {}
    pairs = []
    for r in rows.texts:
        if r[0] not in dev:
            continue
        q = queries.setdefault(r[0], f"q{len(queries)}")
        judged.setdefault(q, {})[documents[r[1]]] = 1
        pairs.append((r[0], r[1]))
    with open(out / DEV / reader.QUERIES, "w", encoding="utf-8") as f:
        f.writelines(json.dumps({"_id": q, "text": t}, ensure_ascii=False) + "\n"
                     for t, q in queries.items())
    _write_qrels(out / DEV / reader.QRELS / f"{SPLIT}.tsv", judged)
    _write_pairs(out / DEV_PAIRS, pairs)
    return {"dev_queries": len(queries), "dev_rows": len(pairs), "documents": n}


def _copy_given(out: Path, dev: Given) -> dict:
    wanted = {d for judged in dev.qrels.values() for d, r in judged.items() if r > 0}
    texts: dict[str, str] = {}
    n = 0
    with open(out / DEV / reader.CORPUS, "w", encoding="utf-8") as f:
        for _, d, text in reader._jsonl(dev.root / reader.CORPUS):
            f.write(json.dumps({"_id": d, "title": "", "text": text}, ensure_ascii=False) + "\n")
            n += 1
            if d in wanted:
                texts[d] = text
    missing = next((d for d in sorted(wanted) if d not in texts), None)
    if missing is not None:
        raise BertctlError(f"{dev.qrels_path}: document {missing!r} is not in "
                           f"{dev.root / reader.CORPUS}")
    with open(out / DEV / reader.QUERIES, "w", encoding="utf-8") as f:
        f.writelines(json.dumps({"_id": q, "text": t}, ensure_ascii=False) + "\n"
                     for q, t in dev.queries.items())
    _write_qrels(out / DEV / reader.QRELS / f"{SPLIT}.tsv", dev.qrels)
    pairs = [(dev.queries[q], texts[d]) for q, judged in dev.qrels.items()
             for d, r in judged.items() if r > 0]
    _write_pairs(out / DEV_PAIRS, pairs)
    return {"dev_queries": len(dev.queries), "dev_rows": len(pairs), "documents": n}


def _write_qrels(path: Path, qrels: dict[str, dict[str, int]]) -> None:
    with open(path, "w", encoding="utf-8") as f:
        f.write("query-id\tcorpus-id\tscore\n")
        f.writelines(f"{q}\t{d}\t{r}\n" for q, judged in qrels.items() for d, r in judged.items())


def _write_pairs(path: Path, pairs: list[tuple[str, str]]) -> None:
    with open(path, "w", encoding="utf-8") as f:
        f.writelines(json.dumps({"query": q, "positive": p}, ensure_ascii=False) + "\n"
                     for q, p in pairs)

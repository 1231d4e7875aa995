"""The search study's data (see bench_search.py's doc), built from GLUE's MRPC and STS-B: a
BEIR set (the dev pairs' first sentences as queries, every sentence as a document), the
training pairs (no sentence of a test pair) and the training sentences, for the miners."""

from __future__ import annotations

import csv
import hashlib
import json
from pathlib import Path


def _rows(path: Path, a: str, b: str, keep):
    with open(path, encoding="utf-8-sig", newline="") as f:
        for row in csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE):
            if row.get(a) and row.get(b):
                yield " ".join(row[a].split()), " ".join(row[b].split()), keep(row)


def build(shared: Path, out: Path) -> dict:
    """The BEIR set, the training pairs and the training sentences (see the module doc)."""
    glue = shared / "glue"
    sources = {"MRPC": ("#1 String", "#2 String", lambda r: r.get("Quality") == "1"),
               "STS-B": ("sentence1", "sentence2", lambda r: float(r.get("score") or 0) >= 4)}
    corpus: dict[str, str] = {}
    pairs: dict[str, list[tuple[str, str]]] = {"train": [], "dev": []}
    train_sentences: set[str] = set()
    for task, (a, b, positive) in sources.items():
        for split in ("train", "dev", "test"):
            for s1, s2, pos in _rows(glue / task / f"{split}.tsv", a, b,
                                     positive if split != "test" else (lambda r: False)):
                for s in (s1, s2):
                    corpus.setdefault(s, "s" + hashlib.blake2b(s.encode(), digest_size=6)
                                      .hexdigest())
                    if split == "train":
                        train_sentences.add(s)
                if pos and s1 != s2:
                    pairs[split].append((s1, s2))
    test_sentences = {s for pair in pairs["dev"] for s in pair}
    train = [p for p in pairs["train"] if not set(p) & test_sentences]
    # A query is not its own answer (BEIR's Quora leaves identical ids out of the ranking):
    # a test query's sentence is no document unless it is some query's relevant one.
    relevant = {s2 for _, s2 in pairs["dev"]}
    for s1, _ in pairs["dev"]:
        if s1 not in relevant:
            corpus.pop(s1, None)
    beir = out / "beir"
    (beir / "qrels").mkdir(parents=True, exist_ok=True)
    with open(beir / "corpus.jsonl", "w", encoding="utf-8") as f:
        for text, i in corpus.items():
            f.write(json.dumps({"_id": i, "title": "", "text": text}) + "\n")
    queries, qrels = {}, {}
    for s1, s2 in pairs["dev"]:
        q = "q" + hashlib.blake2b(s1.encode(), digest_size=6).hexdigest()
        queries[q] = s1
        qrels.setdefault(q, set()).add(corpus[s2])
    with open(beir / "queries.jsonl", "w", encoding="utf-8") as f:
        f.writelines(json.dumps({"_id": q, "text": t}) + "\n" for q, t in queries.items())
    with open(beir / "qrels" / "test.tsv", "w", encoding="utf-8") as f:
        f.write("query-id\tcorpus-id\tscore\n")
        f.writelines(f"{q}\t{d}\t1\n" for q, docs in qrels.items() for d in sorted(docs))
    with open(out / "train.tsv", "w", encoding="utf-8") as f:
        f.write("query\tpositive\n")
        f.writelines(f"{a}\t{b}\n" for a, b in train)
    (out / "train_sentences.txt").write_text(
        "".join(s + "\n" for s in sorted(train_sentences - test_sentences)), encoding="utf-8")
    return {"documents": len(corpus), "test_queries": len(queries), "train_pairs": len(train),
            "left_out_pairs": len(pairs["train"]) - len(train)}

"""`bertctl search INDEX --query TEXT`: the documents of an index nearest to each query, as
JSON lines on stdout (query, rank, id, score, and the text when the index keeps it).

The index is what `bertctl embed MODEL DOCS --id-column ID [--store-text]` wrote with an
embedding model's own vectors, searched exactly (every document's cosine, the shards read a
block at a time, memory-mapped, the best --top-k kept: bertctl.search.ranking), or
an index artifact `bertctl index` built on it (exact below its size threshold, else faiss's
approximate search). Each query is embedded by the model that embedded the documents (its
query prompt before it); another model is refused: its vectors would be another space's.
`--rerank MODEL` reorders each query's first --rerank-depth hits (--top-k's) by a
cross-encoder's scores or, `--rerank-scoring maxsim`, by late interaction over an embedding
model's token vectors (stages/common/cross.py, as `eval --rerank` scores), reading the texts
the index keeps. An index that stores its documents' pieces (`embed --store-pieces`) is
reordered by them, `--rerank-scoring maxsim` with no model or with the index's own: only the
queries are embedded, so a deeper reordering costs little more than a shallow one. Of the
index's rows only the hits' ids, texts and pieces are read (vectors.IndexRows: their row
groups), so memory stays the hits' whatever the corpus's size.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
from bertctl import hardware, tasks
from bertctl.contract import artifacts
from bertctl.frozen_features import INDEX
from bertctl.errors import BertctlError
from bertctl.model import sentence_layout
from bertctl.stages.common import cross, models, vectors
from bertctl.tasks.retrieval import mining, reader
from bertctl.search import approximate, late, ranking

def read_queries(given: list[str], path: Path | None) -> list[tuple[str, str]]:
    """(id, text) of each query: --query texts (numbered q1, ...), then a file's: a .txt (a
    query a line) or a BEIR queries.jsonl (_id, text)."""
    queries = [(f"q{i}", t) for i, t in enumerate(given, 1)]
    if path is not None:
        if not path.is_file():
            raise BertctlError(f"{path}: no such file of queries")
        if path.suffix == ".jsonl":
            queries += [(q, t) for _, q, t in reader._jsonl(path)]
        else:
            for n, line in reader.text_lines(path):
                if not line.strip():
                    raise BertctlError(f"{path}: line {n}: an empty query")
                queries.append((f"{path.stem}:{n}", line.strip()))
    bad = next((q for q, t in queries if not t.strip()), None)
    if bad is not None:
        raise BertctlError(f"query {bad}: empty")
    if not queries:
        raise BertctlError("give --query TEXT (repeatable) or --queries FILE")
    return queries


def open_index(path: Path):
    """(the embeddings artifact, its shards, the faiss index or None for exact search, the
    index's kind) of an embeddings artifact or an index artifact built on one; the faiss index
    searches as it was built (its recorded probe or beam)."""
    kind = artifacts.read_manifest(path).kind
    if kind != "index":
        art, blocks = vectors.index_vectors(path)
        return art, blocks, None, "exact"
    built = artifacts.read_artifact(path, "index")
    ref = next(i for i in built.manifest.inputs if i.role == "embeddings")
    art, blocks = vectors.index_vectors(Path(ref.path))
    if art.manifest.id != ref.id:
        raise BertctlError(f"{art.path}: is not the embeddings {path} was built on (its id is "
                           f"{art.manifest.id}, the index's {ref.id})")
    if built.manifest.stats.get("index") == "exact":
        return art, blocks, None, "exact"
    index = approximate.read(built.file(approximate.FILE),
                             binary=built.manifest.stats.get("quantize") == "binary")
    stats, rows = built.manifest.stats, sum(len(b) for b in blocks)
    if index.ntotal != rows or index.d != blocks[0].shape[1]:
        raise BertctlError(f"{path}: its faiss index holds {index.ntotal:,} vectors of "
                           f"{index.d}, the embeddings {rows:,} of {blocks[0].shape[1]}")
    approximate.tune(index, stats["index"], stats.get("probe"), stats.get("ef_search"))
    return art, blocks, index, stats["index"]


def run(index: Path, query: list[str], queries_file: Path | None, top_k: int,
        model_dir: Path | None, precision: str, threads: int | None,
        probe: int | None = None, ef_search: int | None = None,
        rerank: Path | None = None, rerank_scoring: str = "cross",
        rerank_depth: int | None = None) -> None:
    if precision not in ("auto", "fp32", "bf16"):
        raise BertctlError(f"--precision {precision}: auto, fp32 or bf16")
    if rerank_scoring not in cross.SCORINGS:
        raise BertctlError(f"--rerank-scoring {rerank_scoring}: must be one of "
                           f"{', '.join(cross.SCORINGS)}")
    reordering = rerank is not None or rerank_scoring != "cross"
    if rerank_depth is not None and not reordering:
        raise BertctlError("--rerank-depth: the hits a reranker reorders; give --rerank MODEL "
                           "or --rerank-scoring maxsim")
    if rerank_depth is not None and rerank_depth < top_k:
        raise BertctlError(f"--rerank-depth {rerank_depth}: below --top-k {top_k} (the hits "
                           f"printed are the first of those reordered)")
    hardware.set_threads(threads)
    art, blocks, approx, kind = open_index(index)
    if (probe is not None and kind != "ivf") or (ef_search is not None and kind != "hnsw"):
        raise BertctlError(f"{index}: searched {kind}: --probe applies to an ivf index, "
                           f"--ef-search to an hnsw one")
    if probe is not None or ef_search is not None:   # (only the index's own, checked above)
        approximate.tune(approx, kind, probe, ef_search)
    built_by = next(i for i in art.manifest.inputs if i.role == "model")
    source = models.open_model(model_dir or Path(built_by.path), "model", exports=True)
    if source.ref.id != built_by.id:
        raise BertctlError(f"{source.path}: is not the model that built {art.path} (its id is "
                           f"{source.ref.id}, the index's model {built_by.id}): a query must "
                           f"be embedded by the index's own model")
    family = tasks.get(mining.FAMILY)
    rows = vectors.IndexRows(art.file(INDEX))
    stored = vectors.index_pieces(art, rows) if rerank_scoring == "maxsim" else None
    if stored is not None and source.onnx is not None:
        raise BertctlError(f"{source.path}: an export gives the queries' pooled vectors only, "
                           f"not the pieces {art.path} is reordered by: give --model, the "
                           f"model it was exported from")
    reranker = None
    if rerank is not None:
        reranker = cross.open_reranker(rerank, family, scoring=rerank_scoring)
        if reranker.source.ref.id != source.ref.id:
            stored = None   # another model's pieces: its own, embedded from the texts
        elif stored is not None:
            reranker = None
        if reranker is not None and "text" not in rows.names:
            raise BertctlError(f"{art.path}: keeps no texts for --rerank to read: embed the "
                               f"documents with --store-text"
                               + (" (or --store-pieces, reordered by the index's own model)"
                                  if rerank_scoring == "maxsim" else ""))
    elif rerank_scoring != "cross" and stored is None:
        raise BertctlError(f"--rerank-scoring {rerank_scoring} without --rerank: reorders by "
                           f"the pieces an index stores, and {art.path} stores none (embed "
                           f"the documents with --store-pieces, or give --rerank MODEL)")
    asked = read_queries(query, queries_file)
    tok, _ = source.tokenizer()
    max_len = models.model_length(source)
    record = sentence_layout.record_of(source.hf_config)
    if precision == "auto":
        precision = hardware.auto_precision("auto")
    device, run_precision, _ = source.runtime("auto", precision)
    model = models.load_task_model(source, family.head)
    model.to(device)
    queries = (model, family, tok, [t for _, t in asked],
               sentence_layout.prompt_for(record, "query"), max_len, 64, device, run_precision,
               f"{source.path} on the queries", "queries")
    if stored is not None:   # their pieces from the pass that gives their vectors
        q, pieces = vectors.embed_with_pieces(*queries)
    else:
        q = vectors.embed_texts(*queries)
    if blocks[0].shape[1] != q.shape[1]:
        raise BertctlError(f"{art.path}: vectors of {blocks[0].shape[1]} values, the queries' "
                           f"{q.shape[1]}")
    depth = rerank_depth or top_k
    k = min(depth, sum(len(b) for b in blocks))   # the shards', not a manifest's count
    scores, found = (ranking.search(q, blocks, k) if approx is None
                     else approximate.nearest(approx, q, k, blocks))
    hits = [[j for j in row if j >= 0] for row in found.tolist()]
    if reranker is not None:
        pairs = [(a, j) for a, row in enumerate(hits) for j in row]
        own = reranker.source.ref.id == source.ref.id   # (the index's model, loaded once)
        texts = rows.values("text", [j for _, j in pairs])
        new = cross.score_pairs(reranker, [asked[a][1] for a, _ in pairs],
                                [texts[j] for _, j in pairs], 64, device, run_precision,
                                model=model if own else None)
        scores, found = _reordered(new, scores, found)
    elif stored is not None:
        docs = stored.of([j for row in hits for j in row])
        new = [late.maxsim(pieces[a], [docs[j] for j in row]).numpy()
               for a, row in enumerate(hits) if row]
        scores, found = _reordered(np.concatenate(new) if new else np.zeros(0), scores, found)
    scores, found = scores[:, :top_k], found[:, :top_k]
    shown = [j for row in found.tolist() for j in row if j >= 0]
    ids = rows.values("id" if "id" in rows.names else "row", shown)
    texts = rows.values("text", shown) if "text" in rows.names else None
    out = sys.stdout
    for (qid, text), s, i in zip(asked, scores, found):
        row = i.tolist()
        n = row.index(-1) if -1 in row else len(row)   # an approximate index found fewer
        hits = list(zip(row[:n], s.tolist()[:n]))
        # Ties (duplicate texts score alike) in eval's order: the document id, descending.
        order = ranking.rank_order([str(ids[j]) for j, _ in hits], [sc for _, sc in hits])
        for rank, (j, score) in enumerate((hits[k] for k in order), 1):
            hit = {"query": qid, "rank": rank, "id": str(ids[j]), "score": round(score, 6)}
            if texts is not None:
                hit["text"] = texts[j]
            out.write(json.dumps(hit, ensure_ascii=False) + "\n")


def _reordered(new: np.ndarray, scores: np.ndarray, found: np.ndarray):
    """Each query's hits reordered by `new`, the reranker's scores of every query's hits in
    order (those its hits then carry), as `eval --rerank` reorders a search's first
    documents; ties keep the search's order."""
    out_scores = np.full(scores.shape, -np.inf, np.float64)
    out_found = np.full(found.shape, -1, found.dtype)
    at = 0
    for a, row in enumerate(found.tolist()):
        hits = [j for j in row if j >= 0]
        order = sorted(range(len(hits)), key=lambda i: -float(new[at + i]))   # stable
        out_found[a, :len(hits)] = [hits[i] for i in order]
        out_scores[a, :len(hits)] = [float(new[at + i]) for i in order]
        at += len(hits)
    return out_scores, out_found

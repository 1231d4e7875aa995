"""`bertctl index EMBEDDINGS --out DIR`: an embeddings artifact (an embedding model's own
vectors, `bertctl embed ... --id-column ID`) made searchable. Below --exact-below vectors the
index is exact search over the embeddings as they are (nothing approximated, no file of its
own); above it, or with --kind ivf|hnsw, a faiss index (faiss.index), whose recall@k against
exact search and milliseconds a query, both ways, are measured on the build and recorded in
its stats. `bertctl search INDEX` reads either kind (bertctl/search/approximate.py).
"""

from __future__ import annotations

import time
from pathlib import Path
from bertctl import console
from bertctl.contract import artifacts
from bertctl.stages.settings.index import IndexSettings
from bertctl.stages.common import runtime, vectors
from bertctl.search import approximate


def run(settings: IndexSettings, target: artifacts.Target, embeddings: Path):
    settings = runtime.applied(settings)
    art, blocks = vectors.index_vectors(embeddings)
    n, dim = sum(len(b) for b in blocks), int(blocks[0].shape[1])
    kind = settings.kind
    if kind == "auto":
        kind = "exact" if n < settings.exact_below else "ivf"
    if kind != "exact":
        approximate.require()   # the extra's absence named before any work

    def build(tmp: Path) -> dict:
        stats = {"index": kind, "vectors": n, "dim": dim, "embeddings": str(art.path)}
        if kind == "exact":
            console.log(f"{n:,} vectors: exact search (below --exact-below "
                        f"{settings.exact_below:,})" if settings.kind == "auto" else
                        f"{n:,} vectors: exact search")
            return stats
        started = time.monotonic()
        index = approximate.build(blocks, kind, settings.quantize, lists=settings.lists,
                                  m=settings.m, ef_construction=settings.ef_construction,
                                  seed=settings.seed, threads=settings.threads)
        built = time.monotonic() - started
        approximate.tune(index, kind, settings.probe, settings.ef_search)
        measured = approximate.recall(index, blocks, settings.recall_k, settings.recall_queries,
                                      settings.seed)
        approximate.write(index, tmp / approximate.FILE)
        shape = ({"lists": index.nlist, "probe": index.nprobe} if kind == "ivf"
                 else {"m": settings.m, "ef_search": settings.ef_search})
        console.log(f"{n:,} vectors -> {kind} ({settings.quantize}) in {built:.1f}s; recall@"
                    f"{settings.recall_k} {measured[f'recall@{settings.recall_k}']:.4f} against "
                    f"exact search, {measured['ms_per_query']} ms a query "
                    f"({measured['exact_ms_per_query']} exact)")
        return {**stats, **shape, "quantize": settings.quantize, "build_seconds": round(built, 3),
                "bytes": (tmp / approximate.FILE).stat().st_size, **measured}

    return artifacts.produce("index", settings, [art.as_input("embeddings")], target, build)

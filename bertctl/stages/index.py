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
from bertctl.stages.settings.declared import IndexSettings
from bertctl.stages.common import runtime, vectors
from bertctl.search import approximate


def run(config: IndexSettings, target: artifacts.Target, embeddings: Path):
    config = runtime.applied(config)
    art, blocks = vectors.index_vectors(embeddings)
    n, dim = sum(len(b) for b in blocks), int(blocks[0].shape[1])
    kind = config.kind
    if kind == "auto":
        kind = "exact" if n < config.exact_below else "ivf"
    if kind != "exact":
        approximate.require()   # the extra's absence named before any work

    def build(tmp: Path) -> dict:
        stats = {"index": kind, "vectors": n, "dim": dim, "embeddings": str(art.path)}
        if kind == "exact":
            console.log(f"{n:,} vectors: exact search (below --exact-below "
                        f"{config.exact_below:,})" if config.kind == "auto" else
                        f"{n:,} vectors: exact search")
            return stats
        started = time.monotonic()
        index = approximate.build(blocks, kind, config.quantize, lists=config.lists,
                                  m=config.m, ef_construction=config.ef_construction,
                                  seed=config.seed, threads=config.threads)
        built = time.monotonic() - started
        approximate.tune(index, kind, config.probe, config.ef_search)
        measured = approximate.recall(index, blocks, config.recall_k, config.recall_queries,
                                      config.seed)
        approximate.write(index, tmp / approximate.FILE)
        shape = ({"lists": index.nlist, "probe": index.nprobe} if kind == "ivf"
                 else {"m": config.m, "ef_search": config.ef_search})
        console.log(f"{n:,} vectors -> {kind} ({config.quantize}) in {built:.1f}s; recall@"
                    f"{config.recall_k} {measured[f'recall@{config.recall_k}']:.4f} against "
                    f"exact search, {measured['ms_per_query']} ms a query "
                    f"({measured['exact_ms_per_query']} exact)")
        return {**stats, **shape, "quantize": config.quantize, "build_seconds": round(built, 3),
                "bytes": (tmp / approximate.FILE).stat().st_size, **measured}

    return artifacts.produce("index", config, [art.as_input("embeddings")], target, build)

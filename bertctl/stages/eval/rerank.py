"""`eval FIRST_STAGE BEIR_DIR --rerank RERANKER [--rerank-depth K]`: the first stage's search,
its first K documents a query reordered by a cross-encoder's scores (or, `--rerank-scoring
maxsim`, by late interaction over an embedding model's token vectors: the first stage's own,
say), scored beside it.

The reranker is checked before the first stage runs (stages/common/cross.py: its head, its
tokenizer; the depth against the run's is the family's check); then each query's candidates
are scored in pairs, and the query's first K documents are put in the reranker's order, the
rest of the first stage's run kept below them (so Recall@100 and MAP compare runs of one
depth). The reranked run's metrics are `rerank/METRIC`, beside the first stage's, with the
reranking's queries per second at that depth; its run is `rerank.trec`, each query's figures
`rerank_per_query.tsv`.

Beside it, at no cost, `rerank_fused/METRIC` (`rerank_fused.trec`): the first K in the order
of the reciprocal rank fusion of the two orders (the hybrid's, lexical.py; ties in the first
stage's order). A reranker a little weaker than its first stage alone still adds where the two
err on different queries: a ModernBERT mini pretrained by bertctl on 6 MB of text, 0.797
alone under its first stage's 0.810, fused 0.823 (docs/benchmarks.md); a strong one is best
alone (all-MiniLM-L6-v2's: 0.908 alone, 0.904 fused, over 0.903).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np
from bertctl import console
from bertctl.model import sentence_layout
from bertctl.stages.common.cross import Reranker, score_pairs
from bertctl.search import lexical, ranking

def rerank(reranker: Reranker, candidates, batch_size: int, device, precision: str,
           directory: Path) -> dict[str, Any]:
    """The reranked run's metrics (rerank/METRIC), written to `directory`/rerank.trec."""
    pairs = [(q, d) for q, docs in candidates.run.items() for d in docs[:candidates.depth]]
    started = time.monotonic()
    scores = score_pairs(reranker, [candidates.queries[q] for q, _ in pairs],
                         [candidates.documents[d] for _, d in pairs], batch_size, device,
                         precision)
    seconds = time.monotonic() - started
    runs: dict[str, tuple[dict, dict]] = {"rerank": ({}, {}), "rerank_fused": ({}, {})}
    at = 0
    for q, docs in candidates.run.items():
        head = docs[:candidates.depth]
        ranked = ranking.rank(head, scores[at:at + len(head)].astype(np.float64).tolist())
        at += len(head)
        fused, fused_scores = lexical.fuse([{q: head}, {q: [d for d, _ in ranked]}],
                                           len(head), ties="first")
        # the first stage's others follow, below every reranked score
        rest = [(d, -1.0 - r) for r, d in enumerate(docs[candidates.depth:], 1)]
        for name, order in (("rerank", ranked),
                            ("rerank_fused", list(zip(fused[q], fused_scores[q])))):
            runs[name][0][q] = [d for d, _ in order + rest]
            runs[name][1][q] = [s for _, s in order + rest]
    metrics: dict[str, Any] = {}
    for name, (run, run_scores) in runs.items():
        with open(directory / f"{name}.trec", "w", encoding="utf-8") as f:
            for q, docs in run.items():
                f.writelines(f"{q} Q0 {d} {r} {s:.6f} bertctl-{name}\n"
                             for r, (d, s) in enumerate(zip(docs, run_scores[q]), 1))
        means, per_query = ranking.evaluate(run, candidates.qrels)
        ranking.write_per_query(directory / f"{name}_per_query.tsv", per_query)
        metrics.update({f"{name}/{m}": v for m, v in means.items()})
    console.log(f"reranked the first {candidates.depth} of {len(candidates.run):,} queries' "
                f"results ({len(pairs):,} pairs) in {seconds:.1f}s")
    late_dim = (sentence_layout.record_of(reranker.source.hf_config) or {}).get("late_dim") \
        if reranker.scoring == "maxsim" else None
    return {**metrics, "rerank/depth": candidates.depth, "rerank/scoring": reranker.scoring,
            **({"rerank/late_dim": late_dim} if late_dim else {}),
            "rerank/queries_per_second": (round(len(candidates.run) / seconds, 2)
                                          if seconds else None)}

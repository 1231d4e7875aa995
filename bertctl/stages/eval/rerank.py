"""`eval FIRST_STAGE BEIR_DIR --rerank RERANKER [--rerank-depth K]`: the first stage's search,
its first K documents a query reordered by a cross-encoder's scores, scored beside it.

The reranker is checked before the first stage runs (its head, its tokenizer, the depth
against the run's); then each query's candidates are scored in pairs, a block of pairs at a
time, and the query's first K documents are put in the reranker's order, the rest of the first
stage's run kept below them (so Recall@100 and MAP compare runs of one depth). The reranked
run's metrics are `rerank/METRIC`, beside the first stage's, with the reranking's queries per
second at that depth; its run is `rerank.trec`.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from bertctl import console, evaluation, tasks
from bertctl.errors import BertctlError
from bertctl.stages.common import models
from bertctl.tasks.retrieval import ranking
from bertctl.tasks.sequence import TaskExamples

PAIRS_PER_PART = 10_000


@dataclass
class Reranker:
    source: models.ModelSource
    family: Any
    spec: Any
    max_len: int


def open_reranker(path: Path, first_family) -> Reranker:
    """The reranker, checked as its family reads it (a first-stage model given as the
    reranker is refused here, before any work)."""
    if first_family.reranked_by is None:
        raise BertctlError(f"--rerank {path}: a {first_family.name} task's results are not "
                           f"reranked (a search's are: a BEIR directory)")
    source = models.open_model(path, "reranker")
    family = tasks.get(first_family.reranked_by)
    own = (source.task or {}).get("spec", {}).get("family")
    if own is not None and own != family.name:
        raise BertctlError(f"--rerank {path}: the model was fine-tuned for a '{own}' task, "
                           f"not reranking")
    spec = tasks.make_task_spec(family.name)   # (how pairs are read: the family's alone)
    family.check_head(source.hf_config, spec, None, str(path))
    tok, _ = source.tokenizer()
    max_len = length(source)
    models.check_reads_task(source, tok, max_len)
    return Reranker(source, family, spec, max_len)


def length(source: models.ModelSource) -> int:
    """The reranker's training length, else its tokenizer's model_max_length (where
    CrossEncoder truncates), within its position table."""
    longest = models.model_length(source)
    given = (source.task or {}).get("max_seq_length")
    if given is None:
        settings = source.path / "tokenizer_config.json"
        record = json.loads(settings.read_text(encoding="utf-8")) if settings.is_file() else {}
        given = record.get("model_max_length")
    return min(longest, int(given)) if isinstance(given, (int, float)) and given > 0 \
        else longest


def rerank(reranker: Reranker, candidates, batch_size: int, device, precision: str,
           directory: Path) -> dict[str, Any]:
    """The reranked run's metrics (rerank/METRIC), written to `directory`/rerank.trec."""
    family, spec = reranker.family, reranker.spec
    tok, _ = reranker.source.tokenizer()
    model = models.load_task_model(reranker.source, family.head)
    model.to(device)
    pairs = [(q, d) for q, docs in candidates.run.items() for d in docs[:candidates.depth]]
    scores = np.zeros(len(pairs), np.float32)
    started = time.monotonic()
    with console.progress("rescoring", unit="pairs") as bar:
        for a in range(0, len(pairs), PAIRS_PER_PART):
            part = pairs[a:a + PAIRS_PER_PART]
            examples = TaskExamples(spec, str(reranker.source.path),
                                    [candidates.queries[q] for q, _ in part], None,
                                    [[candidates.documents[d]] for _, d in part], None, None)
            features = family.encode(examples, tok, reranker.max_len)
            outputs = evaluation.predict(
                model, evaluation.task_batches(features, batch_size, family), device, precision,
                progress=lambda k: bar.update(k), where=f"{reranker.source.path}", offset=a)
            scores[a:a + len(part)] = family.predictions(outputs, features, examples,
                                                         spec)[:, 0]
    seconds = time.monotonic() - started
    run, run_scores, at = {}, {}, 0
    for q, docs in candidates.run.items():
        head = docs[:candidates.depth]
        ranked = ranking.rank(head, scores[at:at + len(head)].astype(np.float64).tolist())
        at += len(head)
        # the first stage's others follow, below every reranked score
        rest = [(d, -1.0 - r) for r, d in enumerate(docs[candidates.depth:], 1)]
        run[q] = [d for d, _ in ranked + rest]
        run_scores[q] = [s for _, s in ranked + rest]
    with open(directory / "rerank.trec", "w", encoding="utf-8") as f:
        for q, docs in run.items():
            f.writelines(f"{q} Q0 {d} {r} {s:.6f} bertctl-rerank\n"
                         for r, (d, s) in enumerate(zip(docs, run_scores[q]), 1))
    means, _ = ranking.evaluate(run, candidates.qrels)
    console.log(f"reranked the first {candidates.depth} of {len(run):,} queries' results "
                f"({len(pairs):,} pairs) in {seconds:.1f}s")
    return {**{f"rerank/{m}": v for m, v in means.items()},
            "rerank/depth": candidates.depth,
            "rerank/queries_per_second": round(len(run) / seconds, 2) if seconds else None}

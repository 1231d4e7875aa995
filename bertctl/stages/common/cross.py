"""What scores (query, document) pairs: what `eval --rerank` reorders a search with and what
`mine --teacher` scores a training file's candidates with, through the one inference path
(bertctl.evaluation). Two kinds (`scoring`): a cross-encoder (`cross`: both texts in one
sequence, its head's score) or an embedding model's token vectors compared by late
interaction (`maxsim`: search/late.py). The scorer is checked as its family reads it
before any work; a model of the other kind is refused, naming the flag."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from bertctl import console, evaluation, tasks
from bertctl.errors import BertctlError
from bertctl.model import sentence_layout
from bertctl.stages.common import models, vectors
from bertctl.tasks.base import Ranks
from bertctl.tasks.resolve import tokenizer_length
from bertctl.search import late
from bertctl.tasks.sequence import TaskExamples

PAIRS_PER_PART = 10_000
# Late interaction holds every distinct text's piece vectors of a part: 2,000 pairs of
# 128-piece texts at hidden size 768 are 0.8 GB of fp32 at most.
LATE_PAIRS_PER_PART = 2_000
SCORINGS = ("cross", "maxsim")


@dataclass
class Reranker:
    source: models.ModelSource
    family: Any
    spec: Any
    max_len: int
    scoring: str = "cross"


def open_reranker(path: Path, first_family, flag: str = "--rerank",
                  role: str = "reranker", scoring: str = "cross") -> Reranker:
    """What scores `first_family`'s results' pairs, checked: a cross-encoder (`cross`), or an
    embedding model of `first_family` itself compared by late interaction (`maxsim`); a model
    of the other kind is refused here, naming `flag`."""
    if not isinstance(first_family, Ranks):
        raise BertctlError(f"{flag} {path}: a {first_family.name} task's results are not "
                           f"reranked (a search's are)")
    if scoring not in SCORINGS:
        raise BertctlError(f"{flag}-scoring {scoring}: must be one of {', '.join(SCORINGS)}")
    # A cross-encoder may be an export (its graph run by onnxruntime); late interaction
    # compares the pieces only a model's own forward gives.
    source = models.open_model(path, role, exports=scoring == "cross")
    family = tasks.get(first_family.reranked_by if scoring == "cross" else first_family.name)
    own = (source.task or {}).get("spec", {}).get("family")
    other = {"cross": f" (to score by an embedding model's token vectors: {flag}-scoring "
                      f"maxsim)",
             "maxsim": f" (a cross-encoder is {flag}-scoring cross, the default)"}[scoring]
    if own is not None and own != family.name:
        raise BertctlError(f"{flag} {path}: the model was fine-tuned for a '{own}' task, "
                           f"not {family.name}{other}")
    # How pairs are read and scored: the family's, with what the model saved (its activation).
    spec = family.for_model(tasks.make_task_spec(family.name), source.hf_config)
    try:
        family.check_head(source.hf_config, spec, None, str(path))
    except BertctlError as exc:
        raise BertctlError(f"{exc}{other}") from None
    tok, _ = source.tokenizer()
    max_len = length(source)
    if scoring == "maxsim":   # where its search truncates: its fine-tuning length, else encode's
        record = sentence_layout.record_of(source.hf_config) or {}
        given = (source.task or {}).get("max_seq_length") or record.get("max_seq_length")
        max_len = min(models.model_length(source), int(given)) if given else max_len
    models.check_reads_task(source, tok, max_len)
    return Reranker(source, family, spec, max_len, scoring)


def length(source: models.ModelSource) -> int:
    """The reranker's training length, else its tokenizer's model_max_length (where
    CrossEncoder truncates), within its position table."""
    longest = models.model_length(source)
    given = (source.task or {}).get("max_seq_length") or tokenizer_length(source.path)
    return min(longest, int(given)) if given else longest


def score_pairs(reranker: Reranker, queries: list[str], documents: list[str], batch_size: int,
                device, precision: str, model=None) -> np.ndarray:
    """(pairs,) float32: each (query, document)'s score (CrossEncoder.predict's, or the
    MaxSim of late interaction), a part of pairs at a time."""
    family, spec = reranker.family, reranker.spec
    tok, _ = reranker.source.tokenizer()
    if model is None:
        model = models.load_task_model(reranker.source, family.head)
        model.to(device)
    if reranker.scoring == "maxsim":
        return _maxsim_pairs(reranker, model, tok, queries, documents, batch_size, device,
                             precision)
    scores = np.zeros(len(queries), np.float32)
    with console.progress("cross-encoding", total=len(queries), unit="pairs") as bar:
        for a in range(0, len(queries), PAIRS_PER_PART):
            part = slice(a, a + PAIRS_PER_PART)
            examples = TaskExamples(spec, str(reranker.source.path), queries[part], None,
                                    [[d] for d in documents[part]], None, None)
            features = family.encode(examples, tok, reranker.max_len)
            outputs = evaluation.predict(
                model, evaluation.task_batches(features, batch_size, family), device, precision,
                progress=lambda k: bar.update(k), where=str(reranker.source.path), offset=a)
            scores[part] = family.predictions(outputs, features, examples, spec)[:, 0]
    return scores


def _maxsim_pairs(reranker: Reranker, model, tok, queries: list[str], documents: list[str],
                  batch_size: int, device, precision: str) -> np.ndarray:
    """Late interaction's scores: each distinct text of a part embedded once as pieces (the
    model's query and document prompts before them, as its search embeds them), then every
    query's documents in one product (late.maxsim)."""
    record = sentence_layout.record_of(reranker.source.hf_config)
    prompts = {r: sentence_layout.prompt_for(record, r) for r in ("query", "document")}
    where = str(reranker.source.path)
    scores = np.zeros(len(queries), np.float32)
    with console.progress("late interaction", total=len(queries), unit="pairs") as bar:
        for a in range(0, len(queries), LATE_PAIRS_PER_PART):
            part = range(a, min(a + LATE_PAIRS_PER_PART, len(queries)))
            texts = {}
            for role, side in (("query", queries), ("document", documents)):
                distinct = list(dict.fromkeys(side[i] for i in part))
                _, pieces = vectors.embed_with_pieces(
                    model, reranker.family, tok, distinct, prompts[role], reranker.max_len,
                    batch_size, device, precision, where,
                    "queries" if role == "query" else "documents")
                texts[role] = dict(zip(distinct, pieces))
            by_query: dict[str, list[int]] = {}
            for i in part:
                by_query.setdefault(queries[i], []).append(i)
            for q, rows in by_query.items():
                scores[rows] = late.maxsim(texts["query"][q],
                                           [texts["document"][documents[i]] for i in rows]
                                           ).numpy()
            bar.update(len(part))
    return scores

"""A cross-encoder run on (query, document) pairs: what `eval --rerank` reorders a search with
and what `mine --teacher` scores a training file's candidates with, through the one inference
path (bertctl.evaluation). The reranker is checked as its family reads it before any work."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from bertctl import console, evaluation, tasks
from bertctl.errors import BertctlError
from bertctl.stages.common import models
from bertctl.tasks.sequence import TaskExamples

PAIRS_PER_PART = 10_000


@dataclass
class Reranker:
    source: models.ModelSource
    family: Any
    spec: Any
    max_len: int


def open_reranker(path: Path, first_family, flag: str = "--rerank",
                  role: str = "reranker") -> Reranker:
    """The cross-encoder that reranks `first_family`'s results, checked (a first-stage model
    given in its place is refused here, naming `flag`)."""
    if first_family.reranked_by is None:
        raise BertctlError(f"{flag} {path}: a {first_family.name} task's results are not "
                           f"reranked (a search's are)")
    source = models.open_model(path, role)
    family = tasks.get(first_family.reranked_by)
    own = (source.task or {}).get("spec", {}).get("family")
    if own is not None and own != family.name:
        raise BertctlError(f"{flag} {path}: the model was fine-tuned for a '{own}' task, "
                           f"not {family.name}")
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


def score_pairs(reranker: Reranker, queries: list[str], documents: list[str], batch_size: int,
                device, precision: str, model=None) -> np.ndarray:
    """(pairs,) float32: each (query, document)'s score (CrossEncoder.predict's), a part of
    PAIRS_PER_PART pairs at a time."""
    family, spec = reranker.family, reranker.spec
    tok, _ = reranker.source.tokenizer()
    if model is None:
        model = models.load_task_model(reranker.source, family.head)
        model.to(device)
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

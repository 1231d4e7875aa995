"""Texts as an embedding model's own vectors (its sentence head, with a prompt before each):
what `mine` and `search` embed their queries and documents with, through the one inference
path (bertctl.evaluation: length-sorted batches, non-finite outputs refused)."""

from __future__ import annotations

import numpy as np

from bertctl import console, evaluation
from bertctl.tasks.retrieval.reader import RetrievalExamples


def embed_texts(model, family, tok, texts: list[str], prompt: str, max_len: int,
                batch_size: int, device, precision: str, where: str,
                what: str = "texts") -> np.ndarray:
    """(len(texts), dim) float32: each text, `prompt` before it, truncated at `max_len`."""
    examples = RetrievalExamples(where, "documents", [[prompt + t] for t in texts])
    features = family.encode(examples, tok, max_len)
    with console.progress(f"embedding {what}", total=len(texts), unit="texts") as bar:
        out = evaluation.predict(model, evaluation.task_batches(features, batch_size, family),
                                 device, precision, progress=lambda k: bar.update(k),
                                 where=where)
    return out["embeddings"].astype(np.float32)


__all__ = ["embed_texts"]

"""Texts as an embedding model's own vectors (its sentence head, with a prompt before each):
what `mine` and `search` embed their queries and documents with, through the one inference
path (bertctl.evaluation: length-sorted batches, non-finite outputs refused); and the stored
vectors `index` and `search` read."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from bertctl import console, evaluation
from bertctl.contract import artifacts
from bertctl.errors import BertctlError
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


def index_vectors(path: Path) -> tuple[artifacts.Artifact, list[np.ndarray]]:
    """An embeddings artifact of an embedding model's own vectors (what `index` and `search`
    read) and its shards, memory-mapped."""
    art = artifacts.read_artifact(path, "embeddings")
    if art.manifest.config.get("pool") != "model":
        raise BertctlError(f"{path}: holds hidden states pooled as "
                           f"{art.manifest.config.get('pool')!r}, not an embedding model's own "
                           f"vectors: build the index with bertctl embed MODEL DOCS --id-column "
                           f"ID (an embedding model)")
    shards = [art.file(name) for name in sorted(
        f.name for f in path.glob("vectors-*.npy"))]
    blocks = [np.load(p, mmap_mode="r") for p in shards]
    if not blocks or not sum(len(b) for b in blocks):
        raise BertctlError(f"{path}: holds no vectors")
    return art, blocks

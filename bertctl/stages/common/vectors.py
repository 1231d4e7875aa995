"""Texts as an embedding model's own vectors (its sentence head, with a prompt before each):
what `mine` and `search` embed their queries and documents with (and their pieces' vectors,
what late interaction scores pairs by), through the one inference
path (bertctl.evaluation: length-sorted batches, non-finite outputs refused); and the stored
vectors `index` and `search` read."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import torch
from bertctl import console, evaluation, frozen_features
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


def embed_with_pieces(model, family, tok, texts: list[str], prompt: str, max_len: int,
                      batch_size: int, device, precision: str, where: str,
                      what: str = "texts") -> tuple[np.ndarray, list[torch.Tensor]]:
    """`embed_texts`' vectors and, from the same pass, each text's pieces as late interaction
    (search/late.py) compares them: (pieces, width) float32 of unit length (the
    model's late-interaction head's map where it has one, else its last hidden states).
    Non-finite vectors or pieces are refused as `predict` refuses them."""
    examples = RetrievalExamples(where, "documents", [[prompt + t] for t in texts])
    features = family.encode(examples, tok, max_len)
    out: list[torch.Tensor | None] = [None] * len(texts)
    found: np.ndarray | None = None
    with console.progress(f"embedding {what}", total=len(texts), unit="texts") as bar, \
            evaluation.inference(model, device, precision):
        for indices, inputs in evaluation.task_batches(features, batch_size, family):
            indices = np.asarray(indices, np.int64).reshape(-1)
            ids, types, mask = (None if inputs.get(k) is None
                                else inputs[k].reshape(len(indices), -1).to(device)
                                for k in ("input_ids", "token_type_ids", "attention_mask"))
            vectors, pieces = model.own_head.embed_with_pieces(model, ids, types, mask)
            vectors = vectors.float()
            bad = evaluation.non_finite_rows(vectors) | torch.tensor(
                [not bool(torch.isfinite(p).all()) for p in pieces], device=vectors.device)
            evaluation.refuse_non_finite(bad, indices, where, precision=precision)
            if found is None:
                found = np.empty((len(texts), vectors.shape[-1]), np.float32)
            found[indices] = vectors.cpu().numpy()
            for i, p in zip(indices.tolist(), pieces):
                out[i] = p.cpu()
            bar.update(len(indices))
    return (found if found is not None else np.zeros((0, 0), np.float32)), out


def index_vectors(path: Path) -> tuple[artifacts.Artifact, list[np.ndarray]]:
    """An embeddings artifact of an embedding model's own vectors (what `index` and `search`
    read) and its shards, memory-mapped."""
    art = artifacts.read_artifact(path, "embeddings")
    if art.manifest.config.get("pool") != "model":
        raise BertctlError(f"{path}: holds hidden states pooled as "
                           f"{art.manifest.config.get('pool')!r}, not an embedding model's own "
                           f"vectors: build the index with bertctl embed MODEL DOCS --id-column "
                           f"ID (an embedding model)")
    shards = [art.file(name) for name in art.files(r"vectors-\d+\.npy")]
    blocks = [np.load(p, mmap_mode="r") for p in shards]
    if not blocks or not sum(len(b) for b in blocks):
        raise BertctlError(f"{path}: holds no vectors")
    return art, blocks


class IndexRows:
    """An embeddings artifact's index.parquet, read a column of the asked rows at a time, from
    only the row groups (one a chunk of `embed`'s input) that hold them: a search of a corpus
    of any size reads its hits' ids and texts, never the whole column."""

    def __init__(self, path: Path):
        self.path = path
        self.file = pq.ParquetFile(path)
        meta = self.file.metadata
        self.names = set(self.file.schema_arrow.names)
        self.starts = np.cumsum([0] + [meta.row_group(g).num_rows
                                       for g in range(meta.num_row_groups)])

    def bounds(self, name: str) -> tuple[int, int] | None:
        """(min, max) of an integer column over every row, from the row groups' statistics;
        None where a group has none."""
        index = self.file.schema_arrow.names.index(name)
        found = []
        for g in range(self.file.metadata.num_row_groups):
            stats = self.file.metadata.row_group(g).column(index).statistics
            if stats is None or not stats.has_min_max:
                return None
            found += [stats.min, stats.max]
        return (int(min(found)), int(max(found))) if found else None

    def values(self, name: str, rows) -> dict:
        """{row: its value of column `name`} for the distinct `rows` (positions in the index)."""
        distinct = sorted(set(rows))
        return dict(zip(distinct, self.column(name, distinct)))

    def column(self, name: str, rows) -> list:
        """The values of column `name` at `rows` (positions in the index, any order)."""
        rows = np.asarray(rows, np.int64)
        if len(rows) and (rows.min() < 0 or rows.max() >= self.starts[-1]):
            raise BertctlError(f"{self.path}: holds {self.starts[-1]:,} rows, not row "
                               f"{int(rows.max())}")
        groups = np.searchsorted(self.starts, rows, side="right") - 1
        out: list = [None] * len(rows)
        for g in np.unique(groups):
            at = np.flatnonzero(groups == g)
            values = self.file.read_row_group(int(g), columns=[name]).column(0)
            for i, v in zip(at.tolist(), values.take(pa.array(rows[at] - self.starts[g]))
                            .to_pylist()):
                out[i] = v
        return out


def index_pieces(art: artifacts.Artifact, rows: IndexRows) -> "StoredPieces | None":
    """The late-interaction pieces an embeddings artifact stores beside its vectors (`embed
    --store-pieces`), memory-mapped, or None."""
    if "piece_start" not in rows.names:
        return None
    blocks = [np.load(art.file(frozen_features.PIECES.format(k)), mmap_mode="r")
              for k in range(len(art.files(r"vectors-\d+\.npy")))]
    width = art.manifest.stats.get("piece_dim")
    if any(b.ndim != 2 or b.shape[1] != width for b in blocks):
        raise BertctlError(f"{art.path}: its pieces shards are not of the {width} values its "
                           f"manifest records")
    # Before any work, from the row groups' statistics (no column read): rows that point
    # outside the shards (a hit's exact span is checked when it is read).
    low, high = rows.bounds("shard"), rows.bounds("piece_start")
    count = rows.bounds("piece_count")
    if None in (low, high, count) or low[0] < 0 or low[1] >= len(blocks) or high[0] < 0 \
            or high[1] >= max(len(b) for b in blocks) or count[0] < 1:
        raise BertctlError(f"{rows.path}: its rows' pieces (shards {low}, starts {high}, "
                           f"counts {count}) are not in the artifact's pieces shards")
    return StoredPieces(blocks, rows)


class StoredPieces:
    """Each document's stored pieces, read from the memory-mapped shards when asked."""

    def __init__(self, blocks, rows: IndexRows):
        self.blocks, self.rows = blocks, rows

    def of(self, rows: list[int]) -> dict[int, torch.Tensor]:
        """{row: (pieces, width) float32} of the documents at `rows` (positions in the index)."""
        shards, starts, counts = (self.rows.values(c, rows)
                                  for c in ("shard", "piece_start", "piece_count"))
        out = {}
        for row, shard in shards.items():
            a, n = starts[row], counts[row]
            if not (0 <= shard < len(self.blocks) and a >= 0 and n >= 1
                    and a + n <= len(self.blocks[shard])):
                raise BertctlError(f"{self.rows.path}: row {row}'s pieces (shard {shard}, "
                                   f"start {a}, count {n}) are not in the artifact's pieces "
                                   f"shards")
            out[row] = torch.from_numpy(np.array(self.blocks[shard][a:a + n], np.float32))
        return out


__all__ = ["IndexRows", "StoredPieces", "embed_texts", "embed_with_pieces", "index_pieces",
           "index_vectors"]

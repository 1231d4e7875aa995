"""The on-disk layout of pretraining data: raw little-endian arrays plus small JSON indexes.

A build (or one slice of a build, see `build_pretraining_data`) writes into its output directory:
    build-<i>of<K>.json                  the slice's summary: settings, tokenizer facts, stats,
                                         the shards it wrote
    <split>-<i>of<K>-<n>.json            one shard's index: instance/token counts, array dtypes
    <split>-<i>of<K>-<n>.<field>.bin     one raw array per field (read with np.memmap)

Per-shard fields (n = instances in the shard):
    tokens       token ids of all instances back to back (uint16 if the vocabulary fits, else
                 uint32), masked already for static masking
    offsets      int64, n + 1: instance j is tokens[offsets[j]:offsets[j + 1]]
    b_start      uint16, n: position of B's first token; token_type_ids = (position >= b_start).
                 Equals the length for a single-segment instance.
    nsp          uint8, n: next_sentence_label, 0 = IsNext (B continues A), 1 = NotNext (random B).
                 Absent for no-NSP data.
    mask_offsets int64, n + 1 (static masking only): instance j's predictions are
                 mask_positions/mask_labels[mask_offsets[j]:mask_offsets[j + 1]]
    mask_positions uint16, positions of the predicted tokens, ascending within an instance
    mask_labels  the original ids at those positions (token dtype)

The `.bin` files are written by appending, so a shard never has to fit in memory; its JSON index
is written when it is closed, and the slice summary last.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from bertctl.errors import BertctlError

FORMAT = "bertctl-pretrain-shards"
FORMAT_VERSION = 1


def token_dtype(vocab_size: int) -> np.dtype:
    """The smallest unsigned dtype holding every id of a vocabulary of this size."""
    return np.dtype("<u2") if vocab_size <= 1 << 16 else np.dtype("<u4")


def slice_tag(shard_index: int, num_shards: int) -> str:
    return f"{shard_index:05d}of{num_shards:05d}"


def write_json(path: Path, obj: dict) -> None:
    """Deterministic JSON (sorted keys, fixed separators), written atomically."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(obj, sort_keys=True, indent=1) + "\n", encoding="utf-8")
    os.replace(tmp, path)


@dataclass
class _OpenShard:
    name: str
    files: dict
    n_instances: int = 0
    n_tokens: int = 0
    n_masked: int = 0


@dataclass
class ShardWriter:
    """Appends chunk results of one split to shard files, starting a new shard when the current
    one holds `max_tokens` tokens (always at a chunk boundary, so the layout depends only on the
    data, never on timing)."""

    out_dir: Path
    split: str
    tag: str
    tok_dtype: np.dtype
    nsp: bool
    static_masks: bool
    max_tokens: int
    shards: list[str] = field(default_factory=list)
    _cur: _OpenShard | None = None

    def _fields(self) -> dict[str, np.dtype]:
        f = {"tokens": self.tok_dtype, "offsets": np.dtype("<i8"), "b_start": np.dtype("<u2")}
        if self.nsp:
            f["nsp"] = np.dtype("u1")
        if self.static_masks:
            f.update(mask_offsets=np.dtype("<i8"), mask_positions=np.dtype("<u2"),
                     mask_labels=self.tok_dtype)
        return f

    def _open(self) -> _OpenShard:
        name = f"{self.split}-{self.tag}-{len(self.shards):05d}"
        files = {k: open(self.out_dir / f"{name}.{k}.bin", "wb") for k in self._fields()}
        files["offsets"].write(np.zeros(1, "<i8").tobytes())
        if self.static_masks:
            files["mask_offsets"].write(np.zeros(1, "<i8").tobytes())
        self.shards.append(name)
        return _OpenShard(name, files)

    def append(self, arrays: dict[str, np.ndarray]) -> None:
        """`arrays`: tokens, lengths, b_start, [nsp], [n_masked, mask_positions, mask_labels]."""
        n = len(arrays["lengths"])
        if n == 0:
            return
        if self._cur is None:
            self._cur = self._open()
        cur, dt = self._cur, self._fields()
        offs = cur.n_tokens + np.cumsum(arrays["lengths"], dtype=np.int64)

        def put(key: str, values: np.ndarray, dtype) -> None:
            # Already in the storage dtype when it comes from the builder: no copy then.
            np.ascontiguousarray(values, dtype=dtype).tofile(cur.files[key])
        put("tokens", arrays["tokens"], dt["tokens"])
        put("offsets", offs, "<i8")
        put("b_start", arrays["b_start"], "<u2")
        if self.nsp:
            put("nsp", arrays["nsp"], "u1")
        if self.static_masks:
            moffs = cur.n_masked + np.cumsum(arrays["n_masked"], dtype=np.int64)
            put("mask_offsets", moffs, "<i8")
            put("mask_positions", arrays["mask_positions"], "<u2")
            put("mask_labels", arrays["mask_labels"], dt["tokens"])
            cur.n_masked += int(len(arrays["mask_positions"]))
        cur.n_instances += n
        cur.n_tokens = int(offs[-1])
        if cur.n_tokens >= self.max_tokens:
            self._close()

    def _close(self) -> None:
        cur = self._cur
        if cur is None:
            return
        for f in cur.files.values():
            f.close()
        write_json(self.out_dir / f"{cur.name}.json", {
            "format": FORMAT, "format_version": FORMAT_VERSION, "split": self.split,
            "instances": cur.n_instances, "tokens": cur.n_tokens, "masked": cur.n_masked,
            "fields": {k: v.str for k, v in self._fields().items()}})
        self._cur = None

    def close(self) -> list[str]:
        self._close()
        return list(self.shards)


class ShardReader:
    """One shard, memory-mapped read-only."""

    def __init__(self, directory: Path, name: str):
        index_path = directory / f"{name}.json"
        try:
            index = json.loads(index_path.read_text(encoding="utf-8"))
            self.n = int(index["instances"])
            fields = dict(index["fields"])
            sizes = {"offsets": self.n + 1, "mask_offsets": self.n + 1, "b_start": self.n,
                     "nsp": self.n, "tokens": int(index["tokens"]),
                     "mask_positions": int(index["masked"]), "mask_labels": int(index["masked"])}
        except FileNotFoundError:
            raise BertctlError(f"{index_path}: shard index missing (a deleted or partly "
                               "copied data artifact)") from None
        except (ValueError, KeyError, TypeError, UnicodeDecodeError) as exc:
            raise BertctlError(f"{index_path}: corrupted shard index ({exc})") from None
        self.name = name
        self.arrays: dict[str, np.ndarray] = {}
        for key, dt in fields.items():
            path = directory / f"{name}.{key}.bin"
            if key not in sizes:
                raise BertctlError(f"{index_path}: unknown field {key!r}")
            expected = sizes[key]
            try:
                arr = (np.memmap(path, dtype=np.dtype(dt), mode="r") if expected else
                       np.zeros(0, dtype=np.dtype(dt)))
            except FileNotFoundError:
                raise BertctlError(f"{path}: shard file missing") from None
            except (ValueError, TypeError) as exc:
                raise BertctlError(f"{path}: cannot map as {dt}: {exc}") from None
            if len(arr) != expected:
                raise BertctlError(f"{path}: holds {len(arr)} values, its index says {expected} "
                                   "(truncated or foreign file)")
            self.arrays[key] = arr
        # The offsets say where every instance lies (8 bytes per instance: cheap to check whole);
        # garbage there would index past the tokens deep inside a training step.
        for key, total in (("offsets", sizes["tokens"]),
                           ("mask_offsets", sizes["mask_positions"])):
            arr = self.arrays.get(key)
            if arr is None or not len(arr):
                continue
            if arr[0] != 0 or arr[-1] != total or np.any(np.diff(arr) < 0):
                raise BertctlError(f"{directory / f'{name}.{key}.bin'}: corrupted (offsets do "
                                   f"not rise from 0 to {total})")

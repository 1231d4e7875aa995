"""Reading pretraining data: what a built directory holds (`read_pretraining_info`), random
access to its instances for training and evaluation (`PretrainingDataset`, with dynamic masks
drawn per epoch), and decoding instances for people (`decode_instances`, `describe`).

The directory's layout is written by `build` (the builder) through `shards`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from tokenizers import Tokenizer

from bertctl.labels import IGNORE_INDEX
from bertctl.data.pretraining.build import _COUNTS, SPLITS, _zero_stats, finish_stats, masking_rules
from bertctl.data.settings import PretrainingDataSettings, predictions_for
from bertctl.data.pretraining.masking import MaskingRules, apply_masking, hashed_uniform_at, ranges
from bertctl.data.pretraining.shards import FORMAT, FORMAT_VERSION, ShardReader
from bertctl.errors import BertctlError

if TYPE_CHECKING:  # pragma: no cover
    import torch


# What ShardWriter names a shard: split, slice tag, number.
_SHARD_NAME = re.compile(r"(train|validation)-\d{5,}of\d{5,}-\d{5,}")


@dataclass
class PretrainingDataInfo:
    """What a pretraining-data directory holds, merged over its slices."""

    path: Path
    settings: dict[str, Any]
    vocab_size: int
    special_ids: dict[str, int]
    token_dtype: str
    num_slices: int
    stats: dict[str, dict[str, Any]]     # per split, as finish_stats
    shards: dict[str, list[str]] = field(default_factory=dict)

    @property
    def nsp(self) -> bool:
        return not self.settings["no_nsp"]

    @property
    def masking(self) -> str:
        return self.settings["masking"]


def read_pretraining_info(path: str | Path) -> PretrainingDataInfo:
    """Read and check the slice summaries of a directory (all slices present, same settings,
    same tokenizer); stats are summed over slices. For the manifest: `info.stats`,
    `info.settings`, `info.vocab_size`, `info.special_ids`."""
    path = Path(path)
    files = sorted(path.glob("build-*of*.json"))
    if not files:
        raise BertctlError(f"{path}: not pretraining data (no build-*.json)")
    summaries = [json.loads(f.read_text(encoding="utf-8")) for f in files]
    first = summaries[0]
    for f, s in zip(files, summaries):
        if s.get("format") != FORMAT or s.get("format_version", 0) > FORMAT_VERSION:
            raise BertctlError(f"{f}: unknown format {s.get('format')!r} "
                               f"version {s.get('format_version')!r}")
        for key in ("settings", "vocab"):
            if s[key] != first[key]:
                raise BertctlError(f"{f}: built with different {key} than {files[0].name}; "
                                   "slices of one dataset need the same settings and tokenizer")
        if s["slice"]["count"] != first["slice"]["count"]:
            raise BertctlError(f"{f}: slice count {s['slice']['count']} differs from "
                               f"{files[0].name}")
    count = first["slice"]["count"]
    have = sorted(s["slice"]["index"] for s in summaries)
    if have != list(range(count)):
        missing = sorted(set(range(count)) - set(have))
        raise BertctlError(f"{path}: incomplete dataset: missing slice(s) {missing} of {count}")
    settings = first["settings"]
    nsp, static = not settings["no_nsp"], settings["masking"] == "static"
    stats, shards = {}, {}
    for split in SPLITS:
        totals = _zero_stats()
        for s in summaries:
            for k in _COUNTS:
                totals[k] += s["splits"][split]["stats"].get(k, 0)
        stats[split] = finish_stats(totals, nsp, static)
        shards[split] = []
        for f, s in zip(files, summaries):
            for name in s["splits"][split]["shards"]:
                # A shard is named by the builder, never a path: nothing else may be read.
                if not (isinstance(name, str) and _SHARD_NAME.fullmatch(name)):
                    raise BertctlError(f"{f}: shard {name!r} is not a shard name of this "
                                       f"artifact (a path, or a file elsewhere, is refused)")
                shards[split].append(name)
    v = first["vocab"]
    return PretrainingDataInfo(path, settings, v["size"], v["special_ids"], v["token_dtype"],
                               count, stats, shards)


def check_mask_rate(info: PretrainingDataInfo, mask_rate: float | None) -> None:
    """A training mask rate is drawn by the loader: only data built with dynamic masks has none
    fixed already."""
    if mask_rate is not None and info.masking != "dynamic":
        raise BertctlError(f"{info.path}: --mask-rate draws masks in training, but this data's "
                           f"masks were drawn when it was built (--masking static): build it "
                           f"with --masking dynamic")


class PretrainingDataset:
    """Random access to one split of a pretraining-data directory, memory-mapped.

    Typical training use: `ds = PretrainingDataset(path, "train")`, batches of indices from
    `collate.length_grouped_batches(ds.lengths, batch_size, seed)`, then `ds.batch(idx, epoch)`.
    Opening is cheap (nothing is read until used), so each DataLoader worker or DDP rank can
    open its own.

    `batch(indices, epoch)` returns torch tensors: input_ids, token_type_ids, attention_mask
    (B, T) padded to the batch's longest instance, labels (B, T) with IGNORE_INDEX where nothing is
    predicted, and next_sentence_label (B,) unless the data is no-NSP. With dynamic masking the
    masks are drawn from (mask_seed, epoch, index): the same epoch and index always give the same
    mask, whatever the batch. `mask_seed` defaults to the build seed.
    """

    def __init__(self, path: str | Path, split: str = "train", *, mask_seed: int | None = None,
                 mask_rate: float | None = None):
        if split not in SPLITS:
            raise BertctlError(f"{path}: unknown split {split!r} (expected one of {SPLITS})")
        self.info = read_pretraining_info(path)
        self.path, self.split = Path(path), split
        self.shards = [ShardReader(self.path, n) for n in self.info.shards[split]]
        counts = np.array([s.n for s in self.shards], dtype=np.int64)
        self._starts = np.concatenate([[0], np.cumsum(counts)])
        if self._starts[-1] == 0:
            hint = (" (built with validation_fraction=0)"
                    if split == "validation" and not self.info.settings["validation_fraction"]
                    else "")
            raise BertctlError(f"{path}: no {split} instances{hint}")
        self.mask_seed = self.info.settings["seed"] if mask_seed is None else mask_seed
        check_mask_rate(self.info, mask_rate)
        self.mask_rate = mask_rate
        self.pad_id = self.info.special_ids["[PAD]"]
        self._rules: MaskingRules | None = None
        self._tokenizer: Tokenizer | None = None
        self._lengths: np.ndarray | None = None

    def __len__(self) -> int:
        return int(self._starts[-1])

    @property
    def nsp(self) -> bool:
        return self.info.nsp

    @property
    def lengths(self) -> np.ndarray:
        """Token count of every instance (for length-grouped batching)."""
        if self._lengths is None:
            self._lengths = np.concatenate([np.diff(s.arrays["offsets"]) for s in self.shards])
        return self._lengths

    @property
    def tokenizer(self) -> Tokenizer:
        """The tokenizer the data was built with (the copy stored next to the shards)."""
        if self._tokenizer is None:
            self._tokenizer = Tokenizer.from_file(str(self.path / "tokenizer.json"))
        return self._tokenizer

    @property
    def masking(self) -> dict[str, float | int]:
        """The masks drawn in training: the share of tokens and the most predictions per
        instance. A training rate above the data's raises that cap to what the rate needs at
        the full length (the data's cap would clip it), so it is stated here and recorded."""
        settings = self.info.settings
        if self.mask_rate is None:
            return {"mask_rate": settings["masked_lm_prob"],
                    "max_predictions_per_seq": settings["max_predictions_per_seq"]}
        return {"mask_rate": self.mask_rate,
                "max_predictions_per_seq": max(settings["max_predictions_per_seq"],
                                               predictions_for(settings["max_seq_length"],
                                                               self.mask_rate))}

    def _masking_rules(self) -> MaskingRules:
        if self._rules is None:
            masking = self.masking
            settings = {**self.info.settings, "masked_lm_prob": masking["mask_rate"],
                        "max_predictions_per_seq": masking["max_predictions_per_seq"]}
            self._rules = masking_rules(self.tokenizer, PretrainingDataSettings(**settings))
        return self._rules

    def arrays(self, indices: Sequence[int] | np.ndarray, epoch: int = 0) -> dict[str, np.ndarray]:
        """The batch as numpy arrays (what `batch` wraps in tensors), plus `lengths`."""
        idx = np.asarray(indices, dtype=np.int64).reshape(-1)
        if len(idx) and (idx.min() < 0 or idx.max() >= len(self)):
            raise IndexError(f"instance index out of range [0, {len(self)})")
        shard_of = np.searchsorted(self._starts, idx, side="right") - 1
        local = idx - self._starts[shard_of]
        n = len(idx)
        lengths = np.zeros(n, dtype=np.int64)
        starts = np.zeros(n, dtype=np.int64)
        b_start = np.zeros(n, dtype=np.int64)
        nsp = np.zeros(n, dtype=np.int64)
        for s in np.unique(shard_of):
            sel = shard_of == s
            a, loc = self.shards[s].arrays, local[sel]
            starts[sel] = a["offsets"][loc]
            lengths[sel] = a["offsets"][loc + 1] - starts[sel]
            b_start[sel] = a["b_start"][loc]
            if "nsp" in a:
                nsp[sel] = a["nsp"][loc]
        width = int(lengths.max(initial=0))
        col = np.arange(width)[None, :]
        inside = col < lengths[:, None]
        ids = np.full((n, width), self.pad_id, dtype=np.int64)
        labels = np.full((n, width), IGNORE_INDEX, dtype=np.int64)
        for s in np.unique(shard_of):
            sel = np.nonzero(shard_of == s)[0]
            a = self.shards[s].arrays
            sub = ids[sel]
            tokens = a["tokens"][ranges(starts[sel], lengths[sel])]
            # Checked per batch (vectorised, on what is read anyway), not over whole shards at
            # open: an id past the vocabulary would fail deep inside the model's embedding.
            if tokens.size and int(tokens.max()) >= self.info.vocab_size:
                raise BertctlError(f"{self.path / (self.shards[s].name + '.tokens.bin')}: "
                                   f"corrupted: token id {int(tokens.max())} is not below the "
                                   f"vocabulary size {self.info.vocab_size}")
            sub[inside[sel]] = tokens
            ids[sel] = sub
            if "mask_offsets" in a:
                loc = local[sel]
                m0 = a["mask_offsets"][loc]
                mc = a["mask_offsets"][loc + 1] - m0
                pick = ranges(m0, mc)
                rows = np.repeat(sel, mc)
                labels[rows, a["mask_positions"][pick].astype(np.int64)] = a["mask_labels"][pick]
        if self.info.masking == "dynamic":
            res = apply_masking(ids, lengths, b_start, self._masking_rules(),
                                hashed_uniform_at(self.mask_seed, epoch, idx))
            labels[res.rows, res.cols] = res.labels
        out = {"input_ids": ids, "token_type_ids": ((col >= b_start[:, None]) & inside)
               .astype(np.int64), "attention_mask": inside.astype(np.int64), "labels": labels,
               "lengths": lengths}
        if self.nsp:
            out["next_sentence_label"] = nsp
        return out

    def batch(self, indices: Sequence[int] | np.ndarray, epoch: int = 0) -> dict[str, torch.Tensor]:
        import torch
        arrays = self.arrays(indices, epoch)
        del arrays["lengths"]
        return {k: torch.from_numpy(v) for k, v in arrays.items()}


def decode_instances(dataset: PretrainingDataset, indices: Sequence[int], epoch: int = 0
                     ) -> list[str]:
    """Readable text of some instances (for `bertctl inspect` and logs): A and B with WordPiece
    joined, predicted positions as `[MASK→word]`, `[tok→word]` (replaced by the random token
    tok) or `[=word]` (kept), and the NSP label."""
    tok = dataset.tokenizer
    mask = dataset.info.special_ids["[MASK]"]   # by role: RoBERTa's <mask>
    arr = dataset.arrays(indices, epoch)
    out = []
    for r, i in enumerate(np.asarray(indices).reshape(-1)):
        n = int(arr["lengths"][r])
        ids, labels = arr["input_ids"][r, :n], arr["labels"][r, :n]
        tt = arr["token_type_ids"][r, :n]
        b = int(np.argmax(tt)) if tt.any() else n
        pieces = []
        for p in range(n):
            t = tok.id_to_token(int(ids[p])) or f"<{int(ids[p])}>"
            if labels[p] != IGNORE_INDEX:
                word = tok.id_to_token(int(labels[p]))
                t = (f"[MASK→{word}]" if ids[p] == mask else
                     f"[={word}]" if labels[p] == ids[p] else f"[{t}→{word}]")
            pieces.append(t)
        text_a, text_b = _join(pieces[1:b - 1]), _join(pieces[b:n - 1])
        head = f"#{int(i)}"
        if dataset.nsp:
            head += " IsNext" if arr["next_sentence_label"][r] == 0 else " NotNext"
        head += f" ({n} tokens, {int((labels != IGNORE_INDEX).sum())} predicted)"
        out.append(f"{head}\nA: {text_a}\nB: {text_b}" if b < n else f"{head}\nA: {text_a}")
    return out


def _join(pieces: list[str]) -> str:
    text = ""
    for p in pieces:
        if p.startswith("##") and text:
            text += p[2:]
        else:
            text += (" " if text else "") + p
    return text


def describe(path: Path, count: int = 3) -> list[str]:
    """Decoded instances of the training split, for logs and `bertctl inspect`."""
    try:
        info = read_pretraining_info(path)
        dataset = PretrainingDataset(path, "train")
    except BertctlError as exc:  # e.g. one slice of a sharded build: readable once combined
        return [f"no sample instances: {exc}"]
    picks = [int(i) for i in
             sorted(set((len(dataset) * k) // max(count, 1) for k in range(count)))]
    lines = [f"sample instances ({info.masking} masking"
             f"{', epoch 0' if info.masking == 'dynamic' else ''}):"]
    for text in decode_instances(dataset, picks):
        lines.extend("  " + line for line in text.splitlines())
    return lines

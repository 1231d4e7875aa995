"""Turning variable-length token sequences into batches, shared by pretraining, fine-tuning and
evaluation so all pad the same way: padded only to the batch's own longest sequence (dynamic
padding); packed (several sequences to a row, `pack_batch`), as fine-tuning trains by default;
or, where asked (`group_by_length`) and always for prediction, of similar lengths together.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

import numpy as np
import torch

from bertctl.labels import IGNORE_INDEX


def pad_to_tensor(seqs: Sequence[np.ndarray], pad_value: int = 0, length: int | None = None,
                  dtype: torch.dtype = torch.long) -> torch.Tensor:
    """Stack 1-D arrays into a (batch, length) tensor, right-padded with `pad_value`.

    `length` defaults to the longest sequence in the batch.
    """
    lengths = np.fromiter((len(s) for s in seqs), dtype=np.int64, count=len(seqs))
    width = int(lengths.max(initial=0)) if length is None else length
    out = np.full((len(seqs), width), pad_value, dtype=np.int64)
    # One flat copy instead of a Python loop per row: positions where column < row length.
    mask = np.arange(width)[None, :] < lengths[:, None]
    if len(seqs):
        out[mask] = np.concatenate([np.asarray(s, dtype=np.int64)[:width] for s in seqs])
    return torch.from_numpy(out).to(dtype)


def length_grouped_batches(lengths: np.ndarray, batch_size: int, seed: int | None,
                           window: int = 8) -> list[np.ndarray]:
    """Indices split into batches of similar-length examples, in a seeded random order.

    Examples are shuffled, then sorted by length inside windows of `window` batches, so batches
    are tight on padding but training still sees a random mix. `seed=None` keeps the input
    order sorted by length (for inference, where order does not matter and padding does).

    Why 8 batches and not the 50 of transformers' LengthGroupedSampler: the wider the window,
    the narrower each batch's length band, and batch length correlates with the data's sources
    and labels (STS-B's genres). Fine-tuning all-MiniLM-L6-v2 on 2,000 STS-B rows, mean dev
    Spearman over 5 seeds: 0.761 with 50, 0.772 with 8, 0.776 without grouping (transformers'
    Trainer on seed 0: 0.812 without, 0.789 with its own grouping). Padded/real tokens on GLUE's
    training sets: 1.02-1.04 with 50, 1.09-1.21 with 8, 1.5-2.5 without grouping.

    Even windows of 8 cost accuracy on small training sets (up to 4-6 points on a 2,000-row pair
    task), so fine-tuning trains on random batches by default and grouping is an opt-in
    (FinetuneSettings.group_by_length; benchmarks/studies/finetune_quality/bench_finetune_quality.py measures both).
    Prediction (`seed=None`) always sorts: there the order changes nothing.
    """
    lengths = np.asarray(lengths)
    if seed is None:
        order = np.argsort(-lengths, kind="stable")
        return [order[i:i + batch_size] for i in range(0, len(order), batch_size)]
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(lengths))
    span = batch_size * window
    for start in range(0, len(order), span):
        chunk = order[start:start + span]
        order[start:start + span] = chunk[np.argsort(-lengths[chunk], kind="stable")]
    batches = [order[i:i + batch_size] for i in range(0, len(order), batch_size)]
    rng.shuffle(batches)
    return batches


def length_runs(row_cost: np.ndarray, overhead: float) -> list[tuple[int, int]]:
    """Rows sorted by length, shortest first, split into runs [start, stop) that are each
    padded to their last (longest) row: the split of least total cost, where a run costs its
    rows times `row_cost[stop - 1]` (the work of one row at the run's length) plus `overhead`
    (what running one more batch costs). Dynamic programming over the split points, one numpy
    pass a row: a batch of 1,024 rows plans in milliseconds."""
    cost = np.asarray(row_cost, dtype=np.float64)
    n = len(cost)
    best = np.zeros(n + 1)
    start = np.zeros(n + 1, dtype=np.int64)
    for stop in range(1, n + 1):
        # best[a] + (stop - a) * cost of a row at stop's length, for every start a < stop
        total = best[:stop] + (stop - np.arange(stop)) * cost[stop - 1]
        start[stop] = int(np.argmin(total))
        best[stop] = total[start[stop]] + overhead
    runs, stop = [], n
    while stop > 0:
        runs.append((int(start[stop]), stop))
        stop = runs[-1][0]
    return runs[::-1]


def max_context_window(spans: Sequence[tuple[int, int]], positions: np.ndarray) -> np.ndarray:
    """For each position, the index of the window `[a, b)` of `spans` where it has the most
    context: Google's run_squad rule, the larger of min(left, right) + 0.01 x window length, the
    earlier window on ties. Every position must lie in some window."""
    a = np.array([s[0] for s in spans])[:, None]
    b = np.array([s[1] for s in spans])[:, None]
    score = np.minimum(positions - a, b - 1 - positions) + 0.01 * (b - a)
    return np.argmax(np.where((positions >= a) & (positions < b), score, -np.inf), axis=0)


def without_full_mask(batch: dict) -> dict:
    """The batch without its attention mask when nothing is padding (a packed batch's mask
    carries its sequence numbers and stays). Decided while the batch is still on the host, so
    that the model never reads a mask back from the device to find out
    (`model.shared.attention_bias`), and SDPA can take its unmasked kernel."""
    mask = batch.get("attention_mask")
    if (isinstance(mask, torch.Tensor) and mask.device.type == "cpu"
            and "position_ids" not in batch and bool((mask == 1).all())):
        return {k: v for k, v in batch.items() if k != "attention_mask"}
    return batch


def pack_batch(batch: dict[str, torch.Tensor], capacity: int, pad_id: int,
               label_pad: int = IGNORE_INDEX, per_token: Collection[str] = (),
               per_example: Collection[str] = ()) -> dict[str, torch.Tensor]:
    """A padded (B, T) batch with several sequences per row: the same examples and the same
    loss, less padding.

    Random batches of short, mixed-length sequences are mostly padding (1.4x to 3x the real
    tokens on GLUE and CoNLL); grouping by length removes it but changes which examples meet in a
    step, which cost accuracy (`length_grouped_batches`). Packing keeps the batch as drawn and
    only lays it out tighter: sequences go into rows of at most `capacity` tokens (first fit,
    longest first), the attention mask holds each token's sequence number in its row (1, 2, ...;
    0 = padding) so attention stays inside a sequence, `position_ids` restart at each sequence,
    and (unless the labels are per token) `sequence_starts` gives each sequence's [CLS] as a
    flat row * width + column index.
    The model then computes for each sequence what it would unpacked (`model.bert.
    attention_bias`). Per-example `labels` (B,) are reordered to the order of `sequence_starts`;
    per-token `labels` (B, T; integers) move with their tokens, `label_pad` on padding; label
    sets (B, L; floats) move with their sequences. Other values the
    batch carries move the same way: those named in `per_token` (B, T, ...) with their tokens
    (0 on padding), those in `per_example` (B, ...) with their sequences. A batch with per-token
    labels or values is a token-level one: it has no `sequence_starts`.
    """
    mask = batch["attention_mask"].numpy()
    B, T = mask.shape
    lengths = mask.sum(1)
    capacity = max(capacity, T)
    row, col = np.empty(B, dtype=np.int64), np.empty(B, dtype=np.int64)
    fill: list[int] = []
    for i in np.argsort(-lengths, kind="stable").tolist():   # per example, not per token
        n = int(lengths[i])
        r = next((r for r, used in enumerate(fill) if used + n <= capacity), len(fill))
        if r == len(fill):
            fill.append(0)
        row[i], col[i] = r, fill[r]
        fill[r] += n
    rows, width = len(fill), max(fill)
    src = np.arange(T)[None, :] < lengths[:, None]
    dst = ((row * width + col)[:, None] + np.arange(T)[None, :])[src]

    def place(values: np.ndarray, pad: int, dtype=np.int64) -> torch.Tensor:
        out = np.full((rows * width, *values.shape[2:]), pad, dtype=dtype)
        out[dst] = values[src]
        return torch.from_numpy(out.reshape(rows, width, *values.shape[2:]))

    order = np.lexsort((col, row))                 # sequences in row-major order
    sorted_rows = row[order]
    number = np.empty(B, dtype=np.int64)
    number[order] = np.arange(B) - np.searchsorted(sorted_rows, sorted_rows) + 1
    packed = {
        "input_ids": place(batch["input_ids"].numpy(), pad_id),
        "token_type_ids": place(batch["token_type_ids"].numpy(), 0),
        "attention_mask": place(np.broadcast_to(number[:, None], (B, T)), 0),
        "position_ids": place(np.broadcast_to(np.arange(T), (B, T)), 0),
    }
    labels = batch.get("labels")
    if labels is not None and labels.dim() == 2 and not labels.is_floating_point():
        packed["labels"] = place(labels.numpy(), label_pad).to(labels.dtype)
    elif not any(key in batch for key in per_token):   # a sequence-level batch
        packed["sequence_starts"] = torch.from_numpy((row * width + col)[order])
        if labels is not None:
            packed["labels"] = labels[torch.from_numpy(order)]
    for key in (k for k in per_token if k in batch):
        values = batch[key].numpy()
        packed[key] = place(values, 0, values.dtype)
    for key in (k for k in per_example if k in batch):
        packed[key] = batch[key][torch.from_numpy(order)]
    return packed


class TaskData:
    """Fine-tuning features as the training loop's data source: padded batches, or packed ones
    (`pack_batch`: rows of at most `pack_to` tokens) where `pack` is asked and the model's head
    can read them (`packs`: sentence-level and tagging heads).

    `extras`: batch key -> (values for every example, per token?): values given with each
    batch beside the features' own (a distillation teacher's cached outputs), per-token values
    cut or padded to the batch's width. `per_token`: the features' own per-token keys besides
    the labels (moved with their tokens when packed)."""

    def __init__(self, features, pack: bool, max_seq_length: int, packs: bool,
                 extras: dict[str, tuple[np.ndarray, bool]] | None = None,
                 per_token: Collection[str] = ()):
        self.features = features
        self.lengths = features.lengths
        self.pack_to = max_seq_length if pack and packs else None
        self.extras = extras or {}
        self.per_token = {*per_token, *(k for k, (_, p) in self.extras.items() if p)}
        self.per_example = {k for k, (_, p) in self.extras.items() if not p}

    def __len__(self) -> int:
        return len(self.features)

    def batch(self, indices: np.ndarray, epoch: int):
        batch = self.features.batch(indices, epoch)
        width = batch["input_ids"].shape[-1]
        for key, (values, per_token) in self.extras.items():
            rows = np.asarray(values[np.asarray(indices, dtype=np.int64)])
            if per_token:
                rows = rows[:, :width]
                rows = np.pad(rows, [(0, 0), (0, width - rows.shape[1])]
                              + [(0, 0)] * (rows.ndim - 2))
            batch[key] = torch.from_numpy(np.ascontiguousarray(rows))
        if self.pack_to is None:
            return batch
        return pack_batch(batch, self.pack_to, self.features.pad_id,
                          per_token=self.per_token, per_example=self.per_example)

"""The data order of a training run: the examples of every global step, a function of (seed,
epoch) only, so a resumed run and every rank of a distributed one know each batch without
replaying or communicating."""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

import numpy as np
import torch

from bertctl.data.collate import length_grouped_batches
from bertctl.errors import BertctlError


@runtime_checkable
class DataSource(Protocol):
    """What `train` reads examples from.

    `batch(indices, epoch)` returns the model's keyword arguments (labels included) as tensors
    for those examples. It must be a pure function of its arguments (no global RNG: it may run
    in a background thread, and resuming relies on it); `epoch` lets dynamic masking draw new
    masks each epoch. An optional `lengths` (array, or method returning one) of token counts
    enables `group_by_length`. `PretrainingDataset` and the fine-tuning task data both fit.
    """

    def __len__(self) -> int: ...

    def batch(self, indices: np.ndarray, epoch: int) -> dict[str, torch.Tensor]: ...


def check_fits(n: int, batch_size: int) -> None:
    """A batch is at most the training data (checked before any memory is measured)."""
    if n < batch_size:
        raise BertctlError(f"train settings: --batch-size {batch_size} is larger than the "
                           f"training data ({n} examples)")


class BatchOrder:
    """The global batches of each epoch, a function of (seed, epoch) only.

    The last incomplete batch of an epoch is dropped (as BERT's own input pipeline does): every
    step has the same number of examples, so micro-batches divide evenly over the ranks; with a
    new shuffle each epoch, different examples are left out each time.
    """

    def __init__(self, n: int, batch_size: int, seed: int, lengths: np.ndarray | None):
        check_fits(n, batch_size)
        self.n, self.batch_size, self.seed, self.lengths = n, batch_size, seed, lengths
        self.steps_per_epoch = n // batch_size
        self._cached: tuple[int, list[np.ndarray]] | None = None

    def epoch(self, epoch: int) -> list[np.ndarray]:
        if self._cached is None or self._cached[0] != epoch:
            # SeedSequence mixes (seed, epoch) into independent streams for every epoch.
            if self.lengths is None:
                order = np.random.default_rng([self.seed, epoch]).permutation(self.n)
                batches = [order[i * self.batch_size:(i + 1) * self.batch_size]
                           for i in range(self.steps_per_epoch)]
            else:
                seed = int(np.random.SeedSequence([self.seed, epoch]).generate_state(1)[0])
                batches = [b for b in length_grouped_batches(self.lengths, self.batch_size, seed)
                           if len(b) == self.batch_size]
            self._cached = (epoch, batches)
        return self._cached[1]

    def at(self, local_step: int) -> tuple[int, np.ndarray]:
        """(epoch, example indices) of the run's `local_step`-th batch (0-based)."""
        epoch, position = divmod(local_step, self.steps_per_epoch)
        return epoch, self.epoch(epoch)[position]


def _lengths(data: Any) -> np.ndarray:
    lengths = getattr(data, "lengths", None)
    if lengths is None:
        raise BertctlError("train settings: group_by_length needs a data source with lengths")
    return np.asarray(lengths() if callable(lengths) else lengths)


def lengths_of(data: Any) -> np.ndarray:
    """A data source's token count per example (for group_by_length)."""
    lengths = getattr(data, "lengths", None)
    if lengths is None:
        raise BertctlError("train settings: group_by_length needs a data source with lengths")
    return np.asarray(lengths() if callable(lengths) else lengths)

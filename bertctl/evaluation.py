"""Running a model over a data set and scoring it: the one inference path of bertctl.

Used by `bertctl eval` and by the validation passes of `finetune` and `pretrain`, so it knows
nothing about artifacts, the CLI or the console (progress is a callback).

- `predict` runs any model over batches built in length order (little padding) and returns its
  per-example outputs as numpy arrays, back in the original example order.
- `evaluate_task` predicts a task's encoded features with a fine-tuned model and lets the task's
  family (bertctl.tasks) turn the outputs into per-example predictions and metrics.
- Pretraining objectives score their models with `inference` (bertctl.objectives).

Inference runs under `torch.inference_mode()` with the model in eval mode (dropout off); the
model's previous train/eval mode is restored afterwards, so a training loop can call these
between steps. `precision="bf16"` runs under bfloat16 autocast (CPU or CUDA), "fp16" under
float16 autocast (for GPUs); outputs are returned as float32.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import numpy as np
import torch

from bertctl import hardware
from bertctl.data.collate import length_grouped_batches, without_full_mask
from bertctl.errors import NonFiniteOutputs

Batches = Iterable[tuple[np.ndarray, dict[str, torch.Tensor]]]
Progress = Callable[[int], None]  # called with the number of examples just done


@contextlib.contextmanager
def inference(model: torch.nn.Module, device: str | torch.device, precision: str) -> Iterator[None]:
    """Eval mode, no autograd, and the precision's autocast (hardware.autocast); restores the
    model's mode after."""
    was_training = model.training
    model.eval()
    try:
        with torch.inference_mode(), hardware.autocast(device, precision):
            yield
    finally:
        model.train(was_training)


def _numpy(t: torch.Tensor) -> np.ndarray:
    if t.is_floating_point():
        t = t.float()  # numpy has no bfloat16
    return t.detach().cpu().numpy()


def non_finite_rows(value: torch.Tensor, real: torch.Tensor | None = None) -> torch.Tensor:
    """Per row (the first dimension): whether any of its values is NaN or infinite. A per-token
    output (rows x tokens x ...) is read at the real tokens only when `real` (rows x tokens,
    1 for a real token) is given: padding carries no prediction."""
    bad = ~torch.isfinite(value)
    if real is not None and bad.dim() >= 2 and bad.shape[:2] == real.shape:
        bad = bad & real.bool().reshape(*real.shape, *[1] * (bad.dim() - 2))
    return bad.reshape(bad.shape[0], -1).any(1) if bad.dim() > 1 else bad


def refuse_non_finite(bad: torch.Tensor, indices: np.ndarray, where: str, unit: str = "sequence",
                      precision: str = "fp32") -> None:
    """NonFiniteOutputs when any row of a batch is flagged by `non_finite_rows`: naming how
    many of the batch's rows and the first of them by its index in `indices`."""
    if bool(bad.any()):
        rows = np.flatnonzero(bad.cpu().numpy())
        raise NonFiniteOutputs(where, len(rows), len(bad), unit, int(np.min(indices[rows])),
                               precision)


def predict(model: torch.nn.Module, source_batches: Batches, device: str | torch.device,
            precision: str = "fp32", *, progress: Progress | None = None,
            where: str = "the model", offset: int = 0) -> dict[str, np.ndarray]:
    """Run `model(**inputs)` on each `(indices, inputs)` of `source_batches` and return every
    per-example output (a tensor whose first dimension is the batch's size: "logits", ...)
    concatenated as numpy arrays, row i belonging to example i.

    The indices of all batches together must be a permutation of 0..n-1: batches may come in any
    order (longest first, from `task_batches`), the result is in example order. Outputs that are
    not per example (a batch's scalar "loss") are dropped. Inputs are moved to `device`; the
    model is expected to be there already.

    A batch whose per-example outputs are not finite (at the real tokens) stops the run with
    NonFiniteOutputs naming `where` and the first such example (its index plus `offset`): a
    metric taken from NaN logits would look like a real one.
    """
    device = torch.device(device)
    orders: list[np.ndarray] = []
    chunks: dict[str, list[np.ndarray]] = {}
    with inference(model, device, precision):
        for indices, inputs in source_batches:
            indices = np.asarray(indices, dtype=np.int64).reshape(-1)
            out = model(**hardware.to_device(without_full_mask(inputs), device))
            real = inputs.get("attention_mask")
            for name, value in out.items():
                if isinstance(value, torch.Tensor) and value.dim() >= 1 and value.size(0) == len(indices):
                    if value.is_floating_point():
                        refuse_non_finite(non_finite_rows(value, None if real is None
                                                          else real.to(value.device)),
                                          indices + offset, where, precision=precision)
                    chunks.setdefault(name, []).append(_numpy(value))
            orders.append(indices)
            if progress is not None:
                progress(len(indices))
    if not orders:
        return {}
    order = np.concatenate(orders)
    n = len(order)
    if not np.array_equal(np.sort(order), np.arange(n)):
        raise ValueError("predict: the batches' indices are not a permutation of 0..n-1")
    result = {}
    for name, parts in chunks.items():
        if len(parts) != len(orders):  # an output some batches lack cannot be put in order
            continue
        # Batches may be padded to different widths (per-token outputs): pad to the widest.
        width = max(p.shape[1] for p in parts) if parts[0].ndim > 1 else None
        if width is not None and any(p.shape[1] != width for p in parts):
            parts = [np.pad(p, [(0, 0), (0, width - p.shape[1])] + [(0, 0)] * (p.ndim - 2))
                     for p in parts]
        stacked = np.concatenate(parts)
        values = np.empty_like(stacked)
        values[order] = stacked
        result[name] = values
    return result


def task_batches(features, batch_size: int, family) -> Batches:
    """`(indices, inputs)` for every feature, longest first so that each batch is padded to
    about its own length: the model's inputs alone (`family.inputs`), no targets."""
    for indices in length_grouped_batches(np.asarray(features.lengths), batch_size, seed=None):
        yield indices, family.inputs(features.batch(indices))


def evaluate_task(model: torch.nn.Module, family, spec, examples, features, label_list,
                  batch_size: int, device: str | torch.device, precision: str = "fp32", *,
                  calibration: dict | None = None,
                  progress: Progress | None = None) -> tuple[dict[str, Any], Any]:
    """Predict every example with the task's family and score the predictions.

    Returns `(metrics, predictions)`: the family's metric dict (empty when the examples have no
    labels: prediction only) and its per-example predictions. `label_list` names the classes
    of families that have one.
    """
    outputs = predict(model, task_batches(features, batch_size, family), device, precision,
                      progress=progress)
    predictions = family.predictions(outputs, features, examples, spec, calibration)
    if not examples.labelled:
        return {}, predictions
    return (family.score(family.results(predictions, examples, spec), examples, spec,
                         label_list), predictions)


__all__ = ["evaluate_task", "inference", "non_finite_rows", "predict", "refuse_non_finite",
           "task_batches"]

"""Scoring masked-LM (and next-sentence) pretraining, shared by the objectives that train a
masked LM: the training loop's step metrics and the metrics on a pretraining split."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from bertctl import hardware
from bertctl.data.collate import length_grouped_batches, without_full_mask
from bertctl.evaluation import Progress, inference, non_finite_rows, refuse_non_finite
from bertctl.train import distributed as dist


def evaluate_pretraining(model: torch.nn.Module, dataset, batch_size: int,
                         device: str | torch.device, precision: str = "fp32",
                         max_batches: int | None = None, *, nsp: bool | None = None,
                         progress: Progress | None = None) -> dict[str, float]:
    """Masked-LM and next-sentence metrics of a `BertForPreTraining` model on a
    `PretrainingDataset` split (its masks of epoch 0, so the numbers are reproducible).

    Returns "mlm_loss" (cross-entropy averaged over all masked positions, not per batch),
    "mlm_accuracy", "perplexity" (exp(mlm_loss)), and "nsp_loss" / "nsp_accuracy" when the data
    has next-sentence labels; plus the counts "examples" and "masked_tokens". With
    `max_batches`, a fixed random subset of max_batches * batch_size instances is scored (the
    same one every call, so values are comparable across a training run). `nsp=False` skips
    next-sentence scoring (a checkpoint without the NSP head); None scores it if the data has it.
    """
    device = torch.device(device)
    subset, batches = validation_batches(dataset, batch_size, max_batches)
    nsp = bool(getattr(dataset, "nsp", False)) and nsp is not False
    mlm_sum = mlm_correct = 0.0
    mlm_count = 0
    nsp_sum = nsp_correct = 0.0
    with inference(model, device, precision):
        for local in batches:
            indices = subset[local]
            batch = hardware.to_device(without_full_mask(dataset.batch(indices, epoch=0)),
                                       device)
            out = model(batch["input_ids"], batch["token_type_ids"], batch.get("attention_mask"),
                        labels=batch["labels"])
            targets = out["mlm_targets"]
            logits = out["mlm_logits"].float()
            _refuse_non_finite(logits, precision)
            if targets.numel():
                mlm_sum += float(F.cross_entropy(logits, targets, reduction="sum"))
                mlm_correct += float((logits.argmax(-1) == targets).sum())
                mlm_count += int(targets.numel())
            if nsp:
                nsp_logits = out["nsp_logits"].float()
                _refuse_non_finite(nsp_logits, precision)
                nsp_labels = batch["next_sentence_label"].reshape(-1)
                nsp_sum += float(F.cross_entropy(nsp_logits, nsp_labels, reduction="sum"))
                nsp_correct += float((nsp_logits.argmax(-1) == nsp_labels).sum())
            if progress is not None:
                progress(len(indices))
    sums = dist.all_reduce_sum(torch.tensor(
        [mlm_sum, mlm_correct, mlm_count, nsp_sum, nsp_correct], dtype=torch.float64,
        device=device)).tolist()
    mlm_sum, mlm_correct, nsp_sum, nsp_correct = sums[0], sums[1], sums[3], sums[4]
    mlm_count = int(sums[2])
    examples = len(subset)
    mlm_loss = mlm_sum / mlm_count if mlm_count else float("nan")
    result = {"mlm_loss": mlm_loss,
              "mlm_accuracy": mlm_correct / mlm_count if mlm_count else float("nan"),
              "perplexity": float("inf") if mlm_loss > 709 else math.exp(mlm_loss)}
    if nsp:
        result["nsp_loss"] = nsp_sum / examples
        result["nsp_accuracy"] = nsp_correct / examples
    result["examples"] = examples
    result["masked_tokens"] = mlm_count
    return result


def _refuse_non_finite(logits: torch.Tensor, precision: str, real=None) -> None:
    """A loss or accuracy over NaN logits is no score (the argmax of NaN is the first id)."""
    refuse_non_finite(non_finite_rows(logits, real), np.arange(len(logits)), "the model",
                      "scored position", precision)


def validation_batches(dataset, batch_size: int, max_batches: int | None
                       ) -> tuple[np.ndarray, list[np.ndarray]]:
    """(the instances scored, this rank's batches of positions into them): all instances, or a
    fixed random subset of max_batches * batch_size (the same every call, so values compare
    across a run), grouped by length. Under torchrun each rank scores every world-th batch and
    the sums are added over ranks (every rank must score); a single process scores them all."""
    n = len(dataset)
    subset = np.arange(n)
    if max_batches is not None and max_batches * batch_size < n:
        subset = np.sort(np.random.default_rng(0).permutation(n)[:max_batches * batch_size])
    batches = length_grouped_batches(np.asarray(dataset.lengths)[subset], batch_size, seed=None)
    return subset, batches[dist.rank()::dist.world_size()]


def _accuracy(logits: torch.Tensor, targets: torch.Tensor) -> tuple[torch.Tensor, int]:
    # The count is a shape, known on the host: a device tensor made of it is a copy the host
    # waits for.
    return (logits.argmax(-1) == targets).sum(), targets.numel()


def pretraining_step_metrics(outputs: dict[str, Any], batch: dict[str, Any]) -> dict[str, tuple]:
    """The training loop's `step_metrics` for BertForPreTraining: (correct, total) of the MLM
    over the masked positions and of NSP (when the data has next-sentence labels)."""
    metrics = {}
    if "mlm_targets" in outputs:
        metrics["mlm_accuracy"] = _accuracy(outputs["mlm_logits"], outputs["mlm_targets"])
    if batch.get("next_sentence_label") is not None:
        metrics["nsp_accuracy"] = _accuracy(outputs["nsp_logits"],
                                            batch["next_sentence_label"].reshape(-1))
    return metrics


# ---------------------------------------------------------------------------------------------
# Replaced-token detection (objectives/electra.py)

# Validation samples with this seed, so two evaluations of one model agree.
ELECTRA_SAMPLE_SEED = 0


def disc_counts(out) -> tuple[torch.Tensor, ...]:
    real = out["real"]
    right = ((out["disc_logits"] > 0) == out["replaced"]) & real
    return right.sum(), real.sum(), (out["replaced"] & real).sum()


def electra_step_metrics(outputs: dict[str, Any], batch: dict[str, Any]) -> dict[str, tuple]:
    right, real, replaced = disc_counts(outputs)
    targets = outputs["mlm_targets"]
    return {"mlm_accuracy": _accuracy(outputs["mlm_logits"], targets),
            "disc_accuracy": (right, real), "replaced_share": (replaced, real)}


def evaluate_electra(model, dataset, batch_size: int, device, precision: str,
                     max_batches: int | None = None, progress=None) -> dict[str, float]:
    """The generator's masked-LM loss and accuracy, the discriminator's loss (mean over
    real tokens), accuracy and the share of tokens replaced, with seeded samples."""
    device = torch.device(device)
    subset, batches = validation_batches(dataset, batch_size, max_batches)
    sums = torch.zeros(7, dtype=torch.float64)
    sampler = torch.Generator(device).manual_seed(ELECTRA_SAMPLE_SEED)
    with inference(model, device, precision):
        for local in batches:
            indices = subset[local]
            batch = hardware.to_device(without_full_mask(dataset.batch(indices, epoch=0)),
                                       device)
            out = model(batch["input_ids"], batch["token_type_ids"],
                        batch.get("attention_mask"), labels=batch["labels"],
                        sample_generator=sampler)
            logits, targets = out["mlm_logits"].float(), out["mlm_targets"]
            _refuse_non_finite(logits, precision)
            _refuse_non_finite(out["disc_logits"].float(), precision, out["real"])
            right, real, replaced = disc_counts(out)
            sums += torch.tensor([
                float(F.cross_entropy(logits, targets, reduction="sum")) if targets.numel()
                else 0.0, float((logits.argmax(-1) == targets).sum()), targets.numel(),
                float(out["disc_loss"]) * float(real), float(right), float(real),
                float(replaced)], dtype=torch.float64)
            if progress is not None:
                progress(len(indices))
    s = dist.all_reduce_sum(sums.to(device)).tolist()
    nan = float("nan")
    return {"mlm_loss": s[0] / s[2] if s[2] else nan,
            "mlm_accuracy": s[1] / s[2] if s[2] else nan,
            "disc_loss": s[3] / s[5] if s[5] else nan,
            "disc_accuracy": s[4] / s[5] if s[5] else nan,
            "replaced_share": s[6] / s[5] if s[5] else nan,
            "examples": len(subset), "masked_tokens": int(s[2])}

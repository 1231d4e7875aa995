"""Training a task head: the job `finetune` hands to `training.train_to_artifact`. The same
training loop as pretraining; only the head, the data and the metric differ. The label list
comes from the training file (or --labels) and is stored in the artifact (config.json's id2label
and the task record), so eval never re-derives it.

What a stage trains the head *with* is a part handed to the job (`Supervision`, whose own
behaviour is plain fine-tuning: the file's labels, the model as loaded). A stage that trains on
something else hands in a part of its own, which may build another model, train it inside a loss
module and add what it learnt from to the manifest. The job itself has no hooks to override.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from bertctl import console, evaluation
from bertctl.data.collate import TaskData
from bertctl.evaluation import evaluate_task
from bertctl.model import architectures, lora
from bertctl.stages.common import models
from bertctl.tasks import class_loss
from bertctl.tasks.base import Calibrates, NumericLabels
from bertctl.train import distributed as dist
from bertctl.train.loop import train
from bertctl.train.settings import LoopSettings


@dataclass
class LoopSetup:
    """What the training loop trains and reads: the module (the model, or a loss module around
    it), values given with each batch besides the features', and its per-step metrics."""

    model: torch.nn.Module
    extras: dict[str, Any] | None = None
    step_metrics: Any = None


class Supervision:
    """What a task head is trained with; the base is plain fine-tuning on the file's labels.
    A part that changes it overrides what it changes (a teacher's, for one)."""

    verb = "fine-tuning"
    require_labels = True   # every training row labelled (a teacher labels the rest)

    def spec_for(self, spec, path: Path):
        """The task spec that reads `path` (a teacher's spec describes its own file)."""
        return spec

    def build_model(self, source: models.ModelSource, role: str, head_kwargs: dict,
                    features: dict):
        """(the model, its load report)."""
        return source.load(role, **head_kwargs, **features)

    def check_label_range(self, outside: str | None) -> None:
        """A training file on another scale than the model's (see label_scale): a note; to
        continue fine-tuning a regression model on rescaled targets can be meant."""
        if outside and dist.is_main():
            console.log(f"note: {outside}")

    def prepared(self, job: TaskJob) -> None:
        """Called once the job has read its data and built its model."""

    def loop_setup(self, model, features, work: Path) -> LoopSetup:
        return LoopSetup(model)

    def trained(self, model):
        """The model to write, from what the loop trained."""
        return model

    def inherited_task(self, source: models.ModelSource) -> dict:
        """Task record entries carried over when the dev set calibrates nothing."""
        return {}

    def stats(self, model) -> dict:
        return {}


class TaskJob:
    """`prepare` (read, encode, build the model), `fit` (the training loop), `write` (the model
    directory and its stats), as `training.train_to_artifact` calls them; `by` is what the head
    is trained with (unset: plain fine-tuning)."""

    def __init__(self, settings, spec, family, source: models.ModelSource, train_file: Path,
                 dev_file: Path | None, max_seq_length: int,
                 label_list: tuple[str, ...] | None = None, features: dict | None = None,
                 by: Supervision | None = None):
        self.settings, self.spec, self.family, self.source = settings, spec, family, source
        self.train_file, self.dev_file = train_file, dev_file
        self.max_len = max_seq_length
        self.labels = label_list   # given (the teacher's), or as the training file says
        self.features = features or {}
        self.metric_key = family.main_metric(spec)
        self.by = by or Supervision()
        self.trained_with = None   # the module `fit` trains (a loss around the model, or it)

    # -- the job

    def prepare(self) -> None:
        settings, family, spec = self.settings, self.family, self.spec
        tok, _ = self.source.tokenizer()
        models.check_reads_task(self.source, tok, self.max_len)
        by = self.by
        self.train_examples = family.read(by.spec_for(spec, self.train_file), self.train_file,
                                          label_list=self.labels,
                                          require_labels=by.require_labels)
        self.label_list = (self.labels if not by.require_labels else
                           self.train_examples.label_list if family.label_list else None)
        self.dev_examples = (family.read(by.spec_for(spec, self.dev_file), self.dev_file,
                                         label_list=self.label_list, require_labels=True)
                             if self.dev_file is not None else None)
        warnings = family.check_training(spec, self.train_examples, settings, self.dev_examples)
        for warning in warnings if dist.is_main() else ():
            console.log(f"warning: {warning}")
        by.check_label_range(label_scale(family, self.train_examples, self.source))
        self.train_features = family.encode(self.train_examples, tok, self.max_len,
                                            training=True)
        self.dev_features = (family.encode(self.dev_examples, tok, self.max_len)
                             if self.dev_examples is not None else None)
        self.class_loss = self._class_loss()
        torch.manual_seed(settings.seed)  # the new head's initial weights are part of --seed
        self.model, report = by.build_model(self.source, family.head,
                                            family.head_kwargs(spec, self.label_list),
                                            self.features)
        if dist.is_main():
            self._log_summary(str(report))
        self.adapters = self._attach_adapters()
        self._check_outputs()
        self.select = (self.metric_key, "max") if (self.dev_features is not None
                                                   and settings.keep == "best") else None
        if self.dev_features is None and settings.keep == "best" and dist.is_main():
            console.log("no --dev file: keeping the last weights")
        self.task_record = {"spec": spec.model_dump(mode="json"),
                            "label_list": list(self.label_list) if self.label_list else None,
                            "max_seq_length": self.max_len}
        span = (family.label_range(self.train_examples)
                if isinstance(family, NumericLabels) else None) or (self.source.task or {}).get(
            "label_range")
        if span:
            self.task_record["label_range"] = span
        by.prepared(self)

    def _attach_adapters(self) -> dict | None:
        """LoRA adapters on the model where finetune --lora-rank asks for them: the facts the
        manifest records (model/lora.py)."""
        wanted = self.settings.lora() if hasattr(self.settings, "lora") else None
        if wanted is None:
            return None
        where = str(self.source.path)
        layers = lora.attach(self.model, wanted, architectures.of_model(self.model)
                             .lora_targets, where)
        trained, total = lora.trainable_parameters(self.model)
        if dist.is_main():
            console.log(f"LoRA rank {wanted.rank} (alpha {wanted.alpha:g}) on {len(layers)} "
                        f"layers; training {trained:,} of {total:,} parameters "
                        f"({100 * trained / total:.2f}%), the head's included")
        return {"rank": wanted.rank, "alpha": wanted.alpha, "dropout": wanted.dropout,
                "targets": sorted({n.rsplit(".", 1)[-1] for n in layers}),
                "adapted_layers": len(layers), "head_modules": lora.head_modules(self.model),
                "trained_parameters": trained, "parameters": total}

    def _class_loss(self) -> tuple | None:
        """(weights, smoothing) where finetune --class-weights or --label-smoothing asks for
        them (tasks/class_loss.py), the weights one per label."""
        value = getattr(self.settings, "class_weights", None)
        smoothing = getattr(self.settings, "label_smoothing", 0.0)
        if value is None and not smoothing:
            return None
        weights = (class_loss.class_weights(value, self.family.training_classes(
            self.train_features), self.label_list) if value is not None else None)
        return weights, smoothing

    def _check_outputs(self) -> None:
        """The model's outputs on the first training examples, before the first step: a model
        whose arithmetic overflows is named here, not as a run that "diverged" (which points
        at the learning rate)."""
        if self.features or len(self.train_features) == 0:
            return   # (a frozen encoder's features are checked as they are read)
        rows = list(range(min(2, len(self.train_features))))
        inputs = self.family.inputs(self.train_features.batch(rows))
        evaluation.predict(self.model, [(rows, inputs)], "cpu", "fp32",
                           where=str(self.source.path))

    def _log_summary(self, load_report: str) -> None:
        spec, family = self.spec, self.family
        console.log(load_report)
        console.log(f"task {spec.name} ({spec.family}): {len(self.train_examples):,} training "
                    f"examples" + (f", {len(self.dev_examples):,} validation"
                                   if self.dev_examples else "")
                    + (f"; labels {', '.join(self.label_list)}" if self.label_list else ""))
        for name, features in (("training", self.train_features),
                               ("validation", self.dev_features)):
            stats = family.feature_stats(features) if features is not None else {}
            if stats:
                console.log(f"{name} features: "
                            + ", ".join(f"{k} {v}" for k, v in stats.items()))

    def dev_predictions(self, model):
        model = self.by.trained(model)
        return evaluate_task(model, self.family, self.spec, self.dev_examples, self.dev_features,
                             self.label_list, self.settings.eval_batch_size,
                             next(model.parameters()).device, self.settings.precision)

    def evaluate(self, model) -> dict:
        metrics, _ = self.dev_predictions(model)
        # Per-step records hold numbers; the eval stage reports the rest (a confusion matrix,
        # per-type figures).
        return {k: v for k, v in metrics.items() if not isinstance(v, (dict, list))}

    def progress(self) -> tuple[str, int | None, int]:
        return f"{self.by.verb} {self.spec.name}", self.settings.steps, 0

    def fit(self, work: Path, sink=None):
        settings = self.settings
        module = self.family.training_module(self.model, self.spec)
        if self.class_loss is not None:
            module = class_loss.ClassLoss(module, *self.class_loss, self.label_list)
        self.trained_with = module
        setup = self.by.loop_setup(module, self.train_features, work)
        data = TaskData(self.train_features, settings.pack, self.max_len, setup.model.packs,
                        setup.extras, per_token=self.family.marks)
        result = train(setup.model, data, LoopSettings.of(settings), work,
                       evaluate=self.evaluate if self.dev_features is not None else None,
                       select=self.select, on_log=sink, step_metrics=setup.step_metrics)
        # The loss module trained the model in place; the model is what is written.
        return result if module is self.model else dataclasses.replace(result,
                                                                       model=self.model)

    def write(self, result, tmp: Path) -> dict:
        family, spec, model = self.family, self.spec, self.by.trained(result.model)
        calibration = None
        calibrates = isinstance(family, Calibrates) and self.dev_features is not None
        if calibrates:   # e.g. a no-answer threshold
            _, predictions = self.dev_predictions(model)
            calibration = family.calibrate(predictions, self.dev_examples, spec)
        if calibration is not None:
            self.task_record["calibration"] = calibration
        elif not calibrates:
            self.task_record.update(self.by.inherited_task(self.source))
        if self.adapters is not None:
            # What every reader runs is the merged model: how far it is from the adapted one.
            rows = list(range(min(8, len(self.train_features))))
            inputs = self.family.inputs(self.train_features.batch(rows))
            self.adapters["merged_max_abs_difference"] = lora.max_difference(model, inputs)
        models.write_model(model, tmp, self.source.path,
                           extra_config=family.config_extras(spec, self.label_list),
                           task=self.task_record,
                           max_length=self.max_len if family.records_length else None,
                           base=self.source.path)
        chosen = result.best_metrics if self.select else result.eval_metrics
        train_stats = family.feature_stats(self.train_features)
        # What a loss module around the model chose where the settings left it to the data
        # (retrieval's loss: the same command trains another loss when the file's columns do).
        facts = getattr(self.trained_with, "facts", None)
        return {**({"loss": facts()} if facts is not None else {}),
                "architecture": architectures.of_model(model).name,
                "model_class": type(model).__name__, "task": spec.name,
                "family": spec.family, "label_list": self.task_record["label_list"],
                "train_examples": len(self.train_examples),
                **({"train_features": train_stats} if train_stats else {}),
                "dev_examples": len(self.dev_examples) if self.dev_examples else 0,
                "step": result.step, "epochs": round(result.epoch, 4),
                "selected_step": result.best_step if self.select else result.step,
                "selection": f"best {self.metric_key}" if self.select else "last",
                **({"resumed_from_step": result.resumed_from}
                   if result.resumed_from is not None else {}),
                **result.fits(),
                **({"lora": self.adapters} if self.adapters is not None else {}),
                "metrics": chosen or {}, **self.by.stats(model)}


def label_scale(family, examples, source) -> str | None:
    """What is wrong when a file's regression targets leave the range the model was trained on
    (its task record's label_range, widened by a tenth of its span), else None: a model that
    predicts STS-B's 0-5 read against labels scored 0-100."""
    trained = (getattr(source, "task", None) or {}).get("label_range")
    if not trained or not isinstance(family, NumericLabels):
        return None
    span = family.label_range(examples)
    if not span:
        return None
    lo, hi = trained
    slack = 0.1 * (hi - lo)
    if span[0] >= lo - slack and span[1] <= hi + slack:
        return None
    return (f"{examples.path}: labels run from {span[0]:g} to {span[1]:g}, outside the {lo:g} to "
            f"{hi:g} that {source.path} was trained on")

"""`bertctl finetune MODEL TRAIN --out DIR`: model + task data -> model artifact with a task
head (the job: stages/common/task_training.py)."""

from __future__ import annotations

from pathlib import Path

from bertctl import tasks
from bertctl.contract import artifacts
from bertctl.stages.settings.finetune import FinetuneSettings
from bertctl.errors import BertctlError
from bertctl.model.features import parse_layers
from bertctl.stages.common import models, runtime, training
from bertctl.stages.common.task_training import TaskJob
from bertctl.tasks.resolve import training_files
from bertctl.stages.settings.assembled import task_spec


def frozen_features(settings: FinetuneSettings, family, source: models.ModelSource) -> dict:
    """The head's `features` argument for --freeze-encoder (nothing otherwise)."""
    if not settings.freeze_encoder:
        return {}
    if settings.head not in family.feature_heads:
        raise BertctlError(f"--freeze-encoder --head {settings.head}: a '{family.name}' task's "
                           + (f"frozen-encoder heads are {', '.join(family.feature_heads)}"
                              if family.feature_heads else "head needs the encoder fine-tuned"))
    layers = parse_layers(settings.features, source.num_layers)
    return {"features": {"layers": list(layers), "combine": settings.combine, "head": settings.head}}


def run(settings: FinetuneSettings, target: artifacts.Target, model_dir: Path, train_path: Path,
        dev_path: Path | None = None):
    settings = runtime.applied(settings)
    spec = task_spec(settings)
    family = tasks.get(spec.family)
    source = models.open_model(model_dir, "model")
    if "max_seq_length" not in settings.model_fields_set:
        # unset: the default, or the model's own length where it reads fewer (a RoBERTa of a
        # 128-row table reads 126), as transformers' scripts cap it at model_max_length
        longest = models.model_length(source)
        if longest < settings.max_seq_length:
            settings = settings.model_copy(update={"max_seq_length": longest})
    spec = family.for_model(spec, source.hf_config)
    features = frozen_features(settings, family, source)   # a bad --head fails before any work
    train_file, dev_file = training_files(spec, train_path, dev_path)
    inputs = [source.ref, models.data_input(train_file, "train")]
    if dev_file is not None:
        inputs.append(models.data_input(dev_file, "dev"))
    job = TaskJob(settings, spec, family, source, train_file, dev_file, settings.max_seq_length,
                  spec.labels, features=features)
    return training.train_to_artifact(settings, inputs, target, job)

"""`bertctl finetune MODEL TRAIN --out DIR`: model + task data -> model artifact with a task
head (the job: stages/common/task_training.py)."""

from __future__ import annotations

from pathlib import Path

import torch

from bertctl import tasks
from bertctl.contract import artifacts
from bertctl.stages.settings.finetune import FinetuneSettings
from bertctl.errors import BertctlError
from bertctl.model import architectures, lora
from bertctl.model.features import parse_layers
from bertctl.stages.common import models, runtime, training
from bertctl.stages.common.task_training import TaskJob
from bertctl.tasks import class_loss
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


def check_class_loss(settings: FinetuneSettings, family) -> None:
    """--class-weights and --label-smoothing where the family's loss has classes, and a named
    file's weights readable, before any work."""
    if settings.class_weights is not None and family.class_loss != "classes":
        raise BertctlError(f"--class-weights: a '{family.name}' task's loss has no classes to "
                           f"weigh (classification and tagging tasks have)")
    if settings.label_smoothing and family.class_loss is None:
        raise BertctlError(f"--label-smoothing: a '{family.name}' task's loss has no classes "
                           f"to smooth (classification, tagging and multiple choice have)")
    if settings.class_weights not in (None, class_loss.BALANCED):
        class_loss.named(settings.class_weights)


def check_adapters(settings: FinetuneSettings, source: models.ModelSource) -> None:
    """--lora-rank and --lora-targets fit the model's encoder (checked on its structure built
    on the meta device: no memory, no weights), before any work."""
    wanted = settings.lora()
    if wanted is None:
        return
    where = str(source.path)
    if lora.base_of(source.path) is not None:
        raise BertctlError(f"{where}: is a LoRA adapter itself; train new adapters on its "
                           f"base, or fine-tune it whole (without --lora-rank)")
    arch = architectures.of_config(source.hf_config, where)
    with torch.device("meta"):
        encoder = arch.head("encoder", where)(source.config)
    lora.chosen_layers(encoder, wanted, arch.lora_targets, where)


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
    check_class_loss(settings, family)
    check_adapters(settings, source)
    train_file, dev_file = training_files(spec, train_path, dev_path)
    inputs = [source.ref, models.data_input(train_file, "train")]
    if dev_file is not None:
        inputs.append(models.data_input(dev_file, "dev"))
    weights_file = class_loss.weights_file(settings.class_weights)
    if weights_file is not None:   # its content is part of the id
        inputs.append(models.data_input(weights_file, "class-weights"))
    job = TaskJob(settings, spec, family, source, train_file, dev_file, settings.max_seq_length,
                  spec.labels, features=features)
    return training.train_to_artifact(settings, inputs, target, job)

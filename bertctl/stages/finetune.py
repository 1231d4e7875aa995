"""`bertctl finetune`: model + task data -> model artifact with a task head.

The same training loop as pretraining; only the head, the data and the metric differ. The label
list comes from the training file (or --labels) and is stored in the artifact (config.json's
id2label and bertctl_task.json), so eval never re-derives it.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from bertctl import console
from bertctl.config import FinetuneSettings
from bertctl.data.collate import pack_batch
from bertctl.errors import BertctlError
from bertctl.stages import common


class TaskData:
    """Task features as the training loop's data source; `pack_to`: rows of packed batches
    (`data.collate.pack_batch`) of at most this many tokens, or None for padded batches."""

    def __init__(self, features, pack_to: int | None = None):
        self.features = features
        self.lengths = features.lengths
        self.pack_to = pack_to

    def __len__(self) -> int:
        return len(self.features)

    def batch(self, indices: np.ndarray, epoch: int):
        batch = self.features.batch(indices, epoch)
        if self.pack_to is None:
            return batch
        return pack_batch(batch, self.pack_to, self.features.pad_id)


def _data_files(spec, train: Path, dev: Path | None) -> tuple[Path, Path | None]:
    """A file or a save_to_disk directory, or a preset's data directory holding its train and
    dev files."""
    if train.is_dir() and not common.is_saved_dataset(train):
        found = spec.split_files(train)
        if "train" not in found:
            raise BertctlError(f"{train}: no training file for task {spec.name} "
                               f"(expected {spec.files.get('train', 'train.*')})")
        dev_key = next((k for k in ("dev", "dev_matched", "validation") if k in found), None)
        return found["train"], dev or (found[dev_key] if dev_key else None)
    return train, dev


def frozen_features(config: FinetuneSettings, family, source) -> dict:
    """The head's `features` argument for --freeze-encoder (nothing otherwise)."""
    from bertctl.model.features import parse_layers

    if not config.freeze_encoder:
        return {}
    if config.head not in family.feature_heads:
        raise BertctlError(f"--freeze-encoder --head {config.head}: a '{family.name}' task's "
                           + (f"frozen-encoder heads are {', '.join(family.feature_heads)}"
                              if family.feature_heads else "head needs the encoder fine-tuned"))
    layers = parse_layers(config.features, int(source.hf_config["num_hidden_layers"]))
    return {"features": {"layers": list(layers), "combine": config.combine, "head": config.head}}


def run(config: FinetuneSettings, model_dir: str, train_path: str, out: str, force: bool = False,
        dev_path: str | None = None):
    from bertctl import tasks
    from bertctl.tasks.settings import task_spec

    spec = task_spec(config)
    family = tasks.get(spec.family)
    source = common.open_model(model_dir, "model")
    features = frozen_features(config, family, source)   # a bad --head fails before any work
    train_file, dev_file = _data_files(spec, Path(train_path),
                                       Path(dev_path) if dev_path else None)
    inputs = [source.ref, common.data_input(train_file, "train")]
    if dev_file is not None:
        inputs.append(common.data_input(dev_file, "dev"))

    def prepare(work: Path):
        import torch

        from bertctl.evaluation import evaluate_task
        from bertctl.train import distributed as dist
        from bertctl.train import TrainSettings, train

        tok, _ = source.tokenizer()
        common.check_reads_task(source, tok, config.max_seq_length)
        train_examples = family.read(spec, train_file, label_list=spec.labels,
                                     require_labels=True)
        label_list = train_examples.label_list if family.label_list else None
        dev_examples = (family.read(spec, dev_file, label_list=label_list, require_labels=True)
                        if dev_file is not None else None)
        train_features = family.encode(train_examples, tok, config.max_seq_length, training=True)
        dev_features = (family.encode(dev_examples, tok, config.max_seq_length)
                        if dev_examples is not None else None)

        torch.manual_seed(config.seed)  # the new head's initial weights are part of --seed
        model, report = source.load(family.head_class(), **family.head_kwargs(spec, label_list),
                                    **features)
        if dist.is_main():
            console.log(str(report))
            console.log(f"task {spec.name} ({spec.family}): {len(train_examples):,} training "
                        f"examples" + (f", {len(dev_examples):,} validation" if dev_examples
                                       else "")
                        + (f"; labels {', '.join(label_list)}" if label_list else ""))
            for name, stats in (("training", family.feature_stats(train_features)),
                                ("validation", family.feature_stats(dev_features)
                                 if dev_features is not None else {})):
                if stats:
                    console.log(f"{name} features: " + ", ".join(f"{k} {v}"
                                                                  for k, v in stats.items()))

        metric_key = family.main_metric(spec)
        evaluate = select = None
        if dev_features is not None:
            def evaluate(m):
                metrics, _ = evaluate_task(m, family, spec, dev_examples, dev_features,
                                           label_list, config.eval_batch_size,
                                           next(m.parameters()).device, config.precision)
                # Per-step records hold numbers; the eval stage reports the rest (a confusion
                # matrix, per-type figures).
                return {k: v for k, v in metrics.items() if not isinstance(v, (dict, list))}
            if config.keep == "best":
                select = (metric_key, "max")
        elif config.keep == "best" and dist.is_main():
            console.log("no --dev file: keeping the last weights")
        settings = TrainSettings.of(config)
        task_record = {"spec": spec.model_dump(mode="json"),
                       "label_list": list(label_list) if label_list else None,
                       "max_seq_length": config.max_seq_length}

        def fit():
            with console.training_progress(f"fine-tuning {spec.name}", config.steps) as on_log:
                pack_to = config.max_seq_length if config.pack and model.packs else None
                return train(model, TaskData(train_features, pack_to), settings, work,
                             evaluate=evaluate, select=select, on_log=on_log)

        def write(result, tmp: Path) -> dict:
            if family.calibrates and dev_features is not None:  # e.g. a no-answer threshold
                _, predictions = evaluate_task(
                    result.model, family, spec, dev_examples, dev_features, label_list,
                    config.eval_batch_size, next(result.model.parameters()).device,
                    config.precision)
                calibration = family.calibrate(predictions, dev_examples, spec)
                if calibration is not None:
                    task_record["calibration"] = calibration
            common.write_model(result.model, tmp, source.path,
                               extra_config=family.config_extras(spec, label_list),
                               task=task_record)
            chosen = result.best_metrics if select else result.eval_metrics
            return {"architecture": type(result.model).__name__, "task": spec.name,
                    "family": spec.family, "label_list": task_record["label_list"],
                    "train_examples": len(train_examples),
                    **({"train_features": family.feature_stats(train_features)}
                       if family.feature_stats(train_features) else {}),
                    "dev_examples": len(dev_examples) if dev_examples else 0,
                    "step": result.step, "epochs": round(result.epoch, 4),
                    "selected_step": result.best_step if select else result.step,
                    "selection": f"best {metric_key}" if select else "last",
                    "metrics": chosen or {}}

        return fit, write

    return common.train_to_artifact(config, inputs, out, force, prepare)

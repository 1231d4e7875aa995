"""`bertctl finetune`: model + task data -> model artifact with a task head.

The same training loop as pretraining; only the head, the data and the metric differ. The label
list comes from the training file (or --labels) and is stored in the artifact (config.json's
id2label and bertctl_task.json), so eval never re-derives it.
"""

from __future__ import annotations

from pathlib import Path

from bertctl import console
from bertctl.config import FinetuneSettings
from bertctl.errors import BertctlError
from bertctl.stages import common


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


class FinetuneJob:
    """What `common.train_to_artifact` calls, in order: `prepare` (read, encode, build the
    model), `fit` (the training loop), `write` (the model directory and its stats)."""

    def __init__(self, config: FinetuneSettings, spec, family, source, features: dict,
                 train_file: Path, dev_file: Path | None):
        self.config, self.spec, self.family, self.source = config, spec, family, source
        self.features, self.train_file, self.dev_file = features, train_file, dev_file
        self.metric_key = family.main_metric(spec)

    def prepare(self) -> None:
        import torch

        from bertctl.train import distributed as dist

        config, family, spec = self.config, self.family, self.spec
        tok, _ = self.source.tokenizer()
        common.check_reads_task(self.source, tok, config.max_seq_length)
        self.train_examples = family.read(spec, self.train_file, label_list=spec.labels,
                                          require_labels=True)
        self.label_list = self.train_examples.label_list if family.label_list else None
        self.dev_examples = (family.read(spec, self.dev_file, label_list=self.label_list,
                                         require_labels=True)
                             if self.dev_file is not None else None)
        self.train_features = family.encode(self.train_examples, tok, config.max_seq_length,
                                            training=True)
        self.dev_features = (family.encode(self.dev_examples, tok, config.max_seq_length)
                             if self.dev_examples is not None else None)
        torch.manual_seed(config.seed)  # the new head's initial weights are part of --seed
        self.model, report = self.source.load(family.head_class(),
                                              **family.head_kwargs(spec, self.label_list),
                                              **self.features)
        if dist.is_main():
            self._log_summary(str(report))
        self.select = (self.metric_key, "max") if (self.dev_features is not None
                                                   and config.keep == "best") else None
        if self.dev_features is None and config.keep == "best" and dist.is_main():
            console.log("no --dev file: keeping the last weights")
        self.task_record = {"spec": spec.model_dump(mode="json"),
                            "label_list": list(self.label_list) if self.label_list else None,
                            "max_seq_length": config.max_seq_length}

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

    def _dev_predictions(self, model):
        from bertctl.evaluation import evaluate_task

        return evaluate_task(model, self.family, self.spec, self.dev_examples, self.dev_features,
                             self.label_list, self.config.eval_batch_size,
                             next(model.parameters()).device, self.config.precision)

    def evaluate(self, model) -> dict:
        metrics, _ = self._dev_predictions(model)
        # Per-step records hold numbers; the eval stage reports the rest (a confusion matrix,
        # per-type figures).
        return {k: v for k, v in metrics.items() if not isinstance(v, (dict, list))}

    def fit(self, work: Path):
        from bertctl.data.collate import TaskData
        from bertctl.train import TrainSettings, train

        config = self.config
        data = TaskData(self.train_features, config.pack, config.max_seq_length, self.model)
        with console.training_progress(f"fine-tuning {self.spec.name}", config.steps) as on_log:
            return train(self.model, data, TrainSettings.of(config), work,
                         evaluate=self.evaluate if self.dev_features is not None else None,
                         select=self.select, on_log=on_log)

    def write(self, result, tmp: Path) -> dict:
        family, spec = self.family, self.spec
        if family.calibrates and self.dev_features is not None:  # e.g. a no-answer threshold
            _, predictions = self._dev_predictions(result.model)
            calibration = family.calibrate(predictions, self.dev_examples, spec)
            if calibration is not None:
                self.task_record["calibration"] = calibration
        common.write_model(result.model, tmp, self.source.path,
                           extra_config=family.config_extras(spec, self.label_list),
                           task=self.task_record)
        chosen = result.best_metrics if self.select else result.eval_metrics
        train_stats = family.feature_stats(self.train_features)
        return {"architecture": type(result.model).__name__, "task": spec.name,
                "family": spec.family, "label_list": self.task_record["label_list"],
                "train_examples": len(self.train_examples),
                **({"train_features": train_stats} if train_stats else {}),
                "dev_examples": len(self.dev_examples) if self.dev_examples else 0,
                "step": result.step, "epochs": round(result.epoch, 4),
                "selected_step": result.best_step if self.select else result.step,
                "selection": f"best {self.metric_key}" if self.select else "last",
                "metrics": chosen or {}}


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
    job = FinetuneJob(config, spec, family, source, features, train_file, dev_file)
    return common.train_to_artifact(config, inputs, out, force, job)

"""`bertctl finetune`: model + task data -> model artifact with a task head; and `bertctl
distill`: fine-tuned teacher + task data -> a smaller student of the same task.

The same training loop as pretraining; only the head, the data and the metric differ. The label
list comes from the training file (or --labels) and is stored in the artifact (config.json's
id2label and bertctl_task.json), so eval never re-derives it. Distillation is fine-tuning with
a teacher: the task, labels and length are the teacher's, the training file may lack labels
(the teacher's outputs are the targets), and the model trained is a student built from the
teacher (`Distillation`) inside the loss module of bertctl/train/distill.py.
"""

from __future__ import annotations

import time
from pathlib import Path

from bertctl import console
from bertctl.config import DistillSettings, FinetuneSettings
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


class Distillation:
    """The teacher and the student's plan, all checked before any work; `student` builds it
    (in `prepare`, after the up-to-date check), `wrap` puts it in the loss module."""

    def __init__(self, config: DistillSettings, teacher, family, init=None,
                 student_config: Path | None = None):
        from bertctl.model import read_config, students
        from bertctl.train import distill

        self.config, self.teacher, self.family, self.init = config, teacher, family, init
        t_config = read_config(teacher.path)
        self.plan = students.plan(t_config, layers=config.student_layers,
                                  size=config.student_size, config_file=student_config,
                                  init=read_config(init.path) if init else None,
                                  init_path=str(init.path) if init else "")
        if init is not None and init.has_tokenizer() and \
                init.tokenizer()[0].get_vocab() != teacher.tokenizer()[0].get_vocab():
            raise BertctlError(f"{init.path}: its tokenizer differs from the teacher's; "
                               f"distillation needs the teacher's tokenizer")
        if config.layer_map and not config.hidden_loss:
            raise BertctlError("--layer-map maps hidden states for --hidden-loss: give its "
                               "weight too")
        if config.hidden_loss and teacher.hf_config.get("bertctl_features"):
            raise BertctlError(f"{teacher.path}: a frozen-encoder teacher's layers were not "
                               f"fine-tuned; --hidden-loss needs a fully fine-tuned teacher")
        if config.teacher_cache == "on" and config.hidden_loss:
            raise BertctlError("--teacher-cache on keeps the teacher's outputs, not its hidden "
                               "states: --hidden-loss runs the teacher at every step")
        sizes = (self.plan.num_layers, t_config.num_hidden_layers)
        self.layer_map = [] if not config.hidden_loss else (
            distill.parse_layer_map(config.layer_map, *sizes) if config.layer_map
            else distill.default_layer_map(*sizes))

    def student(self, head_class, head_kwargs: dict):
        """(the student, its load report); also loads the teacher."""
        from bertctl.model import LoadReport
        from bertctl.model import students

        self.teacher_model = common.load_task_model(self.teacher)
        if self.init is not None and self.plan.layers is not None:
            model, _ = self.init.load(head_class, **head_kwargs)
            return students.from_layers(model, self.plan.layers, head_class, head_kwargs,
                                        source=str(self.init.path))
        if self.init is not None:
            return self.init.load(head_class, **head_kwargs)
        if self.plan.layers is not None:
            return students.from_layers(self.teacher_model, self.plan.layers, head_class,
                                        head_kwargs)
        return (head_class(self.plan.config, **head_kwargs),
                LoadReport(source=self.plan.description, missing=["(every weight)"]))

    def wrap(self, student):
        from bertctl.train.distill import Distiller

        c = self.config
        return Distiller(student, self.teacher_model, self.family.soft_targets, c.temperature,
                         c.alpha, c.hidden_loss, self.layer_map)

    def cached_outputs(self, features, work: Path) -> dict | None:
        """The teacher's outputs over the training set, computed once into the run directory,
        where the settings ask for it (see DistillSettings.teacher_cache); else None."""
        from bertctl.train import distill
        from bertctl.train import distributed as dist

        c = self.config
        if c.teacher_cache == "off" or c.alpha == 1 or c.hidden_loss:
            return None
        passes = c.epochs if c.epochs is not None else (
            c.steps * c.batch_size / len(features) if c.steps is not None else None)
        if c.teacher_cache == "auto" and passes is not None and passes <= 1:
            return None
        start = time.perf_counter()
        outputs = distill.teacher_outputs(self.teacher_model, features,
                                          self.family.soft_targets, work / "teacher-outputs",
                                          c.eval_batch_size, dist.init(c.device).device,
                                          c.precision)
        if dist.is_main():
            console.log(f"teacher outputs for {len(features):,} training examples cached in the "
                        f"run directory ({time.perf_counter() - start:.1f} s)")
        return outputs

    def stats(self, student) -> dict:
        return {"teacher": str(self.teacher.path), "teacher_id": self.teacher.ref.id,
                "student": self.plan.description, "student_layers": student.config.num_hidden_layers,
                "student_hidden_size": student.config.hidden_size,
                "student_parameters": sum(p.numel() for p in student.parameters()),
                "teacher_parameters": sum(p.numel() for p in self.teacher_model.parameters()),
                "layer_map": [list(p) for p in self.layer_map]}


def _student(model):
    """The model a distillation trains inside its loss module, or the model itself."""
    return getattr(model, "student", model)


class FinetuneJob:
    """What `common.train_to_artifact` calls, in order: `prepare` (read, encode, build the
    model), `fit` (the training loop), `write` (the model directory and its stats). With a
    `Distillation`, the model is its student, trained on the teacher's outputs."""

    def __init__(self, config: FinetuneSettings, spec, family, source, features: dict,
                 train_file: Path, dev_file: Path | None,
                 distillation: Distillation | None = None, max_seq_length: int | None = None,
                 label_list: tuple[str, ...] | None = None):
        self.config, self.spec, self.family, self.source = config, spec, family, source
        self.features, self.train_file, self.dev_file = features, train_file, dev_file
        self.distillation = distillation
        self.max_len = max_seq_length or config.max_seq_length
        self.labels = label_list if distillation else spec.labels
        self.metric_key = family.main_metric(spec)

    def prepare(self) -> None:
        import torch

        from bertctl.train import distributed as dist

        config, family, spec = self.config, self.family, self.spec
        distilling = self.distillation is not None
        # A teacher's task spec describes its own training file's layout; these may differ.
        spec_for = spec.for_file if distilling else (lambda path: spec)
        tok, _ = self.source.tokenizer()
        common.check_reads_task(self.source, tok, self.max_len)
        # A teacher labels what the file does not (distilling on unlabelled in-domain text).
        self.train_examples = family.read(spec_for(self.train_file), self.train_file,
                                          label_list=self.labels, require_labels=not distilling)
        self.label_list = self.labels if distilling else (
            self.train_examples.label_list if family.label_list else None)
        self.dev_examples = (family.read(spec_for(self.dev_file), self.dev_file,
                                         label_list=self.label_list, require_labels=True)
                             if self.dev_file is not None else None)
        self.train_features = family.encode(self.train_examples, tok, self.max_len,
                                            training=True)
        self.dev_features = (family.encode(self.dev_examples, tok, self.max_len)
                             if self.dev_examples is not None else None)
        torch.manual_seed(config.seed)  # the new head's initial weights are part of --seed
        head = (family.head_class(), family.head_kwargs(spec, self.label_list))
        if distilling:
            self.model, report = self.distillation.student(*head)
        else:
            self.model, report = self.source.load(head[0], **head[1], **self.features)
        if dist.is_main():
            self._log_summary(str(report))
        self.select = (self.metric_key, "max") if (self.dev_features is not None
                                                   and config.keep == "best") else None
        if self.dev_features is None and config.keep == "best" and dist.is_main():
            console.log("no --dev file: keeping the last weights")
        self.task_record = {"spec": spec.model_dump(mode="json"),
                            "label_list": list(self.label_list) if self.label_list else None,
                            "max_seq_length": self.max_len}
        if distilling and self.dev_features is not None:   # what the student is measured by
            self.teacher_metrics = self.evaluate(self.distillation.teacher_model)

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

        model = _student(model)
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
        from bertctl.train.loop import train
        from bertctl.train.settings import TrainSettings

        config, model, metrics, taught = self.config, self.model, None, None
        if self.distillation is not None:
            from bertctl.train.distill import step_metrics as metrics

            model = self.distillation.wrap(self.model)
            taught = self.distillation.cached_outputs(self.train_features, work)
        data = TaskData(self.train_features, config.pack, self.max_len, model, taught)
        what = "distilling" if self.distillation is not None else "fine-tuning"
        with console.training_progress(f"{what} {self.spec.name}", config.steps) as on_log:
            return train(model, data, TrainSettings.of(config), work,
                         evaluate=self.evaluate if self.dev_features is not None else None,
                         select=self.select, on_log=on_log, step_metrics=metrics)

    def write(self, result, tmp: Path) -> dict:
        family, spec, model = self.family, self.spec, _student(result.model)
        if family.calibrates and self.dev_features is not None:  # e.g. a no-answer threshold
            _, predictions = self._dev_predictions(model)
            calibration = family.calibrate(predictions, self.dev_examples, spec)
            if calibration is not None:
                self.task_record["calibration"] = calibration
        elif self.distillation is not None and (self.source.task or {}).get("calibration"):
            self.task_record["calibration"] = self.source.task["calibration"]  # the teacher's
        common.write_model(model, tmp, self.source.path,
                           extra_config=family.config_extras(spec, self.label_list),
                           task=self.task_record)
        chosen = result.best_metrics if self.select else result.eval_metrics
        train_stats = family.feature_stats(self.train_features)
        distilled = {}
        if self.distillation is not None:
            distilled = {"distillation": {**self.distillation.stats(model),
                                          "teacher_metrics": getattr(self, "teacher_metrics",
                                                                     None)}}
        return {"architecture": type(model).__name__, "task": spec.name,
                "family": spec.family, "label_list": self.task_record["label_list"],
                "train_examples": len(self.train_examples),
                **({"train_features": train_stats} if train_stats else {}),
                "dev_examples": len(self.dev_examples) if self.dev_examples else 0,
                "step": result.step, "epochs": round(result.epoch, 4),
                "selected_step": result.best_step if self.select else result.step,
                "selection": f"best {self.metric_key}" if self.select else "last",
                **({"resumed_from_step": result.resumed_from}
                   if result.resumed_from is not None else {}),
                "metrics": chosen or {}, **distilled}


def run(config: FinetuneSettings, target, model_dir: Path, train_path: Path,
        dev_path: Path | None = None):
    from bertctl import tasks
    from bertctl.tasks.settings import task_spec

    spec = task_spec(config)
    family = tasks.get(spec.family)
    source = common.open_model(model_dir, "model")
    features = frozen_features(config, family, source)   # a bad --head fails before any work
    train_file, dev_file = _data_files(spec, train_path, dev_path)
    inputs = [source.ref, common.data_input(train_file, "train")]
    if dev_file is not None:
        inputs.append(common.data_input(dev_file, "dev"))
    job = FinetuneJob(config, spec, family, source, features, train_file, dev_file)
    return common.train_to_artifact(config, inputs, target, job)


def distill(config: DistillSettings, target, teacher_dir: Path, train_path: Path,
            dev_path: Path | None = None, student_init: Path | None = None,
            student_config: Path | None = None):
    from bertctl import artifacts

    teacher = common.open_model(teacher_dir, "teacher")
    if teacher.task is None and not (config.task or config.family):
        raise BertctlError(f"{teacher.path}: has no task ({common.TASK_FILE}); distillation "
                           f"needs a fine-tuned teacher (bertctl finetune), or --task for a "
                           f"Hugging Face model with a head")
    spec, family, labels = common.model_task(config, teacher)
    if family.soft_targets is None:
        raise BertctlError(f"{teacher.path}: a '{family.name}' model's outputs are not scores a "
                           f"student can imitate")
    train_file, dev_file = _data_files(spec, train_path, dev_path)
    init = common.open_model(student_init, "student-init") if student_init else None
    distillation = Distillation(config, teacher, family, init, student_config)
    inputs = [teacher.ref, common.data_input(train_file, "train")]
    if dev_file is not None:
        inputs.append(common.data_input(dev_file, "dev"))
    if init is not None:
        inputs.append(init.ref)
    if student_config:
        inputs.append(artifacts.file_input(student_config, "student-config"))
    job = FinetuneJob(config, spec, family, teacher, {}, train_file, dev_file, distillation,
                      common.task_length(config, teacher), labels)
    return common.train_to_artifact(config, inputs, target, job)

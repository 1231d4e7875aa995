"""`bertctl distill TEACHER TRAIN --out DIR`: fine-tuned teacher + task data -> a smaller
student of the same task, trained on the teacher's outputs (the losses and the students:
bertctl/distillation.py).

Distillation is task training with a teacher (`Distillation`, the part handed to the task-training
job): the task, labels and length are the teacher's, the training file may lack labels (the
teacher's outputs are the targets), and the model the loop trains is the student inside the loss
module (`Distiller`); the artifact is the student, an ordinary fine-tuned model of the teacher's
family.
"""

from __future__ import annotations

import time
from pathlib import Path

from bertctl import console, distillation
from bertctl.contract import artifacts
from bertctl.stages.settings.distill import DistillSettings
from bertctl.errors import BertctlError, NonFiniteOutputs
from bertctl.model import LoadReport, build, read_config
from bertctl.stages.common import models, runtime, training
from bertctl.stages.common.task_training import LoopSetup, Supervision, TaskJob
from bertctl.tasks.resolve import TASK_FILE, model_task, task_length, training_files
from bertctl.train import distributed as dist


class Distillation(Supervision):
    """What a student is trained with: the teacher, and the student's plan, all checked before
    any work. Handed to the task-training job, it builds the student (in `prepare`, after the
    up-to-date check), trains it inside the loss module on the teacher's outputs (and the labels
    where the file has them), and records the teacher in the manifest."""

    verb = "distilling"
    require_labels = False   # a teacher labels what the file does not

    def __init__(self, settings: DistillSettings, teacher, family, init=None,
                 student_config: Path | None = None):
        self.settings, self.teacher, self.family, self.init = settings, teacher, family, init
        t_config = read_config(teacher.path)
        self.plan = distillation.plan(t_config, layers=settings.student_layers,
                                      size=settings.student_size, config_file=student_config,
                                      init=read_config(init.path) if init else None,
                                      init_path=str(init.path) if init else "")
        if init is not None and init.has_tokenizer() and \
                init.tokenizer()[0].get_vocab() != teacher.tokenizer()[0].get_vocab():
            raise BertctlError(f"{init.path}: its tokenizer differs from the teacher's; "
                               f"distillation needs the teacher's tokenizer")
        if settings.layer_map and not settings.hidden_loss:
            raise BertctlError("--layer-map maps hidden states for --hidden-loss: give its "
                               "weight too")
        if settings.hidden_loss and teacher.hf_config.get("bertctl_features"):
            raise BertctlError(f"{teacher.path}: a frozen-encoder teacher's layers were not "
                               f"fine-tuned; --hidden-loss needs a fully fine-tuned teacher")
        if settings.teacher_cache == "on" and settings.hidden_loss:
            raise BertctlError("--teacher-cache on keeps the teacher's outputs, not its hidden "
                               "states: --hidden-loss runs the teacher at every step")
        sizes = (self.plan.num_layers, t_config.num_hidden_layers)
        self.layer_map = [] if not settings.hidden_loss else (
            distillation.parse_layer_map(settings.layer_map, *sizes) if settings.layer_map
            else distillation.default_layer_map(*sizes))

    def spec_for(self, spec, path: Path):
        # A teacher's task spec describes its own training file's layout; these may differ.
        return spec.for_file(path)

    def check_label_range(self, outside: str | None) -> None:
        # The loss would mix the teacher's outputs on its scale with labels on theirs.
        if outside and self.settings.alpha > 0:
            raise BertctlError(f"{outside}: distillation would mix the teacher's scale with the "
                               f"labels'; rescale the labels, or learn from the teacher alone "
                               f"(--alpha 0)")

    def build_model(self, source, role: str, head_kwargs: dict, features: dict):
        """(the student, its load report); also loads the teacher."""
        self.teacher_model = models.load_task_model(self.teacher)
        if self.init is not None and self.plan.layers is not None:
            model, _ = self.init.load(role, **head_kwargs)
            return distillation.from_layers(model, self.plan.layers, role, head_kwargs,
                                            source=str(self.init.path))
        if self.init is not None:
            return self.init.load(role, **head_kwargs)
        if self.plan.layers is not None:
            return distillation.from_layers(self.teacher_model, self.plan.layers, role,
                                            head_kwargs)
        return (build(role, self.plan.config, **head_kwargs),
                LoadReport(source=self.plan.description, missing=["(every weight)"]))

    def wrap(self, student) -> distillation.Distiller:
        c = self.settings
        return distillation.Distiller(student, self.teacher_model, self.family.soft_targets,
                                      c.temperature, c.alpha, c.hidden_loss, self.layer_map,
                                      where=f"the teacher {self.teacher.path}")

    def cached_outputs(self, features, work: Path) -> dict | None:
        """The teacher's outputs over the training set, computed once into the run directory,
        where the settings ask for it (see DistillSettings.teacher_cache); else None."""
        c = self.settings
        if c.teacher_cache == "off" or c.alpha == 1 or c.hidden_loss:
            return None
        passes = c.epochs if c.epochs is not None else (
            c.steps * c.batch_size / len(features) if c.steps is not None else None)
        if c.teacher_cache == "auto" and passes is not None and passes <= 1:
            return None
        start = time.perf_counter()
        outputs = distillation.teacher_outputs(self.teacher_model, features, self.family,
                                               work / "teacher-outputs", c.eval_batch_size,
                                               dist.init(c.device).device, c.precision,
                                               where=f"the teacher {self.teacher.path}")
        if dist.is_main():
            console.log(f"teacher outputs for {len(features):,} training examples cached in the "
                        f"run directory ({time.perf_counter() - start:.1f} s)")
        return outputs

    def prepared(self, job) -> None:
        # What the student is measured by.
        try:
            self.teacher_metrics = (job.evaluate(self.teacher_model)
                                    if job.dev_features is not None else None)
        except NonFiniteOutputs as exc:
            raise exc.named(f"the teacher {self.teacher.path}") from None

    def loop_setup(self, model, features, work: Path) -> LoopSetup:
        return LoopSetup(self.wrap(model), self.cached_outputs(features, work),
                         distillation.step_metrics)

    def trained(self, model):
        return model.student if isinstance(model, distillation.Distiller) else model

    def inherited_task(self, source) -> dict:
        calibration = (source.task or {}).get("calibration")
        return {"calibration": calibration} if calibration else {}   # the teacher's

    def stats(self, student) -> dict:
        return {"distillation": {
            "teacher": str(self.teacher.path), "teacher_id": self.teacher.ref.id,
            "student": self.plan.description,
            "student_layers": student.config.num_hidden_layers,
            "student_hidden_size": student.config.hidden_size,
            "student_parameters": sum(p.numel() for p in student.parameters()),
            "teacher_parameters": sum(p.numel() for p in self.teacher_model.parameters()),
            "layer_map": [list(p) for p in self.layer_map],
            "teacher_metrics": self.teacher_metrics}}


def run(settings: DistillSettings, target: artifacts.Target, teacher_dir: Path, train_path: Path,
        dev_path: Path | None = None, student_init: Path | None = None,
        student_config: Path | None = None):
    settings = runtime.applied(settings)
    teacher = models.open_model(teacher_dir, "teacher")
    if teacher.task is None and not (settings.task or settings.family):
        raise BertctlError(f"{teacher.path}: has no task ({TASK_FILE}); distillation "
                           f"needs a fine-tuned teacher (bertctl finetune), or --task for a "
                           f"Hugging Face model with a head")
    task = model_task(settings, teacher)
    if task.family.soft_targets is None:
        raise BertctlError(f"{teacher.path}: a '{task.family.name}' model's outputs are not "
                           f"scores a student can imitate")
    train_file, dev_file = training_files(task.spec, train_path, dev_path)
    init = models.open_model(student_init, "student-init") if student_init else None
    distill = Distillation(settings, teacher, task.family, init, student_config)
    inputs = [teacher.ref, models.data_input(train_file, "train")]
    if dev_file is not None:
        inputs.append(models.data_input(dev_file, "dev"))
    if init is not None:
        inputs.append(init.ref)
    if student_config:
        inputs.append(artifacts.file_input(student_config, "student-config"))
    job = TaskJob(settings, task.spec, task.family, teacher, train_file, dev_file,
                  task_length(settings, teacher), task.label_list, by=distill)
    return training.train_to_artifact(settings, inputs, target, job)

"""Single-sentence and sentence-pair classification (SST-2, CoLA; MRPC, RTE, MNLI, ...): a class
label per example from a label list, `[CLS]` pooled into a linear classifier."""

from __future__ import annotations

from typing import Any

import numpy as np

from bertctl.errors import BertctlError
from bertctl.data import label_columns
from bertctl.tasks.registry import register
from bertctl.tasks.sequence import SequenceFamily
from bertctl.tasks.base import architecture_name, model_roles, role_name
from bertctl import metrics


def _placeholders(names: list[str]) -> bool:
    return all(n == f"LABEL_{i}" for i, n in enumerate(names))


def model_labels(model_task: dict | None, hf_config: dict[str, Any]) -> tuple[str, ...] | None:
    """The label names a model was trained with (its task file, else real id2label names)."""
    if model_task is not None and model_task.get("label_list"):
        return tuple(str(x) for x in model_task["label_list"])
    id2label = hf_config.get("id2label")
    if isinstance(id2label, dict) and id2label:
        try:
            names = [str(id2label[k]) for k in sorted(id2label, key=int)]
        except (ValueError, TypeError):
            return None
        if not _placeholders(names):
            return tuple(names)
    return None


def num_labels(hf_config: dict[str, Any]) -> int | None:
    from bertctl.model.roles import num_labels_of

    return num_labels_of(hf_config)


# How a task of each problem type and a model with it are named in messages.
_TASK_KIND = {"regression": "a regression", "single_label_classification": "a classification",
              "multi_label_classification": "a multi-label classification"}


def problem_of(hf_config: dict[str, Any]) -> tuple[str, int]:
    """A sequence classifier's problem type and output count, as transformers reads them
    (no problem_type: regression for one output, else one label per example)."""
    num = num_labels(hf_config) or 2
    problem = hf_config.get("problem_type")
    if problem not in _TASK_KIND:
        problem = "regression" if num == 1 else "single_label_classification"
    return problem, num


def _model_kind(problem: str, num: int) -> str:
    if problem == "regression":
        return "has a regression head (one output)"
    return f"is a {num}-label {'multi-label ' * (problem != 'single_label_classification')}classifier"


class SequenceClassifierHead:
    """The head rules shared by classification, label sets and regression: a sequence
    classifier whose problem type and label count fit the task."""

    head = "sequence_classification"
    problem_type = "single_label_classification"
    soft_targets = {"logits": "classes"}
    feature_heads = ("linear",)     # on the combined [CLS] vector

    def check_columns(self, spec, counts: tuple[int, ...]) -> None:
        """ValueError unless the spec names `counts` text columns and no multiple-choice ones."""
        n = len(spec.text_columns)
        if n not in counts:
            raise ValueError(f"a '{self.name}' task takes {' or '.join(map(str, counts))} text "
                             f"column{'s' if counts != (1,) else ''}, got {n}")
        if spec.context_column or spec.choice_columns or spec.choice_prefix_column:
            raise ValueError("context_column, choice_prefix_column and choice_columns are for "
                             "'multiple_choice' tasks only")

    @staticmethod
    def check_label_list(spec) -> None:
        if spec.labels is not None and (len(set(spec.labels)) != len(spec.labels)
                                        or len(spec.labels) < 2):
            raise ValueError(f"labels must be at least 2 distinct values, got {list(spec.labels)}")

    def check_head(self, hf_config, spec, label_list, where: str) -> None:
        arch = hf_config.get("architectures") or []
        roles = model_roles(arch)
        if self.head not in roles:
            hint = (" (fine-tune it first with bertctl finetune)"
                    if "multiple_choice" not in roles else "")
            raise BertctlError(f"{where}: task {spec.name} needs a {role_name(self.head)} "
                               f"model but the model is {architecture_name(arch)}{hint}")
        problem, num = problem_of(hf_config)
        if problem != self.problem_type:
            raise BertctlError(f"{where}: task {spec.name} is {_TASK_KIND[self.problem_type]} "
                               f"but the model {_model_kind(problem, num)}")
        if problem != "regression":
            for labels in (spec.labels, label_list):  # the task's own labels, then the model's
                if labels is not None and len(labels) != num:
                    raise BertctlError(f"{where}: the model is a {num}-label classifier but "
                                       f"task {spec.name} has {len(labels)} labels "
                                       f"({', '.join(labels)})")


class Classification(SequenceClassifierHead, SequenceFamily):
    default_metric = "accuracy"
    label_list = True
    class_loss = "classes"

    def __init__(self, name: str, title: str, text_columns: int):
        self.name = name
        self.title = title
        self.text_columns = text_columns

    def check_spec(self, spec) -> None:
        self.check_columns(spec, (self.text_columns,))
        self.check_label_list(spec)

    def check_metric(self, spec) -> None:
        super().check_metric(spec)
        if spec.metric == "pearson_spearman":
            raise ValueError("metric 'pearson_spearman' is for 'regression' tasks")

    def read_labels(self, values, path, column, spec, label_list, first_row=0):
        return label_columns.class_labels(values, path, column, label_list, first_row)

    def head_kwargs(self, spec, label_list) -> dict[str, Any]:
        return {"num_labels": len(label_list), "problem_type": self.problem_type}

    def training_classes(self, features) -> np.ndarray:
        return features.labels

    def resolve_labels(self, spec, model_task, hf_config, given, where):
        """Always the model's own names; --labels (or a preset's labels) only name the classes
        of a model whose config.json has placeholders."""
        own = model_labels(model_task, hf_config)
        given = tuple(label_columns.label_key(x) for x in given) if given else None
        if own is not None:
            if given is not None and given != own:
                raise BertctlError(f"--labels {list(given)} disagree with the labels the model "
                                   f"was trained with {list(own)} (read from {where})")
            return own
        if given is not None:
            return given
        if spec.labels is not None:
            return spec.labels
        return tuple(f"LABEL_{i}" for i in range(num_labels(hf_config) or 2))

    def score(self, predictions, examples, spec, label_list) -> dict[str, Any]:
        """The task's metric plus macro-F1 and the confusion matrix (rows: true label)."""

        labels = examples.labels
        result = super().score(predictions, examples, spec, label_list)
        num = len(label_list) if label_list else int(max(predictions.max(), labels.max())) + 1
        names = list(label_list) if label_list else [str(i) for i in range(num)]
        result["macro_f1"] = metrics.macro_f1(predictions, labels)
        matrix = metrics.confusion_matrix(predictions, labels, num_labels=num)
        result["confusion_matrix"] = {"labels": names, "matrix": matrix.tolist()}
        return result

    def prediction_values(self, predictions, label_list) -> list[str]:
        if not label_list:
            return super().prediction_values(predictions, label_list)
        return [label_list[int(i)] for i in np.asarray(predictions)]


SINGLE = register(Classification("single", "Single sentence", 1))
PAIR = register(Classification("pair", "Sentence pair", 2))

"""Multiple choice (SWAG): a context and N candidate continuations, one `[CLS] context [SEP]
choice [SEP]` sequence per choice, a score each, softmax over the choices; the label is the
index of the right one."""

from __future__ import annotations

from bertctl.errors import BertctlError
from bertctl.data import label_columns, tables
from bertctl.tasks.base import architecture_name, model_roles
from bertctl.tasks.registry import register
from bertctl.tasks.sequence import SequenceFamily


class MultipleChoice(SequenceFamily):
    name = "multiple_choice"
    title = "Multiple choice"
    default_metric = "accuracy"
    head = "multiple_choice"
    soft_targets = {"logits": "classes"}   # one score per choice: a softmax over them
    class_loss = "choices"

    def check_spec(self, spec) -> None:
        if spec.text_columns:
            raise ValueError("a 'multiple_choice' task takes context_column and choice_columns, "
                             "not text_columns")
        if not spec.context_column or len(spec.choice_columns) < 2:
            raise ValueError("a 'multiple_choice' task needs context_column and at least 2 "
                             "choice_columns")
        if spec.labels is not None:
            raise ValueError("a 'multiple_choice' task has no label list")

    def check_metric(self, spec) -> None:
        super().check_metric(spec)
        if spec.metric == "pearson_spearman":
            raise ValueError("metric 'pearson_spearman' is for 'regression' tasks")

    def check_head(self, hf_config, spec, label_list, where: str) -> None:
        arch = hf_config.get("architectures") or []
        if self.head not in model_roles(arch):
            raise BertctlError(f"{where}: task {spec.name} is multiple choice but the model is "
                               f"{architecture_name(arch)}, not a multiple choice model")

    def read_texts(self, spec, table, path, first_row=0):
        """Sentence A is the context; each choice is the prefix column (SWAG's sent2) and the
        choice's ending."""
        tables.require_columns(table, [spec.context_column, *spec.choice_columns]
                              + ([spec.choice_prefix_column] if spec.choice_prefix_column
                                 else []), path)
        context = tables.text_column(table, spec.context_column, path, first_row=first_row)
        prefix = (tables.text_column(table, spec.choice_prefix_column, path, allow_empty=True,
                                    first_row=first_row) if spec.choice_prefix_column else None)
        endings = [tables.text_column(table, c, path, first_row=first_row)
                   for c in spec.choice_columns]
        if prefix is None:
            choices = [list(row) for row in zip(*endings)]
        else:
            choices = [[f"{p} {e}".strip() for e in row] for p, *row in zip(prefix, *endings)]
        return context, None, choices

    def read_labels(self, values, path, column, spec, label_list, first_row=0):
        return label_columns.choice_labels(values, path, column, spec.num_choices, first_row), None


MULTIPLE_CHOICE = register(MultipleChoice())

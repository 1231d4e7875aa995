"""Span question answering (SQuAD v1.1 and v2.0): reading, windows, post-processing, metrics.

    examples = read_span_examples(path, version_2=True)                     # reader
    windows = encode_windows(examples, tokenizer, max_seq_length=384, doc_stride=128,
                             max_query_length=64, training=True)             # windows
    batch = windows.batch(indices)                           # model inputs (+ positions)
    result = postprocess(examples, windows, start_logits, end_logits,
                         n_best=20, max_answer_length=30, null_threshold=t)  # postprocess
    gold = examples.gold_answers()
    metrics = squad_v2_metrics(gold, result.predictions, result.null_odds)  # metrics
    threshold, f1 = best_null_threshold(gold, result.best_spans, result.null_odds)
    write_span_outputs(directory, result)                                   # outputs
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from bertctl.tasks.base import Family, check_options
from bertctl.tasks.registry import register
from bertctl.tasks.span.reader import SpanColumns, read_span_examples
from bertctl.tasks.span.metrics import squad_v1_metrics, squad_v2_metrics
from bertctl.tasks.span.metrics import best_null_threshold


class SpanOptions(BaseModel):
    """The span family's own settings (a task spec's `options`; flags of the same names)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    version_2_with_negative: bool = Field(False, description="Questions may have no answer "
                                          "(SQuAD 2.0; the squad_v2 preset sets it).")
    doc_stride: int = Field(128, ge=1, description="Tokens shared by consecutive windows of a "
                            "long passage (default 128).")
    max_query_length: int = Field(64, ge=1, description="Question tokens kept (default 64).")
    n_best: int = Field(20, ge=1, description="Candidate answers kept per question "
                        "(default 20).")
    max_answer_length: int = Field(30, ge=1, description="The longest answer in tokens "
                                   "(default 30).")
    null_threshold: float | None = Field(None, description="SQuAD 2.0: predict no answer when "
                                         "the null score beats the best span by more than "
                                         "this; unset: the threshold tuned on the dev set "
                                         "during finetune (else 0).",
                                         json_schema_extra={"stages": ("eval",)})
    question_column: str = Field("question", description="Flat files: the question column "
                                 "(default question).")
    id_column: str = Field("id", description="Flat files: the question id column (default id).")
    answers_column: str = Field("answers", description="Flat files: the answers column, "
                                "{text: [...], answer_start: [...]} (default answers).")


def options(spec) -> SpanOptions:
    return SpanOptions(**spec.options)


class _TrainingWindows:
    """The windows a training run steps over: those whose answer could be aligned."""

    def __init__(self, windows):
        self.windows = windows
        self.rows = windows.train_indices()
        self.lengths = windows.lengths[self.rows]
        self.stats = windows.stats

    def __len__(self) -> int:
        return len(self.rows)

    def batch(self, indices, epoch: int = 0):
        return self.windows.batch(self.rows[np.asarray(indices, dtype=np.int64)])


class Span(Family):
    """SQuAD v1.1 / v2.0: a question and a passage, the answer a span of the passage (or, with
    version_2_with_negative, none). Windows over long passages; answers from the best span over
    all of a question's windows; EM and F1 as the official scripts compute them."""

    name = "span"
    title = "Span QA"
    options_model = SpanOptions
    default_metric = "squad"
    head = "question_answering"
    soft_targets = {"start_logits": "positions", "end_logits": "positions"}
    targets = ("start_positions", "end_positions")
    default_max_seq_length = 384
    metric_in_percent = True   # the official SQuAD script's exact and F1

    def check_spec(self, spec) -> None:
        if spec.text_columns or spec.choice_columns or spec.choice_prefix_column:
            raise ValueError("a 'span' task takes context_column, question_column, id_column "
                             "and answers_column, not text or choice columns")
        if spec.labels is not None:
            raise ValueError("a 'span' task has no label list")
        check_options(SpanOptions, spec)

    def check_metric(self, spec) -> None:
        if spec.metric != "squad":
            raise ValueError("a 'span' task is scored with metric 'squad' (exact match and F1)")

    def read(self, spec, path, label_list=None, require_labels=False):
        o = options(spec)
        columns = SpanColumns(id=o.id_column, context=spec.context_column or "context",
                              question=o.question_column, answers=o.answers_column)
        examples = read_span_examples(path, o.version_2_with_negative, columns)
        examples.spec = spec
        return examples

    def encode(self, examples, tokenizer, max_seq_length: int, training: bool = False):
        from bertctl.tasks.span.windows import encode_windows

        o = options(examples.spec)
        windows = encode_windows(examples, tokenizer, max_seq_length=max_seq_length,
                                 doc_stride=o.doc_stride, max_query_length=o.max_query_length,
                                 training=training)
        return _TrainingWindows(windows) if training else windows

    def feature_stats(self, features) -> dict[str, Any]:
        return features.stats.as_dict()

    def main_metric(self, spec) -> str:
        # v2.0: the F1 at the best no-answer threshold, which finetune then tunes and stores
        return "best_f1" if options(spec).version_2_with_negative else "f1"

    def predictions(self, outputs, features, examples, spec, calibration=None):
        from bertctl.tasks.span.postprocess import postprocess

        o = options(spec)
        threshold = o.null_threshold
        if threshold is None:
            threshold = float((calibration or {}).get("null_threshold", 0.0))
        for name in ("start_logits", "end_logits"):
            if name not in outputs:
                raise ValueError(f"the model returned no per-window {name!r}")
        return postprocess(examples, features, outputs["start_logits"], outputs["end_logits"],
                           n_best=o.n_best, max_answer_length=o.max_answer_length,
                           version_2=o.version_2_with_negative, null_threshold=threshold)

    def score(self, predictions, examples, spec, label_list) -> dict[str, Any]:
        gold = examples.gold_answers()
        if options(spec).version_2_with_negative:
            return squad_v2_metrics(gold, predictions.predictions, predictions.null_odds)
        return squad_v1_metrics(gold, predictions.predictions)

    def write_predictions(self, directory: Path, predictions, examples, spec,
                          label_list, start: int = 0) -> list[str]:
        from bertctl.tasks.span.outputs import write_span_outputs

        return write_span_outputs(directory, predictions)

    def calibrate(self, predictions, examples, spec) -> dict[str, Any] | None:
        """v2.0: the null-odds threshold with the best dev F1, used by eval unless
        --null-threshold is given."""

        if not options(spec).version_2_with_negative:
            return None
        threshold, f1 = best_null_threshold(examples.gold_answers(), predictions.best_spans,
                                            predictions.null_odds)
        return {"null_threshold": threshold, "dev_f1_at_threshold": f1}


SPAN = register(Span())

"""Token tagging (the paper's fourth fine-tuning family): a label for every word, CoNLL-2003 NER.

- `reader`: CoNLL column files and tables (JSON lines, parquet, save_to_disk) -> `TaggedExamples`.
- `schemes`: IOB1 / IOB2 / BIOES detection, validation, conversion, and conlleval's chunk rules.
- `metrics`: conlleval's figures (entity precision / recall / F1 overall and per type, accuracy).
- `windows`: words -> word pieces, first-piece labels, overlapping windows, optional document
  context -> `TaggingFeatures` and model batches.
- `predict`: per-token logits -> one tag per word; predictions.txt in conlleval's input format.

The family object at the end of this module (`Tagging`, registered as "tagging", preset
`conll2003`) is what `finetune` and `eval` call; underneath, the building blocks run like this
(the model is trained in one scheme, IOB2; each file keeps its own):
    train = read_tagged(path)                                   # or tables, columns by name
    scheme = check_scheme(train, tag_scheme)                    # None: detected; log .describe()
    tags = convert(train.tags, train.offsets, "iob2")
    types = entity_types(tags)
    labels = label_list(types, "iob2")                          # the model's id2label
    features = encode_tagged(train, tokenizer, max_seq_length, doc_stride, document_context,
                             word_labels=label_ids(tags, labels))
    batch = make_batch(features, indices)                       # the token classifier(**batch)

    dev = read_tagged(dev_path); dev_scheme = check_scheme(dev, tag_scheme)
    check_known_types(dev, types)
    collector = WordPredictions(dev_features)                   # add(indices, logits) per batch
    predicted = predicted_tags(collector.result(), labels, dev.offsets, dev_scheme.scheme)
    write_predictions(out / "predictions.txt", dev, predicted)
    metrics = score(dev.tags, predicted, dev.offsets)           # = conlleval < predictions.txt
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from bertctl.errors import BertctlError
from bertctl.tasks.base import IMITATED, Family, check_options
from bertctl.tasks.registry import register
from bertctl.tasks.tagging.reader import is_table, read_tagged
from bertctl.tasks.tagging.schemes import (check_known_types, check_scheme, convert,
                                           entity_types, invalid_tags)
from bertctl.tasks.tagging.schemes import label_ids
from bertctl.tasks.tagging.schemes import label_list as make_label_list
from bertctl.tasks.classification import model_labels
from bertctl.tasks.base import logits_of
from bertctl.tasks.tagging.metrics import score

# The model is always trained on IOB2 labels: one consistent scheme whatever the files use.
TRAINING_SCHEME = "iob2"


class TaggingOptions(BaseModel):
    """The tagging family's own settings (a task spec's `options`; flags of the same names)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    # Column files: a field index (or a name from the spec's column_names); tables: a column
    # name or index.
    token_column: str | None = Field(None, description="The token column, an index (column "
                                     "files; default the first) or a name (tables; default "
                                     "tokens).")
    tag_column: str | None = Field(None, description="The tag column, an index (column files; "
                                   "default the last) or a name (tables; default ner_tags).")
    tag_scheme: Literal["iob1", "iob2", "bioes"] | None = Field(
        None, description="The files' tag scheme; unset: detected per file (logged). The model "
        "trains on IOB2; predictions are written in each file's scheme.")
    doc_stride: int | None = Field(None, ge=0, description="Word pieces shared by consecutive "
                                   "windows of a sentence longer than one window (default half "
                                   "the window).")
    document_context: bool = Field(False, description="Fill each window with the sentence's "
                                   "neighbours in its document (the paper's CoNLL setting); "
                                   "only the sentence is predicted.")


def options(spec) -> TaggingOptions:
    return TaggingOptions(**spec.options)


def _column(value: str | None, table: bool):
    """A digit string is an index for tables too (column files take either form)."""
    if value is not None and table and value.lstrip("-").isdigit():
        return int(value)
    return value


def window_step(max_seq_length: int, overlap: int | None) -> int:
    """The step between window starts (what `encode_tagged` takes) for an overlap in pieces."""
    budget = max_seq_length - 2
    overlap = budget // 2 if overlap is None else overlap
    if not 0 <= overlap < budget:
        raise BertctlError(f"--doc-stride {overlap}: the pieces consecutive windows share must "
                           f"be below max_seq_length - 2 ({budget})")
    return budget - overlap


class Tagging(Family):
    """Token tagging (CoNLL-2003 NER): a label per word, on its first word piece; entity
    precision, recall and F1 exactly as conlleval computes them."""

    name = "tagging"
    title = "Tagging"
    options_model = TaggingOptions
    default_metric = "conlleval"
    label_list = True
    head = "token_classification"
    soft_targets = {"logits": "tokens"}
    marks = (IMITATED,)
    metric_in_percent = True   # conlleval's precision, recall and F1
    feature_heads = ("linear", "bilstm")   # bilstm: the paper's feature-based NER head
    class_loss = "classes"

    def check_spec(self, spec) -> None:
        if spec.text_columns or spec.choice_columns or spec.context_column \
                or spec.choice_prefix_column:
            raise ValueError("a 'tagging' task takes token_column and tag_column, not text, "
                             "context or choice columns")
        check_options(TaggingOptions, spec)

    def check_metric(self, spec) -> None:
        if spec.metric != "conlleval":
            raise ValueError("a 'tagging' task is scored with metric 'conlleval' (entity "
                             "precision, recall and F1)")

    def main_metric(self, spec) -> str:
        return "f1"

    # -- data

    def read(self, spec, path, label_list=None, require_labels=False):
        """A file's sentences, its tag scheme (given or detected), and the model's labels:
        `label_list` when given (a model's, or a training run's --labels), else O and the IOB2
        tags of the file's entity types. Every tag must map onto the labels."""

        o = options(spec)
        table = is_table(path)
        examples = read_tagged(path, _column(o.token_column, table), _column(o.tag_column, table),
                               column_names=None if table else spec.column_names,
                               labels=spec.labels if table else None,
                               untagged_ok=not require_labels)
        detection = check_scheme(examples, o.tag_scheme)
        examples.scheme = detection.scheme
        examples.spec = spec
        examples.scheme_note = detection.describe() + (" (given)" if o.tag_scheme else
                                                       " (detected)")
        if label_list is None:
            types = entity_types(examples.tags)
            if not types:
                raise BertctlError(f"{path}: every tag is O: no entity to learn")
            examples.label_list = make_label_list(types, TRAINING_SCHEME)
            return examples
        label_list = tuple(str(x) for x in label_list)
        bad = invalid_tags(np.asarray(label_list, dtype=str))
        if "O" not in label_list or bad.size:
            what = repr(label_list[int(bad[0])]) if bad.size else "no 'O'"
            raise BertctlError(f"{path}: the label list {list(label_list)} is not a tagging "
                               f"label list ({what})")
        check_known_types(examples, entity_types(np.asarray(label_list, dtype=str)))
        needed = set(np.unique(convert(examples.tags, examples.offsets, TRAINING_SCHEME)).tolist())
        missing = sorted(needed - set(label_list))
        if missing:
            raise BertctlError(f"{path}: the label list lacks {', '.join(missing)} (labels are "
                               f"{TRAINING_SCHEME.upper()} tags)")
        examples.label_list = label_list
        return examples

    def encode(self, examples, tokenizer, max_seq_length: int, training: bool = False):
        from bertctl.tasks.tagging.windows import encode_tagged

        o = options(examples.spec)
        labels = None
        if training and examples.labelled:
            tags = convert(examples.tags, examples.offsets, TRAINING_SCHEME)
            labels = label_ids(tags, examples.label_list)
        features = encode_tagged(examples, tokenizer, max_seq_length,
                                 window_step(max_seq_length, o.doc_stride),
                                 document_context=o.document_context, word_labels=labels)
        features.imitated = training and not examples.labelled
        features.stats["tag_scheme"] = examples.scheme_note
        return features

    def feature_stats(self, features) -> dict[str, Any]:
        return dict(features.stats)

    def training_classes(self, features):
        return features.word_labels

    # -- the head

    def head_kwargs(self, spec, label_list) -> dict[str, Any]:
        return {"num_labels": len(label_list)}

    def resolve_labels(self, spec, model_task, hf_config, given, where):
        """The model's own label names; a tagging model without them cannot be read."""

        own = model_labels(model_task, hf_config)
        if own is None:
            raise BertctlError(f"{where}: the model's config.json names no tag labels "
                               "(id2label), so its outputs cannot be read as tags")
        return own

    # -- predictions

    def predictions(self, outputs, features, examples, spec, calibration=None) -> np.ndarray:
        """One tag per word, in the file's own scheme."""
        from bertctl.tasks.tagging.predict import WordPredictions, predicted_tags

        collector = WordPredictions(features)
        logits = logits_of(outputs)
        collector.add(np.arange(len(features)), logits)
        return predicted_tags(collector.result(), examples.label_list, examples.offsets,
                              examples.scheme)

    def score(self, predictions, examples, spec, label_list) -> dict[str, Any]:
        return score(examples.tags, predictions, examples.offsets)

    def write_predictions(self, directory: Path, predictions, examples, spec,
                          label_list, start: int = 0) -> list[str]:
        from bertctl.tasks.tagging.predict import write_predictions

        write_predictions(Path(directory) / "predictions.txt", examples, predictions)
        return ["predictions.txt"]


TAGGING = register(Tagging())

"""What a task family is: the one object the stages ask about everything family-specific.

A family turns a task's files into examples, examples into features (one or several sequences,
"windows", per example), says which head a model needs and whether a checkpoint's head can
answer the task, turns the model's outputs back into one prediction per example, scores them,
and writes them. `finetune` and `eval` call these methods and never branch on a family's name:
adding a family is adding a module that defines a subclass and registers an instance.

Features are any object with `__len__`, a per-feature `lengths` array (for length-sorted
prediction and optional length-grouped training batches), and `batch(indices, epoch=0)` giving
the model's keyword inputs as tensors (with the training targets when the features were encoded
with `training=True` from labelled examples). Examples are any object with `labelled` and
`__len__`. Model outputs reach `predictions` as a dict of per-feature numpy arrays, in feature
order (`evaluation.predict`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar, Protocol, runtime_checkable

import numpy as np

from bertctl.errors import BertctlError
from bertctl.model import architectures
from bertctl.settings import DEFAULT_LENGTH
from pydantic import ValidationError
from bertctl.metrics import main_metric


# A per-token mark: 1 at the tokens a tagging head is read at (each word's first piece), where a
# distilled student imitates its teacher when the words carry no tags to say so.
IMITATED = "imitated"


class Family:
    name: ClassVar[str]
    # How --help and the docs name the family (its flags' panel: "Span QA (family span)").
    title: ClassVar[str]
    # The family's own options: a pydantic model whose fields (type, checks, help text) become
    # the finetune and eval flags of the same names (stages/settings/assembled.py) and the keys of a task
    # spec's `options`, which `check_spec` validates with it. None: the family has none.
    options_model: ClassVar[type | None] = None
    default_metric: ClassVar[str]
    # The label column of a task given by its family and columns alone.
    default_label_column: ClassVar[str | None] = "label"
    # Whether labels are classes named by a label list that is stored with the model
    # (config.json's id2label) and read back by eval.
    label_list: ClassVar[bool] = False
    # The role of the model it fine-tunes (bertctl.model.architectures.ROLES); each
    # architecture has its class for it (config.json's "architectures" names that class).
    head: ClassVar[str]
    # Whether the family's metrics are percentages (SQuAD's 0-100) rather than shares (0-1).
    metric_in_percent: ClassVar[bool] = False
    # max_seq_length when the user gives none (span QA: the paper's 384).
    default_max_seq_length: ClassVar[int] = DEFAULT_LENGTH
    # The heads this family can train on a frozen encoder (finetune --freeze-encoder --head);
    # none: its head needs the whole encoder fine-tuned.
    feature_heads: ClassVar[tuple[str, ...]] = ()
    # What a student imitates (`bertctl distill`): each score output of the head and how it is
    # compared (bertctl/distillation.py): "classes" a softmax over the last axis per row, "tokens" the
    # same per real token, "positions" a softmax over the sequence's real tokens, "score" a
    # number (squared error). None: the family's models cannot be distilled.
    soft_targets: ClassVar[dict[str, str] | None] = None
    # Whether the model directory's tokenizer records the training length as its
    # model_max_length (a reranker's: sentence-transformers' CrossEncoder truncates there).
    records_length: ClassVar[bool] = False
    # The batch keys of its features that are training targets, not model inputs.
    targets: ClassVar[tuple[str, ...]] = ("labels",)
    # Per-token values its batches may carry that are neither inputs nor targets (tagging's
    # mark of the tokens a student imitates on untagged words); moved with their tokens when
    # a batch is packed, left out when a model only predicts.
    marks: ClassVar[tuple[str, ...]] = ()
    # Whether its loss is a cross-entropy over classes that `finetune --class-weights` and
    # `--label-smoothing` may weigh and smooth (tasks/class_loss.py): "classes" both,
    # "choices" smoothing only (a choice is no class), None neither.
    class_loss: ClassVar[str | None] = None

    def inputs(self, batch: dict) -> dict:
        """A batch of this family's features as the model's inputs alone (inference)."""
        dropped = (*self.targets, *self.marks)
        return {k: v for k, v in batch.items() if k not in dropped}

    # -- the spec

    def check_spec(self, spec) -> None:
        """ValueError for a spec this family cannot read (columns, labels)."""

    def check_metric(self, spec) -> None:
        """ValueError for a metric that does not score this family."""

    # -- data

    def read(self, spec, path: str | Path, label_list: tuple[str, ...] | None = None,
             require_labels: bool = False):
        raise NotImplementedError

    def read_chunks(self, spec, path: str | Path, label_list: tuple[str, ...] | None = None,
                    require_labels: bool = False, rows: int | None = 10_000):
        """The file's examples in consecutive parts of at most `rows` (what `eval` predicts and
        writes one at a time). A family that cannot part its files gives them whole."""
        yield self.read(spec, path, label_list=label_list, require_labels=require_labels)

    def encode(self, examples, tokenizer, max_seq_length: int, training: bool = False):
        raise NotImplementedError

    def check_training(self, spec, examples, settings, dev=None) -> list[str]:
        """BertctlError for training settings (batch size, loss) that the training examples
        (and the dev examples, when given) cannot be trained or selected with, checked before
        any model is built; returns warnings naming what in the data the loss cannot learn
        from."""
        return []

    def training_module(self, model, spec):
        """What the training loop trains: the model, whose forward gives the loss, or a loss
        module around it (at `.model`) where the family's loss is the job's choice, not the
        model's (a reranker's ranking loss over a query's candidates)."""
        return model

    def training_classes(self, features):
        """A "classes" family's label index of each training unit (an example, a word): what
        balanced class weights count."""
        raise NotImplementedError

    def feature_stats(self, features) -> dict[str, Any]:
        """Facts about the encoding for the log and the manifest (span QA: windows per
        question, answers that could not be aligned)."""
        return {}

    # -- the head

    def head_kwargs(self, spec, label_list: tuple[str, ...] | None) -> dict[str, Any]:
        return {}

    def config_extras(self, spec, label_list: tuple[str, ...] | None) -> dict[str, Any]:
        """config.json keys that carry the real label names, as transformers expects them."""
        if not label_list:
            return {}
        return {"id2label": {str(i): name for i, name in enumerate(label_list)},
                "label2id": {name: i for i, name in enumerate(label_list)}}

    def check_head(self, hf_config: dict[str, Any], spec, label_list, where: str) -> None:
        """BertctlError unless a checkpoint with this config.json can answer `spec`."""
        arch = hf_config.get("architectures") or []
        if self.head not in model_roles(arch):
            hint = " (fine-tune it first with bertctl finetune)" if not arch else ""
            raise BertctlError(f"{where}: task {spec.name} needs a {role_name(self.head)} model "
                               f"but the model is {architecture_name(arch)}{hint}")

    def for_model(self, spec, hf_config: dict[str, Any]):
        """The spec as the model with this config.json reads its files: settings the flags left
        unset that the model's own files give (retrieval's prompts)."""
        return spec

    def resolve_labels(self, spec, model_task: dict | None, hf_config: dict[str, Any],
                       given: list[str] | None, where: str) -> tuple[str, ...] | None:
        """The label names to read an eval file with (None for families without a list)."""
        return None

    # -- predictions

    def predictions(self, outputs: dict[str, np.ndarray], features, examples, spec,
                    calibration: dict | None = None):
        raise NotImplementedError

    def results(self, predictions, examples, spec):
        """What scoring, reranking and the result files read, made once from the joined
        predictions (retrieval: the search's run over every document); here the predictions
        themselves. Its return is what `score`, `candidates` and `write_results` get as
        `predictions`."""
        return predictions

    def score(self, predictions, examples, spec, label_list) -> dict[str, Any]:
        raise NotImplementedError

    def write_predictions(self, directory: Path, predictions, examples, spec,
                          label_list, start: int = 0) -> list[str]:
        """Write the prediction files into `directory`; returns their names. `start` > 0: the
        part of `read_chunks` that begins at that example, added to what is written."""
        raise NotImplementedError

    def keep(self, predictions, examples) -> tuple[Any, Any]:
        """What `join` needs of one part's predictions and examples (all of them, here)."""
        return predictions, examples

    def join(self, parts: list) -> tuple[Any, Any]:
        """The `keep` of every part of `read_chunks` as one `(predictions, examples)` pair for
        `score`."""
        if len(parts) != 1:
            raise ValueError(f"the {self.name} family reads its files whole")
        return parts[0]

    def main_metric(self, spec) -> str:
        return main_metric(spec.metric)


# What some families do, beyond what every family does: each a protocol a family implements
# by defining its members, which a stage asks for with isinstance (a family without it is
# simply not asked).

@runtime_checkable
class RecognisesData(Protocol):
    def recognises(self, path: Path) -> bool:
        """Whether a data path's own layout says it is this family's (a BEIR directory is a
        search's), so a model without a task evaluates it without --task."""


@runtime_checkable
class NumericLabels(Protocol):
    def label_range(self, examples) -> list[float] | None:
        """The span of a labelled file's numeric targets (regression), recorded with the model
        so a later file on another scale is noticed."""


@runtime_checkable
class NotesHead(Protocol):
    def head_note(self, hf_config: dict[str, Any], spec, where: str) -> str | None:
        """A line to log about how the model's head is read for the task (a default taken in
        place of a setting the model lacks); None: nothing to say."""


@runtime_checkable
class Calibrates(Protocol):
    def calibrate(self, predictions, examples, spec) -> dict[str, Any] | None:
        """State tuned on the dev set during finetune (finetune predicts it once more) and
        stored with the model (span QA's no-answer threshold); None: none."""


@runtime_checkable
class Ranks(Protocol):
    """A family whose results are rankings: written whole once scored, and reordered by the
    models of the family `reranked_by` (eval --rerank)."""

    reranked_by: str

    def write_results(self, directory: Path, predictions, examples, spec) -> list[str]:
        """Files written after scoring, from the joined predictions (retrieval's run file,
        which needs every query and document); returns their names."""

    def check_rerank(self, spec, data: Path, depth: int) -> None:
        """BertctlError, before any work, unless `depth` of each query's results on `data`
        can be reranked."""

    def candidates(self, predictions, examples, spec, data: Path, depth: int):
        """What a reranker reorders: a `Candidates` of the first `depth` results of each
        query, with their texts."""


def check_options(options_model, spec) -> None:
    """A family's options (a spec's `options` dict) checked by its pydantic model: ValueError
    naming the first bad key, as the spec's own validation reports it."""

    try:
        options_model(**spec.options)
    except ValidationError as exc:
        err = exc.errors()[0]
        raise ValueError(f"{'.'.join(map(str, err['loc']))}: {err['msg']}") from None


def architecture_name(arch: list[str]) -> str:
    return "/".join(arch) if arch else "a bare encoder (no architectures in config.json)"


def model_roles(arch: list[str]) -> set[str]:
    """The roles (model.architectures.ROLES) of the classes config.json's `architectures`
    names, of any architecture."""
    return architectures.roles_of(arch)


def role_name(role: str) -> str:
    return role.replace("_", " ")


def logits_of(outputs: dict[str, np.ndarray], model_name: str = "the model") -> np.ndarray:
    if "logits" not in outputs:
        raise ValueError(f"{model_name} returned no per-example 'logits'")
    return outputs["logits"]

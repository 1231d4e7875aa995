"""Reranking: a cross-encoder, which reads a query and a document together (`[CLS] query [SEP]
document [SEP]`) and scores how well the document answers the query: one logit, its sigmoid the
score, as sentence-transformers' `CrossEncoder.predict` gives it (the model directory is a
CrossEncoder: a sequence classifier with one output whose config.json names the sigmoid).

Files are the retrieval family's pairs tables: a query, its positive and its negatives
(`bertctl mine` writes them; unnamed columns: query, positive, negative*). Each row is a group
of candidates, the positive first, trained listwise (softmax cross-entropy over the group) or
pointwise (binary cross-entropy per candidate): loss.py. A row's candidates are ranked by score
and scored as trec_eval scores a run (nDCG@10, MRR@10, MAP of its one relevant candidate), as
sentence-transformers' CrossEncoderRerankingEvaluator does without a first stage. A file of
(query, document) pairs alone is scored, not evaluated. A search's first stage is reranked by
`eval FIRST_STAGE BEIR_DIR --rerank RERANKER`.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from bertctl.errors import BertctlError
from bertctl.model import sentence_layout
from bertctl.tasks.base import architecture_name, check_options, logits_of, model_roles
from bertctl.tasks.registry import register
from bertctl.tasks.retrieval import reader
from bertctl.search import ranking
from bertctl.tasks.sequence import SequenceFamily, TaskExamples, encode_examples

# config.json's note to sentence-transformers: CrossEncoder.predict applies this to the logit.
SIGMOID = {"sentence_transformers": {"activation_fn": "torch.nn.modules.activation.Sigmoid"}}
# The activations a CrossEncoder may have saved (config.json's sentence_transformers
# activation_fn, or the older sbert_ce_default_activation_function the ms-marco cross-encoders
# carry), as bertctl computes them; none saved is CrossEncoder's default for one output.
ACTIVATIONS = {"torch.nn.modules.activation.Sigmoid": "sigmoid",
               "torch.nn.modules.linear.Identity": "identity",
               "torch.nn.modules.activation.Tanh": "tanh"}


class RerankingOptions(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    ranking_loss: Literal["listwise", "pointwise"] = Field(
        "listwise", description="listwise: softmax cross-entropy over a row's positive and "
        "negatives; pointwise: binary cross-entropy on each (1 for the positive, 0 for each "
        "negative).")
    activation: Literal["sigmoid", "identity", "tanh"] | None = Field(
        None, description="How a logit becomes a score, as CrossEncoder.predict applies the "
        "activation it saved. Unset: the model's own (config.json), else sigmoid.",
        # No stage's flag: what the model saved is read (for_model), and a stage's settings
        # record every option flag, which would change every task artifact's id.
        json_schema_extra={"stages": ()})


def sigmoid(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, np.float64)
    return (0.5 * (1.0 + np.tanh(0.5 * x))).astype(np.float32)   # no overflow at any logit


SCORES = {"sigmoid": sigmoid, "identity": lambda x: np.asarray(x, np.float32),
          "tanh": lambda x: np.tanh(np.asarray(x, np.float64)).astype(np.float32)}


def activation_of(hf_config: dict[str, Any]) -> str:
    """The activation a CrossEncoder saved (ACTIVATIONS; read_config_dict finds it), else
    sigmoid; another one refused."""
    named = (hf_config.get(sentence_layout.CROSS_KEY) or {}).get("activation_fn")
    if named is None:
        return "sigmoid"
    if named not in ACTIVATIONS:
        raise BertctlError(f"config.json: the cross-encoder's activation {named!r} is not one "
                           f"bertctl computes ({', '.join(sorted(ACTIVATIONS))})")
    return ACTIVATIONS[named]


class Reranking(SequenceFamily):
    name = "reranking"
    title = "Reranking"
    options_model = RerankingOptions
    default_metric = "ndcg@10"
    default_label_column = None
    head = "sequence_classification"
    records_length = True

    def check_spec(self, spec) -> None:
        check_options(RerankingOptions, spec)
        if spec.context_column or spec.choice_columns or spec.choice_prefix_column:
            raise ValueError("a 'reranking' task reads text columns: the query, its positive "
                             "and its negatives")
        if spec.label_column is not None:
            raise ValueError("a 'reranking' task's first candidate is the relevant one; it "
                             "has no label column")
        if len(spec.text_columns) == 1 or len(spec.text_columns) > 65:
            raise ValueError("a 'reranking' task takes a query column and 1 to 64 candidate "
                             "columns (the positive first)")

    def check_metric(self, spec) -> None:
        if spec.metric != "ndcg@10":
            raise ValueError(f"a reranking task is scored by ndcg@10, not '{spec.metric}'")

    def main_metric(self, spec) -> str:
        return "ndcg@10"

    # -- data

    def read_chunks(self, spec, path, label_list=None, require_labels=False,
                    rows: int | None = 10_000):
        path = Path(path)
        if path.is_dir() or path.suffix == ".txt":
            raise BertctlError(f"{path}: a reranker scores (query, candidates) rows of a table; "
                               f"a search is reranked by bertctl eval FIRST_STAGE {path} "
                               f"--rerank RERANKER")
        for part in reader.read_table_chunks(spec, path, rows):
            g = len(part.texts[0]) - 1
            if require_labels and g < 2:
                raise BertctlError(f"{path}: a reranker learns a query's positive against its "
                                   f"negatives, and the rows have none: add negative columns "
                                   f"(bertctl mine writes them)")
            yield TaskExamples(spec=spec, path=str(path), text_a=[r[0] for r in part.texts],
                               text_b=None, choices=[r[1:] for r in part.texts],
                               labels=np.zeros(len(part.texts), np.int64) if g >= 2 else None,
                               label_list=None)

    def read(self, spec, path, label_list=None, require_labels=False) -> TaskExamples:
        return next(iter(self.read_chunks(spec, path, require_labels=require_labels,
                                          rows=None)))

    def encode(self, examples, tokenizer, max_seq_length: int, training: bool = False):
        """One `[CLS] query [SEP] candidate [SEP]` sequence per candidate, truncated longest
        first (the query too, as CrossEncoder truncates a pair)."""
        return encode_examples(examples, tokenizer, max_seq_length)

    def check_training(self, spec, examples, settings, dev=None) -> list[str]:
        same = sum(c[0] in c[1:] for c in examples.choices)
        if same:
            return [f"{examples.path}: {same:,} of {len(examples):,} rows have a negative equal "
                    f"to their positive: the loss pushes the positive below itself there"]
        return []

    def training_module(self, model, spec):
        from bertctl.tasks.reranking.loss import RankingLoss

        return RankingLoss(model, RerankingOptions(**spec.options).ranking_loss)

    # -- the head

    def head_kwargs(self, spec, label_list) -> dict[str, Any]:
        return {"num_labels": 1, "problem_type": "regression"}

    def config_extras(self, spec, label_list) -> dict[str, Any]:
        return dict(SIGMOID)

    def check_head(self, hf_config, spec, label_list, where: str) -> None:
        """A sequence classifier with one output (a CrossEncoder); an embedding model or an
        encoder is a first stage, refused with the way to use it."""
        arch = hf_config.get("architectures") or []
        roles = model_roles(arch)
        n = hf_config.get("num_labels") or len(hf_config.get("id2label") or {}) or None
        if "sequence_classification" not in roles:
            hint = (" (a first stage: bertctl eval MODEL BEIR_DIR --rerank RERANKER)"
                    if "embedding" in roles else " (fine-tune one with bertctl finetune "
                    "--task reranking)")
            raise BertctlError(f"{where}: a reranker is a sequence classifier with one output; "
                               f"the model is {architecture_name(arch)}{hint}")
        if Path(where).is_dir():
            from bertctl.model.hf import head_outputs   # (torch: not at declaration)

            # the head's weights decide: a config may list two labels beside one output
            n = head_outputs(where) or n
        if n not in (None, 1):
            raise BertctlError(f"{where}: a reranker has one output; the model is a "
                               f"{n}-label classifier (its head's weights)")

    # -- predictions

    def for_model(self, spec, hf_config: dict[str, Any]):
        """The activation left unset is the model's own (what CrossEncoder.predict applies);
        sigmoid, the default, stays unwritten (the ids made before)."""
        if RerankingOptions(**spec.options).activation is not None:
            return spec
        own = activation_of(hf_config)
        if own == "sigmoid":
            return spec
        return spec.model_copy(update={"options": {**spec.options, "activation": own}})

    def predictions(self, outputs, features, examples, spec, calibration=None) -> np.ndarray:
        """(B, G) scores: each candidate's logit through the model's activation
        (CrossEncoder.predict's)."""
        logits = logits_of(outputs)
        activation = RerankingOptions(**spec.options).activation or "sigmoid"
        return SCORES[activation](logits.reshape(len(logits), -1))

    def score(self, predictions, examples, spec, label_list) -> dict[str, Any]:
        return {**rerank_metrics(predictions), "queries": len(predictions)}

    def write_predictions(self, directory: Path, predictions, examples, spec, label_list,
                          start: int = 0) -> list[str]:
        name = "predictions.tsv"
        g = predictions.shape[1]
        with open(Path(directory) / name, "a" if start else "w", encoding="utf-8") as f:
            if not start:
                f.write("index\t" + ("score" if g == 1 else "\t".join(
                    f"score_{j}" for j in range(g))) + "\n")
            f.writelines(f"{i}\t" + "\t".join(f"{v:.6f}" for v in row) + "\n"
                         for i, row in enumerate(predictions, start))
        return [name]

    def keep(self, predictions, examples):
        return predictions, dataclasses.replace(examples, text_a=[], choices=None)


def rerank_metrics(scores: np.ndarray) -> dict[str, float]:
    """The mean ranking metrics of rows of candidate scores whose first is the relevant one."""
    ids = [f"c{j}" for j in range(scores.shape[1])]
    run = {str(i): [d for d, _ in ranking.rank(ids, row.astype(np.float64).tolist())]
           for i, row in enumerate(scores)}
    means, _ = ranking.evaluate(run, {str(i): {"c0": 1} for i in range(len(scores))})
    return means


RERANKING = register(Reranking())

"""The heads of the roles transformers has classes for, written once for every architecture:
what each takes and returns, and its loss (`MaskedLM`, `SequenceClassifier`, `MultipleChoice`,
`QuestionAnswering`, `TokenClassifier`). Each is a `composed.Head` whose modules are the
model's own (`RoleHead`). An architecture's head of a role derives from the role and says what
is its own: its modules under transformers' names, built in `__init__`; how it initialises
them (`init_module`); how it pools a sequence (`pool`, where not the first token), how its
classifier reads a vector (`classify`), how it scores spans (`span_logits`) and predicts the
vocabulary (`predict`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

from bertctl.labels import IGNORE_INDEX
from bertctl.model.composed import Head
from bertctl.model.shared import first_tokens, token_mean, vocabulary_cross_entropy
from bertctl.step_scope import scope_for


def masked_lm(predict: Callable[[torch.Tensor], torch.Tensor], hidden: torch.Tensor,
              labels: torch.Tensor | None) -> dict[str, torch.Tensor]:
    """The masked-LM outputs of the head `predict` (hidden states -> vocabulary logits): with
    `labels` ((B, T), IGNORE_INDEX where nothing is predicted) the hidden states of the
    labelled positions are gathered *before* the head (only ~15% of positions pay for the
    vocabulary projection, which for small models costs more than the whole encoder), and the
    loss over them: their mean, or in the training loop's scope the step's (`token_mean`),
    gathered at the positions the loop found on the host."""
    out: dict[str, torch.Tensor] = {}
    scope = scope_for(labels)
    if labels is not None:
        flat = labels.reshape(-1)
        where = (scope.positions if scope is not None and scope.positions is not None
                 else (flat != IGNORE_INDEX).nonzero().squeeze(1))
        hidden = hidden.reshape(-1, hidden.size(-1)).index_select(0, where)
        out["mlm_targets"] = flat.index_select(0, where)
    out["mlm_logits"] = predict(hidden)
    if labels is not None:
        targets = out["mlm_targets"]
        out["mlm_loss"] = token_mean(vocabulary_cross_entropy(out["mlm_logits"], targets),
                                     targets.numel(), scope)
    return out


class RoleHead(Head):
    """A role's head: its modules are the model's own, named as transformers' class of the role
    names them."""

    attribute = None

    def __init__(self, config):
        super().__init__()
        self.config = config

    def width(self, features) -> int:
        """What a classifier reads: the hidden size, or a frozen encoder's combined width."""
        return features.width if features is not None else self.config.hidden_size


class MaskedLM(RoleHead):
    """Masked-LM outputs (`masked_lm`) of `predict` (hidden states -> vocabulary logits)."""


    def predict(self, model, hidden: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def forward(self, model, input_ids: torch.Tensor,
                token_type_ids: torch.Tensor | None = None,
                attention_mask: torch.Tensor | None = None, labels: torch.Tensor | None = None,
                position_ids: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
        hidden = model.encoder(input_ids, token_type_ids, attention_mask,
                               position_ids=position_ids)["last_hidden_state"]
        out = masked_lm(lambda h: self.predict(model, h), hidden, labels)
        if labels is not None:
            out["loss"] = out["mlm_loss"]
        return out


class SequenceClassifier(RoleHead):
    """A classifier on a pooled sequence vector: classification (CE), label sets (a sigmoid
    and binary CE per label, transformers' multi_label_classification) or regression (MSE, one
    output)."""

    PROBLEM_TYPES = ("single_label_classification", "multi_label_classification", "regression")
    supports_packing = True
    reads_features = True

    def problem(self, num_labels: int | None, problem_type: str) -> int:
        if problem_type not in self.PROBLEM_TYPES:
            raise ValueError(f"problem_type must be one of {self.PROBLEM_TYPES}, got {problem_type!r}")
        if num_labels is None:
            num_labels = 1 if problem_type == "regression" else 2
        if problem_type == "regression" and num_labels != 1:
            raise ValueError(f"regression has one output, got num_labels={num_labels}")
        self.num_labels, self.problem_type = num_labels, problem_type
        return num_labels

    def pool(self, model, input_ids, token_type_ids, attention_mask, position_ids=None,
             sequence_starts=None) -> torch.Tensor:
        """The vector the classifier reads: the first token's last hidden state (each packed
        sequence's own, `sequence_starts`)."""
        return first_tokens(model.sequence(input_ids, token_type_ids, attention_mask,
                                           position_ids), sequence_starts)

    def classify(self, x: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def forward(self, model, input_ids: torch.Tensor,
                token_type_ids: torch.Tensor | None = None,
                attention_mask: torch.Tensor | None = None,
                labels: torch.Tensor | None = None,
                position_ids: torch.Tensor | None = None,
                sequence_starts: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
        if input_ids.dim() == 3:
            return self._grouped(model, input_ids, token_type_ids, attention_mask, labels)
        pooled = self.pool(model, input_ids, token_type_ids, attention_mask, position_ids,
                           sequence_starts)
        if self.problem_type == "regression":
            # A score is read as a number, not an argmax: bf16's 8 bits of mantissa would round
            # STS-B's 0-5 scores to steps of 1/64 and tie their ranks (Spearman). One output
            # costs nothing to compute in fp32, under autocast or not.
            with torch.autocast(pooled.device.type, enabled=False):
                logits = self.classify(pooled.float())
        else:
            logits = self.classify(pooled)
        out = {"logits": logits}
        if labels is not None:
            if self.problem_type == "regression":
                out["loss"] = F.mse_loss(logits.float().squeeze(-1), labels.float().reshape(-1))
            elif self.problem_type == "multi_label_classification":
                out["loss"] = F.binary_cross_entropy_with_logits(logits.float(), labels.float())
            else:
                out["loss"] = F.cross_entropy(logits.float(), labels.reshape(-1))
        return out

    def _grouped(self, model, input_ids, token_type_ids, attention_mask, labels) -> dict:
        """(B, G, T): G sequences an example (a reranker's candidates for one query), each
        classified on its own: `logits` (B, G), or (B, G, labels). How a group is trained is
        the task's (a ranking loss around the model), not the classifier's."""
        if labels is not None:
            raise ValueError("grouped sequences are scored here; their loss is the task's")
        B, G, T = input_ids.shape
        flat = [None if t is None else t.reshape(B * G, T)
                for t in (input_ids, token_type_ids, attention_mask)]
        logits = self.forward(model, *flat)["logits"]
        return {"logits": logits.view(B, G) if self.num_labels == 1 else logits.view(B, G, -1)}

    def hf_config(self) -> dict[str, Any]:
        return {"problem_type": self.problem_type, **label_maps(self.num_labels)}

    @classmethod
    def kwargs_from_hf(cls, hf_config: dict[str, Any]) -> dict[str, Any]:
        kwargs = {"num_labels": num_labels_of(hf_config)}
        if hf_config.get("problem_type") in cls.PROBLEM_TYPES:
            kwargs["problem_type"] = hf_config["problem_type"]
        elif kwargs["num_labels"] == 1:
            kwargs["problem_type"] = "regression"
        return {k: v for k, v in kwargs.items() if v is not None}


class MultipleChoice(RoleHead):
    """One score per (context, choice) pair from the pooled vector; softmax over the choices.
    Inputs are (B, C, T); the C choices run through the encoder as C * B sequences. `pool` and
    `classify` as a sequence classifier's."""

    input_rank = 3

    def pool(self, model, input_ids, token_type_ids, attention_mask) -> torch.Tensor:
        return model.encoder(input_ids, token_type_ids, attention_mask)[
            "last_hidden_state"][:, 0]

    def classify(self, x: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def forward(self, model, input_ids: torch.Tensor,
                token_type_ids: torch.Tensor | None = None,
                attention_mask: torch.Tensor | None = None,
                labels: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
        B, C, T = input_ids.shape

        def flat(t: torch.Tensor | None) -> torch.Tensor | None:
            return None if t is None else t.reshape(B * C, T)

        pooled = self.pool(model, flat(input_ids), flat(token_type_ids), flat(attention_mask))
        logits = self.classify(pooled).view(B, C)
        out = {"logits": logits}
        if labels is not None:
            out["loss"] = F.cross_entropy(logits.float(), labels.reshape(-1))
        return out


class QuestionAnswering(RoleHead):
    """Start and end logits per token for extractive span QA (SQuAD), from `span_logits`
    ((B, T, H) -> (B, T, 2)).

    Gold positions outside the window (>= T, e.g. an answer cut off by the doc stride) carry no
    loss, as in HF; the loss is the mean of the start and end cross-entropies.
    """


    def span_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.qa_outputs(hidden)

    def forward(self, model, input_ids: torch.Tensor,
                token_type_ids: torch.Tensor | None = None,
                attention_mask: torch.Tensor | None = None,
                start_positions: torch.Tensor | None = None,
                end_positions: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
        hidden = model.encoder(input_ids, token_type_ids, attention_mask)["last_hidden_state"]
        start_logits, end_logits = self.span_logits(hidden).float().unbind(-1)
        out = {"start_logits": start_logits, "end_logits": end_logits}
        if start_positions is not None and end_positions is not None:
            T = start_logits.size(1)
            start = start_positions.reshape(-1).clamp(0, T)
            end = end_positions.reshape(-1).clamp(0, T)
            out["loss"] = (F.cross_entropy(start_logits, start, ignore_index=T)
                           + F.cross_entropy(end_logits, end, ignore_index=T)) / 2
        return out

    def hf_config(self) -> dict[str, Any]:
        return label_maps(2)  # HF sizes the span output by num_labels, which defaults to 2


class TokenClassifier(RoleHead):
    """Per-token labels (NER tagging) from `classify`; positions labelled IGNORE_INDEX carry no
    loss."""

    supports_packing = True
    reads_features = True

    def classify(self, x: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def forward(self, model, input_ids: torch.Tensor,
                token_type_ids: torch.Tensor | None = None,
                attention_mask: torch.Tensor | None = None,
                labels: torch.Tensor | None = None,
                position_ids: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
        hidden = model.sequence(input_ids, token_type_ids, attention_mask, position_ids)
        logits = self.classify(hidden)
        out = {"logits": logits}
        if labels is not None:
            flat = labels.reshape(-1)
            total = F.cross_entropy(logits.float().reshape(-1, self.num_labels), flat,
                                    ignore_index=IGNORE_INDEX, reduction="sum")
            out["loss"] = token_mean(total, (flat != IGNORE_INDEX).sum(), scope_for(labels))
        return out

    def hf_config(self) -> dict[str, Any]:
        return label_maps(self.num_labels)

    @classmethod
    def kwargs_from_hf(cls, hf_config: dict[str, Any]) -> dict[str, Any]:
        n = num_labels_of(hf_config)
        return {} if n is None else {"num_labels": n}


def label_maps(num_labels: int) -> dict[str, Any]:
    # HF derives num_labels from id2label; these placeholders are what it writes by default.
    # The caller's real label names (extra_config) replace them.
    return {"id2label": {str(i): f"LABEL_{i}" for i in range(num_labels)},
            "label2id": {f"LABEL_{i}": i for i in range(num_labels)}}


def num_labels_of(hf_config: dict[str, Any]) -> int | None:
    if isinstance(hf_config.get("id2label"), dict) and hf_config["id2label"]:
        return len(hf_config["id2label"])
    n = hf_config.get("num_labels")
    return n if isinstance(n, int) and n > 0 else None

"""`bertctl finetune`: the task block plus the frozen encoder's (feature-based) head."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from bertctl.settings import TRAINING, meta
from bertctl.stages.settings.task import TaskTrainingSettings

FROZEN = "Frozen encoder (feature-based)"
LORA = "LoRA adapters"


class FinetuneSettings(TaskTrainingSettings):
    # Feature-based use (the paper's ELMo-style ablation): bertctl/model/features.py.
    freeze_encoder: bool = Field(False, description="Train only a head on the frozen encoder's "
                                 "hidden states (no dropout, no gradient through it).",
                                 json_schema_extra=meta(FROZEN))
    features: str = Field("-1", description="With --freeze-encoder: the hidden states used "
                          "(0 the embeddings layer, -1 the last; comma-separated, or all).",
                          json_schema_extra=meta(FROZEN))
    combine: Literal["concat", "sum", "mean", "weighted"] = Field(
        "concat", description="With --freeze-encoder: how several layers are joined; weighted "
        "is ELMo's learned scalar mix.", json_schema_extra=meta(FROZEN))
    head: Literal["linear", "bilstm"] = Field("linear", description="With --freeze-encoder: "
                                              "a linear classifier, or (tagging) the paper's "
                                              "two-layer BiLSTM under it.",
                                              json_schema_extra=meta(FROZEN))

    class_weights: str | None = Field(
        None, description="Classification and tagging: weigh each class's term of the loss: "
        "'balanced' (scikit-learn's: the training examples, or a tagging file's words, over "
        "the classes times the class's count), LABEL=W,LABEL=W (a class not named weighs 1) or "
        "a JSON file of {label: weight}. Recorded in the manifest.",
        json_schema_extra=meta(TRAINING, hashed_if_changed=True))
    label_smoothing: float = Field(
        0.0, ge=0, lt=1, description="Classification, tagging and multiple choice: the share "
        "of each target spread evenly over the classes (torch's label_smoothing).",
        json_schema_extra=meta(TRAINING, hashed_if_changed=True))

    # LoRA adapters (bertctl/model/lora.py).
    lora_rank: int | None = Field(
        None, ge=1, description="Train LoRA adapters of this rank on the encoder (and the task "
        "head) instead of every weight; the artifact holds the adapters and the head, in "
        "peft's format, and names the model as its base.", json_schema_extra=meta(LORA))
    lora_alpha: float | None = Field(
        None, gt=0, description="With --lora-rank: the update's scale is alpha / rank "
        "(default: twice the rank).", json_schema_extra=meta(LORA))
    lora_dropout: float = Field(0.0, ge=0, lt=1, description="With --lora-rank: dropout on "
                                "the adapters' input.", json_schema_extra=meta(LORA))
    lora_targets: str | None = Field(
        None, description="With --lora-rank: the encoder's linear layers to adapt, by name, "
        "comma-separated (default: the attention's query and value projections, the "
        "architecture's names).", json_schema_extra=meta(LORA))

    @model_validator(mode="after")
    def _lora_needs_a_rank(self):
        if self.lora_rank is None and (self.lora_alpha is not None or self.lora_dropout
                                       or self.lora_targets is not None):
            raise ValueError("--lora-alpha, --lora-dropout and --lora-targets describe LoRA "
                             "adapters: add --lora-rank")
        if self.lora_rank is not None and self.freeze_encoder:
            raise ValueError("--lora-rank adapts the encoder that --freeze-encoder freezes: "
                             "choose one")
        return self

    def lora(self):
        """The adapters' settings (model/lora.py), None for a full fine-tune."""
        from bertctl.model.lora import LoraSettings

        if self.lora_rank is None:
            return None
        targets = tuple(t.strip() for t in (self.lora_targets or "").split(",") if t.strip())
        return LoraSettings(rank=self.lora_rank, alpha=self.lora_alpha or 2.0 * self.lora_rank,
                            dropout=self.lora_dropout, targets=targets)

    @model_validator(mode="after")
    def _features_need_freezing(self):
        if not self.freeze_encoder and (self.features != "-1" or self.combine != "concat"
                                        or self.head != "linear"):
            raise ValueError("--features, --combine and --head describe a frozen encoder's "
                             "head: add --freeze-encoder")
        return self

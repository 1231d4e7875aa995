"""`bertctl pretrain`: the training loop's block (train/settings.py) plus the objective,
the model's shape and the paper's schedule; the registries' choices are added by assembled.py."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field, field_validator, model_validator

from bertctl.settings import EVALUATION, MODEL, TRAINING, batch_size_field, meta
from bertctl.model import ARCHITECTURES
from bertctl.objectives import OBJECTIVES
from bertctl.train.settings import TrainingSettings

class PretrainSettings(TrainingSettings):
    """`bertctl pretrain`; the objectives' own options are added by assembled.py."""

    produces: ClassVar[str | None] = "model"
    objective: str = Field("bert", description="The pretraining objective, from the registry "
                           "(bertctl/objectives): bert is masked LM + next-sentence prediction "
                           "as the paper (masked LM alone on data built with --no-nsp); mlm is "
                           "masked LM alone on continuous text (data built with --no-nsp), "
                           "as RoBERTa; electra is replaced-token detection (data built with "
                           "--no-nsp --masking dynamic).",
                           json_schema_extra=meta(TRAINING))
    mask_rate: float | None = Field(None, gt=0, lt=1, description="Share of tokens masked in "
                                    "training, drawn anew every epoch: needs data built with "
                                    "--masking dynamic (unset: the data's --masked-lm-prob; "
                                    "base-size recipes use 0.3, the mini budget recipe 0.15). "
                                    "Validation keeps the data's rate, so runs compare. A rate above "
                                    "the data's raises its --max-predictions-per-seq to what the "
                                    "rate needs (stats.masking in the manifest says both).",
                                    json_schema_extra=meta(TRAINING))
    # Declared here; assembled.py narrows them to the registry's names and lists them.
    architecture: str = Field("bert", description="The encoder, from the registry "
                              "(bertctl/model/architectures.py)",
                              json_schema_extra=meta(MODEL, hashed_if_changed=True))
    model_size: str = Field("base", description="The architecture's size presets "
                            "(layers/hidden/heads)",
                            json_schema_extra=meta(MODEL))
    num_hidden_layers: int | None = Field(None, ge=1, description="Override the preset's layers.",
                                          json_schema_extra=meta(MODEL))
    hidden_size: int | None = Field(None, ge=1, description="Override the preset's hidden size.",
                                    json_schema_extra=meta(MODEL))
    num_attention_heads: int | None = Field(None, ge=1, description="Override the preset's "
                                            "heads.", json_schema_extra=meta(MODEL))
    intermediate_size: int | None = Field(None, ge=1, description="Override the feed-forward "
                                          "size (default 4 x hidden; modernbert 1.5 x).",
                                          json_schema_extra=meta(MODEL))
    # A training setting, not the architecture's: config.json keeps the rates fine-tuning uses.
    dropout: float | None = Field(None, ge=0, lt=1, description="Dropout rate while "
                                  "pretraining, everywhere (unset: the model's, 0.1; Cramming "
                                  "pretrains with 0). The saved model keeps its rates for "
                                  "fine-tuning.",
                                  json_schema_extra=meta(TRAINING))
    max_position_embeddings: int = Field(512, ge=8, description="Position embeddings (at least "
                                         "the data's max_seq_length); modernbert has no "
                                         "position table (rotary): the longest input it "
                                         "declares, up to 8192 (unset: 512, or the data's "
                                         "length if longer), which a run with --init-from "
                                         "may raise (context extension).",
                                         json_schema_extra=meta(MODEL))
    rope_theta: float | None = Field(None, gt=0, description="Rotary base of the layers that "
                                     "see the whole input (modernbert; unset: the preset's or "
                                     "the --init-from model's). ModernBERT trains at 1024 "
                                     "tokens with 10000 and raises it to 160000 for 8192.",
                                     json_schema_extra=meta(MODEL, hashed_if_changed=True))
    batch_size: int = batch_size_field(256, step=True, note=" (the paper: 256)")
    lr: float = Field(1e-4, gt=0, description="Peak learning rate (the paper: 1e-4).",
                      json_schema_extra=meta(TRAINING))
    warmup: float = Field(0.01, ge=0, description="Linear warm-up: a fraction of the total steps "
                          "if below 1, else a step count (the paper: 10,000 of 1M).",
                          json_schema_extra=meta(TRAINING))
    total_steps: int | None = Field(None, ge=1, description="Length of the learning-rate "
                                    "schedule when it is longer than this run (phase 1 of the "
                                    "paper's two phases: --steps 900000 --total-steps 1000000).",
                                    json_schema_extra=meta(TRAINING))
    continue_schedule: bool = Field(False, description="With --init-from a bertctl model "
                                    "artifact: continue its step count, schedule and optimizer "
                                    "state (phase 2; a WSD decay from a stable phase).",
                                    json_schema_extra=meta(TRAINING))
    train_only: Literal["all", "new"] = Field(
        "all", description="With --init-from: new trains only the weights the model was saved "
        "without (a sentence-transformers model's masked-LM head), the loaded ones frozen: a "
        "short run of it before continuing pretraining keeps a random head's first gradients "
        "out of the encoder.", json_schema_extra=meta(TRAINING, hashed_if_changed=True))
    eval_batches: int | None = Field(50, ge=1, description="Validation batches per evaluation; "
                                     "unset: the whole validation split.",
                                     json_schema_extra=meta(EVALUATION, identity=False))

    @field_validator("objective")
    @classmethod
    def _registered(cls, name: str) -> str:
        return OBJECTIVES.known(name)

    @model_validator(mode="after")
    def _known_shape(self):
        arch = ARCHITECTURES[ARCHITECTURES.known(self.architecture)]
        if self.model_size not in arch.config_class.presets:
            raise ValueError(f"model_size {self.model_size!r} is not a {arch.name} size (one "
                             f"of {', '.join(arch.config_class.presets)})")
        return self

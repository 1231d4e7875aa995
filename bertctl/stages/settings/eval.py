"""`bertctl eval`: the task block (the model's unless given) plus how to run."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field

from bertctl.settings import (DATA, EVALUATION, SEQ_LENGTH, TASK, batch_size_field, meta,
                              Runtime)
from bertctl.stages.settings.task import TaskSettings



class EvalSettings(TaskSettings, Runtime):
    """`bertctl eval`: the task settings (read from the model's task file unless given) plus
    how to run. The label list always comes from the model."""

    produces: ClassVar[str | None] = "eval"

    labels: list[str] | None = Field(None, description="Label names in index order, for a "
                                     "model whose config.json has only LABEL_0... placeholders; "
                                     "must agree with the model's own names otherwise.",
                                     json_schema_extra=meta(TASK))
    max_seq_length: int | None = Field(None, **SEQ_LENGTH, description="Tokens per example; "
                                       "unset: the model's fine-tuning length, else 128.",
                                       json_schema_extra=meta(TASK))
    header: bool | None = Field(None, description="Whether DATA's first row names its columns; "
                                "unset: as the task's files (GLUE's CoLA test file has a header, "
                                "its train and dev files none).", json_schema_extra=meta(TASK))
    batch_size: int = batch_size_field(64, step=False)
    split: Literal["train", "validation"] | None = Field(
        None, description="Pretrain data only: the split to evaluate; unset: "
        "validation.", json_schema_extra=meta(DATA))
    rerank_depth: int = Field(100, ge=1, le=10_000, description="--rerank: documents a query "
                              "the reranker reorders (at most the search's --top-k).",
                              json_schema_extra=meta(EVALUATION, hashed_if_changed=True))
    rerank_scoring: Literal["cross", "maxsim"] = Field(
        "cross", description="--rerank: how the reranker scores a (query, document) pair. "
        "cross: a cross-encoder's score of the two together; maxsim: an embedding model's "
        "token vectors compared by late interaction (each query piece's best cosine with a "
        "document piece, averaged): --rerank the first stage itself reorders its own search "
        "with no second model.", json_schema_extra=meta(EVALUATION, hashed_if_changed=True))

"""`bertctl mine`: hard negatives for a retrieval training file."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field, model_validator

from bertctl.settings import DATA, SEQ_LENGTH, Runtime, batch_size_field, meta



EMBEDDINGS = "Embeddings"


MINING = "Mining"


class MineSettings(Runtime):
    """`bertctl mine`: each training query searched with the model over a corpus, and the
    highest-ranked documents that are not its positives written as its hard negatives, with
    sentence-transformers' mine_hard_negatives' guards against false negatives (see
    bertctl/tasks/retrieval/mining.py)."""

    produces: ClassVar[str | None] = "mined"

    text_column: list[str] | None = Field(None, description="The training table's query and "
                                          "positive columns (twice). Unset: query, positive.",
                                          json_schema_extra=meta(DATA))
    negatives: int = Field(3, ge=1, le=64, description="Hard negatives per row; a row with "
                           "fewer eligible candidates is left out (counted).",
                           json_schema_extra=meta(MINING))
    range_min: int = Field(0, ge=0, description="Candidates skipped at the top of the ranking "
                           "(after the query's positives): the likeliest false negatives.",
                           json_schema_extra=meta(MINING))
    range_max: int = Field(100, ge=1, le=10_000, description="Candidates considered, from the "
                           "top of the ranking (after the query's positives).",
                           json_schema_extra=meta(MINING))
    margin: float | None = Field(None, ge=0, description="A negative's cosine must be at least "
                                 "this far below its row's positive's. Unset: no margin.",
                                 json_schema_extra=meta(MINING))
    relative_margin: float | None = Field(None, ge=0, lt=1, description="A negative's cosine "
                                          "must be at most (1 - this) times its row's "
                                          "positive's (0.05: 95%). Unset: none.",
                                          json_schema_extra=meta(MINING))
    max_score: float | None = Field(None, ge=-1, le=1, description="A ceiling on a negative's "
                                    "cosine (near-duplicates of the positive are likely "
                                    "false negatives). Unset: none.",
                                    json_schema_extra=meta(MINING))
    min_score: float | None = Field(None, ge=-1, le=1, description="A floor on a negative's "
                                    "cosine (too easy to teach anything). Unset: none.",
                                    json_schema_extra=meta(MINING))
    sampling: Literal["top", "random"] = Field("top", description="top: the highest-ranked "
                                               "eligible candidates; random: drawn among them "
                                               "(--seed).", json_schema_extra=meta(MINING))
    seed: int = Field(0, ge=0, description="The draw of --sampling random.",
                      json_schema_extra=meta(MINING))
    max_seq_length: int | None = Field(None, **SEQ_LENGTH, description="Pieces per text "
                                       "embedded. Unset: the model's own length.",
                                       json_schema_extra=meta(MINING))
    teacher_scoring: Literal["cross", "maxsim"] = Field(
        "cross", description="--teacher: cross, a cross-encoder's scores; maxsim, an "
        "embedding model's (the miner itself, say) by late interaction over its token "
        "vectors, written as sigmoid(20 x (MaxSim - the row's best)) so that the listwise KL "
        "reads softmax(20 x MaxSim).", json_schema_extra=meta(MINING, hashed_if_changed=True))
    batch_size: int = batch_size_field(64, step=False, what="Texts")

    @model_validator(mode="after")
    def _ranges(self):
        if self.range_max <= self.range_min:
            raise ValueError(f"range_max {self.range_max} must be above range_min "
                             f"{self.range_min}")
        if self.range_max - self.range_min < self.negatives:
            raise ValueError(f"range_min {self.range_min} to range_max {self.range_max} holds "
                             f"fewer candidates than --negatives {self.negatives}")
        if self.min_score is not None and self.max_score is not None and \
                self.min_score >= self.max_score:
            raise ValueError("min_score must be below max_score")
        if self.text_column is not None and len(self.text_column) != 2:
            raise ValueError("give --text-column twice: the query's column, the positive's")
        return self

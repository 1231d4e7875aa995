"""`bertctl audit`: which task examples share word n-grams with a corpus."""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field, model_validator

from bertctl.settings import DATA, RUNTIME, StageConfig, corpus_text_column, meta

class AuditSettings(StageConfig):
    """`bertctl audit`: which task examples share word n-grams with a corpus (data/overlap.py)."""

    produces: ClassVar[str | None] = "audit"
    ngram: int = Field(13, ge=2, le=64, description="Words in the n-grams compared (GPT-3's "
                       "contamination check used 13); a shorter text is compared whole.",
                       json_schema_extra=meta(DATA))
    min_ngram: int = Field(8, ge=1, description="Texts of fewer words are not audited (a short "
                           "phrase in a large corpus tells nothing); they are counted apart.",
                           json_schema_extra=meta(DATA))
    against_column: list[str] | None = Field(None, description="The task files' columns to "
                                             "audit (repeat the flag); unset: every column whose "
                                             "median cell has at least 4 words.",
                                             json_schema_extra=meta(DATA))
    text_column: str | None = corpus_text_column()
    max_listed: int = Field(20, ge=0, description="Overlapping examples shown per task file in "
                            "the log (all are in overlaps.jsonl).",
                            json_schema_extra=meta(RUNTIME, identity=False))

    @model_validator(mode="after")
    def _lengths(self):
        if self.min_ngram > self.ngram:
            raise ValueError(f"min_ngram {self.min_ngram} is above ngram {self.ngram}")
        if self.against_column is not None and not self.against_column:
            raise ValueError("against_column is empty: name a column, or leave it unset")
        return self

"""`bertctl split`: a dev set held out of a retrieval training table."""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field, model_validator

from bertctl.settings import DATA, StageConfig, meta

DEV = "Dev set"


class SplitSettings(StageConfig):
    """`bertctl split`: a retrieval training table's queries held out as a dev set (see
    bertctl/tasks/retrieval/split.py)."""

    produces: ClassVar[str | None] = "split"

    text_column: list[str] | None = Field(None, description="The training table's query and "
                                          "positive columns (twice). Unset: query, positive "
                                          "and any negative columns.",
                                          json_schema_extra=meta(DATA))
    dev_share: float = Field(0.1, gt=0, lt=0.5, description="The share of the distinct "
                             "queries held out (every row of a query goes one way).",
                             json_schema_extra=meta(DEV))
    min_dev_queries: int = Field(50, ge=10, description="The fewest dev queries: the share "
                                 "is raised to reach it, and a table with fewer than twice "
                                 "as many queries is refused. 50 queries measure a paired "
                                 "nDCG@10 difference to about 0.03 (one standard error).",
                                 json_schema_extra=meta(DEV))
    seed: int = Field(0, ge=0, description="Which queries are held out (a hash of each "
                   "query's text with the seed: the same split in every process).",
                   json_schema_extra=meta(DEV))

    @model_validator(mode="after")
    def _columns(self):
        if self.text_column is not None and len(self.text_column) != 2:
            raise ValueError("give --text-column twice: the query's column, the positive's")
        return self

"""`bertctl choose`: one of several evals of the same dev set."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field

from bertctl.settings import StageConfig, meta

DEV = "Dev set"


class ChooseSettings(StageConfig):
    """`bertctl choose`: one of several evals of the same dev set, by their paired nDCG@10
    (see bertctl/report/choices.py)."""

    produces: ClassVar[str | None] = "choice"

    rule: Literal["best", "chain"] = Field("best", description="best: the candidate of the "
                                           "highest mean, if it gains over the first (the "
                                           "baseline), else the first; chain: each candidate "
                                           "a step after the one before, taken while each "
                                           "gains over it (the first that does not ends it).",
                                           json_schema_extra=meta(DEV))
    min_gain: float = Field(0.0, ge=0, description="The paired mean gain a candidate must "
                            "exceed to be taken over the one it is compared with.",
                            json_schema_extra=meta(DEV))

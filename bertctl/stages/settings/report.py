"""`bertctl report`: what labels the page."""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field

from bertctl.settings import StageConfig, meta

class ReportSettings(StageConfig):
    """`bertctl report`: the page shows its input artifacts; these only label it."""

    produces: ClassVar[str | None] = "report"

    title: str | None = Field(None, description="The page's title; unset: named after the "
                              "artifacts shown.", json_schema_extra=meta("Report"))

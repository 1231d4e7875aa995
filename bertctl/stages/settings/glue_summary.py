"""`bertctl glue-summary`: nothing of its own; its inputs say everything."""

from __future__ import annotations

from typing import ClassVar


from bertctl.settings import StageConfig

class GlueSummarySettings(StageConfig):
    """`bertctl glue-summary`: everything it shows comes from the eval artifacts given."""

    produces: ClassVar[str | None] = "glue-summary"

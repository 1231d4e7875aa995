"""`bertctl build-pretrain-data`: the pretraining data's settings (the core's block,
data/settings.py) plus how this run builds it."""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field, model_validator

from bertctl.settings import RUNTIME, corpus_text_column, meta
from bertctl.data.settings import PretrainingDataSettings

_RUN = meta(RUNTIME, identity=False)


class BuildPretrainDataSettings(PretrainingDataSettings):
    produces: ClassVar[str | None] = "pretrain-data"
    num_shards: int = Field(1, ge=1, description="Split the build into this many slices (for a "
                            "cluster's job array); combine them with --combine.",
                            json_schema_extra=meta(RUNTIME))
    shard_index: int = Field(0, ge=0, description="Which slice this run builds (0-based).",
                             json_schema_extra=meta(RUNTIME))
    workers: int | None = Field(None, ge=1, description="Worker processes; unset: all cores. "
                                "The output does not depend on it.", json_schema_extra=_RUN)
    text_column: str | None = corpus_text_column()

    @model_validator(mode="after")
    def _slice(self):
        if self.shard_index >= self.num_shards:
            raise ValueError(f"shard_index {self.shard_index} must be below num_shards "
                             f"{self.num_shards}")
        return self

"""`bertctl merge`: a weighted average of models of one architecture, shape and head."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field

from bertctl.settings import Runtime, batch_size_field, meta

MERGING = "Merging"


class MergeSettings(Runtime):
    """`bertctl merge MODEL... --out DIR`: their weights averaged (model soups, Wortsman et
    al. 2022; checkpoint averaging)."""

    produces: ClassVar[str | None] = "model"

    soup: Literal["uniform", "greedy"] = Field(
        "uniform", description="uniform: every model, weighted by --weights; greedy: the "
        "models in order of their --dev score, each kept only if the average with it scores "
        "at least as well on --dev (needs --dev).", json_schema_extra=meta(MERGING))
    weights: str | None = Field(
        None, description="uniform: one positive weight a model, comma-separated, in the "
        "models' order (scaled to sum to 1); unset: equal weights.",
        json_schema_extra=meta(MERGING))
    batch_size: int = batch_size_field(64, step=False)

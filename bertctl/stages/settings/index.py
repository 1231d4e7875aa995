"""`bertctl index`: an embeddings artifact made searchable."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field, model_validator

from bertctl.settings import Threads, meta

INDEX = "Index"


class IndexSettings(Threads):
    """`bertctl index`: an embeddings artifact made searchable: exact search below a size,
    above it an approximate index (faiss), its recall against exact search measured on the
    build (see bertctl/search/approximate.py)."""

    produces: ClassVar[str | None] = "index"

    kind: Literal["auto", "exact", "ivf", "hnsw"] = Field(
        "auto", description="exact: every vector scored (no approximation, no extra); ivf or "
        "hnsw: faiss's inverted lists or graph. auto: exact below --exact-below vectors, else "
        "ivf.", json_schema_extra=meta(INDEX))
    exact_below: int = Field(100_000, ge=0, description="With --kind auto: fewer vectors "
                             "than this are searched exactly.", json_schema_extra=meta(INDEX))
    quantize: Literal["none", "int8", "binary"] = Field(
        "none", description="How an approximate index stores each value: float32; a byte (a "
        "quarter of the memory); or its sign, a bit (a thirty-second), searched by Hamming "
        "distance, the first 4 x k candidates rescored with the stored vectors.",
        json_schema_extra=meta(INDEX))
    lists: int | None = Field(None, ge=1, description="ivf: the clusters. Unset: 4 x "
                              "sqrt(vectors), at least 64 vectors a list.",
                              json_schema_extra=meta(INDEX))
    probe: int = Field(32, ge=1, description="ivf: the lists a query scans (search may change "
                       "it).", json_schema_extra=meta(INDEX))
    m: int = Field(32, ge=4, le=256, description="hnsw: links per vector.",
                   json_schema_extra=meta(INDEX))
    ef_construction: int = Field(200, ge=8, description="hnsw: the beam while building.",
                                 json_schema_extra=meta(INDEX))
    ef_search: int = Field(128, ge=1, description="hnsw: the beam of a query (search may "
                           "change it).", json_schema_extra=meta(INDEX))
    recall_queries: int = Field(1000, ge=1, description="Stored vectors used as queries to "
                                "measure recall against exact search.",
                                json_schema_extra=meta(INDEX))
    recall_k: int = Field(10, ge=1, le=1000, description="The k of the recorded recall@k.",
                          json_schema_extra=meta(INDEX))
    seed: int = Field(0, ge=0, description="The training sample's and the recall queries' "
                      "draw.", json_schema_extra=meta(INDEX))

    @model_validator(mode="after")
    def _approximate_only(self):
        if self.kind == "exact" and self.quantize != "none":
            raise ValueError("--quantize applies to an approximate index (--kind ivf, hnsw "
                             "or auto)")
        return self

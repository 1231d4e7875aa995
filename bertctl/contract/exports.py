"""What an export artifact records about its graph, under its manifest's stats["onnx"]: written
by the export stage, read back by the stages that run an export (eval, embed) and by its model
card, as one named type rather than a dict read by string keys in each."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any


@dataclass(frozen=True)
class ExportFacts:
    graph: str                      # the exported class: a task head's, or BertModel (encoder)
    inputs: list[str]
    outputs: list[str]
    input_rank: int | None = None   # 2: (batch, sequence); 3: multiple choice's choices too
    opset: int | None = None
    quantize: str = "none"          # "none" (fp32) or "int8"
    per_channel: bool | None = None
    fused: dict[str, int] = field(default_factory=dict)
    bytes: int | None = None

    @classmethod
    def from_stats(cls, stats: dict[str, Any]) -> ExportFacts:
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in stats.items() if k in known and v is not None})

    def as_stats(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def runtime(self) -> str:
        """How a run of this graph records its precision: onnxruntime runs it as written."""
        return f"onnxruntime {self.quantize}"

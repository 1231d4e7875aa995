"""`bertctl export`: an ONNX graph, its quantization and its check."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field

from bertctl.settings import EVALUATION, Threads, batch_size_field, meta



EXPORT = "Export"


class ExportSettings(Threads):
    """`bertctl export`: a model as an ONNX graph for onnxruntime (see bertctl/model/onnx_model.py)."""

    produces: ClassVar[str | None] = "export"

    encoder: bool = Field(False, description="Export the bare encoder (every hidden state, for "
                          "`embed`) instead of the model's task head. A model without a task "
                          "(a pretrained one) always exports its encoder.",
                          json_schema_extra=meta(EXPORT))
    quantize: Literal["none", "int8"] = Field("none", description="int8: dynamic quantization "
                                              "of the matrix multiplications' weights (the "
                                              "activations are quantized at run time).",
                                              json_schema_extra=meta(EXPORT))
    per_channel: bool = Field(True, description="With --quantize int8: one scale per output "
                              "channel of each weight instead of one per weight.",
                              json_schema_extra=meta(EXPORT))
    optimize: bool = Field(True, description="Apply onnxruntime's transformer graph fusions "
                           "(layer norm with the residual add, bias with GELU) before "
                           "quantizing.", json_schema_extra=meta(EXPORT))
    opset: int = Field(18, ge=18, le=23, description="The ONNX opset (the exporter's lowest "
                       "is 18).", json_schema_extra=meta(EXPORT))
    max_drop: float = Field(1.0, ge=0, description="With --check: the most the export may lose "
                            "on the model's main metric, in points (0.01 of accuracy or F1 is "
                            "one point); beyond it the exit code is 3, the artifact written.",
                            json_schema_extra=meta(EVALUATION))
    batch_size: int = batch_size_field(64, step=False, what="With --check: examples")

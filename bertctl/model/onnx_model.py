"""A bertctl model as an ONNX graph, and an ONNX graph run by onnxruntime as a bertctl model.

- `export` writes any model of bertctl.model (a task head, or the bare encoder) as one ONNX
  file with dynamic batch and sequence axes (and choices, for multiple choice), through the
  exporter PyTorch recommends (`torch.onnx.export(dynamo=True)`). Its inputs are always
  `input_ids`, `attention_mask` and `token_type_ids` (int64); its outputs are the model's
  per-example outputs by name (`logits`, `start_logits`, ...), or for the encoder every hidden
  state (`hidden_states.0` the embeddings' output ... `hidden_states.L`) and `pooler_output`.
- `optimize` applies onnxruntime's transformer fusions, `quantize` its dynamic int8
  quantization of the matrix multiplications' weights.
- `OnnxModel` is a torch module without parameters that runs such a file: called as the
  PyTorch model is (`model(**inputs)`), it returns the same dict of tensors, so the one
  inference path (bertctl.evaluation, bertctl.frozen_features) scores an export exactly as it scores
  the model it came from.

onnx, onnxscript and onnxruntime are the `export` extra: `require` names the pip command.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import logging
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import torch

from bertctl.errors import BertctlError

EXTRA = "pip install 'bertctl[export]'"
INPUTS = ("input_ids", "attention_mask", "token_type_ids")
HIDDEN = "hidden_states."


def require(what: str, modules: tuple[str, ...] = ("onnx", "onnxscript", "onnxruntime")) -> None:
    """One line naming the pip command when the export extra is missing."""
    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    if missing:
        raise BertctlError(f"{what} needs {', '.join(missing)} (the export extra): {EXTRA}")


class _Graph(torch.nn.Module):
    """The model with a fixed signature (the three inputs, in order) and a tuple of outputs."""

    def __init__(self, model: torch.nn.Module, outputs: list[str], encoder: bool):
        super().__init__()
        self.model, self.outputs, self.encoder = model, outputs, encoder

    def forward(self, input_ids, attention_mask, token_type_ids):
        if self.encoder:
            out = self.model(input_ids, token_type_ids, attention_mask, output_hidden_states=True)
            states = list(out["hidden_states"])
            pooled = [out["pooler_output"]] if out.get("pooler_output") is not None else []
            return tuple(states + pooled)
        out = self.model(input_ids, token_type_ids, attention_mask)
        return tuple(out[name] for name in self.outputs)


def _example(model: torch.nn.Module, rank: int) -> tuple[torch.Tensor, ...]:
    # Sizes above 1 (torch.export treats a dimension of size 0 or 1 as fixed), ids that every
    # vocabulary has, the second segment and some padding, so no branch is specialised away.
    shape = (2, 3, 8) if rank == 3 else (2, 8)
    ids = torch.full(shape, 1, dtype=torch.long)
    mask = torch.ones(shape, dtype=torch.long)
    mask[..., -2:] = 0
    types = torch.zeros(shape, dtype=torch.long)
    types[..., 4:] = 1
    return ids, mask, types


def output_names(model: torch.nn.Module, encoder: bool) -> list[str]:
    """What the exported graph returns, by name, in order."""
    if encoder:
        n = model.config.num_hidden_layers
        pooled = ["pooler_output"] if getattr(model, "pooler", None) is not None else []
        return [f"{HIDDEN}{i}" for i in range(n + 1)] + pooled
    with torch.no_grad():
        out = model(*_reorder(_example(model, input_rank(model))))
    return [k for k, v in out.items() if isinstance(v, torch.Tensor) and k != "loss"]


def _reorder(example):
    ids, mask, types = example
    return ids, types, mask   # the models' positional order: input_ids, token_type_ids, mask


def input_rank(model: torch.nn.Module) -> int:
    """2 for (batch, sequence) inputs, 3 for a multiple-choice head's (batch, choices, seq)."""
    return int(getattr(model, "input_rank", 2))


@contextlib.contextmanager
def _quiet():
    """The exporter's and the quantizer's progress lines and warnings belong in --debug, not on
    every export's stdout."""
    loggers = [logging.getLogger(n) for n in ("", "torch.onnx", "onnxscript", "onnxruntime")]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
            warnings.simplefilter("ignore")
            yield
    finally:
        for lg, level in zip(loggers, levels):
            lg.setLevel(level)


def export(model: torch.nn.Module, path: Path, *, encoder: bool, opset: int,
           max_positions: int) -> list[str]:
    """Write `model` (in eval mode, float32) to `path`; returns the output names."""
    require("bertctl export")
    features = getattr(model, "features", None)
    if not encoder and getattr(features, "lstm", None) is not None:
        # pack_padded_sequence's shapes depend on the data: torch.export cannot trace it, and
        # the TorchScript exporter bakes the traced lengths in (wrong by 1e-2 at other ones).
        raise BertctlError(f"{type(model).__name__} with a frozen-encoder BiLSTM head cannot be "
                           f"exported to ONNX; export its encoder (--encoder) and run the head "
                           f"in PyTorch, or fine-tune a linear head (--head linear)")
    model = model.float().eval()
    outputs = output_names(model, encoder)
    rank = input_rank(model)
    batch = torch.export.Dim("batch")
    seq = torch.export.Dim("sequence", max=max_positions)
    axes = {0: batch, 1: torch.export.Dim("choices"), 2: seq} if rank == 3 else {0: batch, 1: seq}
    with _quiet():
        try:
            torch.onnx.export(
                _Graph(model, outputs, encoder), _example(model, rank), str(path), dynamo=True,
                input_names=list(INPUTS), output_names=outputs, opset_version=opset,
                dynamic_shapes={name: axes for name in INPUTS}, external_data=False,
                verbose=False)
        except Exception as exc:  # noqa: BLE001 - the exporter's errors are many and long
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise BertctlError(f"{type(model).__name__} cannot be exported to ONNX: "
                               f"{first[:300]}") from None
    return outputs


def optimize(path: Path, model_type: str, num_heads: int, hidden_size: int) -> dict[str, int]:
    """onnxruntime's transformer fusions (for its `model_type`) in place; returns the fused
    operators it made."""
    from onnxruntime.transformers.optimizer import optimize_model

    with _quiet():
        optimized = optimize_model(str(path), model_type=model_type, num_heads=num_heads,
                                   hidden_size=hidden_size)
        optimized.save_model_to_file(str(path))
    return {k: v for k, v in optimized.get_fused_operator_statistics().items() if v}


def quantize(source: Path, target: Path, per_channel: bool) -> None:
    """Dynamic int8: weights of the matrix multiplications stored in int8, activations
    quantized per batch at run time (what suits BERT on CPUs: no calibration data needed).
    A product of constants alone (DeBERTa's relative position embeddings through their key and
    query projections) stays in fp32: it is the same every batch, and quantizing "activations"
    that are weights made a DynamicQuantizeMatMul that onnxruntime refused to run."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    with _quiet():
        quantize_dynamic(str(source), str(target), weight_type=QuantType.QInt8,
                         per_channel=per_channel, nodes_to_exclude=constant_products(source))


def constant_products(path: Path) -> list[str]:
    """The names of the graph's matrix products whose input is computed from its initializers
    alone."""
    import onnx

    graph = onnx.load(str(path), load_external_data=False).graph
    constant = {i.name for i in graph.initializer}
    products = []
    for node in graph.node:   # nodes are in topological order
        if node.op_type == "Constant" or (node.input and all(not i or i in constant
                                                               for i in node.input)):
            constant.update(node.output)
        if node.op_type in ("MatMul", "Gemm") and node.input and node.input[0] in constant:
            # the quantizer splits a Gemm into NAME_MatMul and an Add first
            products += [node.name, f"{node.name}_MatMul"]
    return products


class OnnxModel(torch.nn.Module):
    """An exported model run by onnxruntime on the CPU, with the PyTorch model's interface."""

    def __init__(self, path: Path, threads: int | None = None, name: str | None = None):
        """`name`: how errors name the graph (the artifact's file, for a graph still in the
        export's temporary directory)."""
        super().__init__()
        self.name = name or str(path)
        require(f"{path.parent}: running an export", ("onnxruntime",))
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.intra_op_num_threads = threads or torch.get_num_threads()
        options.inter_op_num_threads = 1
        options.log_severity_level = 4   # its errors reach the user as our one line
        self.path = path
        try:
            self.session = ort.InferenceSession(str(path), options,
                                                providers=["CPUExecutionProvider"])
        except Exception as exc:  # noqa: BLE001 - onnxruntime raises its own exception types
            raise BertctlError(f"{self.name}: onnxruntime {ort.__version__} cannot load it: "
                               f"{self._said(exc)}") from None
        self.inputs = [i.name for i in self.session.get_inputs()]
        self.outputs = [o.name for o in self.session.get_outputs()]
        self.rank = len(self.session.get_inputs()[0].shape)   # 2, or 3 (multiple choice)
        if sorted(self.inputs) != sorted(INPUTS):
            raise BertctlError(f"{self.name}: inputs {self.inputs}, not the {list(INPUTS)} of "
                               f"a bertctl export")

    def _said(self, exc: Exception) -> str:
        """onnxruntime's message on one line, naming the graph as `name` does."""
        return " ".join(str(exc).split()).replace(str(self.path), self.name)[:300]

    def forward(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor | None = None,
                attention_mask: torch.Tensor | None = None, **_: Any) -> dict[str, Any]:
        # Other keyword inputs (output_hidden_states, num_layers) ask for what an encoder export
        # returns anyway; a batch without padding may come without its mask.
        feeds = {"input_ids": input_ids,
                 "attention_mask": torch.ones_like(input_ids) if attention_mask is None
                 else attention_mask,
                 "token_type_ids": torch.zeros_like(input_ids) if token_type_ids is None
                 else token_type_ids}
        # A reranker's batch is grouped, (rows, candidates, sequence), as the PyTorch model
        # takes it; its graph, a sequence classifier's, scores one sequence a row: each
        # candidate alone, then grouped back.
        group = input_ids.shape[:2] if input_ids.dim() == 3 and self.rank == 2 else None
        if group is not None:
            feeds = {k: v.reshape(-1, v.shape[-1]) for k, v in feeds.items()}
        try:
            arrays = self.session.run(None, {k: np.ascontiguousarray(
                v.detach().cpu().numpy().astype(np.int64, copy=False)) for k, v in feeds.items()})
        except Exception as exc:  # noqa: BLE001 - onnxruntime raises its own exception types
            raise BertctlError(f"{self.name}: onnxruntime cannot run it: "
                               f"{self._said(exc)}") from None
        out: dict[str, Any] = {n: torch.from_numpy(a) for n, a in zip(self.outputs, arrays)}
        if group is not None:   # as the PyTorch head groups them: (B, G), or (B, G, labels)
            out = {n: v.reshape(*group) if v.shape[1:] == (1,) else v.reshape(*group, -1)
                   for n, v in out.items()}
        states = [out.pop(n) for n in self.outputs if n.startswith(HIDDEN)]
        if states:
            out["hidden_states"] = tuple(states)
            out["last_hidden_state"] = states[-1]
        return out


__all__ = ["EXTRA", "INPUTS", "OnnxModel", "export", "input_rank", "optimize", "output_names",
           "quantize", "require"]

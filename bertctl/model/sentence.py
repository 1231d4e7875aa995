"""A text's vector from its hidden states, as sentence-transformers computes it, and that
library's model layout.

A sentence-transformers model is a chain of modules (modules.json): the Transformer (the
encoder, in the model directory itself), then Pooling, any Dense layers, Normalize. bertctl
computes exactly that chain (`SentenceHead`) and reads and writes the layout, so a model either
library saved is the same model in the other. A directory holding any other module, or a
setting of these that bertctl does not compute, is refused in one line naming it: the vectors
would be another model's.

- Pooling: every mode sentence-transformers has, several concatenated in the order given:
  `cls` (the first token), `mean` (over the real tokens), `max`, `mean_sqrt_len_tokens` (the
  sum over the square root of the count), `weightedmean` (token i weighted i + 1), `lasttoken`.
- Dense: a linear map, its activation (torch.nn's Identity, Tanh, ReLU, GELU, Sigmoid, SiLU)
  and an optional residual; its weights in its own folder (`N_Dense/model.safetensors`).
- Normalize: unit length.
- Prompts (config_sentence_transformers.json): texts put before a query or a document, which
  E5/BGE-style models were trained with; recorded here, prepended by whoever tokenizes.

config.json's `bertctl_embedding` records the same (KEY), for a directory without the layout;
reading the layout is bertctl.model.sentence_layout's (without torch).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from safetensors import safe_open
from torch import nn

from bertctl.errors import BertctlError
from bertctl.model.sentence_layout import KEY, LEGACY_FLAGS, MODES, inside, record_of

ACTIVATIONS = {"torch.nn.modules.linear.Identity": nn.Identity,
               "torch.nn.modules.activation.Tanh": nn.Tanh,
               "torch.nn.modules.activation.ReLU": nn.ReLU,
               "torch.nn.modules.activation.GELU": nn.GELU,
               "torch.nn.modules.activation.Sigmoid": nn.Sigmoid,
               "torch.nn.modules.activation.SiLU": nn.SiLU}


def pool(hidden: torch.Tensor, attention_mask: torch.Tensor | None,
         modes: tuple[str, ...]) -> torch.Tensor:
    """(B, T, H) -> (B, H * len(modes)) over right-padded rows (mask 1 = token), each mode as
    sentence-transformers' Pooling computes it, sums in float32."""
    if attention_mask is None:
        attention_mask = torch.ones(hidden.shape[:2], dtype=torch.long, device=hidden.device)
    mask = attention_mask.to(torch.float32).unsqueeze(-1)
    h = hidden.float()
    out = []
    for mode in modes:
        if mode == "cls":
            out.append(h[:, 0])
        elif mode == "max":
            out.append(h.masked_fill(mask == 0, float("-inf")).max(dim=1).values)
        elif mode in ("mean", "mean_sqrt_len_tokens"):
            count = mask.sum(1).clamp_min(1e-9)
            out.append((h * mask).sum(1) / (count if mode == "mean" else count.sqrt()))
        elif mode == "weightedmean":
            weights = mask * torch.arange(1, h.shape[1] + 1, device=h.device,
                                          dtype=torch.float32).view(1, -1, 1)
            out.append((h * weights).sum(1) / weights.sum(1).clamp_min(1e-9))
        elif mode == "lasttoken":
            last = (attention_mask.sum(1) - 1).clamp_min(0)
            out.append(h[torch.arange(h.shape[0], device=h.device), last])
        else:
            raise ValueError(f"pooling mode must be one of {MODES}, got {mode!r}")
    return out[0] if len(out) == 1 else torch.cat(out, dim=-1)


def mean_pool(hidden: torch.Tensor, attention_mask: torch.Tensor | None) -> torch.Tensor:
    """(B, T, H) -> (B, H): the mean over the real tokens; ModernBERT's "mean" classifier
    pooling too (in the hidden states' dtype)."""
    if attention_mask is None:
        return hidden.mean(1)
    weights = attention_mask.to(hidden.dtype).unsqueeze(-1)
    return (hidden * weights).sum(1) / weights.sum(1)


class Dense(nn.Module):
    """sentence-transformers' Dense: activation(linear(x)), plus x (or its projection) when
    residual."""

    def __init__(self, in_features: int, out_features: int, bias: bool = True,
                 activation: str = "torch.nn.modules.activation.Tanh", residual: bool = False):
        super().__init__()
        self.spec = {"in_features": in_features, "out_features": out_features, "bias": bias,
                     "activation_function": activation, "use_residual": residual}
        self.linear = nn.Linear(in_features, out_features, bias=bias)
        self.activation = ACTIVATIONS[activation]()
        if residual and in_features != out_features:
            self.residual = nn.Linear(in_features, out_features, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.activation(self.linear(x))
        if self.spec["use_residual"]:
            out = out + (self.residual(x) if hasattr(self, "residual") else x)
        return out


class SentenceHead(nn.Module):
    """Pooling, then the Dense layers, then (if `normalize`) unit length."""

    def __init__(self, width: int, pooling: str | list[str] | tuple[str, ...] = "mean",
                 dense: list[dict[str, Any]] | tuple = (), normalize: bool = True):
        super().__init__()
        self.modes = (pooling,) if isinstance(pooling, str) else tuple(pooling)
        bad = [m for m in self.modes if m not in MODES]
        if bad or not self.modes:
            raise ValueError(f"pooling must be one or more of {MODES}, got {pooling!r}")
        self.normalize = bool(normalize)
        self.dense = nn.ModuleList()
        width *= len(self.modes)
        for i, d in enumerate(dense):
            if d["in_features"] != width:
                raise ValueError(f"Dense layer {i} takes {d['in_features']} values but gets "
                                 f"{width}")
            self.dense.append(Dense(d["in_features"], d["out_features"], d.get("bias", True),
                                    d.get("activation_function",
                                          "torch.nn.modules.activation.Tanh"),
                                    d.get("use_residual", False)))
            width = d["out_features"]
        self.dim = width

    def forward(self, hidden: torch.Tensor, attention_mask: torch.Tensor | None) -> torch.Tensor:
        vectors = pool(hidden, attention_mask, self.modes)
        for layer in self.dense:
            vectors = layer(vectors)
        return F.normalize(vectors.float(), dim=-1) if self.normalize else vectors

    def record(self) -> dict[str, Any]:
        """What config.json's KEY records: the pooling and normalisation, the Dense layers'
        shapes when there are any."""
        out: dict[str, Any] = {"pooling": self.modes[0] if len(self.modes) == 1
                               else list(self.modes), "normalize": self.normalize}
        if len(self.dense):
            out["dense"] = [dict(layer.spec) for layer in self.dense]
        return out

    def layout(self, width: int, max_seq_length: int, prompts: dict[str, str],
               default_prompt_name: str | None) -> dict[str, Any]:
        """sentence-transformers' files for this head behind the encoder in the directory:
        path -> JSON-able object (text) or a dict of tensors (a safetensors file)."""
        modules = [{"idx": 0, "name": "0", "path": "",
                    "type": "sentence_transformers.models.Transformer"},
                   {"idx": 1, "name": "1", "path": "1_Pooling",
                    "type": "sentence_transformers.models.Pooling"}]
        files: dict[str, Any] = {
            "1_Pooling/config.json": {
                "word_embedding_dimension": width,
                # the order of several modes is pooling_mode's; the flags, for readers before
                # sentence-transformers 6, cannot say it
                "pooling_mode": self.modes[0] if len(self.modes) == 1 else list(self.modes),
                **{flag: mode in self.modes for flag, mode in LEGACY_FLAGS.items()},
                "include_prompt": True},
            "sentence_bert_config.json": {"max_seq_length": max_seq_length,
                                          "do_lower_case": False}}
        for layer in self.dense:
            idx = len(modules)
            path = f"{idx}_Dense"
            modules.append({"idx": idx, "name": str(idx), "path": path,
                            "type": "sentence_transformers.models.Dense"})
            files[f"{path}/config.json"] = dict(layer.spec)
            files[f"{path}/model.safetensors"] = {k: v.detach().contiguous().cpu()
                                                  for k, v in layer.state_dict().items()}
        if self.normalize:
            idx = len(modules)
            modules.append({"idx": idx, "name": str(idx), "path": f"{idx}_Normalize",
                            "type": "sentence_transformers.models.Normalize"})
        files["modules.json"] = modules
        if prompts or default_prompt_name:
            files["config_sentence_transformers.json"] = {
                "prompts": prompts, "default_prompt_name": default_prompt_name,
                "similarity_fn_name": "cosine"}
        return files


def dense_weights(directory: Path, record: dict[str, Any], prefix: str) -> dict[str, torch.Tensor]:
    """The Dense layers' weights a layout names (each `path`), as `prefix`.N.name; a layer
    without a folder of its own (a bertctl directory read from config.json alone) has none."""
    tensors: dict[str, torch.Tensor] = {}
    for i, spec in enumerate(record.get("dense") or []):
        if "path" in spec:
            tensors.update(folder_weights(directory, spec["path"], f"{prefix}.{i}",
                                          directory / "modules.json"))
    return tensors


def folder_weights(directory: Path, name: str, prefix: str, named_by: Path | None = None
                   ) -> dict[str, torch.Tensor]:
    """The tensors of a module's folder inside the model directory (its model.safetensors),
    as `prefix`.key; a missing file or a pickle is one line naming it."""
    folder = inside(directory, name, named_by or directory / "config.json")
    path = folder / "model.safetensors"
    if not path.is_file():
        pickled = folder / "pytorch_model.bin"
        raise BertctlError(f"{pickled if pickled.exists() else path}: "
                           + ("a pickle; bertctl reads model.safetensors only"
                              if pickled.exists() else "not found"))
    try:
        with safe_open(str(path), framework="pt") as f:
            return {f"{prefix}.{key}": f.get_tensor(key) for key in f.keys()}
    except Exception as exc:  # noqa: BLE001 - safetensors raises several types
        raise BertctlError(f"{path}: cannot read safetensors file: {exc}") from None


__all__ = ["KEY", "MODES", "Dense", "SentenceHead", "dense_weights", "folder_weights",
           "mean_pool", "pool", "record_of"]

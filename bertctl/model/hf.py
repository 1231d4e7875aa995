"""Hugging Face names in and out: config.json + model.safetensors, as transformers writes them.

Our parameter names already are HF's, so writing is a plain dump of the state dict. Reading
accepts any local HF directory of a registered architecture (config.json's model_type: bert,
modernbert): our artifacts, `save_pretrained` output of any of its heads, a bare encoder's
checkpoint (keys without the encoder's prefix, e.g. sentence-transformers models), and old
TF-converted BERT names (`gamma`/`beta`, an explicit decoder). Only safetensors is
read: a pickle (`pytorch_model.bin`) can run code when loaded, so it is refused.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import torch
from safetensors import safe_open
from safetensors.torch import save_file
from torch import nn

from bertctl.errors import BertctlError, DiskFull, is_disk_full, read_json_object
from bertctl.model import architectures, lora, sentence_layout as sentence
from bertctl.model.composed import Composed

CONFIG_NAME = "config.json"
WEIGHTS_NAME = "model.safetensors"
WEIGHTS_INDEX_NAME = "model.safetensors.index.json"  # sharded checkpoints
PICKLE_NAMES = ("pytorch_model.bin", "pytorch_model.bin.index.json", "tf_model.h5",
                "flax_model.msgpack")



@dataclass
class LoadReport:
    """What loading a checkpoint did, for the log: nothing here is an error by itself."""

    source: str
    missing: list[str] = field(default_factory=list)     # ours, not in the file: initialised
    unexpected: list[str] = field(default_factory=list)  # in the file, not ours: ignored
    mismatched: list[str] = field(default_factory=list)  # head weights of another shape: initialised

    @property
    def complete(self) -> bool:
        return not (self.missing or self.unexpected or self.mismatched)

    def __str__(self) -> str:
        parts = [f"loaded {self.source}"]
        for name in ("missing", "mismatched", "unexpected"):
            keys = getattr(self, name)
            if keys:
                shown = ", ".join(keys[:6]) + (f", ... ({len(keys)} in all)" if len(keys) > 6 else "")
                verb = "ignored" if name == "unexpected" else "initialised"
                parts.append(f"{name} ({verb}): {shown}")
        return "; ".join(parts)


# ---------------------------------------------------------------------------------------------
# config.json


def read_config_dict(directory: str | Path) -> dict[str, Any]:
    """The parsed config.json of a model directory, with a clear error for each way it fails."""
    directory = Path(directory)
    if not directory.is_dir():
        raise BertctlError(f"{directory}: not a directory")
    path = directory / CONFIG_NAME
    if not path.is_file():
        raise BertctlError(f"{path}: not found (not a Hugging Face model directory?)")
    data = read_json_object(path, "the model config")
    # A sentence-transformers layout is the model's sentence head (what bertctl wrote agrees
    # with it); one bertctl does not compute is kept as its refusal, which only a stage that
    # reads the head raises: the encoder alone is still an encoder.
    try:
        layout = sentence.read_layout(directory)
    except BertctlError as exc:
        layout = {"refused": str(exc)}
    if layout is not None:   # what only bertctl records (Matryoshka sizes) kept beside it
        own = data.get(sentence.KEY) if isinstance(data.get(sentence.KEY), dict) else {}
        data[sentence.KEY] = layout if "refused" in layout else {**own, **layout}
    cross = sentence.read_cross_encoder(directory, data)
    if cross is not None:
        data[sentence.CROSS_KEY] = cross
    return data


def read_config(directory: str | Path):
    """The config of a model directory, of its architecture's config class; BertctlError if it
    is not a model bertctl can build."""
    hf = read_config_dict(directory)
    source = str(Path(directory) / CONFIG_NAME)
    return architectures.of_config(hf, source).config_from_hf(hf, source)


# ---------------------------------------------------------------------------------------------
# Saving


def _unwrap(model: nn.Module) -> nn.Module:
    # DDP keeps the model at .module, torch.compile at ._orig_mod; both prefix the state dict.
    while hasattr(model, "module") or hasattr(model, "_orig_mod"):
        model = getattr(model, "module", None) or model._orig_mod
    return model


def save_model(model: nn.Module, directory: str | Path, extra_config: dict[str, Any] | None = None,
               base: Path | None = None) -> None:
    """Write config.json and model.safetensors so `transformers` loads them with from_pretrained.

    `extra_config` adds or overrides config.json keys: id2label/label2id with the real label
    names, problem_type, and anything a later stage wants to read back. A model with LoRA
    adapters (model/lora.py) is written as its adapters and head in peft's format instead of
    its weights, naming `base`, the model directory they adapt.
    """
    model = _unwrap(model)
    if architectures.role_of(type(model).__name__) is None:
        raise TypeError(f"save_model expects a bertctl model, got {type(model).__name__}")
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    config = model.config.to_hf_dict()
    config["architectures"] = [type(model).__name__]
    if isinstance(model, Composed):
        config.update(model.hf_config())
    config.update(extra_config or {})
    (directory / CONFIG_NAME).write_text(json.dumps(config, indent=2, sort_keys=True) + "\n",
                                         encoding="utf-8")
    headed = isinstance(model, Composed)
    for name, content in (model.extra_files() if headed else {}).items():
        (directory / name).parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, dict) and content and \
                all(isinstance(v, torch.Tensor) for v in content.values()):
            _save_tensors(content, directory / name)
        else:
            (directory / name).write_text(content if isinstance(content, str) else
                                          json.dumps(content, indent=2) + "\n", encoding="utf-8")
    if lora.adapted(model):
        if base is None:
            raise ValueError("a model with LoRA adapters is saved naming its base model")
        tensors, adapter = lora.adapter_files(model, base,
                                              architectures.role_of(type(model).__name__))
        _save_tensors(tensors, directory / lora.WEIGHTS)
        (directory / lora.CONFIG).write_text(json.dumps(adapter, indent=2) + "\n",
                                             encoding="utf-8")
        return
    # The decoder is not a parameter of ours (it reads the embedding table), so nothing is shared
    # and transformers re-ties it from `tie_word_embeddings`, exactly as for its own files.
    # Weights another library keeps in its own files (extra_files) stay out of the encoder's.
    elsewhere = model.weights_elsewhere if headed else ()
    tensors = {k: v.detach().contiguous().cpu() for k, v in model.state_dict().items()
               if not (elsewhere and k.startswith(elsewhere))}
    _save_tensors(tensors, directory / WEIGHTS_NAME)


def _save_tensors(tensors: dict[str, torch.Tensor], path: Path) -> None:
    try:
        save_file(tensors, str(path), metadata={"format": "pt"})
    except Exception as exc:  # noqa: BLE001 - safetensors raises its own type for I/O errors
        if is_disk_full(exc):
            raise DiskFull(path) from None
        raise


# ---------------------------------------------------------------------------------------------
# Loading


def read_safetensors(directory: str | Path) -> dict[str, torch.Tensor]:
    """All tensors of model.safetensors (or its shards); refuses pickle-only checkpoints."""
    directory = Path(directory)
    files: list[Path]
    if (directory / WEIGHTS_NAME).is_file():
        files = [directory / WEIGHTS_NAME]
    elif (directory / WEIGHTS_INDEX_NAME).is_file():
        index_path = directory / WEIGHTS_INDEX_NAME
        try:
            weight_map = json.loads(index_path.read_text(encoding="utf-8"))["weight_map"]
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise BertctlError(f"{index_path}: cannot read the shard index: {exc}") from None
        files = [directory / name for name in sorted(set(weight_map.values()))]
    else:
        present = [name for name in PICKLE_NAMES if (directory / name).exists()]
        if present:
            raise BertctlError(f"{directory / present[0]}: only pickle/TF/Flax weights found; bertctl "
                               f"loads model.safetensors only (convert the checkpoint first)")
        raise BertctlError(f"{directory / WEIGHTS_NAME}: not found")
    tensors: dict[str, torch.Tensor] = {}
    for path in files:
        tensors.update(_read_file(path))
    _refuse_non_finite(tensors, directory)
    return tensors


def _read_file(path: Path) -> dict[str, torch.Tensor]:
    try:
        with safe_open(str(path), framework="pt") as f:
            return {key: f.get_tensor(key) for key in f.keys()}
    except Exception as exc:  # safetensors raises several types for missing or corrupt files
        raise BertctlError(f"{path}: cannot read safetensors file: {exc}") from None


_HEAD_WEIGHT = re.compile(r"(^|\.)(classifier(\.out_proj)?|score)\.weight$")


def head_outputs(directory: str | Path) -> int | None:
    """The outputs of a sequence classifier's last layer as its weights hold them (the
    safetensors header alone, no tensor read), or None when the directory holds no such
    weights: what a checkpoint is, whatever its config.json says (transformers 5 writes
    neither num_labels nor id2label for two labels)."""
    directory = Path(directory)
    path = directory / WEIGHTS_NAME
    if not path.is_file():
        return None
    try:
        with safe_open(str(path), framework="pt") as f:
            found = sorted((k for k in f.keys() if _HEAD_WEIGHT.search(k)), key=len)
            return int(f.get_slice(found[-1]).get_shape()[0]) if found else None
    except Exception as exc:  # safetensors raises several types for truncated/corrupt files
        raise BertctlError(f"{path}: cannot read safetensors file: {exc}") from None


def _refuse_non_finite(tensors: dict[str, torch.Tensor], directory: Path) -> None:
    """A weight that is NaN or infinite makes every output NaN: refused when read, naming it,
    rather than found later as a metric of NaN predictions or a 'diverged' fine-tuning."""
    bad = {k: int((~torch.isfinite(t)).sum()) for k, t in tensors.items()
           if t.is_floating_point()}
    bad = {k: n for k, n in bad.items() if n}
    if bad:
        first = sorted(bad)[0]
        raise BertctlError(f"{directory}: {sum(bad.values()):,} weight value(s) are not finite "
                           f"(NaN or infinity), in {len(bad)} tensor(s), the first {first}; "
                           f"the checkpoint is unusable")


def _canonical_name(key: str, arch: architectures.Architecture, prefix: str) -> str:
    """A checkpoint key as a full head-model name (the encoder's prefix, current LayerNorm
    names)."""
    if key.startswith(arch.bare_prefixes):  # a bare encoder's file
        key = prefix + key
    if "LayerNorm." in key:  # TF-converted checkpoints call the LayerNorm affine gamma/beta
        key = key.replace("LayerNorm.gamma", "LayerNorm.weight").replace("LayerNorm.beta", "LayerNorm.bias")
    return key


def load_state_dict(model: nn.Module, state_dict: dict[str, torch.Tensor], source: str = "state dict") -> LoadReport:
    """Copy a HF-named state dict into `model` and report what did not match.

    Works for any mix of bare/headed checkpoint and bare/headed model. Encoder shapes must agree
    with the model's config (BertctlError otherwise); a head of another shape (a 3-label
    classifier loaded for a 2-label task) is left initialised and reported as mismatched.
    """
    model = _unwrap(model)
    arch = architectures.of_model(model)
    ours = model.state_dict()
    headed = isinstance(model, Composed)
    encoder = f"{model.encoder_name}." if headed else ""
    full = f"{arch.encoder_name}."

    incoming: dict[str, torch.Tensor] = {}
    for key, tensor in state_dict.items():
        incoming[_canonical_name(key, arch, full)] = tensor
    # Old HF files hold the MLM output bias as the decoder's bias too (or only there).
    decoder_bias = incoming.pop("cls.predictions.decoder.bias", None)
    if decoder_bias is not None and "cls.predictions.bias" not in incoming:
        incoming["cls.predictions.bias"] = decoder_bias

    report = LoadReport(source=source)
    to_load: dict[str, torch.Tensor] = {}
    for key, tensor in incoming.items():
        if key in arch.ignored_keys:
            continue
        name = key if headed else key.removeprefix(full)
        if name not in ours:
            report.unexpected.append(key)
        elif ours[name].shape != tensor.shape:
            if name.startswith(encoder) and not name[len(encoder):].startswith("pooler."):
                raise BertctlError(f"{source}: {key} has shape {tuple(tensor.shape)} but the "
                                   f"config gives {tuple(ours[name].shape)}")
            report.mismatched.append(name)
        else:
            to_load[name] = tensor
    report.missing = [k for k in ours if k not in to_load and k not in report.mismatched]
    model.load_state_dict(to_load, strict=False)
    return report


def load_model(directory: str | Path, role: str | type | None = None,
               config_updates: dict[str, Any] | None = None,
               **head_kwargs: Any) -> tuple[nn.Module, LoadReport]:
    """Build the model of `role` (architectures.ROLES, or a model class of any architecture,
    standing for its role) of the directory's architecture from its config.json and load its
    weights.

    `role=None` takes the role of the class config.json's `architectures` names (the bare
    encoder if it names none; a BertctlError if it names only classes none has). Head
    arguments not given (num_labels, problem_type) come from config.json when it has them.
    `config_updates` change config.json's fields that hold no weight's shape (a rotary base,
    the longest input a model without a position table reads) before the model is built.
    The returned model is in train mode on the CPU, in float32.
    """
    directory = Path(directory)
    hf_config = read_config_dict(directory)
    source = str(directory / CONFIG_NAME)
    arch = architectures.of_config(hf_config, source)
    config = arch.config_from_hf(hf_config, source)
    if config_updates:
        config = replace(config, **config_updates)   # checked again when built
    names = hf_config.get("architectures") or []
    if isinstance(role, type):
        role = architectures.role_of(role.__name__)
    if role is None:
        known = [r for r in map(architectures.role_of, names) if r in arch.roles()]
        if names and not known:
            # Read as the bare encoder it would lose its head without a word (a family's own
            # head is known once its module is imported: `import bertctl.tasks`).
            raise BertctlError(f"{source}: names {', '.join(map(str, names))}, a model class no "
                               f"loaded architecture or task family has; give the role to "
                               f"load (\"encoder\" for its encoder alone)")
        role = known[0] if known else "encoder"
    head_class = arch.head(role, str(directory))
    if issubclass(head_class, Composed) and (
            head_class.__name__ in names or getattr(head_class, "kwargs_from_any_config", False)):
        # A checkpoint of this very head type knows its label count; another head's does not.
        given = "num_labels" in head_kwargs   # the caller's count wins (a new head)
        head_kwargs = {**head_class.kwargs_from_hf(hf_config), **head_kwargs}
        outputs = head_outputs(directory) if "num_labels" in head_kwargs and not given else None
        if outputs is not None and outputs != head_kwargs["num_labels"]:
            # the head's weights are what the checkpoint is: a one-output reranker whose
            # config lists two labels scores with one
            head_kwargs["num_labels"] = outputs
            if outputs == 1 and hf_config.get("problem_type") is None:
                head_kwargs["problem_type"] = "regression"
    model = head_class(config, **head_kwargs)
    base = lora.base_of(directory)   # an adapter's weights are its base's and its own
    tensors = read_safetensors(base or directory)
    if issubclass(head_class, Composed):
        extra = head_class.extra_weights(directory, hf_config)
        _refuse_non_finite(extra, directory)
        tensors.update(extra)
    report = load_state_dict(model, tensors, source=str(directory))
    if base is not None:
        adapter = _read_file(directory / lora.WEIGHTS)
        _refuse_non_finite(adapter, directory)
        model, given = lora.load(model, directory, adapter, arch.encoder_name)
        report.source = f"{directory} (a LoRA adapter on {base}, merged)"
        report.missing = [k for k in report.missing if k not in given]
        report.mismatched = [k for k in report.mismatched if k not in given]
    return model, report


__all__ = ["LoadReport", "load_model", "load_state_dict", "read_config", "read_config_dict",
           "read_safetensors", "save_model"]

"""LoRA adapters (Hu et al. 2021): a frozen linear layer W plus a trained low-rank update,
y = W x + (alpha / r) B A dropout(x), A (r, in) and B (out, r), B zero at the start so the
model begins as its base.

`attach` puts adapters on the linear layers a model's encoder names as targets and leaves
trainable only them and the task head (the modules outside the encoder, new for the task).
`adapter_files` gives them in peft's format (adapter_config.json, adapter_model.safetensors, keys
`base_model.model.<module>.lora_A.weight` and the head's `base_model.model.<module>.weight`),
so `peft.PeftModel.from_pretrained` reads them onto transformers' model of the base; `merged`
folds each update into its layer, giving the plain model every reader runs (eval, embed,
export), which `load` returns for a saved adapter.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from bertctl.errors import BertctlError, read_json_object

CONFIG = "adapter_config.json"
WEIGHTS = "adapter_model.safetensors"
PREFIX = "base_model.model."
# peft's task types, by the role of the model an adapter belongs to (peft has no multiple
# choice type: its model class is the generic one, which reads the same files).
TASK_TYPES = {"sequence_classification": "SEQ_CLS", "token_classification": "TOKEN_CLS",
              "question_answering": "QUESTION_ANS", "encoder": "FEATURE_EXTRACTION"}


@dataclass(frozen=True)
class LoraSettings:
    rank: int
    alpha: float
    dropout: float = 0.0
    targets: tuple[str, ...] = ()   # none: the architecture's own (its attention's q and v)


class LoraLinear(nn.Module):
    """A linear layer (`base_layer`, frozen) with a low-rank update (`lora_A`, `lora_B`)."""

    def __init__(self, base: nn.Linear, rank: int, alpha: float, dropout: float = 0.0):
        super().__init__()
        self.base_layer = base
        self.lora_A = nn.Linear(base.in_features, rank, bias=False,
                                device=base.weight.device, dtype=base.weight.dtype)
        self.lora_B = nn.Linear(rank, base.out_features, bias=False,
                                device=base.weight.device, dtype=base.weight.dtype)
        self.lora_dropout = nn.Dropout(dropout) if dropout else nn.Identity()
        self.scaling = alpha / rank
        nn.init.kaiming_uniform_(self.lora_A.weight, a=math.sqrt(5))   # nn.Linear's own init
        nn.init.zeros_(self.lora_B.weight)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.base_layer(x) + self.lora_B(self.lora_A(self.lora_dropout(x))) * self.scaling

    def merged(self) -> nn.Linear:
        """The base layer with the update folded into its weight."""
        base = self.base_layer
        with torch.no_grad():
            delta = (self.lora_B.weight.float() @ self.lora_A.weight.float()) * self.scaling
            base.weight.add_(delta.to(base.weight.dtype))
        return base


def _encoder(model: nn.Module) -> tuple[str, nn.Module]:
    """(the name its weights carry before the encoder's, the encoder): a headed model's
    encoder at its `encoder_name`, or a bare encoder itself."""
    name = getattr(model, "encoder_name", None)
    return (f"{name}.", getattr(model, name)) if name is not None else ("", model)


def head_modules(model: nn.Module) -> list[str]:
    """The model's modules outside its encoder: the task's head, trained and saved whole
    (none for a bare encoder)."""
    encoder = getattr(model, "encoder_name", None)
    if encoder is None:
        return []
    elsewhere = getattr(model, "weights_elsewhere", ())
    return [name for name, child in model.named_children()
            if name != encoder and any(True for _ in child.parameters())
            and not any(p.startswith(name) for p in elsewhere)]


def chosen_layers(encoder: nn.Module, settings: LoraSettings, default_targets: tuple[str, ...],
                  where: str) -> list[tuple[str, nn.Linear]]:
    """The encoder's linear layers an adapter goes on (named by `settings.targets`, else
    `default_targets`); a rank outside 1..the layer's width or a target naming no linear
    layer is refused. Cheap on a model built on the meta device (finetune checks there
    before any work)."""
    targets = settings.targets or default_targets
    chosen = [(name, m) for name, m in encoder.named_modules()
              if isinstance(m, nn.Linear) and name.rsplit(".", 1)[-1] in targets]
    missing = sorted(set(targets) - {name.rsplit(".", 1)[-1] for name, _ in chosen})
    if missing:
        known = sorted({name.rsplit(".", 1)[-1] for name, m in encoder.named_modules()
                        if isinstance(m, nn.Linear) and name})
        raise BertctlError(f"{where}: --lora-targets {', '.join(missing)} name no linear layer "
                           f"of this model's encoder (its linear layers: {', '.join(known)})")
    narrowest = min(min(m.in_features, m.out_features) for _, m in chosen)
    if not 1 <= settings.rank <= narrowest:
        raise BertctlError(f"{where}: --lora-rank {settings.rank} must be 1 to {narrowest} "
                           f"(the narrowest adapted layer's width)")
    return chosen


def attach(model: nn.Module, settings: LoraSettings, default_targets: tuple[str, ...],
           where: str) -> list[str]:
    """Put adapters on the encoder's linear layers `chosen_layers` gives and freeze
    everything else but the head; returns the adapted modules' names."""
    prefix, encoder = _encoder(model)
    chosen = chosen_layers(encoder, settings, default_targets, where)
    model.requires_grad_(False)
    for name, base in chosen:
        parent, _, leaf = name.rpartition(".")
        owner = encoder.get_submodule(parent) if parent else encoder
        setattr(owner, leaf, LoraLinear(base, settings.rank, settings.alpha, settings.dropout))
    for name in head_modules(model):
        getattr(model, name).requires_grad_(True)
    return [f"{prefix}{name}" for name, _ in chosen]


def adapted(model: nn.Module) -> bool:
    return any(isinstance(m, LoraLinear) for m in model.modules())


def merged(model: nn.Module) -> nn.Module:
    """The model with every adapter folded into its layer (in place): a plain model."""
    for name, module in list(model.named_modules()):
        if isinstance(module, LoraLinear):
            parent, _, leaf = name.rpartition(".")
            setattr(model.get_submodule(parent) if parent else model, leaf, module.merged())
    return model


def adapter_files(model: nn.Module, base: Path, role: str | None
                  ) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """The adapter's weights and config as peft writes them (adapter_model.safetensors,
    adapter_config.json): the adapters' and the head's tensors, the base's path."""
    heads = head_modules(model)
    layers = [(name, m) for name, m in model.named_modules() if isinstance(m, LoraLinear)]
    targets = sorted({name.rsplit(".", 1)[-1] for name, _ in layers})
    one = layers[0][1]
    rank = one.lora_A.out_features
    dropout = one.lora_dropout.p if isinstance(one.lora_dropout, nn.Dropout) else 0.0
    tensors = {PREFIX + key: value.detach().contiguous().cpu()
               for key, value in model.state_dict().items()
               if ".lora_A." in key or ".lora_B." in key or key.split(".", 1)[0] in heads}
    config = {"peft_type": "LORA", "task_type": TASK_TYPES.get(role),
              "base_model_name_or_path": str(Path(base).resolve()), "r": rank,
              "lora_alpha": one.scaling * rank, "lora_dropout": dropout,
              "target_modules": targets, "modules_to_save": heads, "bias": "none",
              "fan_in_fan_out": False, "inference_mode": True, "init_lora_weights": True}
    return tensors, config


def read_config(directory: Path) -> dict[str, Any] | None:
    """A directory's adapter config (None: it holds no adapter), checked as bertctl reads it."""
    path = Path(directory) / CONFIG
    if not path.is_file():
        return None
    config = read_json_object(path, "the adapter config")
    if config.get("peft_type") != "LORA":
        raise BertctlError(f"{path}: not a LoRA adapter (peft_type "
                           f"{config.get('peft_type')!r})")
    for key, kind in (("r", int), ("lora_alpha", (int, float)), ("target_modules", list),
                      ("base_model_name_or_path", str)):
        if not isinstance(config.get(key), kind) or isinstance(config.get(key), bool):
            raise BertctlError(f"{path}: {key} is missing or not a "
                               f"{'number' if key == 'lora_alpha' else kind.__name__}")
    if config.get("use_dora") or config.get("use_rslora") or config.get("fan_in_fan_out"):
        raise BertctlError(f"{path}: DoRA, rsLoRA and fan-in-fan-out adapters are not read "
                           f"by bertctl")
    return config


def base_of(directory: Path) -> Path | None:
    """The base model directory a saved adapter names (None: not an adapter)."""
    config = read_config(directory)
    if config is None:
        return None
    base = Path(config["base_model_name_or_path"])
    if not base.is_absolute():
        base = Path(directory) / base
    if not base.is_dir():
        raise BertctlError(f"{Path(directory) / CONFIG}: its base model {base} is missing (an "
                           f"adapter holds no base weights)")
    return base


def load(model: nn.Module, directory: Path, tensors: dict[str, torch.Tensor],
         encoder_name: str) -> tuple[nn.Module, set[str]]:
    """The base `model` (its head of the adapter's role, or its bare encoder) with the adapter
    in `directory` (its config; `tensors`, its weights as the file holds them) attached,
    loaded and merged: the plain model it stands for; and the names of the model's weights the
    adapter gave (its head's). `encoder_name`: where the architecture's headed models keep the
    encoder (a bare encoder reads the adapter's weights there and leaves its head's)."""
    config = read_config(directory)
    where = str(Path(directory) / WEIGHTS)
    settings = LoraSettings(rank=config["r"], alpha=float(config["lora_alpha"]),
                            targets=tuple(config["target_modules"]))
    frozen = {name for name, p in model.named_parameters() if not p.requires_grad}
    attach(model, settings, (), str(Path(directory) / CONFIG))
    tensors = {k.removeprefix(PREFIX): v for k, v in tensors.items()}
    if getattr(model, "encoder_name", None) is None:   # the bare encoder of a headed one
        inside, heads = f"{encoder_name}.", tuple(config.get("modules_to_save") or ())
        tensors = {k.removeprefix(inside): v for k, v in tensors.items()
                   if k.startswith(inside) or not k.startswith(heads)}
    own = model.state_dict()
    wanted = {k for k in own if ".lora_A." in k or ".lora_B." in k}
    missing = sorted(wanted - set(tensors))
    unknown = sorted(set(tensors) - set(own))
    if missing or unknown:
        raise BertctlError(f"{where}: does not fit the base model: "
                           + (f"missing {missing[0]}" if missing else f"unknown {unknown[0]}")
                           + f" ({len(missing)} missing, {len(unknown)} unknown)")
    for key, value in tensors.items():
        if own[key].shape != value.shape:
            raise BertctlError(f"{where}: {key} has shape {tuple(value.shape)}, the model's is "
                               f"{tuple(own[key].shape)}")
    model.load_state_dict(tensors, strict=False)
    merged(model)
    for name, p in model.named_parameters():   # as the model was built (a frozen pooler)
        p.requires_grad_(name not in frozen)
    return model, {k for k in tensors if k not in wanted}


def trainable_parameters(model: nn.Module) -> tuple[int, int]:
    """(trained, all) parameter counts."""
    params = list(model.parameters())
    return sum(p.numel() for p in params if p.requires_grad), sum(p.numel() for p in params)


def max_difference(model: nn.Module, inputs: dict[str, torch.Tensor]) -> float:
    """The largest absolute difference between the adapted model's outputs and its merged
    copy's on `inputs` (what `export` and every reader get is the merged one)."""
    model = model.eval()
    plain = merged(copy.deepcopy(model))
    device = next(model.parameters()).device
    inputs = {k: v.to(device) for k, v in inputs.items()}
    with torch.inference_mode():
        a, b = model(**inputs), plain(**inputs)
    return max(float((a[k].float() - b[k].float()).abs().max()) for k in a
               if isinstance(a[k], torch.Tensor) and a[k].dim() and k != "loss")


__all__ = ["CONFIG", "WEIGHTS", "LoraLinear", "LoraSettings", "adapter_files", "attach",
           "base_of", "load", "merged"]

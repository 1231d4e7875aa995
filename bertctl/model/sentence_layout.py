"""sentence-transformers' model layout read without torch (the stages that only look at a model
start without it): which modules a directory holds, each one's settings, the prompts; as
config.json's KEY records it. What it computes is bertctl.model.sentence's.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from bertctl.errors import BertctlError

KEY = "bertctl_embedding"
MODES = ("cls", "mean", "max", "mean_sqrt_len_tokens", "weightedmean", "lasttoken")
# sentence-transformers before 6 saved a flag per mode.
LEGACY_FLAGS = {"pooling_mode_cls_token": "cls", "pooling_mode_mean_tokens": "mean",
                "pooling_mode_max_tokens": "max",
                "pooling_mode_mean_sqrt_len_tokens": "mean_sqrt_len_tokens",
                "pooling_mode_weightedmean_tokens": "weightedmean",
                "pooling_mode_lasttoken": "lasttoken"}
# The activations a Dense layer may name (torch.nn's classes), computed by bertctl.
ACTIVATIONS = ("torch.nn.modules.linear.Identity", "torch.nn.modules.activation.Tanh",
               "torch.nn.modules.activation.ReLU", "torch.nn.modules.activation.GELU",
               "torch.nn.modules.activation.Sigmoid", "torch.nn.modules.activation.SiLU")
COMPUTED = ("Transformer", "Pooling", "Dense", "Normalize")
# The prompt names sentence-transformers' encode_document tries, in its order.
DOCUMENT_PROMPTS = ("document", "passage", "corpus")
SIMILARITY = ("cosine", None)


# ---------------------------------------------------------------------------------------------
# Reading the layout


def _json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8-sig"))
    except FileNotFoundError:
        raise BertctlError(f"{path}: not found (named by modules.json)") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise BertctlError(f"{path}: cannot read: {' '.join(str(exc).split())}") from None


def inside(directory: Path, relative: Any, where: Path) -> Path:
    """A module's folder, which must lie inside the model directory (a crafted modules.json
    could name any path)."""
    if not isinstance(relative, str) or Path(relative).is_absolute() or ".." in Path(relative).parts:
        raise BertctlError(f"{where}: module path {relative!r} is not a folder inside the model")
    path = directory / relative
    if path.is_symlink() or not path.resolve().is_relative_to(directory.resolve()):
        raise BertctlError(f"{where}: module path {relative!r} leads outside the model")
    return path


def _pooling(config: dict[str, Any], where: Path) -> list[str]:
    if "pooling_mode" in config:     # sentence-transformers 6: a name or a list of names
        given = config["pooling_mode"]
        modes = [given] if isinstance(given, str) else list(given or [])
    else:
        modes = [mode for flag, mode in LEGACY_FLAGS.items() if config.get(flag)] or ["mean"]
    bad = [m for m in modes if m not in MODES]
    if bad or not modes:
        raise BertctlError(f"{where}: pooling mode {bad[0] if bad else modes!r} is not one "
                           f"sentence-transformers has ({', '.join(MODES)})")
    if config.get("include_prompt", True) is not True:
        raise BertctlError(f"{where}: include_prompt false (pooling that leaves the prompt's "
                           f"tokens out, INSTRUCTOR-style) is not computed by bertctl")
    return modes


def _dense(config: dict[str, Any], where: Path) -> dict[str, Any]:
    if config.get("module_input_name", "sentence_embedding") != "sentence_embedding" or \
            config.get("module_output_name") not in (None, "sentence_embedding"):
        raise BertctlError(f"{where}: a Dense layer over {config.get('module_input_name')!r} "
                           f"(not the sentence vector) is not computed by bertctl")
    activation = config.get("activation_function", "torch.nn.modules.activation.Tanh")
    if activation not in ACTIVATIONS:
        raise BertctlError(f"{where}: activation {activation!r} is not computed by bertctl "
                           f"(it computes {', '.join(a.rsplit('.', 1)[1] for a in ACTIVATIONS)})")
    try:
        spec = {"in_features": int(config["in_features"]),
                "out_features": int(config["out_features"]),
                "bias": bool(config.get("bias", True)), "activation_function": activation,
                "use_residual": bool(config.get("use_residual", False))}
    except (KeyError, TypeError, ValueError):
        raise BertctlError(f"{where}: a Dense config needs in_features and out_features") from None
    if min(spec["in_features"], spec["out_features"]) < 1:
        raise BertctlError(f"{where}: in_features and out_features must be positive")
    return spec


def read_layout(directory: Path) -> dict[str, Any] | None:
    """The sentence-transformers layout of a model directory as config.json's KEY records it
    (with each Dense layer's folder, and the prompts), None without modules.json; BertctlError
    naming the first module or setting bertctl does not compute."""
    where = directory / "modules.json"
    if not where.is_file():
        return None
    modules = _json(where)
    if not isinstance(modules, list) or not all(isinstance(m, dict) for m in modules):
        raise BertctlError(f"{where}: expected a list of modules")
    modules = sorted(modules, key=lambda m: m.get("idx", 0) if isinstance(m.get("idx"), int)
                     else 0)
    kinds = [str(m.get("type", "")).rsplit(".", 1)[-1] for m in modules]
    for i, (module, kind) in enumerate(zip(modules, kinds)):
        if kind not in COMPUTED:
            raise BertctlError(f"{where}: module {i} ({module.get('type')}) is not computed "
                               f"by bertctl (it computes {', '.join(COMPUTED)})")
    if not kinds or kinds[0] != "Transformer" or modules[0].get("path", "") not in ("", "."):
        raise BertctlError(f"{where}: the first module must be the Transformer in the model "
                           f"directory itself")
    if kinds == ["Transformer"]:
        return None   # the model alone, as config.json says (a CrossEncoder saves this)
    order = [k for k in kinds if k != "Dense"]
    if order not in (["Transformer", "Pooling"], ["Transformer", "Pooling", "Normalize"]) or \
            (("Dense" in kinds) and kinds.index("Dense") < kinds.index("Pooling")) or \
            ("Normalize" in kinds and kinds[-1] != "Normalize"):
        raise BertctlError(f"{where}: modules {' -> '.join(kinds)}: bertctl computes "
                           f"Transformer -> Pooling [-> Dense ...] [-> Normalize]")
    record: dict[str, Any] = {"normalize": "Normalize" in kinds, "dense": []}
    for module, kind in zip(modules, kinds):
        if kind == "Pooling":
            folder = inside(directory, module.get("path", ""), where)
            record["pooling"] = _pooling(_json(folder / "config.json"), folder / "config.json")
        elif kind == "Dense":
            folder = inside(directory, module.get("path", ""), where)
            spec = _dense(_json(folder / "config.json"), folder / "config.json")
            record["dense"].append({**spec, "path": module.get("path")})
    if len(record["pooling"]) == 1:
        record["pooling"] = record["pooling"][0]
    # The length its encode truncates at: sentence_bert_config.json's, else (as
    # sentence-transformers 6 saves it) the tokenizer's model_max_length.
    for name in ("sentence_bert_config.json", "tokenizer_config.json"):
        given = _json(directory / name) if (directory / name).is_file() else None
        if not isinstance(given, dict):
            continue
        length = given.get("max_seq_length" if name.startswith("sentence") else
                           "model_max_length")
        if "max_seq_length" not in record and isinstance(length, int) and 0 < length < 10**6:
            record["max_seq_length"] = length
        if name.startswith("sentence") and given.get("do_lower_case"):
            record["do_lower_case"] = True
    record.update(_prompts(directory))
    return record


def _prompts(directory: Path) -> dict[str, Any]:
    path = directory / "config_sentence_transformers.json"
    if not path.is_file():
        return {}
    given = _json(path)
    if not isinstance(given, dict):
        raise BertctlError(f"{path}: expected a JSON object")
    if given.get("similarity_fn_name") not in SIMILARITY:
        raise BertctlError(f"{path}: similarity_fn_name {given['similarity_fn_name']!r}: bertctl "
                           f"searches by cosine only")
    prompts = given.get("prompts") or {}
    if not isinstance(prompts, dict) or not all(isinstance(k, str) and isinstance(v, (str, type(None)))
                                                for k, v in prompts.items()):
        raise BertctlError(f"{path}: prompts must map names to texts")
    prompts = {k: v or "" for k, v in prompts.items()}
    default = given.get("default_prompt_name")
    if default is not None and default not in prompts:
        raise BertctlError(f"{path}: default_prompt_name {default!r} is not one of the prompts "
                           f"({', '.join(prompts) or 'none'})")
    out: dict[str, Any] = {}
    if any(prompts.values()):
        out["prompts"] = prompts
    if default is not None and prompts.get(default):
        out["default_prompt_name"] = default
    return out


CROSS_KEY = "bertctl_cross_encoder"   # what read_config_dict records of a CrossEncoder


def read_cross_encoder(directory: Path, config: dict[str, Any]) -> dict[str, Any] | None:
    """What a sentence-transformers CrossEncoder saved of its scoring, wherever its version
    wrote it: the activation its predict applies (config_sentence_transformers.json's
    activation_fn as sentence-transformers 5 and 6 save it, config.json's
    sentence_transformers.activation_fn as 4 did, or the sbert_ce_default_activation_function
    of older ones), None for no CrossEncoder."""
    path = directory / "config_sentence_transformers.json"
    given = _json(path) if path.is_file() else None
    own = given if isinstance(given, dict) and (given.get("model_type") == "CrossEncoder"
                                                or "activation_fn" in given) else None
    old = config.get("sentence_transformers")
    if own is not None:
        return {"activation_fn": own.get("activation_fn")}
    if isinstance(old, dict) and "activation_fn" in old:
        return {"activation_fn": old["activation_fn"]}
    if "sbert_ce_default_activation_function" in config:
        return {"activation_fn": config["sbert_ce_default_activation_function"]}
    return None


def record_of(hf_config: dict[str, Any]) -> dict[str, Any] | None:
    """config.json's KEY (a layout read from the directory, or what bertctl wrote); raises
    the refusal a layout bertctl does not compute was read with."""
    record = hf_config.get(KEY)
    if isinstance(record, dict) and "refused" in record:
        raise BertctlError(record["refused"])
    return record if isinstance(record, dict) else None


def prompt_for(record: dict[str, Any] | None, role: str) -> str:
    """The text sentence-transformers puts before a `role` ("query", "document", or "text":
    encode's default) of a model whose layout is `record`."""
    record = record or {}
    prompts = record.get("prompts") or {}
    default = prompts.get(record.get("default_prompt_name") or "", "")
    if role == "query":
        return prompts["query"] if "query" in prompts else default
    if role == "document":
        name = next((n for n in DOCUMENT_PROMPTS if n in prompts), None)
        return prompts[name] if name else default
    return default


__all__ = ["CROSS_KEY", "KEY", "MODES", "inside", "prompt_for", "read_cross_encoder",
           "read_layout", "record_of"]

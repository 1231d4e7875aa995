"""How settings work, for every stage and the core alike: a pydantic model whose fields are both
`--flags` (derived by the CLI from the field itself, so the two cannot drift apart) and keys of
`--config FILE.yaml`, resolved as defaults < file < flags. `extra="forbid"` turns a typo into an
error rather than a silently ignored setting.

A field's description is its --help text. `json_schema_extra` (built with `meta`) says where
the flag is shown in --help (`panel`), whether the setting is part of an artifact's identity, and
the flag's spelling where it is not derived from the name.
"""

from __future__ import annotations

import typing
from pathlib import Path
from typing import Any, ClassVar, Literal, Optional, TypeVar

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from bertctl.errors import BertctlError
from bertctl.hardware import auto_precision

# A sequence length setting's bounds (data, fine-tuning, eval, embed: one declaration; 8192 is
# ModernBERT's context, and a model's own positions bound it further), and the length where
# neither the user nor the model says one (the paper's fine-tuning length).
SEQ_LENGTH = {"ge": 8, "le": 8192}
DEFAULT_LENGTH = 128

# The --help panels, in the order a reader looks for them.
PANELS = TASK, TRAINING, MODEL, DATA, EVALUATION, CHECKPOINTS, RUNTIME = (
    "Task", "Training", "Model", "Data", "Evaluation", "Checkpoints", "Runtime")


def meta(panel: str, *, identity: bool = True, flag: str | None = None,
         text: bool = False, hashed_if_changed: bool = False) -> dict[str, Any]:
    """A field's json_schema_extra. identity=False: the setting changes how a run goes (worker
    counts, logging), not what it makes, so changing it must not invalidate an artifact.
    hashed_if_changed=True: a setting added later whose default makes what the code made
    before it existed; the id leaves it out at its default, so those artifacts keep their ids.
    text=True: the flag takes text that the field's validator parses (a duration: 30m)."""
    extra: dict[str, Any] = {"panel": panel}
    if not identity:
        extra["identity"] = False
    if hashed_if_changed:
        extra["hashed_if_changed"] = True
    if flag:
        extra["flag"] = flag
    if text:
        extra["text"] = True
    return extra


def batch_size_field(default: int, *, step: bool, what: str = "Examples", note: str = "") -> Any:
    """`--batch-size`, declared here for every command with each one's default. `step`: the
    examples of an optimizer step over all processes (a training stage's: part of what it
    makes); else a forward pass's (how a stage runs: outside the artifact's id)."""
    if step:
        return Field(default, ge=1, description="Examples per optimizer step, over all "
                     f"processes{note}.", json_schema_extra=meta(TRAINING))
    return Field(default, ge=1, description=f"{what} per forward pass.",
                 json_schema_extra=meta(RUNTIME, identity=False))


def corpus_text_column() -> Any:
    """`--text-column` of a command that reads a corpus (tokenize, build-pretrain-data, audit)."""
    return Field(None, description="Column holding the text in JSON lines, CSV, parquet or "
                 "Arrow corpus files; unset: text, or a table's only column.",
                 json_schema_extra=meta(DATA))


def field_meta(field) -> dict[str, Any]:
    return field.json_schema_extra if isinstance(field.json_schema_extra, dict) else {}


class StageConfig(BaseModel):
    # No setting means anything at inf or NaN (an --lr inf trained a step of NaNs before the
    # divergence check stopped it): refused for every float, as out of range.
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)
    # What a settings error is prefixed with when the settings are built directly (in code
    # rather than by `resolve`, which names the config file instead).
    where: ClassVar[str] = "settings"
    # The artifact kind a stage with these settings writes: how a manifest's recorded settings
    # are read back into the part its id hashes (`identity_exclusions`).
    produces: ClassVar[str | None] = None

    @model_validator(mode="before")
    @classmethod
    def _nothing_empty(cls, data: Any) -> Any:
        """An empty value given for a text or list setting (--student-layers "", labels: [])
        means nothing; it is refused rather than read as unset."""
        if isinstance(data, dict):
            for key, value in data.items():
                if value == "" or (isinstance(value, (list, tuple))
                                   and (not value or "" in value)):
                    raise ValueError(f"{key} is empty: give a value, or leave it out")
                field = cls.model_fields.get(key)
                # YAML's true is not 1: a yes/no given for a number is refused (pydantic's lax
                # mode would take true as 1 and false as 0).
                if isinstance(value, bool) and field is not None and \
                        _numeric(field.annotation):
                    raise ValueError(f"{key}: {str(value).lower()} is a yes/no; give a number")
        return data

    def __init__(self, /, **data: Any):
        try:
            super().__init__(**data)
        except ValidationError as exc:
            raise SettingsError(exc.errors(), f"{self.where}: ") from None


def _numeric(annotation) -> bool:
    """A number field (int or float, optional or not), not one that also takes a bool."""
    args = typing.get_args(annotation) or (annotation,)
    kinds = {a for a in args if a is not type(None)}
    return bool(kinds) and bool not in kinds and kinds <= {int, float}


class SettingsError(BertctlError):
    """Invalid settings: names the key, the value and the reason of the first problem."""

    def __init__(self, errors: list[dict], prefix: str = ""):
        self.errors = errors
        super().__init__(prefix + _describe(errors[0], ""))


C = TypeVar("C", bound=StageConfig)


def load_yaml(path: str | Path) -> dict[str, Any]:
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise BertctlError(f"{path}: config file not found") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise BertctlError(f"{path}: cannot read config file: {exc}") from None
    try:
        data = yaml.load(text, Loader=_UniqueKeyLoader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark else str(path)
        problem = getattr(exc, "problem", None) or str(exc)
        raise BertctlError(f"{where}: invalid YAML: {' '.join(problem.split())}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise BertctlError(f"{path}: config file must be a mapping of settings, "
                           f"not a {type(data).__name__}")
    # YAML users write either flag spelling; the model's keys use underscores. Both spellings
    # of one setting would leave it to the order which one wins: refused, as a repeated key.
    out: dict[str, Any] = {}
    spelled: dict[str, str] = {}
    for k, v in data.items():
        key = str(k).replace("-", "_")
        if key in out:
            raise BertctlError(f"{path}: setting {key!r} is given twice ({spelled[key]!r} and "
                               f"{str(k)!r}); keep one")
        out[key], spelled[key] = v, str(k)
    return out


class _UniqueKeyLoader(yaml.SafeLoader):
    """safe_load, but a key repeated in one mapping is an error (PyYAML keeps the last one
    silently)."""

    def construct_mapping(self, node, deep=False):
        seen = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if isinstance(key, (str, int, float, bool)) and key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"key {key!r} is repeated", key_node.start_mark)
            seen.add(key)
        return super().construct_mapping(node, deep)


def _describe(err: dict, source: str) -> str:
    key = ".".join(str(p) for p in err["loc"])
    if not key:  # a rule across several settings
        return f"{source}{err['msg'].removeprefix('Value error, ')}"
    if err["type"] == "extra_forbidden":
        return f"{source}unknown setting {key!r}"
    value = err.get("input")
    return f"{source}setting {key!r} = {value!r}: {err['msg'].removeprefix('Value error, ')}"


def resolve(cls: type[C], config_file: str | Path | None = None,
            overrides: dict[str, Any] | None = None) -> C:
    """Defaults < values from `config_file` < `overrides` (flags actually given).

    Raises BertctlError naming the key, the value and the reason for the first problem.
    """
    values: dict[str, Any] = {}
    file_values = load_yaml(config_file) if config_file else {}
    values.update(file_values)
    given = {k: v for k, v in (overrides or {}).items() if v is not None}
    values.update(given)
    try:
        return cls(**values)
    except SettingsError as exc:
        err = exc.errors[0]
        key = str(err["loc"][0]) if err["loc"] else ""
        source = f"{config_file}: " if config_file and key in file_values and key not in given else ""
        raise BertctlError(_describe(err, source)) from None


def as_dict(config: StageConfig) -> dict[str, Any]:
    """The resolved settings as plain JSON values, the form stored in manifests."""
    return config.model_dump(mode="json")


def identity(config: StageConfig) -> dict[str, Any]:
    """The settings that determine the output, the part an artifact id hashes. Fields marked
    `json_schema_extra={"identity": False}` (worker counts, logging intervals) change how a
    stage runs, not what it makes, so changing them must not invalidate an artifact."""
    if getattr(config, "precision", None) == "auto":   # (a stage resolves it first: Runtime)
        raise RuntimeError(f"{type(config).__name__}: precision auto is unresolved; hash "
                           f"settings.resolved()")
    values = as_dict(config)
    for name, field in type(config).model_fields.items():
        if field_meta(field).get("identity") is False:
            values.pop(name, None)
    return without_unchanged_defaults(values, type(config))


# Every stage's settings class, registered by the stages' settings package when it is imported
# (bertctl.stages.settings): the contract checks artifact ids with them and, being
# below the stages, must not import them.
_STAGE_SETTINGS: list[type[StageConfig]] = []


def register_stage_settings(*classes: type[StageConfig]) -> None:
    _STAGE_SETTINGS.extend(c for c in classes if c not in _STAGE_SETTINGS)


def stage_settings() -> tuple[type[StageConfig], ...]:
    """The registered stage settings classes (every entry point, the CLI and each stage,
    imports them before any artifact is read)."""
    if not _STAGE_SETTINGS:
        raise RuntimeError("no stage settings registered: import bertctl.stages.settings "
                           "before reading artifacts")
    return tuple(_STAGE_SETTINGS)


def without_unchanged_defaults(values: dict[str, Any], *classes) -> dict[str, Any]:
    """`values` without the `hashed_if_changed` settings of `classes` that are at their
    default."""
    for cls in classes:
        for name, field in cls.model_fields.items():
            if field_meta(field).get("hashed_if_changed") and values.get(name) == field.default:
                values = {k: v for k, v in values.items() if k != name}
    return values


def identity_exclusions(kind: str, classes) -> set[frozenset[str]]:
    """The sets of fields `identity` may have left out of an artifact of `kind`: one per
    settings class of `classes` writing that kind (stage_settings()), and the empty set
    (settings given as a plain dict, as `--combine` records them)."""
    found: set[frozenset[str]] = {frozenset()}
    for cls in classes:
        if cls.produces == kind:
            found.add(frozenset(n for n, f in cls.model_fields.items()
                                if field_meta(f).get("identity") is False))
    return found


def plugin_option_fields(plugins, kind: str, shared_panel: str, stage: str | None = None
                         ) -> dict[str, tuple[Any, Any]]:
    """name -> (annotation, FieldInfo): the options the registered `plugins` of one kind (task
    families, pretraining objectives) declare in their `options_model`, as optional fields of
    a stage's settings, one flag each in a help panel of the plug-in's ("Span QA (family
    span)"). Unset by default (unset: the plug-in's own default); the values' checks are the
    plug-in's, when it reads them. Two plug-ins may share an option name: one flag serves both,
    its help joining theirs, in `shared_panel`. An option whose metadata names
    `stages` is shown by those stages only."""
    owners: dict[str, list[tuple[Any, Any]]] = {}
    for plugin in plugins:
        model = plugin.options_model
        if model is None:
            continue
        for name, info in model.model_fields.items():
            if stage is not None and stage not in field_meta(info).get("stages", (stage,)):
                continue
            owners.setdefault(name, []).append((plugin, info))
    fields = {}
    for name, found in owners.items():
        annotations = {info.annotation for _, info in found}
        if len(annotations) > 1 and len({Optional[a] for a in annotations}) > 1:  # noqa: UP007
            raise TypeError(f"{kind}s {', '.join(p.name for p, _ in found)} declare the "
                            f"option {name!r} with different types")
        plugin, info = found[0]
        panel = shared_panel if len(found) > 1 else f"{plugin.title} ({kind} {plugin.name})"
        help_text = (info.description if len(found) == 1 else
                     " ".join(f"{p.title}: {i.description[:1].lower()}{i.description[1:]}"
                              for p, i in found))
        fields[name] = (Optional[info.annotation], Field(  # noqa: UP007 - typer reads Optional
            None, description=help_text, json_schema_extra=meta(panel)))
    return fields


# The precisions a model runs in; `auto` is the machine's choice, made by the stage (Runtime).
Precision = Literal["auto", "fp32", "bf16", "fp16"]


class Threads(StageConfig):
    """The CPU threads of a stage that computes: declared once, mixed into each."""

    threads: int | None = Field(
        None, ge=1, le=4096, description="CPU threads per process; unset: OMP_NUM_THREADS if "
        "set, else the cores this process may use (affinity and cgroup quota).",
        json_schema_extra=meta(RUNTIME, identity=False))


class Runtime(Threads):
    """Where and in what precision a stage runs a model: declared once, mixed into every stage
    that runs one. `auto` stays `auto` here; the stage resolves it first (`resolved`), so the
    manifest records and the artifact id hashes what this machine runs."""

    precision: Precision = Field(
        "auto", description="auto: bf16 where the device runs bf16 matmuls natively (CPUs with "
        "AMX or AVX512-BF16, GPUs that support it), else fp32; fp32; bf16 autocast; fp16 "
        "autocast, on a CUDA GPU only (training adds a gradient scaler). Recorded resolved.",
        json_schema_extra=meta(RUNTIME))
    device: Literal["auto", "cpu", "cuda"] = Field(
        "auto", description="auto: cuda when available (cuda:LOCAL_RANK under torchrun).",
        json_schema_extra=meta(RUNTIME, identity=False))

    def resolved(self):
        """These settings with `auto` precision made this machine's (bertctl.hardware)."""
        if self.precision != "auto":
            return self
        return self.model_copy(update={"precision": auto_precision(self.device)})

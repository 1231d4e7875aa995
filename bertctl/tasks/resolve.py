"""A model's task as the flags refine it, and how a data file is read for it: what eval, export
--check and distillation's teacher share.

    task = model_task(config, model)               # ModelTask: spec, family, label list
    opened = open_task(config, model, Path(DATA))  # TaskInput: + the file, the sequence length

`model` is any object with the model input's `path`, its config.json (`hf_config`) and its task
record (`task`, the parsed TASK_FILE, or None): the stages' ModelSource.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from bertctl import console
from bertctl.errors import BertctlError
from bertctl.model.sentence_layout import CROSS_KEY, KEY
from bertctl.settings import DEFAULT_LENGTH
from bertctl.data.tables import format_of, is_saved_dataset
from bertctl.tasks.base import NotesHead, RecognisesData
from bertctl.tasks.registry import FAMILIES, get
from bertctl.tasks.spec import TaskSpec, make_task_spec

# The task record beside a fine-tuned model's weights: its spec, label list, length, calibration.
TASK_FILE = "bertctl_task.json"


class TaskModel(Protocol):
    path: Path
    hf_config: dict[str, Any]
    task: dict[str, Any] | None


@dataclass(frozen=True)
class ModelTask:
    spec: TaskSpec
    family: Any            # the registered tasks.base.Family
    label_list: tuple[str, ...] | None


@dataclass(frozen=True)
class TaskInput:
    """How to read one data file for a model: its spec (for that file), family and labels,
    the file itself (a preset's directory resolved to its dev file) and the sequence length."""

    spec: TaskSpec
    family: Any
    label_list: tuple[str, ...] | None
    file: Path
    max_seq_length: int


def model_task(config, model: TaskModel, data: Path | None = None) -> ModelTask:
    """The model's task as the flags refine it (or as DATA's layout says, for a model without
    a task), the model's head checked against it."""
    spec = resolve_spec(config, model, data)
    family = get(spec.family)
    spec = family.for_model(spec, model.hf_config)
    label_list = family.resolve_labels(spec, model.task, model.hf_config, config.labels,
                                       str(model.path))
    family.check_head(model.hf_config, spec, label_list, str(model.path))
    note = (family.head_note(model.hf_config, spec, str(model.path))
            if isinstance(family, NotesHead) else None)
    if note:
        console.log(note)
    return ModelTask(spec, family, label_list)


def task_length(config, model: TaskModel) -> int:
    """--max-seq-length, else the model's fine-tuning length, else a sentence-transformers
    model's own (what its encode truncates at) or a CrossEncoder's (its tokenizer's
    model_max_length, where its predict truncates), else DEFAULT_LENGTH."""
    record = model.hf_config.get(KEY)
    own = record.get("max_seq_length") if isinstance(record, dict) else None
    if own is None and isinstance(model.hf_config.get(CROSS_KEY), dict):
        own = tokenizer_length(model.path)
    return config.max_seq_length or int((model.task or {}).get("max_seq_length")
                                        or own or DEFAULT_LENGTH)


def tokenizer_length(directory: Path) -> int | None:
    """The tokenizer's model_max_length (tokenizer_config.json), when it sets a usable one."""
    path = Path(directory) / "tokenizer_config.json"
    try:
        record = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise BertctlError(f"{path}: cannot read: {' '.join(str(exc).split())}") from None
    given = record.get("model_max_length") if isinstance(record, dict) else None
    ok = isinstance(given, (int, float)) and not isinstance(given, bool) and 0 < given < 1e9
    return int(given) if ok else None


def open_task(config, model: TaskModel, data: Path) -> TaskInput:
    """How to read DATA for the model, the model's head checked against the task."""
    task = model_task(config, model, data)
    data = task_file(task.spec, data)
    return TaskInput(task.spec.for_file(data), task.family, task.label_list, data,
                     task_length(config, model))


def resolve_spec(config, model: TaskModel, data: Path | None = None) -> TaskSpec:
    """The TaskSpec to read DATA with: the model's task, with the flags given replacing its
    fields; a preset named by --task instead; the flags alone for a model without one; or
    the family whose layout DATA has (a BEIR directory: retrieval)."""
    flags = config.task_fields()
    if getattr(config, "header", None) is not None:   # e.g. GLUE's CoLA test file has a header, its dev file none
        flags["header"] = config.header
    if config.task is not None:
        return make_task_spec(config.task, **flags)
    if model.task is not None:
        try:
            spec = TaskSpec(**model.task["spec"])
        except Exception as exc:  # noqa: BLE001 - a task file of another version or edited by hand
            raise BertctlError(f"{model.path / TASK_FILE}: cannot read the task: "
                               f"{' '.join(str(exc).split())}") from None
        if not flags:
            return spec   # the model's own, exactly
        base = spec.model_dump()
        if "family" in flags and flags["family"] != base["family"]:
            raise BertctlError(f"{model.path}: the model was fine-tuned for a '{base['family']}' "
                               f"task, not '{flags['family']}'")
        if "options" in flags:  # flags refine the model's options (e.g. --null-threshold)
            flags = {**flags, "options": {**base.get("options", {}), **flags["options"]}}
        return make_task_spec(None, **{**base, **flags})
    if "family" in flags:
        return make_task_spec(None, **flags)
    known = next((f for f in FAMILIES.values() if data is not None and isinstance(f, RecognisesData)
                  and f.recognises(data)),
                 None)
    if known is not None:
        console.log(f"{data}: read as a {known.name} task (its layout; --task to choose)")
        return make_task_spec(None, family=known.name, **flags)
    raise BertctlError(f"{model.path}: the model has no task file ({TASK_FILE}); give "
                       f"the task with --task (e.g. glue/sst2) or --family and the columns")


def task_file(spec: TaskSpec, data: Path) -> Path:
    """A preset task's data directory (GLUE's SST-2/) stands for its dev file; any other
    directory is one table (save_to_disk's, or shards)."""
    if not data.is_dir() or is_saved_dataset(data):
        return data
    found = spec.split_files(data)
    if "dev" in found:
        console.log(f"{data}: evaluating the task's dev file {found['dev'].name}")
        return found["dev"]
    if found:
        raise BertctlError(f"{data}: give one of the task's files: "
                           f"{', '.join(str(p) for p in found.values())}")
    return data  # the table reader explains what a directory of shards needs


def _holds_tables(path: Path) -> bool:
    """Some file in `path` is a table: the table reader then says what is wrong, if anything."""
    return any(p.is_file() and format_of(p) is not None for p in path.iterdir())


def training_files(spec: TaskSpec, train: Path, dev: Path | None) -> tuple[Path, Path | None]:
    """A training table (a file, a save_to_disk directory, a directory or glob of shards), or
    a preset's data directory holding its train and dev files (finetune and distill)."""
    if train.is_dir() and not is_saved_dataset(train):
        found = spec.split_files(train)
        if not found and (not spec.files or _holds_tables(train)):
            return train, dev   # none of a preset's files: shards of one table
        if "train" not in found:
            raise BertctlError(f"{train}: no training file for task {spec.name} "
                               f"(expected {spec.files.get('train', 'train.*')})")
        dev_key = next((k for k in ("dev", "dev_matched", "validation") if k in found), None)
        return found["train"], dev or (found[dev_key] if dev_key else None)
    return train, dev

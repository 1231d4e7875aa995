"""`bertctl eval MODEL DATA` on task data: model + task data file -> eval artifact.

What the model was trained for is read from the model, never re-typed: the task from its
`bertctl_task.json` (flags may override how this file is read), the label names from that file
or config.json's id2label, and the sequence length from the task file. Whether the model's head
can answer the task is its family's rule (bertctl.tasks); everything family-specific (reading,
predictions, metrics, prediction files) is the family's too.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from bertctl import artifacts, console, evaluation, hardware
from bertctl.config import EvalSettings
from bertctl.errors import BertctlError
from bertctl.stages import common
from bertctl.stages.common import ModelSource

METRICS_FILE = "metrics.json"


def run(config: EvalSettings, source: ModelSource, data: Path, out: str,
        force: bool = False) -> artifacts.Outcome:
    hardware.set_threads(config.threads)
    from bertctl import tasks

    if config.split is not None:
        raise BertctlError(f"--split applies to pretrain-data artifacts; {data} is a task data "
                           f"file (one split already)")
    spec = resolve_task(config, source)
    family = tasks.get(spec.family)
    label_list = family.resolve_labels(spec, source.task, source.hf_config, config.labels,
                                       str(source.path))
    family.check_head(source.hf_config, spec, label_list, str(source.path))
    data = _task_file(spec, data)
    spec = spec.for_file(data)
    max_len = config.max_seq_length or int((source.task or {}).get("max_seq_length") or 128)
    tok, _ = source.tokenizer()
    common.check_reads_task(source, tok, max_len)
    device = hardware.resolve_device(config.device)
    inputs = [source.ref, common.data_input(data)]
    calibration = (source.task or {}).get("calibration")

    def build(tmp: Path) -> dict[str, Any]:
        examples = family.read(spec, data, label_list=label_list)
        features = family.encode(examples, tok, max_len)
        feature_stats = family.feature_stats(features)
        if feature_stats:
            console.log("features: " + ", ".join(f"{k} {v}" for k, v in feature_stats.items()))
        console.log(f"{data}: {len(examples):,} examples, task {spec.name} ({spec.family}), "
                    f"{'labelled' if examples.labelled else 'no labels: predictions only'}"
                    f"{', labels ' + ', '.join(label_list) if label_list else ''}")
        model = _load_task_model(source)
        model.to(device)
        started = time.monotonic()
        with console.progress("evaluating", total=len(features), unit="sequences") as bar:
            metrics, predictions = evaluation.evaluate_task(
                model, family, spec, examples, features, label_list, config.batch_size, device,
                config.precision, calibration=calibration, progress=lambda n: bar.update(n))
        seconds = time.monotonic() - started
        metrics = evaluation.json_safe(metrics)
        (tmp / METRICS_FILE).write_text(json.dumps(metrics, indent=2) + "\n", encoding="utf-8")
        family.write_predictions(tmp, predictions, examples, spec, label_list)
        return {"metrics": metrics, "examples": len(examples),
                "labelled": examples.labelled, "model": str(source.path),
                "model_id": source.ref.id, "data": str(data), "task": spec.name,
                "family": spec.family, "metric": spec.metric,
                "main_metric": family.main_metric(spec) if examples.labelled else None,
                "labels": list(label_list) if label_list else None, "max_seq_length": max_len,
                **({"features": feature_stats} if feature_stats else {}),
                "precision": config.precision, "device": str(device),
                "seconds": round(seconds, 3),
                "examples_per_second": round(len(examples) / seconds, 1) if seconds else None}

    return artifacts.produce("eval", config, inputs, out, build, force=force)


def resolve_task(config: EvalSettings, source: ModelSource):
    """The TaskSpec to read DATA with: the model's task, with the flags given replacing its
    fields; a preset named by --task instead; or the flags alone for a model without one."""
    from bertctl.tasks import TaskSpec, make_task_spec

    flags = config.task_fields()
    if config.header is not None:   # e.g. GLUE's CoLA test file has a header, its dev file none
        flags["header"] = config.header
    if config.task is not None:
        return make_task_spec(config.task, **flags)
    if source.task is not None:
        try:
            base = TaskSpec(**source.task["spec"]).model_dump()
        except Exception as exc:  # noqa: BLE001 - a task file of another version or edited by hand
            raise BertctlError(f"{source.path / common.TASK_FILE}: cannot read the task: "
                               f"{' '.join(str(exc).split())}") from None
        if "family" in flags and flags["family"] != base["family"]:
            raise BertctlError(f"{source.path}: the model was fine-tuned for a '{base['family']}' "
                               f"task, not '{flags['family']}'")
        if "options" in flags:  # flags refine the model's options (e.g. --null-threshold)
            flags = {**flags, "options": {**base.get("options", {}), **flags["options"]}}
        return make_task_spec(None, **{**base, **flags})
    if "family" in flags:
        return make_task_spec(None, **flags)
    raise BertctlError(f"{source.path}: the model has no task file ({common.TASK_FILE}); give "
                       f"the task with --task (e.g. glue/sst2) or --family and the columns")


def _task_file(spec, data: Path) -> Path:
    """A preset task's data directory (GLUE's SST-2/) stands for its dev file; any other
    directory must be one written by `datasets`' save_to_disk."""
    if not data.is_dir() or common.is_saved_dataset(data):
        return data
    found = spec.split_files(data)
    if "dev" in found:
        console.log(f"{data}: evaluating the task's dev file {found['dev'].name}")
        return found["dev"]
    if found:
        raise BertctlError(f"{data}: give one of the task's files: "
                           f"{', '.join(str(p) for p in found.values())}")
    return data  # the family's reader explains what a saved dataset directory needs


def _load_task_model(source: ModelSource):
    model, report = source.load()
    problems = report.missing + report.mismatched
    if problems:
        shown = ", ".join(problems[:4]) + (f", ... ({len(problems)} in all)"
                                           if len(problems) > 4 else "")
        raise BertctlError(f"{source.path}: the checkpoint lacks trained weights the model needs "
                           f"({shown}); it would predict with random ones")
    if report.unexpected:
        console.log(f"{source.path}: ignored {len(report.unexpected)} checkpoint entries not "
                    f"used by {type(model).__name__}")
    return model

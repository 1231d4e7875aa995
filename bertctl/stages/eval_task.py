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
    if config.split is not None:
        raise BertctlError(f"--split applies to pretrain-data artifacts; {data} is a task data "
                           f"file (one split already)")
    spec, family, label_list, data, max_len = common.open_task(config, source, data)
    tok, _ = source.tokenizer()
    common.check_reads_task(source, tok, max_len)
    device, precision, recorded = source.runtime(config.device, config.precision)
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
        model = common.load_task_model(source)
        model.to(device)
        started = time.monotonic()
        with console.progress("evaluating", total=len(features), unit="sequences") as bar:
            metrics, predictions = evaluation.evaluate_task(
                model, family, spec, examples, features, label_list, config.batch_size, device,
                precision, calibration=calibration, progress=lambda n: bar.update(n))
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
                "precision": recorded, "device": str(device),
                "seconds": round(seconds, 3),
                "examples_per_second": round(len(examples) / seconds, 1) if seconds else None}

    return artifacts.produce("eval", config, inputs, out, build, force=force)

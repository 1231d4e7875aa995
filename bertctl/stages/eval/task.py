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

from bertctl import console, evaluation
from bertctl.contract import artifacts
from bertctl.metrics import json_safe
from bertctl.stages.settings.eval import EvalSettings
from bertctl.errors import BertctlError
from bertctl.stages.common import models
from bertctl.stages.common import cross
from bertctl.stages.eval import rerank
from bertctl.tasks.base import Ranks
from bertctl.tasks.resolve import open_task
from bertctl.stages.common.models import ModelSource
from bertctl.stages.common.task_training import label_scale

METRICS_FILE = artifacts.METRICS_FILE
# Examples read, predicted and written at a time: a few MB of texts and token ids.
ROWS_PER_PART = 10_000


def run(settings: EvalSettings, target: artifacts.Target, source: ModelSource,
        data: Path, rerank_with: Path | None = None) -> artifacts.Outcome:
    if settings.split is not None:
        raise BertctlError(f"--split applies to pretrain-data artifacts; {data} is a task data "
                           f"file (one split already)")
    task = open_task(settings, source, data)
    spec, family, label_list, data, max_len = (task.spec, task.family, task.label_list,
                                               task.file, task.max_seq_length)
    tok, _ = source.tokenizer()
    models.check_reads_task(source, tok, max_len)
    reranker = None
    if rerank_with is not None:
        if not isinstance(family, Ranks):
            raise BertctlError(f"{data}: --rerank reorders a search's results; a "
                               f"{family.name} task has none")
        family.check_rerank(spec, data, settings.rerank_depth)
        reranker = cross.open_reranker(rerank_with, family, scoring=settings.rerank_scoring)
    settings = source.applied(settings)
    device, precision, recorded = source.runtime(settings.device, settings.precision)
    inputs = [source.ref, *models.data_inputs(data)]
    if reranker is not None:
        inputs.append(reranker.source.ref)
    calibration = (source.task or {}).get("calibration")

    def build(tmp: Path) -> dict[str, Any]:
        # The file is read, predicted and written a part at a time (as `embed` does), so memory
        # stays bounded at any size; only what scoring needs is kept (labels and predictions).
        model = models.load_task_model(source, family.head)
        model.to(device)
        kept, stats, n, labelled, seconds, sequences = [], {}, 0, False, 0.0, 0
        with console.progress("evaluating", unit="sequences") as bar:
            for examples in family.read_chunks(spec, data, label_list, rows=ROWS_PER_PART):
                features = family.encode(examples, tok, max_len)
                stats = stats or family.feature_stats(features)
                started = time.monotonic()
                outputs = evaluation.predict(
                    model, evaluation.task_batches(features, settings.batch_size, family), device,
                    precision, progress=lambda k: bar.update(k), where=f"{source.path} on {data}",
                    offset=sequences)
                sequences += len(features)
                predictions = family.predictions(outputs, features, examples, spec, calibration)
                seconds += time.monotonic() - started
                family.write_predictions(tmp, predictions, examples, spec, label_list, start=n)
                kept.append(family.keep(predictions, examples))
                n, labelled = n + len(examples), labelled or examples.labelled
                # Else this part's features and outputs live on while the next part is read
                # and encoded: two parts at the peak instead of one.
                del examples, features, outputs, predictions
        if stats:
            console.log("features: " + ", ".join(f"{k} {v}" for k, v in stats.items()))
        console.log(f"{data}: {n:,} examples, task {spec.name} ({spec.family}), "
                    f"{'labelled' if labelled else 'no labels: predictions only'}"
                    f"{', labels ' + ', '.join(label_list) if label_list else ''}")
        predictions, examples = family.join(kept)
        outside = label_scale(family, examples, source) if labelled else None
        if outside:
            console.log(f"note: {outside}; correlations do not see the scale, but the "
                        f"predictions written are on the model's")
        results = family.results(predictions, examples, spec)
        metrics = family.score(results, examples, spec, label_list) if labelled else {}
        if reranker is not None:
            found = family.candidates(results, examples, spec, data, settings.rerank_depth)
            metrics.update(rerank.rerank(reranker, found, settings.batch_size, device, precision,
                                         tmp))
        if isinstance(family, Ranks):
            family.write_results(tmp, results, examples, spec)
        metrics = json_safe(metrics)
        (tmp / METRICS_FILE).write_text(json.dumps(metrics, indent=2) + "\n", encoding="utf-8")
        return {"metrics": metrics, "examples": n, "labelled": labelled,
                "model": str(source.path), "model_id": source.ref.id, "data": str(data),
                "task": spec.name, "family": spec.family, "metric": spec.metric,
                "main_metric": family.main_metric(spec) if labelled else None,
                "labels": list(label_list) if label_list else None, "max_seq_length": max_len,
                **({"features": stats} if stats else {}),
                "precision": recorded, "device": str(device),
                "seconds": round(seconds, 3),
                "examples_per_second": round(n / seconds, 1) if seconds else None}

    return artifacts.produce("eval", settings, inputs, target, build)

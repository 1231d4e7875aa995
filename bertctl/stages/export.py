"""`bertctl export MODEL --out DIR [--check DATA]`: a model as an ONNX graph in an export
artifact: `model.onnx` (the task head's graph, or the bare encoder's), the model's config.json,
tokenizer files and task file, so the directory is all a service needs, and `eval` and `embed`
run it with onnxruntime (bertctl/model/onnx_model.py).

`--check DATA` scores the PyTorch model (fp32) and the export on the same task data with the
one inference path and records in the manifest what the export changed: the largest output
difference, the share of examples whose predictions agree, the metric of each and their batch-1
latency. A drop beyond --max-drop points is exit 3, the artifact written (as eval --expect).
"""

from __future__ import annotations

import json
import shutil
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from bertctl import console, evaluation

from bertctl.contract import modelcard

from bertctl.model import onnx_model
from bertctl.contract import artifacts
from bertctl.metrics import json_safe
from bertctl.model import architectures, sentence_layout
from bertctl.stages.settings.export import ExportSettings
from bertctl.errors import BertctlError
from bertctl.contract.expectations import ExpectationsUnmet
from bertctl.contract.exports import ExportFacts
from bertctl.stages.common import models, runtime
from bertctl.tasks.resolve import TASK_FILE, TaskInput, open_task
from bertctl.stages.settings.assembled import eval_settings

# Batch-1 requests timed for the latency the card states (the first ones warm up, untimed).
LATENCY_REQUESTS, LATENCY_WARMUP = 100, 5


def run(settings: ExportSettings, target: artifacts.Target, model_dir: Path,
        check: Path | None = None) -> artifacts.Outcome:
    onnx_model.require("bertctl export")   # before any work: nothing written without it
    settings = runtime.applied(settings)
    source = models.open_model(model_dir)
    # A sentence-transformers model (its layout, no bertctl task) is an embedding model: its
    # graph is the embedding head (pooling, Dense, normalisation), what `embed` reads of it.
    embedding = source.task is None and not settings.encoder and \
        sentence_layout.record_of(source.hf_config) is not None
    encoder = settings.encoder or (source.task is None and not embedding)
    inputs = [source.ref]
    task = None
    if check is not None:
        if encoder:
            raise BertctlError(f"--check {check}: an encoder export has no task to score"
                               + ("" if settings.encoder else f" ({model_dir} was not fine-tuned)"))
        task = _read_check(source, open_task(eval_settings()(), source, check))
        inputs += models.data_inputs(task.input.file, "check")
    models.tokenizer_files(source.path)
    # The checks every stage that reads a model applies (an embedding table smaller than the
    # tokenizer exported a graph that crashes on the tokenizer's last ids).
    models.check_reads_task(source, source.tokenizer()[0], models.model_length(source))

    def build(tmp: Path) -> dict[str, Any]:
        model = models.load_encoder(source) if encoder else \
            models.load_task_model(source, "embedding" if embedding else None)
        started = time.monotonic()
        facts = _write_graph(model, tmp, settings, encoder, source)
        _runs(tmp / models.ONNX_FILE, facts, settings, target,
              architectures.longest_input(model.config))
        console.log(f"exported {facts.graph} ({facts.quantize}) in "
                    f"{time.monotonic() - started:.1f}s: {facts.bytes:,} bytes")
        _copy_model_files(source, tmp, encoder, type(model).__name__ if embedding else None)
        stats: dict[str, Any] = {"onnx": facts.as_stats(), "model": source.ref.path,
                                 "model_id": source.ref.id}
        if task is not None:
            graph = onnx_model.OnnxModel(tmp / models.ONNX_FILE,
                                         name=str(target.out / models.ONNX_FILE))
            stats["check"] = _check(model, graph, source, task, settings)
            stats["metrics"] = {"pytorch": stats["check"]["pytorch"],
                                "export": stats["check"]["export"]}
            _log_check(stats["check"])
        modelcard.write_export(tmp, stats, settings.model_dump(mode="json"))
        return stats

    outcome = artifacts.produce("export", settings, inputs, target, build)
    check_stats = outcome.manifest.stats.get("check")
    if check_stats and check_stats.get("drop_points") is None:
        # A drop that could not be computed (a metric without a value) is never a pass.
        raise ExpectationsUnmet(outcome, [
            f"export check not met: {check_stats['metric']} has no value "
            f"({_shown(check_stats['pytorch_value'])} -> {_shown(check_stats['export_value'])}),"
            f" so the drop cannot be measured"])
    if check_stats and check_stats["drop_points"] > settings.max_drop:
        raise ExpectationsUnmet(outcome, [
            f"export check not met: {check_stats['metric']} dropped "
            f"{check_stats['drop_points']:.3g} points ({check_stats['pytorch_value']:.6g} -> "
            f"{check_stats['export_value']:.6g}), more than --max-drop {settings.max_drop:g}"])
    return outcome


def _write_graph(model, tmp: Path, settings: ExportSettings, encoder: bool,
                 source: models.ModelSource) -> ExportFacts:
    path = tmp / models.ONNX_FILE
    fusions = architectures.of_model(model).onnx_fusions
    outputs = onnx_model.export(model, path, encoder=encoder, opset=settings.opset,
                                max_positions=architectures.longest_input(model.config))
    fused = (onnx_model.optimize(path, fusions, model.config.num_attention_heads,
                                 model.config.hidden_size)
             if settings.optimize and fusions else {})
    if settings.quantize == "int8":
        quantized = tmp / "model.int8.onnx"
        onnx_model.quantize(path, quantized, settings.per_channel)
        quantized.replace(path)
    return ExportFacts(graph=type(model).__name__, inputs=list(onnx_model.INPUTS),
                       outputs=outputs, input_rank=onnx_model.input_rank(model),
                       opset=settings.opset, quantize=settings.quantize,
                       per_channel=settings.per_channel if settings.quantize == "int8" else None,
                       fused=fused, bytes=path.stat().st_size)


def _runs(path: Path, facts: ExportFacts, settings: ExportSettings,
          target: artifacts.Target, longest: int) -> None:
    """The graph loads and runs one batch in the installed onnxruntime before it is published:
    an opset or a quantized operator it cannot run is one line, and nothing is written."""
    what = f"--opset {settings.opset}" + (" --quantize int8" if settings.quantize == "int8" else "")
    try:
        graph = onnx_model.OnnxModel(path, threads=1, name=str(target.out / models.ONNX_FILE))
        # a short batch, and one past the relative positions' buckets (DeBERTa's 256)
        for length in sorted({min(8, longest), min(300, longest)}):
            shape = (1, 2, length) if facts.input_rank == 3 else (1, length)
            graph(torch.ones(shape, dtype=torch.long))
    except BertctlError as exc:
        raise BertctlError(f"{exc} (exported with {what}; opset 18 is what bertctl tests)"
                           ) from None


def _copy_model_files(source: models.ModelSource, tmp: Path, encoder: bool,
                      head: str | None = None) -> None:
    models.copy_tokenizer(source.path, tmp)
    hf_config = dict(source.hf_config)
    if encoder:   # the graph is the encoder whatever head the model had: eval must say so
        hf_config["architectures"] = [
            architectures.of_config(hf_config).head("encoder").__name__]
    elif head is not None:   # the head the graph is (a sentence-transformers model's)
        hf_config["architectures"] = [head]
    (tmp / "config.json").write_text(json.dumps(hf_config, indent=2) + "\n", encoding="utf-8")
    if not encoder and source.task is not None:
        shutil.copyfile(artifacts.checked_file(source.path, TASK_FILE),
                        tmp / TASK_FILE)


@dataclass(frozen=True)
class CheckData:
    """The --check file as the model's task reads it (read as `eval MODEL DATA` reads it)."""

    input: TaskInput
    examples: Any
    features: Any


def _read_check(source: models.ModelSource, task: TaskInput) -> CheckData:
    """The check data read and encoded before any export work: a file the model's task cannot
    read is one line, and nothing is exported."""
    tok, _ = source.tokenizer()
    models.check_reads_task(source, tok, task.max_seq_length)
    examples = task.family.read(task.spec, task.file, label_list=task.label_list,
                                require_labels=True)
    return CheckData(task, examples, task.family.encode(examples, tok, task.max_seq_length))


def _check(model, exported, source: models.ModelSource, check: CheckData,
           settings: ExportSettings) -> dict[str, Any]:
    """Both models over the check data: outputs, predictions, metrics and batch-1 latency."""
    spec, family, label_list = check.input.spec, check.input.family, check.input.label_list
    examples, features = check.examples, check.features
    calibration = (source.task or {}).get("calibration")
    runs = {}
    for name, m in (("pytorch", model), ("export", exported)):
        with console.progress(f"checking ({name})", total=len(features),
                              unit="sequences") as bar:
            outputs = evaluation.predict(
                m, evaluation.task_batches(features, settings.batch_size, family), "cpu", "fp32",
                progress=lambda n: bar.update(n),
                where=f"{source.path if name == 'pytorch' else 'its export'} on {check.input.file}")
        predictions = family.predictions(outputs, features, examples, spec, calibration)
        metrics = json_safe(family.score(family.results(predictions, examples, spec),
                                         examples, spec, label_list))
        runs[name] = (outputs, metrics, _latency(m, features, family))
    (ref, ref_metrics, ref_latency), (got, got_metrics, got_latency) = runs["pytorch"], runs["export"]
    main = family.main_metric(spec)
    scale = 1.0 if family.metric_in_percent else 100.0
    before, after = ref_metrics.get(main), got_metrics.get(main)
    drop = (before - after) * scale if before is not None and after is not None else None
    return {"data": str(check.input.file), "examples": len(examples), "metric": main,
            "pytorch_value": before, "export_value": after,
            "drop_points": None if drop is None else round(drop, 6),
            "max_abs_diff": {k: float(np.abs(ref[k] - got[k]).max()) for k in ref if k in got},
            "agreement": agreement(ref, got, np.asarray(features.lengths)),
            "pytorch": ref_metrics, "export": got_metrics,
            "latency_ms": {"pytorch": ref_latency, "export": got_latency,
                           "threads": torch.get_num_threads()}}


def _log_check(check: dict[str, Any]) -> None:
    """The check's figures as a table at the end of the log (they are in the manifest too)."""
    lat = check["latency_ms"]
    ratio = (lat["pytorch"]["median"] / lat["export"]["median"]
             if lat["export"]["median"] else float("nan"))
    share = check["agreement"]
    rows = [("", "PyTorch fp32", "export"),
            (check["metric"], _shown(check["pytorch_value"]), _shown(check["export_value"])),
            ("batch-1 latency, median ms", f"{lat['pytorch']['median']:.2f}",
             f"{lat['export']['median']:.2f} ({ratio:.2f}x)"),
            ("batch-1 latency, p95 ms", f"{lat['pytorch']['p95']:.2f}",
             f"{lat['export']['p95']:.2f}")]
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    console.log(f"check on {check['data']} ({check['examples']:,} examples, "
                f"{lat['threads']} thread(s)):")
    for r in rows:
        console.log("  " + "  ".join(c.ljust(w) if i == 0 else c.rjust(w)
                                     for i, (c, w) in enumerate(zip(r, widths))))
    drop = check["drop_points"]
    console.log(f"  drop: {'n/a' if drop is None else f'{drop:.3g} points'}; predictions "
                f"agreeing: {'n/a' if share is None else f'{share:.4f}'}")


def _shown(value) -> str:
    return "n/a" if value is None else f"{value:.4f}"


def agreement(ref: dict[str, np.ndarray], got: dict[str, np.ndarray],
              lengths: np.ndarray) -> float | None:
    """The share of examples whose every argmax agrees (class, choice, span start and end,
    every real token's tag); None for outputs that are scores, not choices (regression)."""
    same = None
    for name, a in ref.items():
        if a.ndim < 2 or a.shape[-1] < 2 or name not in got:
            continue
        r, g = a.argmax(-1), got[name].argmax(-1)
        if r.ndim == 2:   # a tag per token: only the real tokens count
            real = np.arange(r.shape[1])[None, :] < lengths[:, None]
            agree = ((r == g) | ~real).all(axis=1)
        else:
            agree = r == g
        same = agree if same is None else same & agree
    return None if same is None else round(float(same.mean()), 6)


def _latency(model, features, family) -> dict[str, float]:
    """Median and p95 milliseconds of a one-example request, over the first examples."""
    n = min(len(features), LATENCY_REQUESTS + LATENCY_WARMUP)
    times = []
    with evaluation.inference(model, "cpu", "fp32"):
        for i in range(n):
            batch = features.batch(np.array([i]))
            inputs = family.inputs(batch)
            start = time.perf_counter()
            model(**inputs)
            if i >= min(LATENCY_WARMUP, n - 1):
                times.append((time.perf_counter() - start) * 1000)
    times.sort()
    return {"median": round(statistics.median(times), 3),
            "p95": round(times[min(len(times) - 1, int(0.95 * len(times)))], 3),
            "requests": len(times)}

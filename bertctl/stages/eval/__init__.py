"""`bertctl eval MODEL DATA --out DIR [--expect GATE]`: which evaluation DATA asks for (a task
data file: task.py; a pretrain-data artifact, its masked-LM scores: pretraining.py), and the
quality gate on the metrics it writes."""

from __future__ import annotations

from pathlib import Path

from bertctl import console

from bertctl.contract import expectations
from bertctl.contract import artifacts
from bertctl.stages.settings.eval import EvalSettings
from bertctl.errors import BertctlError
from bertctl.contract.expectations import ExpectationsUnmet
from bertctl.stages.common import models, runtime
from bertctl.stages.eval import pretraining, task


def run(settings: EvalSettings, target: artifacts.Target, model: Path, data: Path,
        expect: list[str], rerank: Path | None = None) -> artifacts.Outcome:
    gates = [expectations.parse(e) for e in expect]  # a typo fails before any work
    settings = runtime.applied(settings)
    if rerank is None and settings.rerank_scoring != "cross":
        raise BertctlError(f"--rerank-scoring {settings.rerank_scoring}: give --rerank MODEL, "
                           f"the model that scores (the first stage itself, say)")
    if rerank is None and "rerank_depth" in settings.model_fields_set:
        raise BertctlError(f"--rerank-depth {settings.rerank_depth}: give --rerank MODEL, the "
                           f"model that reorders each query's first documents")
    source = models.open_model(model, exports=True)
    pretrain_data = models.pretrain_data_artifact(data)
    if pretrain_data is not None and source.onnx is not None:
        raise BertctlError(f"{model}: is an export; the masked-LM scores of a pretrain-data "
                           f"artifact come from the PyTorch model it was exported from")
    if pretrain_data is not None and rerank is not None:
        raise BertctlError(f"--rerank {rerank}: reranks a search; {data} is pretrain data")
    if pretrain_data is not None:
        outcome = pretraining.run(settings, target, source, pretrain_data)
    else:
        outcome = task.run(settings, target, source, data, rerank)
    console.log_metrics(outcome.manifest.metrics)
    unmet = expectations.unmet(gates, outcome.manifest.metrics or {}, outcome.path)
    if unmet:
        raise ExpectationsUnmet(outcome, unmet)
    return outcome

"""`bertctl merge MODEL... --out DIR`: models of one architecture, shape, vocabulary and head
averaged weight by weight into an ordinary model artifact (checkpoint averaging; model soups,
Wortsman et al. 2022: fine-tuned seeds of one model averaged are often better than the best
of them).

- uniform: every model, weighted by --weights (equal by default);
- greedy: the models ranked by their score on --dev (the task's main metric, as eval scores
  it), the soup starting from the best and taking each next model only if the uniform average
  with it scores at least as well on --dev.

Every model is a parent in the lineage; the merged model keeps the first one's task record,
labels, tokenizer and config. Models are read one at a time and summed in float32, so memory
holds two models, not all of them.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import torch

from bertctl import console, evaluation
from bertctl.contract import artifacts
from bertctl.errors import BertctlError
from bertctl.model import architectures
from bertctl.stages.common import models
from bertctl.stages.settings.eval import EvalSettings
from bertctl.stages.settings.merge import MergeSettings
from bertctl.tasks.resolve import open_task

# config.json keys that name a head's outputs: models merged must agree on them.
HEAD_KEYS = ("architectures", "id2label", "problem_type", "num_labels")


def run(settings: MergeSettings, target: artifacts.Target, given: list[Path],
        dev: Path | None = None) -> artifacts.Outcome:
    if len(given) < 2:
        raise BertctlError("merge: give two or more models")
    if settings.soup == "greedy" and dev is None:
        raise BertctlError("merge --soup greedy: give --dev, the file the soup is chosen on")
    if settings.soup == "greedy" and settings.weights is not None:
        raise BertctlError("merge: --weights are uniform's; a greedy soup weighs the models "
                           "it keeps equally")
    sources = [models.open_model(path, f"model {i}") for i, path in enumerate(given)]
    weights = _weights(settings.weights, len(sources))
    check_fit(sources)
    task = open_task(EvalSettings(), sources[0], dev) if dev is not None else None
    settings = settings.resolved()
    inputs = [s.ref for s in sources] + (models.data_inputs(task.file) if task else [])

    def build(tmp: Path) -> dict[str, Any]:
        first = sources[0]
        scorer = Scorer(sources, task, settings) if task is not None else None
        if settings.soup == "greedy":
            kept, merged = greedy(sources, scorer)
            weights[:] = [1 / len(kept) if i in kept else 0.0 for i in range(len(sources))]
        else:
            kept, merged = list(range(len(sources))), average(sources, weights)
        scores = scorer.record(merged) if scorer is not None else None
        models.write_model(merged, tmp, first.path,
                           extra_config={k: first.hf_config[k] for k in ("id2label", "label2id")
                                         if k in first.hf_config},
                           task=first.task)
        console.log("merged " + ", ".join(f"{s.path} x {w:.3g}" for s, w in
                                          zip(sources, weights) if w))
        return {"soup": settings.soup, "weights": [round(w, 6) for w in weights],
                "kept": [str(sources[i].path) for i in kept],
                "architecture": architectures.of_model(merged).name,
                "model_class": type(merged).__name__,
                **({"dev": scores, "metrics": scores["soup"]} if scores else {})}

    return artifacts.produce("model", settings, inputs, target, build)


def _weights(text: str | None, n: int) -> list[float]:
    if text is None:
        return [1 / n] * n
    try:
        values = [float(x) for x in text.split(",")]
    except ValueError:
        raise BertctlError(f"--weights {text!r}: give numbers, comma-separated") from None
    if len(values) != n:
        raise BertctlError(f"--weights: {len(values)} weights for {n} models")
    if not all(math.isfinite(v) and v > 0 for v in values):
        raise BertctlError(f"--weights {text!r}: every weight must be a positive number")
    return [v / sum(values) for v in values]


def check_fit(sources: list[models.ModelSource]) -> None:
    """One line naming the first model that does not fit the first: another architecture,
    another shape (config.json's sizes), another vocabulary or another head."""
    first = sources[0]
    arch = architectures.of_config(first.hf_config, str(first.path))
    vocab = first.tokenizer()[0].get_vocab()
    ours = _sizes(first)
    for other in sources[1:]:
        where = f"merge: {other.path} does not fit {first.path}"
        theirs = architectures.of_config(other.hf_config, str(other.path))
        if theirs.name != arch.name:
            raise BertctlError(f"{where}: architecture {theirs.name}, not {arch.name}")
        sizes = _sizes(other)
        shape = [k for k in sorted({*ours, *sizes}) if ours.get(k) != sizes.get(k)]
        if shape:
            raise BertctlError(f"{where}: another shape ({shape[0]} {sizes.get(shape[0])}, "
                               f"not {ours.get(shape[0])})")
        head = [k for k in HEAD_KEYS if first.hf_config.get(k) != other.hf_config.get(k)]
        if head:
            raise BertctlError(f"{where}: another head ({head[0]} {other.hf_config.get(head[0])}"
                               f", not {first.hf_config.get(head[0])})")
        if other.tokenizer()[0].get_vocab() != vocab:
            raise BertctlError(f"{where}: another vocabulary")


def _sizes(source: models.ModelSource) -> dict:
    """The config fields that set a weight's shape (widths, depths, heads, tables)."""
    return {k: v for k, v in source.config.to_hf_dict().items()
            if k.endswith(("_size", "_layers", "_heads", "_embeddings"))}


def average(sources: list[models.ModelSource], weights: list[float]) -> torch.nn.Module:
    """The weighted average of the models' weights, read one model at a time."""
    merged, total = None, None
    for source, weight in zip(sources, weights):
        if not weight:
            continue
        model = models.load_task_model(source)
        state = model.state_dict()
        if total is None:
            merged = model
            total = {k: v.float() * weight for k, v in state.items()
                     if v.is_floating_point()}
            continue
        for key, value in total.items():
            theirs = state.get(key)
            if theirs is None or theirs.shape != value.shape:
                raise BertctlError(f"merge: {source.path} does not fit {sources[0].path}: "
                                   f"its weight {key} is "
                                   + ("missing" if theirs is None else
                                      f"of shape {tuple(theirs.shape)}"))
            value.add_(theirs.float(), alpha=weight)
        del model, state
    own = merged.state_dict()
    merged.load_state_dict({k: v.to(own[k].dtype) for k, v in total.items()}, strict=False)
    return merged


class Scorer:
    """Each model's score on --dev (the task's main metric, as eval computes it), the dev file
    read and encoded once."""

    def __init__(self, sources, task, settings: MergeSettings):
        self.spec, self.family, self.label_list = task.spec, task.family, task.label_list
        self.file, self.settings = task.file, settings
        tok, _ = sources[0].tokenizer()
        self.examples = self.family.read(self.spec, task.file, task.label_list,
                                         require_labels=True)
        self.features = self.family.encode(self.examples, tok, task.max_seq_length)
        self.key = self.family.main_metric(self.spec)
        self.device, self.precision, _ = sources[0].runtime(settings.device, settings.precision)
        self.calibration = (sources[0].task or {}).get("calibration")
        self.alone = [self(models.load_task_model(s)) for s in sources]
        self.paths = [str(s.path) for s in sources]

    def __call__(self, model) -> float:
        metrics, _ = evaluation.evaluate_task(
            model.to(self.device), self.family, self.spec, self.examples, self.features,
            self.label_list, self.settings.batch_size, self.device, self.precision,
            calibration=self.calibration)
        return float(metrics[self.key])

    def record(self, merged) -> dict[str, Any]:
        value = self(merged)
        console.log(f"{self.file}: merged {self.key} {value:.4f}; best model alone "
                    f"{max(self.alone):.4f}")
        return {"metric": self.key, "file": str(self.file),
                "models": dict(zip(self.paths, self.alone)), "soup": {self.key: value}}


def greedy(sources, scorer: Scorer) -> tuple[list[int], torch.nn.Module]:
    """Wortsman et al.'s greedy soup: (the models kept, the soup)."""
    order = sorted(range(len(sources)), key=lambda i: -scorer.alone[i])
    kept, best = [order[0]], scorer.alone[order[0]]
    console.log(f"greedy soup: {sources[order[0]].path} first ({scorer.key} {best:.4f})")
    for i in order[1:]:
        trial = kept + [i]
        value = scorer(average([sources[j] for j in trial], [1 / len(trial)] * len(trial)))
        taken = value >= best
        console.log(f"  + {sources[i].path}: {scorer.key} {value:.4f} "
                    f"{'kept' if taken else 'left out'}")
        if taken:
            kept, best = trial, value
    kept = sorted(kept)
    return kept, average([sources[j] for j in kept], [1 / len(kept)] * len(kept))

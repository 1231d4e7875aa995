"""The report's title when none is given: what the page is about in words (the tasks, their
metrics, the data and the model the runs came from), not the artifacts' ids."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bertctl.model import architectures

MODELS = ("model", "hf-model")


def name(path: str | Path) -> str:
    """A path as a reader knows it: its last part, with its parent when the last part is a
    generic name a pipeline repeats (runs/budget/model, lr1e-4-seed1/model)."""
    p = Path(path)
    generic = p.name in ("model", "dev", "test", "student", "teacher") or p.name.startswith("seed")
    return f"{p.parent.name}/{p.name}" if generic and p.parent.name else p.name


def origin(inputs: list[Any]) -> str | None:
    """The deepest model of a lineage: the pretrained (or published) model the runs start from."""
    found = None
    while (model := next((i for i in inputs if i.kind in MODELS), None)) is not None:
        found, inputs = model.path, model.inputs
    return found


def _listed(values: list[str]) -> str:
    values = list(dict.fromkeys(v for v in values if v))
    return ", ".join(values[:3]) + (f" and {len(values) - 3} more" if len(values) > 3 else "")


def title_of(artifacts: list[Any]) -> str:
    parts = []
    evals = [a for a in artifacts if a.kind == "eval"]
    if evals:
        stats = [a.manifest.stats for a in evals]
        tasks = _listed([s.get("task") or "masked LM" for s in stats])
        metrics = _listed([s.get("main_metric") or s.get("metric") or "" for s in stats])
        data = _listed([Path(s["data"]).name for s in stats if s.get("data")])
        origins = _listed([name(origin(a.manifest.inputs) or s.get("model") or "")
                           for a, s in zip(evals, stats)])
        runs = (f"{len(evals)} evaluations of models" if len(evals) > 1
                else "an evaluation of a model")
        parts.append(f"{tasks}: {metrics or 'metrics'} on {data or 'the data'}, {runs} from "
                     f"{origins}")
    models = [a for a in artifacts if a.kind == "model" and "task" not in a.manifest.stats]
    if models:
        described = []
        for a in models:
            s = a.manifest.stats
            how = ", ".join(str(v) for v in (s.get("objective"),
                                             architectures.recorded(s.get("architecture")),
                                             f"{s['step']:,} steps" if "step" in s else None)
                            if v)
            described.append(f"{name(a.path)} ({how})" if how else name(a.path))
        parts.append(f"pretraining of {_listed(described)}")
    rest = [a for a in artifacts if a.kind not in ("eval", "model")]
    if rest:
        parts.append(_listed([f"{a.kind} {name(a.path)}" for a in rest]))
    if not parts:   # fine-tuned models alone
        parts.append(_listed([f"{a.manifest.stats.get('task')} fine-tuning {name(a.path)}"
                              for a in artifacts]))
    text = "; ".join(parts)
    return text if evals else text[0].upper() + text[1:]   # a task's name keeps its case

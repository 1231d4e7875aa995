"""Pretraining objectives: one module each, registered by name, as task families are.

    objective = get("bert")                 # pretrain --objective bert
    objective.check_data(info, where)        # refuses data it cannot train on, before any work
    model = build(objective.head, config, **objective.model_kwargs(settings))  # its role's model
    objective.step_metrics(outputs, batch)   # the training loop's per-step metrics
    objective.evaluate(model, dataset, ...)  # validation during pretrain, and `eval` on data

The stages, the training loop and the inference path never name an objective
(tests/test_architecture.py). Adding one is a module that subclasses `base.Objective`, registers
an instance, and is imported below.
"""

from __future__ import annotations

from bertctl.objectives.registry import OBJECTIVES, for_checkpoint, get, register

# The built-in objectives register themselves on import.
from bertctl.objectives import bert, electra, mlm  # noqa: E402,F401,I001

__all__ = ["OBJECTIVES", "for_checkpoint", "get", "register"]

"""Fine-tuning tasks: the families (one module each) and the declarative task specs.

    spec = make_task_spec("glue/rte")                      # a preset, or fields for a new task
    family = get(spec.family)                              # the family that owns everything else
    train = family.read(spec, "RTE/train.tsv", require_labels=True)
    dev = family.read(spec, "RTE/dev.tsv", label_list=train.label_list)
    features = family.encode(dev, tokenizer, max_seq_length=128)
    batch = features.batch(indices)                        # the model's keyword inputs

Adding a family is adding a module that subclasses `base.Family` (or `sequence.SequenceFamily`)
and registers an instance, and importing it below.
"""

from __future__ import annotations

from bertctl.tasks.registry import FAMILIES, get, register

# The built-in families register themselves on import (before any spec is validated).
from bertctl.tasks import classification, regression, multiple_choice, retrieval, span, tagging  # noqa: E402,F401,I001
from bertctl.tasks import multi_label, reranking  # noqa: E402,F401
from bertctl.tasks.spec import PRESETS, TaskSpec, make_task_spec  # noqa: E402


__all__ = ["FAMILIES", "PRESETS", "TaskSpec", "get", "make_task_spec", "register"]

"""Students for distillation, built from a teacher: some of its layers, or some layers of a
pretrained model with its vocabulary (DistilBERT's initialisation: the layers before any
fine-tuning), the whole of such a model, or a fresh model of another size.

The student is always the teacher's head class (with the head arguments the task gives), so it
is an ordinary fine-tuned model of the same family once trained.
"""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

from torch import nn

from bertctl.errors import BertctlError
from bertctl.model.bert import PRESETS, BertConfig
from bertctl.model.hf import LoadReport, load_state_dict

_LAYER = re.compile(r"^bert\.encoder\.layer\.(\d+)\.")


def parse_layers(text: str, teacher_layers: int, owner: str = "the teacher") -> list[int]:
    """"0,2,4" -> [0, 2, 4]: distinct layers of `owner`, 0-based and increasing."""
    items = [x.strip() for x in text.split(",")]
    if not items or not all(x.isdigit() for x in items):
        raise BertctlError(f"--student-layers {text!r}: expected teacher layer numbers such as "
                           f"0,2,4 (0-based)")
    layers = [int(x) for x in items]
    bad = [i for i in layers if i >= teacher_layers]
    if bad:
        raise BertctlError(f"--student-layers {text!r}: {owner} has no layer {bad[0]} (it "
                           f"has layers 0..{teacher_layers - 1})")
    if layers != sorted(set(layers)):
        raise BertctlError(f"--student-layers {text!r}: list each layer once, in increasing "
                           f"order")
    return layers


def every_second_layer(teacher_layers: int) -> list[int]:
    return list(range(0, teacher_layers, 2))


def from_layers(model: nn.Module, layers: list[int], head_class, head_kwargs: dict,
                source: str = "teacher") -> tuple[nn.Module, LoadReport]:
    """A student with `layers` of `model`'s encoder (the teacher's, or a pretrained model's,
    named `source`; renumbered 0..), its embeddings, and its pooler and head where their
    shapes fit (a frozen-encoder teacher's head reads combined features of another width: the
    student's head then starts fresh)."""
    config = dataclasses.replace(model.config, num_hidden_layers=len(layers))
    student = head_class(config, **head_kwargs)
    renumber = {old: new for new, old in enumerate(layers)}
    state = {}
    for key, tensor in model.state_dict().items():
        found = _LAYER.match(key)
        if found is None:
            state[key] = tensor
        elif int(found.group(1)) in renumber:
            state[f"bert.encoder.layer.{renumber[int(found.group(1))]}.{key[found.end():]}"] = tensor
    report = load_state_dict(student, state, source=f"{source} layers {','.join(map(str, layers))}")
    return student, report


def sized_config(teacher: BertConfig, size: str) -> BertConfig:
    """A preset size with the teacher's vocabulary, positions and segment types."""
    if size not in PRESETS:
        raise BertctlError(f"--student-size {size!r}: one of {', '.join(PRESETS)}")
    return BertConfig.from_preset(size, vocab_size=teacher.vocab_size,
                                  max_position_embeddings=teacher.max_position_embeddings,
                                  type_vocab_size=teacher.type_vocab_size,
                                  pad_token_id=teacher.pad_token_id)


@dataclasses.dataclass
class StudentPlan:
    """How the student is built: from teacher `layers`, as a new model of `config`, or (both
    None) from the pretrained model given beside; `description` is what the manifest says."""

    description: str
    num_layers: int
    layers: list[int] | None = None
    config: BertConfig | None = None


def plan(teacher: BertConfig, *, layers: str | None = None, size: str | None = None,
         config_file: str | Path | None = None, init: BertConfig | None = None,
         init_path: str = "") -> StudentPlan:
    """The student the options describe (at most one of them, or --student-layers of the
    --student-init model; none: every second teacher layer), checked against the teacher
    before any work."""
    given = [name for name, value in (("--student-layers", layers and init is None),
                                      ("--student-size", size), ("--student-init", init),
                                      ("--student-config", config_file)) if value]
    if len(given) > 1:
        raise BertctlError(f"give one way to build the student, not {' and '.join(given)}")
    if init is not None:
        check_vocabulary(init, teacher, init_path)
        if layers:
            kept = parse_layers(layers, init.num_hidden_layers, f"{init_path} (--student-init)")
            return StudentPlan(f"layers {','.join(map(str, kept))} of {init_path}", len(kept),
                               layers=kept)
        return StudentPlan(f"initialised from {init_path}", init.num_hidden_layers)
    if config_file is not None:
        try:
            raw = json.loads(Path(config_file).read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise BertctlError(f"{config_file}: cannot read: "
                               f"{' '.join(str(exc).split())}") from None
        config = BertConfig.from_hf_dict(raw, source=str(config_file))
        check_vocabulary(config, teacher, str(config_file))
        return StudentPlan(f"a new model of {Path(config_file).name} (random weights)",
                           config.num_hidden_layers, config=config)
    if size:
        config = sized_config(teacher, size)
        return StudentPlan(f"a new {size} model (random weights)", config.num_hidden_layers,
                           config=config)
    kept = (parse_layers(layers, teacher.num_hidden_layers) if layers
            else every_second_layer(teacher.num_hidden_layers))
    return StudentPlan(f"teacher layers {','.join(map(str, kept))}", len(kept), layers=kept)


def check_vocabulary(config: BertConfig, teacher: BertConfig, where: str) -> None:
    """Distillation compares outputs token for token: one tokenizer for both."""
    if config.vocab_size != teacher.vocab_size:
        raise BertctlError(f"{where}: the student's vocabulary has {config.vocab_size:,} entries, "
                           f"the teacher's {teacher.vocab_size:,}; distillation needs the "
                           f"teacher's tokenizer (the same vocabulary)")


__all__ = ["StudentPlan", "check_vocabulary", "every_second_layer", "from_layers",
           "parse_layers", "plan", "sized_config"]

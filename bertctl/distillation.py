"""Knowledge distillation: a student trained to imitate a frozen teacher, and the student
built from a teacher, a pretrained model or a preset size. What the distill stage
(bertctl/stages/distill.py) runs; nothing else in bertctl knows distillation exists.

    model = Distiller(student, teacher, {"logits": "classes"}, temperature=2.0, alpha=0.5)
    train(model, data, settings, work)      # the one training loop, unchanged

`Distiller` is what the training loop trains: its forward runs the teacher (eval mode, no
autograd) and the student on the same batch and returns the student's outputs with the
distillation loss as "loss". The teacher is not a submodule: the optimizer, checkpoints,
best-weight copies and DDP see the student (and the hidden-state projections) only, `train()`
cannot switch the teacher's dropout on, and the forward puts it on the batch's device.

The losses (Hinton et al. 2015; TinyBERT for the hidden states):
- soft: per score output of the head, T^2 * KL(softmax(teacher / T) || softmax(student / T))
  averaged over the rows it is taken over ("classes": examples or choices, "labels": the same
  with each label's sigmoid a distribution of its own, summed over the labels, "tokens": the
  labelled tokens where the batch has labels, else every real token, "positions": a softmax
  over each sequence's real tokens), or the squared error for a "score" (regression); the mean
  over the head's outputs (span QA: start and end).
- hard: the student head's own loss on the gold labels, where the batch has them;
  loss = alpha * hard + (1 - alpha) * soft, or soft alone on unlabelled data.
- hidden (weight > 0): mean squared error between mapped hidden states (0 = the embeddings'
  output), over real tokens, through a learned linear projection where the widths differ.

The student is always the teacher's head class (with the head arguments the task gives), so it
is an ordinary fine-tuned model of the same family once trained: some of the teacher's layers,
some layers of a pretrained model with its vocabulary (DistilBERT's initialisation: the layers
before any fine-tuning), the whole of such a model, or a fresh model of another size.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import shutil
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from bertctl.labels import IGNORE_INDEX
from bertctl.errors import BertctlError
from bertctl.evaluation import non_finite_rows, predict, refuse_non_finite, task_batches
from bertctl.model import architectures, build
from bertctl.model.hf import LoadReport, load_state_dict
from bertctl.tasks.base import IMITATED
from bertctl.train import distributed as dist

# Batch keys of a teacher's outputs read from its cache (`teacher_outputs`), per example or per
# token: packing moves them with their sequences or tokens, as it moves the labels.
TEACHER = "teacher:"

KINDS = ("classes", "labels", "tokens", "positions", "score")
# A logit far below any real one but finite, so masked positions get probability 0 in both
# distributions without producing inf - inf.
_MASKED = -1e4


def soft_loss(kind: str, student: torch.Tensor, teacher: torch.Tensor,
              mask: torch.Tensor | None, temperature: float) -> torch.Tensor:
    """The soft-target loss of one output. `mask`: the batch's attention mask (> 0 marks a
    token; packed batches number their sequences), None when every position is a token."""
    s, t = student.float(), teacher.float()
    if kind == "score":
        return F.mse_loss(s.reshape(-1), t.reshape(-1))
    if kind == "labels":   # (N, L): one two-way distribution (a sigmoid) per label
        s, t = s / temperature, t / temperature
        p_t = torch.sigmoid(t)
        kl = (p_t * (F.logsigmoid(t) - F.logsigmoid(s))
              + (1 - p_t) * (F.logsigmoid(-t) - F.logsigmoid(-s))).sum(-1).mean()
        return kl * temperature ** 2
    if kind == "positions":   # (B, T): one distribution over each sequence's tokens
        if mask is not None:
            real = mask.reshape(s.shape) > 0
            s, t = s.masked_fill(~real, _MASKED), t.masked_fill(~real, _MASKED)
        rows_s, rows_t = s, t
    elif kind == "tokens":   # (B, T, K): one distribution over the labels per real token
        rows_s, rows_t = s.reshape(-1, s.size(-1)), t.reshape(-1, t.size(-1))
        if mask is not None:
            keep = (mask.reshape(-1) > 0).nonzero().squeeze(1)
            rows_s, rows_t = rows_s.index_select(0, keep), rows_t.index_select(0, keep)
    elif kind == "classes":   # (N, K)
        rows_s, rows_t = s.reshape(-1, s.size(-1)), t.reshape(-1, t.size(-1))
    else:
        raise ValueError(f"soft target kind {kind!r}: one of {', '.join(KINDS)}")
    if rows_s.size(0) == 0:
        return s.sum() * 0.0
    log_s = F.log_softmax(rows_s / temperature, dim=-1)
    log_t = F.log_softmax(rows_t / temperature, dim=-1)
    kl = (log_t.exp() * (log_t - log_s)).sum(-1).mean()
    return kl * temperature ** 2


def default_layer_map(student_layers: int, teacher_layers: int) -> list[tuple[int, int]]:
    """Each student layer m to teacher layer round(m * L_teacher / L_student) (TinyBERT's
    uniform map; the last layers meet)."""
    return [(m, round(m * teacher_layers / student_layers)) for m in range(1, student_layers + 1)]


def parse_layer_map(text: str, student_layers: int, teacher_layers: int
                    ) -> list[tuple[int, int]]:
    """"1:2,2:4" -> [(1, 2), (2, 4)], each index a hidden state (0 = embeddings) the model has."""
    pairs = []
    for item in text.split(","):
        parts = item.strip().split(":")
        if len(parts) != 2 or not all(p.strip().isdigit() for p in parts):
            raise BertctlError(f"--layer-map {text!r}: expected student:teacher pairs such as "
                               f"1:2,2:4 (0 is the embeddings)")
        s, t = int(parts[0]), int(parts[1])
        for name, index, count in (("student", s, student_layers),
                                   ("teacher", t, teacher_layers)):
            if index > count:
                raise BertctlError(f"--layer-map {text!r}: the {name} has no layer {index} "
                                   f"(it has layers 1..{count}, and 0 for the embeddings)")
        pairs.append((s, t))
    if len({s for s, _ in pairs}) != len(pairs):
        raise BertctlError(f"--layer-map {text!r}: a student layer is mapped twice")
    return pairs


@contextlib.contextmanager
def hidden_states(model: nn.Module, wanted: Sequence[int]) -> Iterator[dict[int, torch.Tensor]]:
    """Collect the hidden states `wanted` (0 = embeddings' output, i = layer i's) of the
    model's encoder while the block runs, by forward hooks on the modules the model names
    (`hidden_state_modules`): the heads stay as they are."""
    states: dict[int, torch.Tensor] = {}
    modules = dict(enumerate(model.hidden_state_modules()))
    handles = []
    for index in set(wanted):
        def keep(_module, _inputs, output, index=index):
            states[index] = output
        handles.append(modules[index].register_forward_hook(keep))
    try:
        yield states
    finally:
        for handle in handles:
            handle.remove()


class Distiller(nn.Module):
    """The student, the frozen teacher and the losses, as one module the training loop trains."""

    def __init__(self, student: nn.Module, teacher: nn.Module, targets: dict[str, str],
                 temperature: float = 2.0, alpha: float = 0.5, hidden_weight: float = 0.0,
                 layer_map: Sequence[tuple[int, int]] = (), where: str = "the teacher"):
        super().__init__()
        self.where = where
        if not targets or any(kind not in KINDS for kind in targets.values()):
            raise ValueError(f"targets {targets!r}: output name -> one of {', '.join(KINDS)}")
        self.student = student
        teacher.eval()
        teacher.requires_grad_(False)
        # In a tuple, not a submodule: not trained, saved, put in train mode or wrapped by DDP.
        self._frozen = (teacher,)
        self.targets, self.temperature, self.alpha = dict(targets), temperature, alpha
        self.hidden_weight = hidden_weight
        self.layer_map = list(layer_map) if hidden_weight > 0 else []
        widths = (student.config.hidden_size, teacher.config.hidden_size)
        self.projections = (nn.ModuleList(nn.Linear(*widths) for _ in self.layer_map)
                            if self.layer_map and widths[0] != widths[1] else None)
        if self.projections is not None:
            for projection in self.projections:
                nn.init.normal_(projection.weight, std=student.config.initializer_range)
                nn.init.zeros_(projection.bias)

    @property
    def teacher(self) -> nn.Module:
        return self._frozen[0]

    @property
    def packs(self) -> bool:
        return bool(self.student.packs and self.teacher.packs)

    def _teacher_on(self, device: torch.device) -> nn.Module:
        """The teacher, moved where the batch is (the training loop moves the module)."""
        if next(self.teacher.parameters()).device != device:
            self.teacher.to(device)
        return self.teacher

    def forward(self, **batch) -> dict[str, torch.Tensor]:
        # The teacher's outputs come with the batch where they were cached (`teacher_outputs`).
        imitated = batch.pop(IMITATED, None)
        taught = {key[len(TEACHER):]: batch.pop(key)
                  for key in [k for k in batch if k.startswith(TEACHER)]}
        mask = batch.get("attention_mask")
        teacher = self._teacher_on(batch["input_ids"].device)
        with hidden_states(self.student, [s for s, _ in self.layer_map]) as mine, \
                hidden_states(teacher, [t for _, t in self.layer_map]) as theirs:
            out = dict(self.student(**batch))
            if "loss" in out and self.alpha == 1 and not self.layer_map:
                return out   # the teacher's outputs would weigh nothing: it is not run
            if not taught:
                with torch.no_grad():
                    taught = teacher(**batch)
                # Targets that are NaN would surface as a diverged loss, whose advice (a lower
                # lr) points the wrong way: the teacher is what is broken.
                for k in self.targets:   # (a packed batch has more outputs than rows)
                    if k in taught:
                        refuse_non_finite(non_finite_rows(taught[k]),
                                          np.arange(len(taught[k])), self.where)
        missing = [k for k in self.targets if k not in out or k not in taught]
        if missing:
            raise ValueError(f"the models returned no {', '.join(missing)}")
        soft = sum(soft_loss(kind, out[k], taught[k],
                             self._rows(kind, out[k], batch, mask, imitated), self.temperature)
                   for k, kind in self.targets.items()) / len(self.targets)
        loss = soft if "loss" not in out else self.alpha * out["loss"] + (1 - self.alpha) * soft
        out["soft_loss"] = soft.detach()
        if self.layer_map:
            hidden = self._hidden_loss(mine, theirs, mask)
            out["hidden_loss"] = hidden.detach()
            loss = loss + self.hidden_weight * hidden
        out["loss"] = loss
        return out

    @staticmethod
    def _rows(kind: str, output: torch.Tensor, batch: dict, mask: torch.Tensor | None,
              imitated: torch.Tensor | None = None):
        """The tokens a "tokens" output is imitated on: those the head is trained and read at
        (a tagging head's first word pieces: the labelled positions, or those the batch marks
        `IMITATED` when it has no labels), since the teacher's outputs elsewhere were never
        trained; else every token."""
        labels = batch.get("labels")
        if kind == "tokens" and labels is not None and labels.shape == output.shape[:-1]:
            return (labels != IGNORE_INDEX).long()
        if kind == "tokens" and imitated is not None:
            return imitated
        return mask

    def _hidden_loss(self, mine: dict[int, torch.Tensor], theirs: dict[int, torch.Tensor],
                     mask: torch.Tensor | None) -> torch.Tensor:
        total = 0.0
        for i, (s, t) in enumerate(self.layer_map):
            x, y = mine[s].float(), theirs[t].float()
            if self.projections is not None:
                x = self.projections[i](x)
            error = (x - y).pow(2).mean(-1)   # (rows, T): per token
            if mask is not None:
                real = (mask.reshape(error.shape) > 0).float()
                total = total + (error * real).sum() / real.sum().clamp(min=1)
            else:
                total = total + error.mean()
        return total / len(self.layer_map)


def step_metrics(out: dict, batch: dict) -> dict:
    """The distillation losses for the training log (a `train` step_metrics function)."""
    return {name: (out[name], 1) for name in ("soft_loss", "hidden_loss") if name in out}


def teacher_outputs(teacher: nn.Module, features, family, directory: Path, batch_size: int,
                    device, precision: str, where: str = "the teacher"
                    ) -> dict[str, tuple[np.ndarray, bool]]:
    """The teacher's `targets` outputs for every example of `features`, computed once (eval
    mode, no autograd, longest batches first) and kept as .npy files in `directory`, which a
    resumed run reads back (memory-mapped) instead of running the teacher again. Returns what
    `collate.TaskData` takes as extras: batch key -> (values in example order, per token?)."""
    targets = family.soft_targets
    stamp = {"examples": len(features), "precision": precision, "outputs": sorted(targets)}
    marker = directory / "outputs.json"

    def current() -> bool:
        try:
            return json.loads(marker.read_text()) == stamp
        except (OSError, ValueError):
            return False

    if dist.is_main() and not current():
        teacher.to(device)
        outputs = predict(teacher, task_batches(features, batch_size, family), device, precision,
                          where=where)
        try:
            shutil.rmtree(directory, ignore_errors=True)
            directory.mkdir(parents=True)
            for name in targets:
                np.save(directory / f"{name}.npy", outputs[name].astype(np.float32))
            marker.write_text(json.dumps(stamp))   # last: the files before it are complete
        except OSError as exc:
            raise BertctlError(f"{directory}: cannot keep the teacher's outputs: "
                               f"{exc.strerror or exc} (or run with --teacher-cache off)") from None
    dist.barrier()
    return {TEACHER + name: (np.load(directory / f"{name}.npy", mmap_mode="r"),
                             kind in ("tokens", "positions")) for name, kind in targets.items()}


# ---------------------------------------------------------------------------------------------
# The student

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


def from_layers(model: nn.Module, layers: list[int], role: str, head_kwargs: dict,
                source: str = "teacher") -> tuple[nn.Module, LoadReport]:
    """A student with `layers` of `model`'s encoder (the teacher's, or a pretrained model's,
    named `source`; renumbered 0..), its embeddings, and its pooler and head where their
    shapes fit (a frozen-encoder teacher's head reads combined features of another width: the
    student's head then starts fresh)."""
    student = build(role, model.config.with_layers(layers), **head_kwargs)
    report = load_state_dict(student, model.layer_state(layers),
                             source=f"{source} layers {','.join(map(str, layers))}")
    return student, report


def sized_config(teacher, size: str):
    """A preset size of the teacher's architecture (its config class's presets, whatever the
    architecture), reading what the teacher reads."""
    presets = getattr(type(teacher), "presets", {})
    if size not in presets:
        raise BertctlError(f"--student-size {size!r}: not a size of the teacher's architecture "
                           f"({getattr(teacher, 'architecture', type(teacher).__name__)}: "
                           f"{', '.join(presets) or 'none'})")
    return teacher.sized(size)


@dataclasses.dataclass
class StudentPlan:
    """How the student is built: from teacher `layers`, as a new model of `config`, or (both
    None) from the pretrained model given beside; `description` is what the manifest says."""

    description: str
    num_layers: int
    layers: list[int] | None = None
    config: object | None = None   # the architecture's config class


def plan(teacher, *, layers: str | None = None, size: str | None = None,
         config_file: str | Path | None = None, init=None,
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
        config = architectures.of_config(raw, str(config_file)).config_from_hf(
            raw, str(config_file))
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


def check_vocabulary(config, teacher, where: str) -> None:
    """Distillation compares outputs token for token: one tokenizer for both."""
    if config.vocab_size != teacher.vocab_size:
        raise BertctlError(f"{where}: the student's vocabulary has {config.vocab_size:,} entries, "
                           f"the teacher's {teacher.vocab_size:,}; distillation needs the "
                           f"teacher's tokenizer (the same vocabulary)")

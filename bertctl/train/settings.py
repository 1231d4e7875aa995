"""The training loop's settings: those a stage shows as flags (`TrainingSettings`, which pretrain
and finetune extend with their own defaults) and those only code sets (`LoopSettings`)."""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import Field, field_validator, model_validator

from bertctl.settings import (CHECKPOINTS, EVALUATION, RUNTIME, TRAINING, batch_size_field, meta,
                              Runtime)
from bertctl.train.optimizers import OPTIMIZERS
import re

_RUN = meta(RUNTIME, identity=False)


class TrainingSettings(Runtime):
    """The training loop's settings, shared by pretrain and finetune (which set other defaults)."""

    # The bounds are beyond any real run: a typo of many digits is refused, not scheduled.
    steps: int | None = Field(None, ge=1, le=10**9,
                              description="Optimizer steps (or give --epochs).",
                              json_schema_extra=meta(TRAINING))
    epochs: float | None = Field(None, gt=0, description="Passes over the training data (or "
                                 "give --steps).", json_schema_extra=meta(TRAINING))
    # Seconds once resolved ("30m" and "1800" are one setting, one artifact id).
    time_budget: float | None = Field(
        None, gt=0, le=365 * 86400, description="Train for this long instead of --steps or "
        "--epochs: 90s, 30m, 2h, 1d (or seconds; at most 365 days). The learning-rate schedule runs over the budget (warm-up and "
        "decay by the elapsed share of it), so the run ends with a decayed rate; evaluations "
        "and checkpoints count against it; a resumed run has the budget it had left at its "
        "last checkpoint.",
        json_schema_extra=meta(TRAINING, text=True))
    batch_size: int = batch_size_field(32, step=True)
    min_steps: int | None = Field(
        None, ge=1, description="With --time-budget: the optimizer steps the budget should buy "
        "at least. A few forward and backward passes measure the time per example on this "
        "machine, and --batch-size is halved (not below 16) until the budget buys this many; "
        "the learning rate, the warm-up share and the model stay. Recorded in the manifest "
        "(batch_fit); a resumed run keeps the choice.",
        json_schema_extra=meta(TRAINING, hashed_if_changed=True))
    micro_batch_size: int | None = Field(None, ge=1, description="Examples per forward pass; "
                                         "gradients accumulate up to --batch-size. Unset: "
                                         "batch size / processes.", json_schema_extra=_RUN)
    lr: float = Field(1e-4, gt=0, description="Peak learning rate.",
                      json_schema_extra=meta(TRAINING))
    # Its choices and help are the registry's (train/optimizers.py: optimizer_field).
    optimizer: str = Field("adamw", description="The optimizer, from the registry.",
                           json_schema_extra=meta(TRAINING))
    gradient_checkpointing: bool = Field(False, description="Keep only each encoder layer's "
                                         "input and recompute the layer in the backward pass: "
                                         "much less activation memory for about a third more "
                                         "compute; the same gradients.", json_schema_extra=_RUN)
    compile: bool | None = Field(
        None, description="torch.compile each encoder layer (its first step is slower while "
        "it compiles; a CPU needs a C++ compiler). Unset: where it pays, measured on the run's "
        "own steps: a run with enough steps left times a few eager steps, compiles, times a "
        "few compiled ones and keeps the faster; short runs never compile. The choice and its "
        "figures are recorded in the checkpoints and the artifact (stats.compile); a resumed "
        "run takes them.",
        # In the id where given: compiled kernels round differently (6.3e-4 in the weights
        # after 12 steps); unset is auto, like --attention's auto (its choice in the stats).
        json_schema_extra=meta(RUNTIME, hashed_if_changed=True))
    attention: Literal["auto", "fused", "written", "varlen"] = Field(
        "auto", description="Attention's kernel (they round differently): fused "
        "(PyTorch's scaled_dot_product_attention), written (the product as plain tensor "
        "operations), varlen (each sequence of a padded or packed batch over its own tokens, "
        "no mask: PyTorch's variable-length flash kernel on a GPU in bf16/fp16, one sequence "
        "at a time elsewhere; no attention dropout, not DeBERTa), or auto: on a GPU varlen "
        "wherever it runs, on a CPU in reduced precision the one timed faster for each "
        "shape on its first step, written wherever attention has dropout on a CPU, else fused. "
        "Auto's choices are recorded in the checkpoints and the artifact (stats.attention); a "
        "resumed run takes them, and a distributed run's ranks time nothing (fused).",
        json_schema_extra=meta(TRAINING, hashed_if_changed=True))
    weight_decay: float = Field(0.01, ge=0, description="AdamW weight decay (not on biases and "
                                "LayerNorm).", json_schema_extra=meta(TRAINING))
    layer_decay: float | None = Field(
        None, gt=0, le=1, description="Layer-wise learning-rate decay (ELECTRA's and "
        "DeBERTa's fine-tuning recipes): the head at the full rate, each encoder layer at the "
        "one above's times this, the embeddings lowest. Unset: one rate for every weight.",
        json_schema_extra=meta(TRAINING, hashed_if_changed=True))
    ema: float | None = Field(
        None, gt=0, lt=1, description="Keep an exponential moving average of the weights with "
        "this decay (e.g. 0.999; at most (1 + t) / (10 + t) at update t), and evaluate, select "
        "and save it in place of the trained weights. Unset: the trained weights.",
        json_schema_extra=meta(TRAINING, hashed_if_changed=True))
    warmup: float = Field(0.1, ge=0, description="Linear warm-up: a fraction of the steps if "
                          "below 1, else a step count; then the --schedule.",
                          json_schema_extra=meta(TRAINING))
    log_to: str | None = Field(
        None, description="Also log the run to an experiment tracker: mlflow (where "
        "MLFLOW_TRACKING_URI says; mlflow:URI names it, a file: store too) or wandb (project "
        "WANDB_PROJECT; wandb:PROJECT names it; WANDB_MODE=offline writes it to disk). The run "
        "is named by the artifact id, with the settings as parameters, every logged number at "
        "its step, the final metrics and the lineage as tags; a resumed run continues it. "
        "Optional extras: pip install 'bertctl[mlflow]' or 'bertctl[wandb]'.",
        json_schema_extra=_RUN)
    schedule: Literal["linear", "cosine", "wsd", "constant"] = Field(
        "linear", description="The learning rate after the warm-up: linear decay to 0; cosine "
        "decay to 0 (half a cosine); wsd, warm-up-stable-decay: the peak rate until the last "
        "--decay of the run, then linear decay to 0; constant, the peak rate to the end. Over a "
        "--time-budget, by the elapsed share of it.",
        json_schema_extra=meta(TRAINING, hashed_if_changed=True))
    decay: float | None = Field(
        None, gt=0, description="With --schedule wsd: the decay's length, a fraction of the run "
        "(of the budget with --time-budget) if below 1, else a whole number of steps (2 or "
        "more); unset: 0.1.",
        json_schema_extra=meta(TRAINING, hashed_if_changed=True))
    max_grad_norm: float | None = Field(1.0, gt=0, description="Gradient clipping norm.",
                                        json_schema_extra=meta(TRAINING))
    seed: int = Field(0, ge=0, description="Seed for initialisation, data order and dropout.",
                      json_schema_extra=meta(TRAINING))
    group_by_length: bool = Field(False, description="Batch examples of similar length "
                                  "together (less padding).", json_schema_extra=meta(TRAINING))
    log_every: int = Field(10, ge=1, description="Steps between log lines.",
                           json_schema_extra=_RUN)
    eval_every: int | None = Field(None, ge=1, description="Steps between validation passes; "
                                   "unset: at each epoch's end and the run's end.",
                                   json_schema_extra=meta(EVALUATION, identity=False))
    patience: int | None = Field(
        None, ge=1, le=10**6, description="Stop when the dev metric the run selects by has not "
        "improved for this many evaluations in a row (each epoch's end, or --eval-every); the "
        "best evaluated weights are kept, as without it. Needs a dev set. Unset: train to the "
        "end.", json_schema_extra=meta(EVALUATION, hashed_if_changed=True))
    checkpoint_every: int | None = Field(200, ge=1, description="Steps between resumable "
                                         "checkpoints; unset: none.",
                                         json_schema_extra=meta(CHECKPOINTS, identity=False))
    keep_last: int = Field(2, ge=1, description="Checkpoints kept.",
                           json_schema_extra=meta(CHECKPOINTS, identity=False))
    resume_from: str = Field("latest", pattern=r"^(latest|never|\d+)$", description="Checkpoint "
                             "to resume from when the same command is rerun: latest, never, or "
                             "a step (to skip a corrupted newer one).",
                             json_schema_extra=meta(CHECKPOINTS, identity=False))
    tensorboard: str | None = Field(None, description="Also write the logged scalars as "
                                    "TensorBoard event files to this directory (needs the "
                                    "tensorboard extra).", json_schema_extra=_RUN)

    @field_validator("optimizer")
    @classmethod
    def _registered(cls, name: str) -> str:
        return OPTIMIZERS.known(name)

    @field_validator("time_budget", mode="before")
    @classmethod
    def _duration(cls, value: Any) -> Any:
        return parse_duration(value) if isinstance(value, str) else value

    @field_validator("resume_from", mode="before")
    @classmethod
    def _step_number(cls, value: Any) -> Any:
        return str(value) if isinstance(value, int) and not isinstance(value, bool) else value

    @model_validator(mode="after")
    def _length(self):
        given = [n for n in ("steps", "epochs", "time_budget") if getattr(self, n) is not None]
        if len(given) != 1:
            raise ValueError("give exactly one of --steps, --epochs and --time-budget"
                             + (f" (got {' and '.join('--' + g.replace('_', '-') for g in given)})"
                                if given else ""))
        if self.min_steps is not None and self.time_budget is None:
            raise ValueError("min_steps fits the batch size to a time budget: give "
                             "time_budget too")
        if self.micro_batch_size is not None and self.batch_size % self.micro_batch_size:
            # (checked here, before the batch-size measurement --min-steps makes)
            raise ValueError(f"batch_size {self.batch_size} is not a multiple of "
                             f"micro_batch_size {self.micro_batch_size}")
        if self.time_budget is not None and self.warmup >= 1:
            raise ValueError(f"with time_budget, warmup is a fraction of the budget (below 1), "
                             f"not a step count ({self.warmup:g})")
        if self.log_to is not None and self.log_to.partition(":")[0] not in ("mlflow", "wandb"):
            raise ValueError(f"log_to {self.log_to!r}: mlflow or wandb (optionally :URI for "
                             f"mlflow, :PROJECT for wandb)")
        if self.decay is not None and self.decay >= 1 and \
                (self.decay != int(self.decay) or self.decay == 1):
            # 1 reads as the whole run and as one step; 2.5 is neither a share nor a count
            raise ValueError(f"decay {self.decay:g} is neither a fraction of the run (below 1) "
                             f"nor a whole number of steps (2 or more)")
        if self.decay is not None and self.schedule != "wsd":
            raise ValueError(f"decay is the length of --schedule wsd's decay; the schedule is "
                             f"{self.schedule}")
        if self.decay is not None and self.time_budget is not None and self.decay >= 1:
            raise ValueError(f"with time_budget, decay is a fraction of the budget (below 1), "
                             f"not a step count ({self.decay:g})")
        # The schedule's length: its own (pretrain's --total-steps), else the run's; a
        # continued schedule's is its parent's, which the loop checks.
        length = getattr(self, "total_steps", None) or self.steps
        if self.decay is not None and self.decay >= 1 and length is not None and \
                not getattr(self, "continue_schedule", False) and \
                self.decay + (self.warmup if self.warmup >= 1 else self.warmup * length) \
                > length:
            raise ValueError(f"decay {self.decay:g} steps and the warm-up are longer than the "
                             f"schedule's {length} steps")
        if self.decay is not None and self.decay < 1 and self.warmup < 1 and \
                self.warmup + self.decay > 1:
            raise ValueError(f"warmup {self.warmup:g} and decay {self.decay:g} together are "
                             f"longer than the run")
        return self


_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_duration(text: str) -> float:
    """'90s', '30m', '2h', '1d', '1h30m' or a number of seconds -> seconds."""

    cleaned = text.strip().lower().replace(" ", "")
    try:
        return float(cleaned)
    except ValueError:
        pass
    number = r"\d+(?:\.\d+)?(?:e[+-]?\d+)?"
    parts = re.fullmatch(rf"(?:{number}[smhd])+", cleaned) and re.findall(
        rf"({number})([smhd])", cleaned)
    if not parts:
        raise ValueError(f"{text!r} is not a duration: give e.g. 90s, 30m, 2h, 1d or seconds")
    return float(sum(float(n) * _UNITS[u] for n, u in parts))


class LoopSettings(TrainingSettings):
    """How to train: the stages' settings (`TrainingSettings`, where each one is described and
    checked) plus those that only code sets. Checked when built: a bad value raises a
    `SettingsError` naming it. The defaults suit a call from code: no checkpoints (the stages
    checkpoint every 200 steps), and keep_last=None keeps every checkpoint.

    Step numbers (log/eval/checkpoint cadences, stop_after, resume_from, checkpoint names) are
    global: a continued phase with start_step=900_000 logs step 900_001 first. batch_size is
    GLOBAL, over all ranks; micro_batch_size defaults to batch_size / world size; warmup below 1
    is a fraction of total_steps, otherwise a step count.
    """

    where: ClassVar[str] = "train settings"

    checkpoint_every: int | None = Field(None, ge=1)
    precision: Literal["fp32", "bf16", "fp16"] = "fp32"   # code says what it wants
    keep_last: int | None = Field(2, ge=1)
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = Field(1e-6, gt=0)       # BERT's Adam epsilon (PyTorch's default is 1e-8)
    start_step: int = Field(0, ge=0)     # continue the step count of an earlier phase ...
    total_steps: int | None = Field(None, ge=1)  # ... and its schedule (default: its end)
    # The step its data order counts from (default start_step): 0 goes on with an earlier
    # phase's order on the same data.
    order_start: int | None = Field(None, ge=0)
    stop_after: int | None = Field(None, ge=0)   # stop at this global step as if interrupted
    # DDP: set when some parameters get no gradient (the NSP head of MLM-only pretraining).
    find_unused_parameters: bool = False

    @field_validator("betas")
    @classmethod
    def _betas_in_range(cls, betas: tuple[float, float]) -> tuple[float, float]:
        if not all(0 <= b < 1 for b in betas):
            raise ValueError("betas must be in [0, 1)")
        return betas

    @classmethod
    def of(cls, stage: TrainingSettings, **extra: Any) -> "LoopSettings":
        """A stage's training settings plus `extra` (the settings only code sets)."""
        own = stage.model_dump(include=set(cls.model_fields))  # e.g. pretrain's total_steps
        return cls(**{**own, **extra})

    @property
    def resume_step(self) -> int | str:
        """resume_from as "latest", "never" or a step number."""
        return int(self.resume_from) if self.resume_from.isdigit() else self.resume_from

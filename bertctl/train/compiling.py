"""`--compile`: each encoder layer through torch.compile, on, off, or (unset) where it pays.

Whether it pays depends on the device, the precision and the model: on an AMX Xeon it made
BERT mini's bf16 step 2.08x faster, on AVX512 and AVX2 CPUs 0.90-1.02x (docs/benchmarks.md);
on a GPU it fuses the layers' elementwise work. So auto measures, on the run's own steps, as
the attention policy does: after `WARMUP` steps it times `EAGER` steps; where the run has
enough left for even a `GAIN_FLOOR` gain to repay a compile (`COMPILE_GUESS_S`), it compiles,
times the first compiled step (the compile) and `COMPILED` more, and keeps the faster. Short
runs (every test, a quick fine-tune) never compile. The choice and its figures are recorded
(checkpoints, the artifact's stats); a resumed run takes the recorded choice. Under torchrun
the ranks decide on their mean times, so all decide alike.

The timing waits for the device at the phases' ends, a few times in a run.
"""

from __future__ import annotations

import shutil
import time
from typing import Any

import torch
from torch import nn

from bertctl.errors import BertctlError
from bertctl.train import distributed as dist
from bertctl.train.encoders import encoders

WARMUP, EAGER, COMPILED = 2, 3, 3
# A compile's cost before it is measured: 10-25 s for a layer on these CPUs
# (benchmarks/speed/bench_compile.py); a GPU's base model is unmeasured here.
COMPILE_GUESS_S = 60.0
# The smallest gain a trial is run for: below it the compile's cost is not repaid in time.
GAIN_FLOOR = 0.1
# Compiled must be at least this much faster to be kept (timing noise on a loaded machine).
KEEP_BELOW = 0.97


def compiler_missing(device: torch.device) -> str | None:
    """Why torch.compile cannot run here, or None."""
    if device.type == "cpu" and not any(shutil.which(c) for c in ("g++", "c++", "clang++")):
        return "no C++ compiler (torch.compile builds its CPU kernels with one)"
    return None


class CompileChoice:
    """One run's --compile: `setting` True (on), False (off) or None (auto)."""

    def __init__(self, setting: bool | None, model: nn.Module, device: torch.device):
        self.model, self.device = model, device
        self.record: dict[str, Any] = {"mode": {None: "auto", True: "on", False: "off"}[setting]}
        self.phase = "decided"
        self.marks: list[float] = []
        if setting:
            if compiler_missing(device):
                raise BertctlError(f"--compile: {compiler_missing(device)}; install one (g++) "
                                   f"or leave --compile unset")
            self._set(True)
        elif setting is False or not encoders(model):
            self.record["chosen"] = "eager"
        elif compiler_missing(device):
            self.record.update(chosen="eager", reason=compiler_missing(device))
        else:
            self.phase = "warmup"

    def _set(self, on: bool) -> None:
        for encoder in encoders(self.model):
            encoder.compile_layers(on)
        self.record["chosen"] = "compiled" if on else "eager"

    def adopt(self, recorded: dict[str, Any] | None) -> None:
        """A resumed run: the recorded choice (a trial the checkpoint interrupted starts over)."""
        chosen = (recorded or {}).get("chosen")
        if self.record["mode"] != "auto" or chosen is None:
            return
        self.record = dict(recorded)
        self.phase = "decided"
        self._set(chosen == "compiled")

    def finish(self) -> dict[str, Any]:
        """The record at the run's end (a trial the run ended during: what it last ran)."""
        if self.phase != "decided":
            self.record.setdefault("chosen", "compiled" if self.phase == "compiled" else "eager")
            self.record["reason"] = "the run ended before the trial did"
            self.phase = "decided"
        return self.record

    def _mark(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        self.marks.append(time.perf_counter())

    def _mean_over_ranks(self, values: list[float]) -> list[float]:
        if not dist.active():
            return values
        t = torch.tensor(values, dtype=torch.float64, device=self.device)
        return [v / dist.world_size() for v in dist.all_reduce_sum(t).tolist()]

    def after_step(self, steps_done: int, steps_left: float) -> None:
        """Called after each step: `steps_done` since this run started, `steps_left` the
        steps it expects (a time budget: its seconds left over the mean step's so far)."""
        if self.phase == "decided":
            return
        if self.phase == "warmup" and steps_done == WARMUP:
            self._mark()
            self.phase = "eager"
        elif self.phase == "eager" and steps_done == WARMUP + EAGER:
            self._mark()
            eager = (self.marks[1] - self.marks[0]) / EAGER
            eager = self._mean_over_ranks([eager])[0]
            self.record["eager_step_s"] = round(eager, 6)
            if steps_left * eager * GAIN_FLOOR < COMPILE_GUESS_S:
                self.record.update(chosen="eager", reason="too few steps left to repay a "
                                   "compile")
                self.phase = "decided"
                return
            self._set(True)
            self.record.pop("chosen")
            self.phase = "compiled"
        elif self.phase == "compiled" and steps_done == WARMUP + EAGER + 1:
            self._mark()   # the first compiled step: the compile
        elif self.phase == "compiled" and steps_done == WARMUP + EAGER + 1 + COMPILED:
            self._mark()
            first, compiled = self.marks[2] - self.marks[1], (self.marks[3] - self.marks[2]) \
                / COMPILED
            compiled, first = self._mean_over_ranks([compiled, first])
            eager = self.record["eager_step_s"]
            self.record.update(compiled_step_s=round(compiled, 6),
                               compile_s=round(max(0.0, first - compiled), 3))
            if compiled < KEEP_BELOW * eager:
                self.record["chosen"] = "compiled"
            else:
                self._set(False)
            self.phase = "decided"


__all__ = ["CompileChoice", "compiler_missing"]

"""The training stages' shared run (pretrain, finetune, distill): the up-to-date check, the
output's lock for the whole run, the run directory that outlives a crash, and the atomic write.
A stage hands its own part over as a `TrainingJob`.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import time
from pathlib import Path
from collections.abc import Callable
from typing import Any, Protocol

from bertctl import console

from bertctl.contract import modelcard
from bertctl.contract import artifacts, locks, placement
from bertctl import settings as settings_mod
from bertctl.errors import Interrupted
from bertctl.train import distributed as dist
from bertctl.train import sinks
from bertctl.train.sinks import trackers
from bertctl.train.checkpoint import list_checkpoints


class TrainingJob(Protocol):
    """A training stage's own part, called by `train_to_artifact` in this order on every rank:
    `prepare()` (read the data, build the model: everything before the first step), `fit(work,
    sink)` (the training loop, resuming from `work`'s checkpoints; `sink`, on rank 0, is the
    loop's `on_log`: train/sinks' fan-out), and on rank 0 `write(result, tmp)` (the model
    directory; returns the manifest stats). `progress()`: the console display's description,
    total steps and first step."""

    def prepare(self) -> None: ...

    def progress(self) -> tuple[str, int | None, int]: ...

    def fit(self, work: Path, sink: Callable[[dict], None] | None = None) -> Any: ...

    def write(self, result: Any, tmp: Path) -> dict: ...


def train_to_artifact(settings, inputs: list[artifacts.InputRef], target: artifacts.Target,
                      job: TrainingJob):
    """What every training stage shares. Under torchrun every rank decides "up to date" the same
    way and trains; rank 0 alone writes the artifact (the others return None). The work
    directory holds the checkpoints, so it outlives a crash (the rerun resumes from it) and is
    removed once the artifact is in place.
    """
    dist.init(settings.device)  # under torchrun: join the group first, to know who writes
    try:
        planned = artifacts.plan("model", settings, inputs, target.out, target.given)
        # The output's lock covers the whole run, its run directory included (rank 0 holds it
        # for a distributed run).
        with (locks.output_lock(planned.out, target.wait) if dist.is_main()
              else contextlib.nullcontext()):
            return _train(settings, target, job, planned)
    finally:
        dist.cleanup()


def _train(settings, target, job: TrainingJob, planned: artifacts.Plan):
    artifact_id, out_path, inputs = planned.artifact_id, planned.out, planned.inputs
    existing = artifacts.check_out(out_path, "model", artifact_id, target.force)
    if existing is not None:
        return artifacts.Outcome(manifest=existing, path=str(out_path), up_to_date=True)
    work = placement.work_dir(out_path, artifact_id)
    marks = {"start": time.perf_counter()}
    tracker = None
    if dist.is_main():   # reached before any work
        sinks.require(settings)
    if getattr(settings, "log_to", None) and dist.is_main():
        tracker = trackers.Tracker(settings.log_to, work, artifact_id,
                                   settings_mod.as_dict(settings),
                                   [{"role": i.role, "kind": i.kind, "id": i.id} for i in inputs])
    try:
        outcome = _trained(settings, job, planned, work, marks, tracker)
    except BaseException:
        if tracker is not None:
            tracker.abandon()
        raise
    if tracker is not None:
        tracker.finish(outcome.manifest.metrics if outcome is not None else None)
    return outcome


def _trained(settings, job: TrainingJob, planned: artifacts.Plan, work: Path, marks: dict,
             tracker):
    artifact_id, out_path, inputs = planned.artifact_id, planned.out, planned.inputs
    job.prepare()
    if not dist.is_main():
        job.fit(work)
        # Back only once rank 0 has put the artifact in place: when torchrun returns on any
        # node, the next stage (phase 2, a fine-tuning) finds it.
        dist.barrier()
        return None

    def build(tmp: Path) -> dict:
        with sinks.fanned_out(job.progress(), settings, tracker) as sink:
            result = job.fit(work, sink)
        marks["trained"] = time.perf_counter()
        marks["loop"] = getattr(result, "loop_started", 0.0) or marks["start"]
        stats = job.write(result, tmp)
        shutil.copyfile(work / "metrics.jsonl", tmp / "metrics.jsonl")
        modelcard.write(tmp, artifact_id, out_path, settings_mod.as_dict(settings), inputs, stats)
        return stats

    try:
        outcome = artifacts.publish(planned, build)   # checked above, under the lock
    except BaseException as exc:
        if not list_checkpoints(work):   # nothing a rerun could resume: nothing left behind
            shutil.rmtree(work, ignore_errors=True)
        elif isinstance(exc, KeyboardInterrupt):   # kept on purpose: the rerun resumes
            raise Interrupted(f"interrupted; no artifact was written; checkpoints kept in "
                              f"{work / 'checkpoints'}: rerun the same command to resume") from None
        raise
    shutil.rmtree(work, ignore_errors=True)
    placement.remove_other_work_dirs(out_path)   # runs of other settings for this --out
    if getattr(settings, "time_budget", None) is not None and "trained" in marks:
        _log_budget(settings.time_budget, outcome.manifest.stats, marks)
    dist.barrier()
    return outcome


def _log_budget(budget: float, stats: dict, marks: dict) -> None:
    """Where a budget run's time went. The budget covers the training loop, its evaluations and
    checkpoints; the loop ends after the step that crosses it. Start-up (imports, reading the
    data, building the model and optimizer, --min-steps' measurement) and writing come on top."""
    now = time.perf_counter()
    # The imports before this stage began, when this process is the command (a test runner or
    # a notebook that calls the stage has lived longer: its age says nothing).
    imports = (_process_age() or 0.0) - (now - marks["start"])
    before = marks["loop"] - marks["start"] + (imports if 0 < imports < 60 else 0.0)
    loop, writing = marks["trained"] - marks["loop"], now - marks["trained"]
    over = (stats.get("elapsed_s") or loop) - budget
    tokens = f", {stats['tokens']:,} tokens" if stats.get("tokens") else ""
    console.log(f"time budget {budget:g}s spent: {stats.get('step', 0):,} steps{tokens}; "
                f"the last step ended {over:.1f}s past it. "
                f"{before + loop + writing:.1f}s in all: start-up {before:.1f}s, training "
                f"{loop:.1f}s (its last evaluation and checkpoint included), writing "
                f"{writing:.1f}s")


def _process_age() -> float | None:
    """Seconds since this process started (Linux), so start-up includes the imports."""
    try:
        with open("/proc/self/stat") as f:
            ticks = int(f.read().rsplit(")", 1)[1].split()[19])
        with open("/proc/uptime") as f:
            uptime = float(f.read().split()[0])
        return max(0.0, uptime - ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return None

"""Where a training run's records go, fanned out in one place on rank 0: the console (every
record: the figures, and the loop's notes: its plan, a resume, an out-of-memory halving),
TensorBoard (`--tensorboard`, tensorboard.py) and an experiment tracker (`--log-to`,
trackers.py), the figures alone. metrics.jsonl is not a sink: it is the run's history, which
the loop writes and reads back when it resumes."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from bertctl import console
from bertctl.train.sinks import tensorboard, trackers

# Records that say what the loop does, not what it measured.
NOTES = ("plan", "resume", "note")


def require(settings) -> None:
    """Refuse a sink whose optional package is missing, before any work (one line, exit 2)."""
    if getattr(settings, "tensorboard", None):
        tensorboard.require()
    if getattr(settings, "log_to", None):
        trackers.require(settings.log_to)


class Sinks:
    """The training loop's `on_log`: each record to the console's display, each figure to
    TensorBoard and the tracker. TensorBoard's files open at the first figure: a run that
    resumed (its "resume" note comes first) drops what the interrupted run logged after its
    checkpoint, rather than showing those steps twice."""

    def __init__(self, display, board: str | None = None,
                 tracker: trackers.Tracker | None = None):
        self.display, self.board_dir, self.tracker = display, board, tracker
        self.board: tensorboard.ScalarWriter | None = None
        self.resumed: int | None = None

    def __call__(self, record: dict[str, Any]) -> None:
        self.display(record)
        split = record.get("split")
        if split == "resume":
            self.resumed = int(record["step"])
        if split in NOTES:
            return
        if self.board_dir and self.board is None:
            self.board = tensorboard.ScalarWriter(
                self.board_dir, purge_step=None if self.resumed is None else self.resumed + 1)
        if self.board is not None:
            self.board.log(record)
        if self.tracker is not None:
            self.tracker.log(record)

    def close(self) -> None:
        if self.board is not None:
            self.board.close()


@contextmanager
def fanned_out(progress: tuple[str, int | None, int], settings,
               tracker: trackers.Tracker | None) -> Iterator[Sinks]:
    """The sinks of one run: `progress` is the display's (description, total steps, first
    step), `settings` the stage's (its `tensorboard` directory)."""
    with console.training_progress(*progress) as display:
        sinks = Sinks(display, getattr(settings, "tensorboard", None), tracker)
        try:
            yield sinks
        finally:
            sinks.close()

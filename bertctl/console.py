"""The one place output is made: logs and progress on stderr, results on stdout.

stdout carries only results (a summary line, or with --json exactly one JSON object), so scripts
can parse it; everything else goes to stderr. On a terminal progress is a rich bar; elsewhere (CI,
make, pipes) it becomes a plain log line every few seconds.
"""

from __future__ import annotations

import json
import sys
import time
from contextlib import contextmanager
from typing import Any

from rich.console import Console
from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn,
                           TimeElapsedColumn, TimeRemainingColumn)

err = Console(stderr=True, highlight=False, soft_wrap=True)
out = Console(highlight=False, soft_wrap=True)
_quiet = False


def set_quiet(quiet: bool) -> None:
    global _quiet
    _quiet = quiet


def log(message: str) -> None:
    if not _quiet:
        err.print(message, markup=False)


def error(message: str) -> None:
    err.print(f"error: {message}", markup=False, style="red")


def emit_json(obj: Any) -> None:
    sys.stdout.write(json.dumps(obj, indent=2, default=str) + "\n")
    sys.stdout.flush()


class _LineProgress:
    """Progress for a non-terminal: one line every `interval` seconds and one at the end."""

    def __init__(self, description: str, total: float | None, unit: str, interval: float):
        self.description, self.total, self.unit, self.interval = description, total, unit, interval
        self.done = 0.0
        self.fields: dict[str, Any] = {}
        self.start = self.last = time.monotonic()
        self.shown: tuple | None = None   # what the last line said, so the end does not repeat it
        self.budget: float | None = None  # seconds, for a run that ends by the clock

    def update(self, advance: float = 0, **fields: Any) -> None:
        self.done += advance
        self.fields.update(fields)
        now = time.monotonic()
        if now - self.last >= self.interval:
            self.last = now
            self._line()

    def _line(self) -> None:
        state = (self.done, tuple(self.fields.items()))
        if state == self.shown:
            return
        self.shown = state
        elapsed = time.monotonic() - self.start
        left = ""
        if self.total:
            pos = f"{self.done:,.0f}/{self.total:,.0f} {self.unit} ({100 * self.done / self.total:.0f}%)"
            if 0 < self.done < self.total:
                left = f", {_duration(elapsed / self.done * (self.total - self.done))} left"
        else:
            pos = f"{self.done:,.0f} {self.unit}"
            if self.budget:
                left = f", {_duration(max(0.0, self.budget - elapsed))} of the budget left"
        extra = "".join(f" {k}={v}" for k, v in self.fields.items())
        log(f"{self.description}: {pos} in {elapsed:.0f}s{left}{extra}")

    def plan(self, total: float | None, budget: float | None) -> None:
        self.total, self.budget = total or self.total, budget


def _duration(seconds: float) -> str:
    seconds = int(round(seconds))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


class _BarProgress:
    def __init__(self, bar, task):
        self.bar, self.task = bar, task

    def plan(self, total: float | None, budget: float | None) -> None:
        if total:
            self.bar.update(self.task, total=total)

    def update(self, advance: float = 0, **fields: Any) -> None:
        info = " ".join(f"{k}={v}" for k, v in fields.items())
        self.bar.update(self.task, advance=advance, **({"info": info} if fields else {}))


@contextmanager
def progress(description: str, total: float | None = None, unit: str = "items",
             interval: float = 10.0):
    """Yields an object with `update(advance=0, **fields)`."""
    if _quiet:
        yield _LineProgress(description, total, unit, float("inf"))
        return
    if err.is_terminal:
        columns = [TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                   TimeElapsedColumn(), TimeRemainingColumn(), TextColumn("{task.fields[info]}")]
        with Progress(*columns, console=err, transient=False) as bar:
            yield _BarProgress(bar, bar.add_task(description, total=total, info=""))
    else:
        p = _LineProgress(description, total, unit, interval)
        yield p
        p._line()


_HIDDEN = {"step", "epoch", "split"}


def _fmt(record: dict) -> str:
    return " ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}"
                    for k, v in record.items() if k not in _HIDDEN)


@contextmanager
def training_progress(description: str, total_steps: int | None, start_step: int = 0):
    """Yields an `on_log(record)` callback for the training loop: training records move the
    bar (or print a line every few seconds off a terminal), validation records always print.
    A run continuing an earlier phase's step count logs steps from `start_step` on; the bar
    counts this run's steps."""
    with progress(description, total=total_steps, unit="steps") as bar:
        last = [start_step]

        def on_log(record: dict) -> None:
            step = int(record.get("step", last[0]))
            if record.get("split") == "resume":
                log(f"resuming from the checkpoint of step {step} ({record.get('path')})")
                bar.update(step - last[0])
                last[0] = step
                return
            if record.get("split") == "note":
                log(record["text"])
                return
            if record.get("split") == "plan":
                bar.plan(record.get("steps"), record.get("budget_s"))
                return
            if record.get("split") == "validation":
                log(f"validation at step {step}: {_fmt(record)}")
                return
            keep = ("loss", "lr", "mlm_accuracy", "nsp_accuracy", "accuracy", "tokens_per_s")
            bar.update(step - last[0], **{k: (f"{v:.4g}" if isinstance(v, float) else v)
                                          for k, v in record.items() if k in keep})
            last[0] = step

        yield on_log


def _log_table(name: str, rows: dict[str, dict]) -> None:
    columns = list(dict.fromkeys(k for row in rows.values() for k in row))

    def cell(v) -> str:
        return f"{v:.2f}" if isinstance(v, float) else str(v)

    widths = [max(len(c), *(len(cell(r.get(c, ""))) for r in rows.values())) for c in columns]
    first = max(len(str(k)) for k in rows)
    log(f"{name}:")
    log("  " + " " * first + "  " + "  ".join(c.rjust(w) for c, w in zip(columns, widths)))
    for key, row in rows.items():
        log("  " + str(key).ljust(first) + "  "
            + "  ".join(cell(row.get(c, "")).rjust(w) for c, w in zip(columns, widths)))


def log_metrics(metrics: dict) -> None:
    """A metrics dict as log lines; a confusion matrix as a table (rows: true label)."""
    for name, value in metrics.items():
        if name == "confusion_matrix" and isinstance(value, dict):
            names = [str(n) for n in value["labels"]]
            width = max(len(n) for n in names + ["true \\ pred"])
            cells = [max(len(n), max(len(str(r[j])) for r in value["matrix"]))
                     for j, n in enumerate(names)]
            log("confusion matrix (rows: true label, columns: prediction):")
            log("  " + "true \\ pred".ljust(width) + "  "
                + "  ".join(n.rjust(c) for n, c in zip(names, cells)))
            for n, row in zip(names, value["matrix"]):
                log("  " + n.ljust(width) + "  "
                    + "  ".join(str(x).rjust(c) for x, c in zip(row, cells)))
        elif isinstance(value, dict) and value and all(isinstance(v, dict) for v in value.values()):
            _log_table(name, value)     # e.g. tagging's per-type precision / recall / F1
        elif isinstance(value, float):
            log(f"{name}: {value:.4f}")
        else:
            log(f"{name}: {value}")

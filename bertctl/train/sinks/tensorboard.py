"""`--tensorboard DIR`: the training loop's records as TensorBoard scalars.

The writer is tensorboardX, an optional extra (`pip install 'bertctl[tensorboard]'`): it writes
the event files with only protobuf and numpy, while the `tensorboard` package itself (a server,
grpcio, werkzeug) is needed only where the logs are viewed, which is often another machine.
Every numeric field of a metrics.jsonl record becomes the scalar `SPLIT/NAME` at the record's
step, so TensorBoard shows exactly what metrics.jsonl holds.
"""

from __future__ import annotations

import math
from typing import Any

from bertctl.errors import BertctlError

_NOT_SCALARS = {"split", "step", "epoch"}


def require() -> None:
    """Fail before any work when the extra is missing (one line, exit code 2)."""
    try:
        import tensorboardX  # noqa: F401
    except ImportError:
        raise BertctlError("--tensorboard needs the optional package tensorboardX: "
                           "pip install 'bertctl[tensorboard]'") from None


def scalars(record: dict[str, Any]) -> dict[str, float]:
    """The scalars of one metrics.jsonl record, tagged `split/name`."""
    split = record.get("split", "train")
    return {f"{split}/{k}": float(v) for k, v in record.items()
            if k not in _NOT_SCALARS and isinstance(v, (int, float)) and not isinstance(v, bool)
            and math.isfinite(v)}


class ScalarWriter:
    """Appends records to event files in `logdir`. A resumed run passes `purge_step`, the first
    step it will log, so TensorBoard discards what the interrupted run logged from there on
    instead of showing those steps twice."""

    def __init__(self, logdir: str, purge_step: int | None = None):
        require()
        from tensorboardX import SummaryWriter

        self._writer = SummaryWriter(logdir, purge_step=purge_step)

    def log(self, record: dict[str, Any]) -> None:
        step = int(record["step"])
        for tag, value in scalars(record).items():
            self._writer.add_scalar(tag, value, step)

    def close(self) -> None:
        self._writer.close()

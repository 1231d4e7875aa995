"""The errors a user can fix. The CLI prints them as one line and exits with `exit_code`;
anything else is a bug or an environment failure and exits 1 (with a traceback under --debug)."""

import errno
import json


class BertctlError(Exception):
    """Bad usage, settings or input data: exit code 2, one line naming what and where."""

    exit_code = 2


class IntegrityError(BertctlError):
    """An artifact's files no longer match its manifest (inspect --verify): exit code 1."""

    exit_code = 1


class Interrupted(BertctlError):
    """Ctrl-C or SIGTERM during a run that keeps something on purpose (training checkpoints,
    so that the rerun resumes): exit code 130, and the message says what is left where."""

    exit_code = 130


class DiskFull(BertctlError):
    """A write failed for lack of space: exit code 1 (the environment, not the input); what was
    there before the write is left as it was."""

    exit_code = 1

    def __init__(self, path):
        super().__init__(f"no space left on device writing {path}")


class NonFiniteOutputs(BertctlError):
    """A model's outputs hold NaN or infinity where a prediction, a score or a vector is read:
    exit code 2 (the model is the bad input: a weight gone NaN, a config that makes its
    arithmetic overflow, or fp16 overflow, which the message names); nothing is written, since a
    metric taken from NaN logits (the argmax is the first class) looks like a real one."""

    exit_code = 2

    def __init__(self, where: str, bad: int, of: int, unit: str, first: int | None = None,
                 precision: str = "fp32"):
        self.fields = (bad, of, unit, first, precision)
        at = "" if first is None else f" (the first: {unit} {first}, counted from 0)"
        hint = ("; fp16 overflows where bf16 and fp32 do not: try --precision bf16 or fp32"
                if precision == "fp16" else "")
        super().__init__(f"{where}: the model's outputs are not finite (NaN or infinity) for "
                         f"{bad:,} of the {of:,} {unit}s of a batch{at}; nothing was "
                         f"written{hint}")

    def named(self, where: str) -> "NonFiniteOutputs":
        """The same error naming the model and data (where the scorer knew neither)."""
        return NonFiniteOutputs(where, *self.fields)


class WorkerDied(BertctlError):
    """A worker process was killed or crashed (the OOM killer, a signal): exit code 1 (the
    environment, not the input); nothing is written."""

    exit_code = 1


# torch's zip writer reports a short write as a RuntimeError with these words, not as ENOSPC;
# the Rust writers (tokenizers' save, safetensors) as their own exception types, whose message
# carries the OS error's text or its Rust kind.
_SHORT_WRITE = ("unexpected pos", "file write failed", "PytorchStreamWriter failed")
_RUST_FULL = ("No space left on device", "StorageFull", "Disk quota exceeded",
              "QuotaExceeded")


def is_disk_full(exc: BaseException) -> bool:
    if isinstance(exc, OSError):
        return exc.errno in (errno.ENOSPC, errno.EDQUOT)
    if isinstance(exc, RuntimeError) and any(m in str(exc) for m in _SHORT_WRITE):
        return True
    return isinstance(exc, Exception) and any(m in str(exc) for m in _RUST_FULL)


def read_json_object(path, what: str, expected: str = "a JSON object") -> dict:
    """A user's JSON file whose top level is an object, or one line naming the file and the
    problem: `PATH: cannot read WHAT: REASON`, `PATH: WHAT must be EXPECTED`."""
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise BertctlError(f"{path}: cannot read {what}: {' '.join(str(exc).split())}") from None
    if not isinstance(data, dict):
        raise BertctlError(f"{path}: {what} must be {expected}")
    return data

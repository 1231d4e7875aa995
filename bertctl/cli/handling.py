"""Error handling shared by every command: an expected error is one line and its exit code,
anything else exit 1 with the traceback on --debug; and the line an artifact's outcome prints."""

from __future__ import annotations

import os
import sys
import traceback
from contextlib import contextmanager

import typer

from bertctl import console
from bertctl.errors import BertctlError, DiskFull, is_disk_full
from bertctl.contract.expectations import ExpectationsUnmet


@contextmanager
def _handled(json_mode: bool, debug: bool):
    """Expected errors: one line, their exit code. Anything else: exit 1, traceback on --debug."""
    try:
        yield
    except ExpectationsUnmet as exc:  # the artifact stands; the gate's verdict follows it
        _report(exc.outcome, json_mode)
        for line in exc.lines:
            console.error(line)
        raise typer.Exit(exc.exit_code) from None
    except BertctlError as exc:
        _fail(str(exc), exc.exit_code, json_mode, debug)
    except KeyboardInterrupt:
        _fail("interrupted; nothing was written", 130, json_mode, debug)
    except (typer.Exit, typer.Abort, SystemExit):
        raise
    except BrokenPipeError:
        # The reader of stdout went away (`bertctl search ... | head`): it had what it asked
        # for. Nothing more reaches it, nor a traceback at exit when Python flushes stdout.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        raise typer.Exit(0) from None
    except OSError as exc:
        if not is_disk_full(exc):
            _fail(f"{type(exc).__name__}: {exc} (run with --debug for the traceback)", 1,
                  json_mode, debug)
        _fail(str(DiskFull(exc.filename or "an output file")), 1, json_mode, debug)
    except Exception as exc:  # noqa: BLE001 - the last line of defence
        if is_disk_full(exc):   # a library's own error type for ENOSPC, where not caught nearer
            _fail(str(DiskFull("an output file")), 1, json_mode, debug)
        _fail(f"{type(exc).__name__}: {exc} (run with --debug for the traceback)", 1,
              json_mode, debug)


def _fail(message: str, code: int, json_mode: bool, debug: bool):
    if debug:
        traceback.print_exc()
    if json_mode:
        console.emit_json({"error": message, "exit_code": code})
    console.error(message)
    raise typer.Exit(code)


def _report(outcome, json_mode: bool) -> None:
    m = outcome.manifest
    if json_mode:
        console.emit_json(m.model_dump(mode="json"))
        return
    state = "up to date" if outcome.up_to_date else "written"
    print(f"{m.kind} artifact {m.id} {state}: {outcome.path}")

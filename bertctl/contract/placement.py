"""Where an artifact is written: `--out` resolved, refused where writing there could destroy an
input or the working directory, the hidden siblings a run uses (temporary directories, the old
artifact being replaced, a training run's directory), and the atomic replace."""

from __future__ import annotations

import glob
import os
import shutil
import uuid
from pathlib import Path
from typing import TYPE_CHECKING

from bertctl.errors import BertctlError

if TYPE_CHECKING:
    from bertctl.contract.manifest import InputRef

TMP_MARK = ".tmp-"
# The longest hidden sibling's name is the artifact's plus this many characters
# (`.NAME.tmp-PID-old-XXXXXXXX`, PID up to 7 digits).
SIBLING_EXTRA = 26


def recordable(path: str | os.PathLike) -> str:
    """`path` as the manifest records it (JSON, UTF-8): a name that is not UTF-8 (bytes the
    file system allows) cannot be written there, and is refused naming it with escapes."""
    text = str(path)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        shown = os.fsencode(text).decode("utf-8", errors="backslashreplace")
        raise BertctlError(f"{shown}: the path is not valid UTF-8, which the manifest (JSON) "
                           f"cannot record; rename it") from None
    return text


def resolve_out(out: str | os.PathLike, artifact_id: str) -> Path:
    """`--out` may hold `{id}` so each configuration lands in its own directory."""
    return Path(str(out).replace("{id}", artifact_id))


def _within(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


def check_out_is_apart(out: Path, inputs: list["InputRef"], given: tuple[Path, ...] = ()
                       ) -> None:
    """`--out` is replaced whole (with --force) and written beside: it must not be, contain or
    lie inside any input file or artifact of the run, nor be the working directory or one of its
    parents (`.`, `..`, `/`, or a path to them). Paths are compared resolved, links followed."""
    if not str(out).strip():
        raise BertctlError("--out is empty: name the artifact directory to write")
    name_max = _name_max(Path(out).absolute().parent)
    if len(os.fsencode(Path(out).name)) + SIBLING_EXTRA > name_max:
        raise BertctlError(f"--out {out}: its name is too long (at most "
                           f"{name_max - SIBLING_EXTRA} bytes here: the run writes hidden "
                           f"siblings with longer names beside it)")
    target = Path(os.path.realpath(out))
    if _within(Path(os.path.realpath(os.getcwd())), target):
        raise BertctlError(f"--out {out}: is the working directory or one of its parents; "
                           f"name a directory of its own for the artifact")
    if Path(out).name == "..":   # X/sub/.. is X, whose rename into place would fail half-way
        raise BertctlError(f"--out {out}: name the directory itself, not '..' of another")
    for ref in inputs:
        source = Path(os.path.realpath(ref.path))
        what = "input file" if ref.kind == "file" else f"input {ref.kind}"
        if _within(source, target):
            problem = "is" if source == target else "contains"
        elif _within(target, source):
            problem = "lies inside"
        else:
            continue
        raise BertctlError(f"--out {out}: {problem} the {what} {ref.path} ({ref.role}); "
                           f"writing there could destroy it: choose another directory")
    for directory in given:
        source = Path(os.path.realpath(directory))
        if source.is_dir() and _within(target, source):
            raise BertctlError(f"--out {out}: lies inside the input directory {directory}; "
                               f"the artifact would become part of it for every later read: "
                               f"choose another directory")


def _name_max(directory: Path) -> int:
    while not directory.exists() and directory != directory.parent:
        directory = directory.parent
    try:
        return os.pathconf(directory, "PC_NAME_MAX")
    except (OSError, ValueError, AttributeError):
        return 255


def work_dir(out_path: Path, artifact_id: str) -> Path:
    """A hidden sibling for state that must outlive a crash (training checkpoints), keyed by
    the id so that rerunning the same command finds it and a changed one does not."""
    return out_path.parent / f".{out_path.name}.run-{artifact_id}"


def remove_other_work_dirs(out_path: Path) -> None:
    """Once an artifact is in place at `out_path`, the checkpoints of runs of other settings
    for the same --out (a rerun that changed the id) are stale: no rerun can resume into what
    is there now."""
    for d in out_path.parent.glob(f"{glob.escape(f'.{out_path.name}.run-')}*"):
        _remove(d)


def remove_stale_tmp(out: Path) -> None:
    """Temporary siblings left by a killed run (SIGKILL leaves no chance to clean up)."""
    prefix = f".{out.name}{TMP_MARK}"
    for tmp in out.parent.glob(f"{glob.escape(prefix)}*"):
        try:   # .NAME.tmp-PID-XXXXXXXX (a new artifact) or .NAME.tmp-PID-old-XXXXXXXX (an old)
            pid = int(tmp.name[len(prefix):].split("-")[0])
            os.kill(pid, 0)  # the writer is still alive: leave its directory alone
        except (ValueError, IndexError):
            continue
        except ProcessLookupError:
            _remove(tmp)
        except PermissionError:
            continue


def _remove(path: Path) -> None:
    """A directory, or the symbolic link an --out was (never the directory it points to)."""
    if path.is_symlink():
        path.unlink(missing_ok=True)
    else:
        shutil.rmtree(path, ignore_errors=True)


def replace(tmp: Path, out: Path) -> None:
    """Rename `tmp` to `out`. An old `out` is first renamed aside (so at no moment is a
    half-replaced artifact visible) and deleted only after the new one is in place."""
    if not out.exists():
        os.replace(tmp, out)
        return
    old = out.parent / f".{out.name}{TMP_MARK}{os.getpid()}-old-{uuid.uuid4().hex[:8]}"
    os.replace(out, old)
    os.replace(tmp, out)
    _remove(old)

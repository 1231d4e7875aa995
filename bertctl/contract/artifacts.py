"""Versioned artifact directories: the manifest, ids, atomic writes, reading checks and lineage.

An artifact is a directory whose `artifact.json` is written last; a directory without it is never
an artifact. A stage's id is a hash of its kind, its resolved settings and its inputs' ids, so it
is known before any work starts: rerunning a stage whose output already holds that id is a no-op,
which is what lets make, CI and shell scripts chain stages safely.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import os
import platform
import re
import shutil
import sys
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

import bertctl
from bertctl import settings as settings_mod
from bertctl import plugins
from bertctl.contract import locks, placement, signals
from bertctl.settings import StageConfig
from bertctl.errors import BertctlError, DiskFull, is_disk_full
from bertctl.contract.identity import (REVISIONS, SCHEMA_VERSIONS, compute_id,  # noqa: F401
                              lineage_problem)
# The manifest's types, where every module that reads them takes them (re-exported: the
# stages name them artifacts.InputRef, artifacts.Manifest).
from bertctl.contract.manifest import FORMAT, MANIFEST, FileEntry, InputRef, Manifest  # noqa: F401

class Artifact:
    """A complete artifact on disk, as read and checked by `read_artifact`."""

    def __init__(self, path: Path, manifest: Manifest):
        self.path = path
        self.manifest = manifest

    @property
    def id(self) -> str:
        return self.manifest.id

    @property
    def kind(self) -> str:
        return self.manifest.kind

    def file(self, name: str) -> Path:
        """`path / name` for a stage to read: inside the artifact, no symbolic link, recorded
        by its manifest (a file dropped in later is never read), of the recorded size (a
        truncated shard is named here, not by the reader that would fail on it) and of the
        recorded checksum (`_check_recorded`)."""
        path = self.path / name
        problem = _outside_problem(self.path, path)
        if problem:
            raise BertctlError(f"{path}: {problem}")
        if not path.is_file():
            raise BertctlError(f"{path}: missing from the {self.kind} artifact")
        _check_recorded(self.path, name, self.manifest.files.get(name))
        return path

    def files(self, pattern: str) -> list[str]:
        """The names its manifest records that match `pattern` (a regular expression), in
        order: what a stage reads of a set of shards, never a directory listing."""
        return sorted(n for n in self.manifest.files if re.fullmatch(pattern, n))

    def as_input(self, role: str) -> InputRef:
        m = self.manifest
        # Absolute, as file inputs are: a lineage must resolve from any working directory
        # (model cards read their ancestors' facts through it).
        return InputRef(role=role, kind=m.kind, id=m.id, path=str(self.path.resolve()),
                        config=m.config, inputs=m.inputs)


# ---------------------------------------------------------------------------------------------
# Hashing and ids

def sha256_file(path: str | os.PathLike) -> str:
    with open(path, "rb") as fh:
        return hashlib.file_digest(fh, "sha256").hexdigest()


def file_input(path: str | os.PathLike, role: str) -> InputRef:
    path = Path(path)
    placement.recordable(path)
    try:
        # the name given, links kept: a hub snapshot's file names its commit, its blob does not
        return InputRef(role=role, kind="file", id=sha256_file(path), path=os.path.abspath(path),
                        size=path.stat().st_size)
    except OSError as exc:
        raise BertctlError(f"{path}: cannot read: {exc.strerror}") from None


def environment() -> dict[str, Any]:
    env: dict[str, Any] = {"python": platform.python_version(), "platform": platform.platform()}
    for name in ("torch", "tokenizers", "numpy"):
        module = sys.modules.get(name)
        if module is not None:
            env[name] = getattr(module, "__version__", "?")
    torch = sys.modules.get("torch")
    if torch is not None:
        env["device"] = (torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu")
    if plugins.load():   # what installed packages added to the command (bertctl.plugins)
        env["plugins"] = dict(plugins.load())
    return env


# ---------------------------------------------------------------------------------------------
# Reading

def read_manifest(path: str | os.PathLike) -> Manifest:
    """Parse DIR/artifact.json, with one clear line for anything that is not a bertctl artifact."""
    path = Path(path)
    mpath = path / MANIFEST
    if not path.exists():
        raise BertctlError(f"{path}: no such artifact directory")
    if not path.is_dir():
        raise BertctlError(f"{path}: not a directory (an artifact is a directory)")
    if not mpath.is_file():
        raise BertctlError(f"{path}: not a bertctl artifact (no {MANIFEST}; an interrupted run "
                           f"leaves none, so rerun the stage that makes it)")
    try:
        data = json.loads(mpath.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise BertctlError(f"{mpath}: corrupted manifest: {exc}") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise BertctlError(f"{mpath}: not a bertctl artifact manifest")
    try:
        return Manifest(**data)
    except ValidationError as exc:
        err = exc.errors()[0]
        key = ".".join(str(p) for p in err["loc"])
        raise BertctlError(f"{mpath}: corrupted manifest: {key}: {err['msg']}") from None


def read_artifact(path: str | os.PathLike, kinds: str | tuple[str, ...] | None = None, *,
                  check_files: bool = True, check_lineage: bool = True) -> Artifact:
    """Read an artifact, checking its kind against `kinds`, its schema version against what
    this bertctl understands and (`check_files`, for a stage that reads them) that every file
    its manifest lists is a plain file inside it: a symbolic link or a name resolving elsewhere
    would read bytes that were never checksummed. `inspect` and `diff` read the manifest only
    (inspect --verify reports such files itself). `check_lineage`: that the manifest's id, and
    every ancestor's id it records, is what its recorded settings and inputs give (inspect,
    which shows an edited manifest and reports it with --verify, reads without)."""
    path = Path(path)
    manifest = read_manifest(path)
    wanted = (kinds,) if isinstance(kinds, str) else kinds
    if wanted and manifest.kind not in wanted:
        article = "an" if manifest.kind[0] in "aeiou" else "a"
        raise BertctlError(f"{path}: is {article} {manifest.kind} artifact, expected "
                           f"{' or '.join(wanted)}")
    supported = SCHEMA_VERSIONS.get(manifest.kind)
    if supported is None:
        raise BertctlError(f"{path}: unknown artifact kind {manifest.kind!r}")
    if manifest.schema_version > supported:
        raise BertctlError(f"{path}: {manifest.kind} schema version {manifest.schema_version} is "
                           f"newer than this bertctl {bertctl.__version__} reads "
                           f"({supported}); upgrade bertctl")
    problem = lineage_problem(manifest) if check_lineage else None
    if problem:
        raise BertctlError(f"{path / MANIFEST}: {problem}")
    if check_files:
        for name in manifest.files:
            problem = _outside_problem(path, path / name)
            if problem:
                raise BertctlError(f"{path / name}: {problem}")
    return Artifact(path, manifest)


def _outside_problem(root: Path, path: Path) -> str | None:
    """Why `path` may not be read as a file of the artifact at `root`, or None: a symbolic link
    (its target is not what was checksummed when written), or a path resolving elsewhere."""
    p = path
    while p != root and p != p.parent:
        if p.is_symlink():
            return "a symbolic link in the artifact (refused: it may point anywhere)"
        p = p.parent
    try:
        path.resolve().relative_to(root.resolve())
    except ValueError:
        return "resolves outside the artifact"
    return None


def verify(artifact: Artifact) -> list[str]:
    """Recompute every file's checksum and the manifest's id, and compare each artifact input
    still present where it was read with the id recorded for it. Returns the problems, one line
    each (empty: all good). File inputs (corpora, task data) are not rehashed: a corpus may be
    100 GB, and its hash was taken when it was read."""
    problems = []
    lineage = lineage_problem(artifact.manifest)
    if lineage:
        problems.append(f"{artifact.path / MANIFEST}: {lineage}")
    for ref in artifact.manifest.inputs:
        parent = Path(ref.path)
        if ref.kind == "file" or not (parent / MANIFEST).is_file():
            continue
        try:
            now = read_manifest(parent)
        except BertctlError as exc:
            problems.append(f"its {ref.role} input: {exc}")
            continue
        if now.id != ref.id or now.kind != ref.kind:
            problems.append(f"{parent}: its {ref.role} input there is now {now.kind} artifact "
                            f"{now.id}, not the {ref.kind} {ref.id} it was made from")
        else:
            problem = lineage_problem(now)
            if problem:
                problems.append(f"{parent / MANIFEST} (its {ref.role} input): {problem}")
    for name, entry in sorted(artifact.manifest.files.items()):
        path = artifact.path / name
        outside = _outside_problem(artifact.path, path)
        if outside:
            problems.append(f"{path}: {outside}")
        elif not path.is_file():
            problems.append(f"{path}: missing")
        elif path.stat().st_size != entry.size or sha256_file(path) != entry.sha256:
            problems.append(f"{path}: changed since it was written (checksum mismatch)")
    problems += _metrics_problems(artifact)
    return problems


METRICS_FILE = "metrics.json"   # an eval's metrics as a file, beside the manifest's copy


def _metrics_problems(artifact: Artifact) -> list[str]:
    """metrics.json must say what the manifest's metrics say (the summaries read the
    manifest, people the file): an edit of either, checksums rewritten or not, is named."""
    path = artifact.path / METRICS_FILE
    if METRICS_FILE not in artifact.manifest.files or not path.is_file():
        return []
    try:
        written = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        return [f"{path}: cannot read: {' '.join(str(exc).split())}"]
    recorded = json.loads(json.dumps(artifact.manifest.metrics))
    if json.dumps(written, sort_keys=True) == json.dumps(recorded, sort_keys=True):   # NaN too
        return []
    if not isinstance(written, dict):
        return [f"{path}: not the JSON object of metrics the manifest records"]
    key = next((k for k in sorted(set(written) | set(recorded))
                if written.get(k, "absent") != recorded.get(k, "absent")), None)
    return [f"{path}: {key} is {written.get(key, 'absent')!r} here but "
            f"{recorded.get(key, 'absent')!r} in {MANIFEST}"]


# Files up to this size are checksummed before another artifact copies them (tokenizer files,
# configs: cheap); larger ones (shards, weights) by size only, as their readers check structure.
CHECKSUM_ON_COPY_BYTES = 16 << 20


def checked_file(root: Path, name: str) -> Path:
    """`root / name` for copying into a new artifact. When `root` is an artifact: never a
    symbolic link or a path leading outside it, and the file its manifest recorded (its size
    and checksum); a corrupted-input error otherwise. (A plain Hugging Face
    directory is the user's own: a hub cache's snapshot is made of symbolic links.)"""
    root = Path(root)
    path = root / name
    if (root / MANIFEST).is_file():
        outside = _outside_problem(root, path)
        if outside:
            raise BertctlError(f"{path}: {outside}")
        _check_recorded(root, name, read_manifest(root).files.get(name))
    return path


# A larger file's sample: this many blocks of SAMPLE_BLOCK bytes, the first at its start, the
# last at its end, the rest evenly between (1 MiB read whatever the size).
SAMPLE_BLOCKS, SAMPLE_BLOCK = 16, 64 << 10


def sample_digest(path: Path) -> str:
    """sha256 of a file's size and SAMPLE_BLOCKS blocks spread over it: an edit, a shuffle or
    a truncation of a large shard seen at the cost of reading 1 MiB, before its whole hash."""
    size = path.stat().st_size
    h = hashlib.sha256(str(size).encode())
    last = max(0, size - SAMPLE_BLOCK)
    with open(path, "rb") as f:
        for i in range(SAMPLE_BLOCKS):
            f.seek(last * i // (SAMPLE_BLOCKS - 1))
            h.update(f.read(SAMPLE_BLOCK))
    return h.hexdigest()


# Files this process has hashed whole and found as recorded, by what would change with them:
# a model opened by two stages of one run, or a shard by each loader, is read through once.
_VERIFIED: set[tuple] = set()


def _whole_checksum_holds(path: Path, sha256: str) -> bool:
    st = path.stat()
    key = (os.path.realpath(path), st.st_size, st.st_mtime_ns, st.st_ino, sha256)
    if key in _VERIFIED:
        return True
    if sha256_file(path) != sha256:
        return False
    _VERIFIED.add(key)
    return True


def _check_recorded(root: Path, name: str, entry) -> None:
    """The one rule for a file a stage reads from an artifact: recorded, its size, its sample
    (`sample_digest`, 1 MiB: a large file shuffled or edited is named before the whole read)
    and then every byte's checksum. A stage reads each such file whole (weights, vectors) or
    over a run (shards): one more pass, at about a second a gigabyte, and an edit between the
    sampled blocks no longer passes under the untampered id."""
    path = root / name
    if entry is None:
        raise BertctlError(f"{path}: not among the files its artifact.json records")
    size = path.stat().st_size
    small = size <= CHECKSUM_ON_COPY_BYTES
    if size != entry.size or (
            not small and entry.sample is not None and sample_digest(path) != entry.sample) or \
            not _whole_checksum_holds(path, entry.sha256):
        raise BertctlError(f"{path}: changed since it was written ("
                           + (f"{size:,} bytes, {entry.size:,} recorded" if size != entry.size
                              else "checksum mismatch")
                           + f"); inspect --verify {root} lists every such file")


# ---------------------------------------------------------------------------------------------
# Writing

class Outcome(BaseModel):
    manifest: Manifest
    path: str
    up_to_date: bool


def _hash_files(root: Path) -> dict[str, FileEntry]:
    files = {}
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        rel = path.relative_to(root).as_posix()
        if rel != MANIFEST:
            size = path.stat().st_size
            files[rel] = FileEntry(sha256=sha256_file(path), size=size,
                                   sample=sample_digest(path) if size > CHECKSUM_ON_COPY_BYTES
                                   else None)
    return files


def check_out(out: Path, kind: str, artifact_id: str, force: bool) -> Manifest | None:
    """Decide what may happen at `out`: returns the existing manifest when it is up to date,
    None when the stage should run, and raises when running would clobber something."""
    if not out.exists():
        return None
    if not out.is_dir():
        raise BertctlError(f"{out}: --out exists and is not a directory")
    if not (out / MANIFEST).exists():
        if any(out.iterdir()) and not force:
            raise BertctlError(f"{out}: --out is a non-empty directory that is not an artifact; "
                               f"choose another --out or pass --force to replace it")
        return None
    try:
        existing = read_manifest(out)
    except BertctlError as exc:
        if force:
            return None
        raise BertctlError(f"{exc} (pass --force to replace it)") from None
    edited = lineage_problem(existing)
    if edited:
        if force:
            return None
        raise BertctlError(f"{out / MANIFEST}: {edited}; pass --force to replace it")
    if existing.kind != kind:
        if force:
            return None
        raise BertctlError(f"{out}: holds a {existing.kind} artifact, not {kind}; "
                           f"choose another --out or pass --force")
    if existing.id == artifact_id:
        return existing  # even with --force: the same id is the same result
    if not force:
        raise BertctlError(f"{out}: holds {kind} artifact {existing.id} made with other settings "
                           f"or inputs (this run is {artifact_id}); pass --force to replace it, "
                           f"or put {{id}} in --out to keep both")
    return None


def _settings(settings: StageConfig | dict[str, Any]) -> tuple[dict, dict]:
    """(what the manifest records, what the id hashes)."""
    if isinstance(settings, dict):
        return settings, settings
    return settings_mod.as_dict(settings), settings_mod.identity(settings)


@dataclass(frozen=True)
class Plan:
    """An artifact planned once: its kind, what its manifest records, its id and where it goes.
    `produce` plans, locks and publishes; a training stage plans before its long run, checks the
    output once, and publishes the same plan afterwards."""

    kind: str
    recorded: dict[str, Any]
    artifact_id: str
    out: Path
    inputs: list[InputRef]


def plan(kind: str, settings: StageConfig | dict[str, Any], inputs: list[InputRef],
         out: str | os.PathLike, given: tuple[Path, ...] = ()) -> Plan:
    """The id an artifact will have and the directory it will be written to, refused (before
    any work) where writing it could destroy an input or the working directory, or would lie
    in a directory the command was given."""
    recorded, hashed = _settings(settings)
    artifact_id = compute_id(kind, hashed, inputs)
    out_path = placement.resolve_out(placement.recordable(out), artifact_id)
    placement.check_out_is_apart(out_path, inputs, given)
    return Plan(kind, recorded, artifact_id, out_path, inputs)


@dataclass(frozen=True)
class Target:
    """Where and how a stage publishes its artifact: `out` (--out, may hold {id}), `force`
    (replace a different artifact there), `wait` (wait for another run's lock on it instead
    of failing at once)."""

    out: Path
    force: bool = False
    wait: bool = False
    # The directories the command was given (a corpus, a task's data, a BEIR set): --out may
    # not lie in one, where it would become part of that input for every later read of it.
    given: tuple[Path, ...] = ()

    def __post_init__(self):
        object.__setattr__(self, "out", Path(self.out))


def produce(kind: str, settings: StageConfig | dict[str, Any], inputs: list[InputRef],
            target: Target, build: Callable[[Path], dict[str, Any]]) -> Outcome:
    """Run `build(tmp_dir)` for an artifact unless `target.out` already holds it, and move the
    result into place atomically, holding the output's lock.

    `build` writes the stage's files into the temporary directory and returns the manifest's
    `stats` (and, under the key "metrics", its metrics). The manifest is written last, then the
    directory is renamed over `out`: an interrupted run leaves only a hidden temporary sibling,
    which the next run removes.
    """
    planned = plan(kind, settings, inputs, target.out, target.given)
    with locks.output_lock(planned.out, target.wait):
        existing = check_out(planned.out, kind, planned.artifact_id, target.force)
        if existing is not None:
            return Outcome(manifest=existing, path=str(planned.out), up_to_date=True)
        return publish(planned, build)


def publish(planned: Plan, build: Callable[[Path], dict[str, Any]]) -> Outcome:
    """Build a planned artifact whose output was checked (`check_out`) under its lock, which the
    caller holds, and put it in place whole."""
    out_path = planned.out
    out_path.parent.mkdir(parents=True, exist_ok=True)
    placement.remove_stale_tmp(out_path)
    tmp = (out_path.parent
           / f".{out_path.name}{placement.TMP_MARK}{os.getpid()}-{uuid.uuid4().hex[:8]}")
    tmp.mkdir()
    try:
        stats = dict(build(tmp) or {})
        _honour_umask(tmp)
        metrics = stats.pop("metrics", {})
        manifest = Manifest(
            format=FORMAT, schema_version=SCHEMA_VERSIONS[planned.kind], kind=planned.kind,
            id=planned.artifact_id,
            created_at=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            bertctl_version=bertctl.__version__, config=planned.recorded,
            inputs=planned.inputs, files=_hash_files(tmp), environment=environment(),
            stats=stats, metrics=metrics)
        manifest.digest = manifest.content_digest()
        with signals.deferred():   # published whole, or not at all
            (tmp / MANIFEST).write_text(manifest.model_dump_json(indent=2) + "\n",
                                        encoding="utf-8")
            placement.replace(tmp, out_path)
    except BaseException as exc:
        with signals.deferred():
            shutil.rmtree(tmp, ignore_errors=True)
        if not isinstance(exc, DiskFull) and is_disk_full(exc):
            # A write's ENOSPC names no file: the artifact it was writing is named instead.
            raise DiskFull(out_path) from None
        raise
    return Outcome(manifest=manifest, path=str(out_path), up_to_date=False)


def _honour_umask(root: Path) -> None:
    """Every file with the mode a plain open() would give it: some writers (safetensors) create
    theirs 0600, which leaves one file of a shared artifact unreadable to the group."""
    mask = os.umask(0)
    os.umask(mask)
    for path in root.rglob("*"):
        if path.is_file() and not path.is_symlink():
            path.chmod(0o666 & ~mask)

"""The manifest's types (artifact.json): its files, its inputs (an artifact's lineage) and the
manifest itself. Their own module, below artifacts.py (reading, writing, placing), identity.py
(ids) and placement.py (where an artifact goes), which all read them: none imports another to
name a type, and this module imports none of them."""

from __future__ import annotations

import hashlib
import json
from pathlib import PurePosixPath
from typing import Any

from pydantic import BaseModel, ConfigDict, field_validator, model_serializer

FORMAT = "bertctl-artifact"
MANIFEST = "artifact.json"


class FileEntry(BaseModel):
    model_config = ConfigDict(extra="forbid")
    sha256: str
    size: int
    # For a large file (a shard, weights): the hash of its size and blocks spread over it
    # (artifacts.sample_digest), which a stage checks before it hashes every byte.
    sample: str | None = None

    @model_serializer(mode="wrap")
    def _without_sample(self, handler):
        # A small file's entry stays as it was written before samples were (no "sample": null).
        data = handler(self)
        if data.get("sample") is None:
            data.pop("sample", None)
        return data


# The kinds of input identified by content alone (no manifest of their own): a file, a
# directory's files, a glob pattern's matches, a plain Hugging Face model directory.
CONTENT_KINDS = ("file", "directory", "files", "hf-model")


class InputRef(BaseModel):
    """A parent of an artifact: another artifact (with its own lineage, so the chain survives
    the parent being moved or deleted) or a plain file identified by its content hash."""

    model_config = ConfigDict(extra="forbid")
    role: str
    kind: str
    id: str
    path: str
    size: int | None = None
    config: dict[str, Any] | None = None
    inputs: list["InputRef"] = []


def _inside(name: str) -> bool:
    """A manifest's file name names a file inside its artifact: relative, without `..`."""
    pure = PurePosixPath(name)
    return bool(name) and "\\" not in name and not pure.is_absolute() and ".." not in pure.parts


class Manifest(BaseModel):
    model_config = ConfigDict(extra="allow")
    format: str
    schema_version: int
    kind: str
    id: str
    created_at: str
    bertctl_version: str
    config: dict[str, Any]
    inputs: list[InputRef]
    files: dict[str, FileEntry]
    environment: dict[str, Any]
    stats: dict[str, Any] = {}
    metrics: dict[str, Any] = {}
    # The hash of every other field as written (`content_digest`): stats and metrics reach
    # model cards and choices, and no id covers them. Absent from manifests written before.
    digest: str | None = None

    @model_serializer(mode="wrap")
    def _without_digest(self, handler):
        data = handler(self)
        if data.get("digest") is None:
            data.pop("digest", None)
        return data

    def content_digest(self) -> str:
        """sha256 of the manifest's fields but `digest`, as its JSON reads back (a NaN metric
        is written null), in one canonical form."""
        fields = json.loads(self.model_dump_json(exclude={"digest"}))
        blob = json.dumps(fields, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        return hashlib.sha256(blob.encode("utf-8")).hexdigest()

    @field_validator("files")
    @classmethod
    def _names_inside(cls, files: dict[str, FileEntry]) -> dict[str, FileEntry]:
        # A crafted name would make readers (verify, --combine's links, copies) reach or write
        # outside the artifact.
        outside = next((n for n in files if not _inside(n)), None)
        if outside is not None:
            raise ValueError(f"file name {outside!r} points outside the artifact")
        return files

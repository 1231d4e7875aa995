"""An artifact's lineage: the tree of its inputs back to the source files, as recorded in its
manifest, and what differs between two such trees.

Every manifest records its parents' ids, settings and own inputs, so the tree survives a parent
being moved or deleted. A parent's manifest may still be read from its recorded path for the
facts the lineage does not copy (its stats, metrics and bertctl version); `resolve` does so only
when the directory there still holds that very artifact (same id).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bertctl.contract.artifacts import InputRef, Manifest, read_manifest
from bertctl.contract.manifest import CONTENT_KINDS
from bertctl.errors import BertctlError


def resolve(ref: InputRef) -> Manifest | None:
    """The manifest of an artifact parent, if it is still where it was recorded."""
    if ref.kind in CONTENT_KINDS:
        return None
    try:
        manifest = read_manifest(ref.path)
    except BertctlError:
        return None
    return manifest if manifest.id == ref.id else None


def walk(inputs: list[InputRef], prefix: str = "",
         parent: InputRef | None = None) -> Iterator[tuple[str, InputRef, InputRef | None]]:
    """Every node below a manifest, depth first: its role path (e.g. "data/tokenizer"), the
    node, and its parent node (None for the manifest's own inputs)."""
    for ref in inputs:
        path = f"{prefix}/{ref.role}" if prefix else ref.role
        yield path, ref, parent
        yield from walk(ref.inputs, path, ref)


def source_files(inputs: list[InputRef]) -> list[tuple[InputRef, list[str]]]:
    """The plain files of the lineage, each content hash once in walk order, with the kinds of
    the artifacts that read them (e.g. a corpus read by the tokenizer and the pretrain data)."""
    found: dict[str, tuple[InputRef, list[str]]] = {}
    for _, ref, parent in walk(inputs):
        if ref.kind == "file":
            users = found.setdefault(ref.id, (ref, []))[1]
            kind = parent.kind if parent is not None else "this artifact"
            if kind not in users:
                users.append(kind)
    return list(found.values())


def find(inputs: list[InputRef], kind: str) -> tuple[InputRef, Manifest | None] | None:
    """The nearest ancestor of a kind, with its manifest when it can still be read."""
    for _, ref, _ in walk(inputs):
        if ref.kind == kind:
            return ref, resolve(ref)
    return None


def lineage_lines(ref_inputs: list[InputRef], depth: int = 1) -> list[str]:
    """The chain of parents as indented lines, back to the source files."""
    lines = []
    for ref in ref_inputs:
        pad = "  " * depth
        if ref.kind == "file":
            size = f", {ref.size:,} bytes" if ref.size is not None else ""
            lines.append(f"{pad}{ref.role}: file {ref.path} (sha256 {ref.id[:12]}{size})")
            lines.extend(lineage_lines(ref.inputs, depth + 1))   # the artifact it is of
        else:
            lines.append(f"{pad}{ref.role}: {ref.kind} {ref.id} at {ref.path}")
            if ref.config:
                settings = ", ".join(f"{k}={v}" for k, v in ref.config.items())
                lines.append(f"{pad}  settings: {settings}")
            lines.extend(lineage_lines(ref.inputs, depth + 1))
    return lines


# ---------------------------------------------------------------------------------------------
# Differences


@dataclass(frozen=True)
class Difference:
    """One thing that differs: `where` is the node's role path ("" for the artifacts
    themselves), `what` the setting or fact; `a`/`b` are ABSENT where one side lacks it."""

    where: str
    what: str
    a: Any
    b: Any

    def line(self) -> str:
        place = f"{self.where}: " if self.where else ""
        return f"{place}{self.what}: {_show(self.a)} -> {_show(self.b)}"

    def as_dict(self) -> dict[str, Any]:
        return {"where": self.where, "what": self.what,
                **{k: v for k, v in (("a", self.a), ("b", self.b)) if v is not ABSENT}}


ABSENT = "(absent)"


def _show(value: Any) -> str:
    if value is ABSENT:
        return ABSENT
    return value if isinstance(value, str) else json.dumps(value)


def _name(ref: InputRef) -> str:
    """How a file input is told apart from its siblings of the same role: its file name."""
    return Path(ref.path).name


def _describe(ref: InputRef) -> str:
    if ref.kind in CONTENT_KINDS:
        return f"{ref.kind} {_name(ref)} (sha256 {ref.id[:12]})"
    return f"{ref.kind} {ref.id}"


def _mapping_differences(where: str, prefix: str, a: dict, b: dict) -> list[Difference]:
    out = []
    for key in sorted(set(a) | set(b), key=str):
        va, vb = a.get(key, ABSENT), b.get(key, ABSENT)
        if va != vb:
            out.append(Difference(where, f"{prefix}{key}", va, vb))
    return out


def _pair(a: list[InputRef], b: list[InputRef]) -> tuple[list[tuple[InputRef, InputRef]],
                                                         list[InputRef], list[InputRef]]:
    """Match the inputs of two nodes: by role, then the same content, then the same file name,
    then in order. Returns (pairs, only in a, only in b)."""
    pairs, rest_a, rest_b = [], list(a), list(b)
    for same in (lambda x, y: x.role == y.role and x.id == y.id,
                 lambda x, y: x.role == y.role and _name(x) == _name(y),
                 lambda x, y: x.role == y.role):
        for x in list(rest_a):
            y = next((y for y in rest_b if same(x, y)), None)
            if y is not None:
                pairs.append((x, y))
                rest_a.remove(x)
                rest_b.remove(y)
    return pairs, rest_a, rest_b


def _node_differences(where: str, a: InputRef, b: InputRef) -> list[Difference]:
    if a.kind != b.kind:
        return [Difference(where, "kind", a.kind, b.kind)]
    if a.kind in CONTENT_KINDS:
        out = []
        if _name(a) != _name(b):
            out.append(Difference(where, "name", _name(a), _name(b)))
        if a.id != b.id:
            out.append(Difference(where, "sha256", a.id, b.id))
            if a.size != b.size:
                out.append(Difference(where, "size", a.size, b.size))
        return out
    out = _mapping_differences(where, "settings.", a.config or {}, b.config or {})
    ma, mb = resolve(a), resolve(b)
    if ma is not None and mb is not None and ma.bertctl_version != mb.bertctl_version:
        out.append(Difference(where, "bertctl_version", ma.bertctl_version, mb.bertctl_version))
    out += _inputs_differences(where, a.inputs, b.inputs)
    if a.id != b.id and not out:
        # Same recorded settings and inputs, another id: the code that made it changed.
        out.append(Difference(where, "id", a.id, b.id))
    return out


def _inputs_differences(where: str, a: list[InputRef], b: list[InputRef]) -> list[Difference]:
    pairs, only_a, only_b = _pair(a, b)
    out = []
    for x, y in pairs:
        # Siblings sharing a role are told apart by name, so each difference names its node.
        shared = sum(r.role == x.role for r in a) > 1 or sum(r.role == y.role for r in b) > 1
        node = f"{where}/{x.role}" if where else x.role
        if shared:
            node += f"[{_name(x)}]"
        out += _node_differences(node, x, y)
    for ref in only_a:
        out.append(Difference(f"{where}/{ref.role}" if where else ref.role, "input",
                              _describe(ref), ABSENT))
    for ref in only_b:
        out.append(Difference(f"{where}/{ref.role}" if where else ref.role, "input", ABSENT,
                              _describe(ref)))
    return out


def _derivation(a: Manifest, b: Manifest) -> list[Difference] | None:
    """When B was made from A (A is in B's lineage: a model and its export, its eval): the
    stages from A to B, each with its settings and its other inputs, rather than a comparison
    of two trees that share nothing but A."""
    steps: list[tuple[str, InputRef]] = []

    def search(inputs: list[InputRef], where: str) -> bool:
        for ref in inputs:
            if ref.id == a.id:
                return True
            node = f"{where}/{ref.role}" if where else ref.role
            if search(ref.inputs, node):
                steps.append((node, ref))
                return True
        return False

    if a.id == b.id or not search(b.inputs, ""):
        return None
    out = [Difference("", "lineage", f"{a.kind} {a.id} (an ancestor)", f"{b.kind} {b.id}")]
    for where, node in [("", None), *reversed(steps)]:
        config, inputs = (b.config, b.inputs) if node is None else (node.config, node.inputs)
        out += [Difference(where, f"settings.{k}", ABSENT, v)
                for k, v in sorted((config or {}).items())]
        out += [Difference(f"{where}/{r.role}" if where else r.role, "input", ABSENT,
                           _describe(r))
                for r in inputs if r.id != a.id and r not in [n for _, n in steps]]
    return out + _mapping_differences("", "environment.", a.environment, b.environment)


def differences(a: Manifest, b: Manifest) -> list[Difference]:
    """What differs between two artifacts' lineages: kinds, settings at every level, inputs by
    content hash, the bertctl versions and environments that made them. Ids are derived from
    the rest, so an id is listed only where nothing else explains it. Where one was made from
    the other, the stages between them (`_derivation`)."""
    derived = _derivation(a, b)
    if derived is None:
        reverse = _derivation(b, a)
        derived = None if reverse is None else [
            Difference(d.where, d.what, d.b, d.a) for d in reverse]
    if derived is not None:
        return derived
    out = []
    if a.kind != b.kind:
        out.append(Difference("", "kind", a.kind, b.kind))
    out += _mapping_differences("", "settings.", a.config, b.config)
    if a.bertctl_version != b.bertctl_version:
        out.append(Difference("", "bertctl_version", a.bertctl_version, b.bertctl_version))
    if a.schema_version != b.schema_version:
        out.append(Difference("", "schema_version", a.schema_version, b.schema_version))
    out += _inputs_differences("", a.inputs, b.inputs)
    out += _mapping_differences("", "environment.", a.environment, b.environment)
    if a.id != b.id and not out:
        out.append(Difference("", "id", a.id, b.id))
    return out


def differ_only_in_seed(a: Manifest, b: Manifest) -> bool:
    """Two runs of the same thing but for the random seed (at any level of the lineage)."""
    found = differences(a, b)
    return bool(found) and all(d.what == "settings.seed" for d in found)

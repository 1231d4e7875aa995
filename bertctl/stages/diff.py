"""`bertctl diff A B`: what differs between two artifacts' lineages, one line per difference."""

from __future__ import annotations

from pathlib import Path

from bertctl import console

from bertctl.contract import lineage
from bertctl.contract import artifacts


def run(a_dir: Path, b_dir: Path, json_output: bool = False) -> list[lineage.Difference]:
    a = artifacts.read_artifact(a_dir, check_files=False).manifest
    b = artifacts.read_artifact(b_dir, check_files=False).manifest
    found = lineage.differences(a, b)
    if json_output:
        console.emit_json({"a": {"path": str(a_dir), "kind": a.kind, "id": a.id},
                           "b": {"path": str(b_dir), "kind": b.kind, "id": b.id},
                           "same": a.id == b.id and not found,
                           "differences": [d.as_dict() for d in found]})
    else:
        for d in found:
            print(d.line())
        console.log(f"{a_dir} ({a.kind} {a.id}) and {b_dir} ({b.kind} {b.id}): "
                    + (f"{len(found)} difference(s)" if found else "no differences"))
    return found

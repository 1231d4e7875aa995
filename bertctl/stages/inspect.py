"""`bertctl inspect`: an artifact's manifest, lineage and checksum verification."""

from __future__ import annotations

from pathlib import Path

from bertctl import artifacts, console, lineage
from bertctl.errors import IntegrityError
from bertctl.data.pretraining_dataset import describe


def _samples(artifact: artifacts.Artifact) -> list[str]:
    """Kind-specific lines that show a person what the artifact holds."""
    if artifact.kind == "pretrain-data":
        return describe(artifact.path)
    return []


def _flat(values: dict, indent: str = "  ") -> list[str]:
    lines = []
    for key, value in values.items():
        if isinstance(value, dict) and value and all(not isinstance(v, dict) for v in value.values()):
            inner = ", ".join(f"{k}={v}" for k, v in value.items())
            lines.append(f"{indent}{key}: {inner}")
        elif isinstance(value, dict):
            lines.append(f"{indent}{key}:")
            lines.extend(_flat(value, indent + "  "))
        else:
            lines.append(f"{indent}{key}: {value}")
    return lines


def run(directory: Path, verify: bool = False, json_output: bool = False) -> None:
    artifact = artifacts.read_artifact(directory, check_files=False, check_lineage=False)
    m = artifact.manifest
    problems = artifacts.verify(artifact) if verify else []
    if json_output:
        console.emit_json(m.model_dump(mode="json"))
    else:
        size = sum(f.size for f in m.files.values())
        lines = [f"{m.kind} artifact {m.id} (schema {m.schema_version}) at {artifact.path}",
                 f"  created {m.created_at} by bertctl {m.bertctl_version}",
                 f"  files: {len(m.files)}, {size:,} bytes",
                 "settings:", *_flat(m.config)]
        if m.stats:
            lines += ["stats:", *_flat(m.stats)]
        if m.metrics:
            lines += ["metrics:", *_flat(m.metrics)]
        lines += ["lineage:", *lineage.lineage_lines(m.inputs)]
        if m.environment:
            lines += ["environment:", *_flat(m.environment)]
        lines += _samples(artifact)
        print("\n".join(lines))
    if verify:
        if problems:
            raise IntegrityError("; ".join(problems))
        console.log(f"verified: all {len(m.files)} files match their checksums")

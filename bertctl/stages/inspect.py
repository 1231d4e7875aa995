"""`bertctl inspect`: an artifact's manifest, lineage and checksum verification."""

from __future__ import annotations

import json
from pathlib import Path

from bertctl import console

from bertctl.contract import lineage
from bertctl.contract import artifacts
from bertctl.stages.settings import STAGE_SETTINGS
from bertctl.errors import IntegrityError
from bertctl.data.pretraining.dataset import describe


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


def _changed(kind: str, settings: dict) -> dict | None:
    """The settings that differ from the defaults of the stage that made the artifact (the
    settings class of that kind whose fields cover the most of them); None when no class
    makes this kind. A setting the class does not know (a family's or an objective's option)
    counts as changed unless it is unset."""
    classes = [c for c in STAGE_SETTINGS if c.produces == kind]
    if not classes:
        return None
    cls = max(classes, key=lambda c: len(set(c.model_fields) & set(settings)))
    fields = cls.model_fields

    def same(name, value) -> bool:
        field = fields.get(name)
        if field is None:
            return value is None
        if field.is_required():
            return False
        return json.dumps(value, default=str) == json.dumps(field.default, default=str)

    return {k: v for k, v in settings.items() if not same(k, v)}


def run(directory: Path, verify: bool = False, json_output: bool = False,
        show_all: bool = False) -> None:
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
                 *_settings(m.kind, m.config, show_all)]
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


def _settings(kind: str, settings: dict, show_all: bool) -> list[str]:
    changed = None if show_all else _changed(kind, settings)
    if changed is None:
        return ["settings:", *_flat(settings)]
    if not changed:
        return [f"settings: all {len(settings)} at their defaults (shown with --all)"]
    return [f"settings ({len(changed)} of {len(settings)} differ from their defaults; all with "
            f"--all):", *_flat(changed)]

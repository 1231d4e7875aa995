"""`bertctl report ARTIFACT... --out DIR`: a report artifact holding one self-contained HTML
page about the artifacts given (see bertctl/report/page.py); its lineage is theirs."""

from __future__ import annotations

import json
from pathlib import Path

from bertctl import console
from bertctl.contract import artifacts
from bertctl.stages.settings.report import ReportSettings
from bertctl.errors import BertctlError
from bertctl.report import page, plots
from bertctl.report import title as report_title

PAGE = "report.html"


def run(settings: ReportSettings, target: artifacts.Target, paths: list[Path]):
    plots.require()
    if not paths:
        raise BertctlError("report: give at least one artifact")
    shown = [artifacts.read_artifact(p) for p in paths]
    ids = [a.id for a in shown]
    twice = next((p for p, i in zip(paths, ids) if ids.count(i) > 1), None)
    if twice is not None:
        raise BertctlError(f"{twice}: artifact {artifacts.read_manifest(twice).id} is given "
                           f"twice")
    # Roles carry the order: the same artifacts in another order are another page.
    inputs = [a.as_input(f"artifact-{i}") for i, a in enumerate(shown, 1)]

    def build(tmp: Path) -> dict:
        runs = []
        for i, art in enumerate(shown, 1):
            try:
                history = page.read_history(art.path)
            except (UnicodeDecodeError, json.JSONDecodeError) as exc:
                raise BertctlError(f"{art.path / 'metrics.jsonl'}: corrupted: {exc}") from None
            runs.append(page.Run(i, art, history))
        title = settings.title or report_title.title_of(shown)
        (tmp / PAGE).write_text(page.render(runs, title), encoding="utf-8")
        groups = page.seed_groups(runs)
        console.log(f"report of {len(runs)} artifact(s)"
                    + (f", {len(groups)} group(s) of runs differing only in seed" if groups
                       else ""))
        return {"page": PAGE, "artifacts": ids,
                "seed_groups": [[r.artifact.id for r in g] for g in groups]}

    return artifacts.produce("report", settings, inputs, target, build)

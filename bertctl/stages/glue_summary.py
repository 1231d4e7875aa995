"""`bertctl glue-summary EVAL... --out DIR`: a GLUE summary artifact from the eval artifacts of
a grid of fine-tuning runs (see bertctl/tasks/glue.py): summary.json, summary.md and the benchmark's
submission.zip of the dev-selected runs' test predictions."""

from __future__ import annotations

import json
from pathlib import Path

from bertctl import console

from bertctl.tasks import glue
from bertctl.contract import artifacts
from bertctl.metrics import json_safe
from bertctl.stages.settings.glue_summary import GlueSummarySettings
from bertctl.errors import BertctlError

SUMMARY = "summary.json"
PAGE = "summary.md"
ZIP = "submission.zip"


def run(settings: GlueSummarySettings, target: artifacts.Target, paths: list[Path]):
    if not paths:
        raise BertctlError("glue-summary: give the eval artifacts of the runs")
    placed = [glue.place(artifacts.read_artifact(p, "eval")) for p in paths]
    ids = [e.artifact.id for e in placed]
    twice = next((e for e, i in zip(placed, ids) if ids.count(i) > 1), None)
    if twice is not None:
        raise BertctlError(f"{twice.where}: eval {twice.artifact.id} is given twice")
    # Sorted by id: the same evals given in another order are the same summary.
    inputs = sorted((e.artifact.as_input("eval") for e in placed), key=lambda r: r.id)

    def build(tmp: Path) -> dict:
        summary, files = glue.summarize(placed)
        summary = json_safe(summary)
        (tmp / SUMMARY).write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
        (tmp / PAGE).write_text(glue.markdown(summary), encoding="utf-8")
        glue.write_zip(tmp / ZIP, files)
        metrics = {}
        for t in summary["tasks"]:
            s = t["selected"]
            metrics.update({f"{t['task']}/{t['metric']}/mean": s["mean"],
                            f"{t['task']}/{t['metric']}/sd": s["sd"],
                            f"{t['task']}/{t['metric']}/selected_run": s["value"]})
            console.log(f"{t['task']}: {t['metric']} at lr {s['lr']:g}: {glue.fmt(s['mean'])} "
                        f"± {glue.fmt(s['sd'])} over {s['n']} seed(s); selected seed {s['seed']} "
                        f"({glue.fmt(s['value'])})")
        if summary["missing"]:
            console.log(f"submission lacks {', '.join(summary['missing'])}")
        return {"tasks": [t["task"] for t in summary["tasks"]],
                "submission_files": summary["submission_files"],
                "missing": summary["missing"], "evals": len(placed), "metrics": metrics}

    return artifacts.produce("glue-summary", settings, inputs, target, build)

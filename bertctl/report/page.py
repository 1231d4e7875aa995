"""The HTML page of `bertctl report`: one file, no scripts, no network, plots inline as SVG.

The page leads with what a reader came for: an overview (one column per artifact: its kind, id
and metrics), mean +- sd over runs that differ only in their seed, the training curves of every
run overlaid (and the seed groups' mean curves with their sd band); then only the settings that
differ between the artifacts; then one section per artifact with its metrics and confusion
matrix, and, folded, all its settings, stats, lineage back to the source files and environment.

Every number in a table carries its exact value in `data-value` (JSON) next to the shown,
rounded text, and every element a reader may look for has a stable id or class, so a program
(the tests) can check the page against the artifacts.
"""

from __future__ import annotations

import html
import json
import math
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bertctl.contract import lineage
from bertctl.contract.artifacts import Artifact, InputRef
from bertctl.contract.manifest import CONTENT_KINDS
from bertctl.report import choices, gains, plots

# Fields of metrics.jsonl records that are not curves (bookkeeping and counts).
NOT_CURVES = {"split", "step", "epoch", "tokens", "examples", "masked_tokens", "elapsed_s"}
# Curves people look for first; the others follow in name order.
FIRST = ["loss", "mlm_loss", "mlm_accuracy", "nsp_loss", "nsp_accuracy", "accuracy", "f1",
         "perplexity", "lr", "grad_norm", "tokens_per_s", "examples_per_s"]

CSS = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1200px; color: #222; }
table { border-collapse: collapse; margin: 0.5em 0 1.5em; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: 0.2em 0.6em; text-align: left; vertical-align: top; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
.plots { display: flex; flex-wrap: wrap; gap: 1em; }
figure { margin: 0; } figure svg { width: 540px; height: auto; }
ul.lineage { font-family: monospace; font-size: 0.85em; }
.settings { color: #666; }
section.artifact { border-top: 2px solid #888; margin-top: 2em; }
"""


@dataclass
class Run:
    """One artifact shown on the page, with what it logged."""

    index: int
    artifact: Artifact
    history: list[dict[str, Any]] = field(default_factory=list)

    @property
    def label(self) -> str:
        return f"{self.artifact.path.name} ({self.artifact.id})"


def esc(value: Any) -> str:
    return html.escape(str(value), quote=True)


def is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def shown(value: Any) -> str:
    """How a value is written in a cell: numbers to 6 significant digits, nothing for a value
    the artifact does not have, JSON otherwise."""
    if value is None:
        return ""
    if isinstance(value, float):
        return "NaN" if math.isnan(value) else f"{value:.6g}"
    if isinstance(value, (int, str)) and not isinstance(value, bool):
        return str(value)
    return json.dumps(value)


def cell(value: Any, **attrs: str) -> str:
    extra = "".join(f' data-{k}="{esc(v)}"' for k, v in attrs.items())
    klass = ' class="num"' if is_number(value) else ""
    return (f"<td{klass}{extra} data-value=\"{esc(json.dumps(value))}\">"
            f"{esc(shown(value))}</td>")


def flatten(values: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested dicts as dotted keys (stats hold a few levels)."""
    out = {}
    for key, value in values.items():
        if isinstance(value, dict) and value:
            out.update(flatten(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def numeric_metrics(metrics: dict[str, Any]) -> dict[str, float]:
    return {k: v for k, v in metrics.items() if is_number(v) and k not in NOT_CURVES}


def key_table(table_class: str, values: dict[str, Any], run: Run) -> str:
    rows = "".join(f"<tr><th>{esc(k)}</th>{cell(v, key=k, artifact=run.artifact.id)}</tr>"
                   for k, v in values.items())
    return f'<table class="{table_class}">{rows}</table>'


# ---------------------------------------------------------------------------------------------
# Sections


def _rows(runs: list[Run], rows) -> list[str]:
    """One row per (name, getter), left out where no artifact has a value."""
    table = [(name, [get(r) for r in runs]) for name, get in rows]
    return [f"<tr><th>{esc(name)}</th>" + "".join(cell(v, key=name, artifact=r.artifact.id)
                                                   for v, r in zip(values, runs)) + "</tr>"
            for name, values in table if any(v is not None for v in values)]


def run_kind(run: Run) -> str:
    """What made the artifact, in words: its curves are drawn with others of the same kind."""
    stats = run.artifact.manifest.stats
    if run.artifact.kind != "model":
        return run.artifact.kind
    if "distillation" in stats:
        return "distillation"
    return "fine-tuning" if "task" in stats else "pretraining"


def overview(runs: list[Run]) -> str:
    """What a reader came for, one column per artifact: what it is and its metrics."""
    head = "".join(f"<th>{esc(r.label)}</th>" for r in runs)
    body = _rows(runs, [("kind", lambda r: r.artifact.kind), ("id", lambda r: r.artifact.id)])
    # An eval's cost beside its quality, so a teacher and its student (or a model and its
    # export) compare on one page.
    shown_paths = {r.artifact.path.resolve() for r in runs if r.artifact.kind == "model"}
    body += _rows(runs, [("model MB", lambda r: _model_mb(r, shown_paths)),
                         ("eval examples/s",
                          lambda r: r.artifact.manifest.stats.get("examples_per_second"))])
    metric_keys = sorted({k for r in runs for k in numeric_metrics(r.artifact.manifest.metrics)})
    for k in metric_keys:
        body.append(f"<tr><th>metrics.{esc(k)}</th>"
                    + "".join(cell(r.artifact.manifest.metrics[k], key=f"metrics.{k}",
                                   artifact=r.artifact.id)
                              if k in r.artifact.manifest.metrics else "<td></td>"
                              for r in runs) + "</tr>")
    return (f'<h2>Overview</h2><table id="overview"><tr><th></th>{head}</tr>'
            + "".join(body) + "</table>")


def _model_mb(run: Run, shown_paths: set[Path]) -> float | None:
    """The size of a model's weights, in its own column; an eval's, of the weights it ran when
    that model has no column of its own (a teacher's and a student's evals side by side)."""
    if run.artifact.kind in ("model", "export"):
        model = run.artifact.path
    elif run.artifact.kind == "eval" and run.artifact.manifest.stats.get("model"):
        model = Path(run.artifact.manifest.stats["model"])
        if model.resolve() in shown_paths:
            return None
    else:
        return None
    for name in ("model.safetensors", "model.onnx"):
        path = Path(model) / name
        if path.is_file():
            return round(path.stat().st_size / 1e6, 1)
    return None


def differences(runs: list[Run]) -> str:
    """Only the settings that differ between the artifacts shown (all of each artifact's
    settings are in its section, folded), and where each came from."""
    head = "".join(f"<th>{esc(r.label)}</th>" for r in runs)
    configs = [r.artifact.manifest.config for r in runs]
    # Like with like: a setting differs where the artifacts that have it disagree (one only
    # some have, with one value, is in their own sections, not a row of blanks here).
    keys = sorted({k for c in configs for k in c}, key=str)
    differing = [k for k in keys if len({json.dumps(c[k]) for c in configs if k in c}) > 1]
    body = [f"<tr><th>settings.{esc(k)}</th>"
            + "".join(cell(c.get(k), key=f"settings.{k}", artifact=r.artifact.id)
                      for r, c in zip(runs, configs)) + "</tr>" for k in differing]
    body += _rows(runs, [("path", lambda r: str(r.artifact.path)),
                         ("created", lambda r: r.artifact.manifest.created_at),
                         ("bertctl_version", lambda r: r.artifact.manifest.bertctl_version)])
    title = "Settings that differ" if len(runs) > 1 else "Where it is"
    return (f'<h2>{title}</h2><table id="differences"><tr><th></th>{head}</tr>'
            + "".join(body) + "</table>")


def seed_groups(runs: list[Run]) -> list[list[Run]]:
    """Runs whose lineages differ only in `seed` settings, in groups of two or more."""
    groups: list[list[Run]] = []
    for run in runs:
        for group in groups:
            if lineage.differ_only_in_seed(group[0].artifact.manifest, run.artifact.manifest):
                group.append(run)
                break
        else:
            groups.append([run])
    return [g for g in groups if len(g) > 1]


def _seed(manifest) -> Any:
    """The run's seed: its own setting, else the nearest in its lineage (an eval's model's)."""
    pending = [manifest]
    for item in pending:   # breadth first, appending as it goes
        if (item.config or {}).get("seed") is not None:
            return item.config["seed"]
        pending += item.inputs
    return None


def seed_table(groups: list[list[Run]]) -> str:
    """Mean and sample standard deviation (n - 1) of each metric over a group's seeds."""
    if not groups:
        return ""
    parts = ["<h2>Mean &plusmn; sd over seeds</h2>",
             "<p>Runs whose lineages differ only in their seed; sd is the sample standard "
             "deviation (n &minus; 1).</p>"]
    for g, group in enumerate(groups, 1):
        ids = ", ".join(r.artifact.id for r in group)
        seeds = [_seed(r.artifact.manifest) for r in group]
        rows = []
        keys = sorted(set.intersection(*(set(numeric_metrics(r.artifact.manifest.metrics))
                                         for r in group)))
        for k in keys:
            values = [float(r.artifact.manifest.metrics[k]) for r in group]
            mean, sd = statistics.fmean(values), statistics.stdev(values)
            rows.append(f'<tr data-metric="{esc(k)}"><th>{esc(k)}</th>'
                        f'<td class="num" data-mean="{esc(json.dumps(mean))}" '
                        f'data-sd="{esc(json.dumps(sd))}">{shown(mean)} &plusmn; {shown(sd)}</td>'
                        + "".join(cell(v, artifact=r.artifact.id) for v, r in zip(values, group))
                        + "</tr>")
        head = "".join(f"<th>seed {esc(s)}</th>" for s in seeds)
        parts.append(f'<h3>Group {g}: {len(group)} runs ({esc(ids)})</h3>'
                     f'<table class="seed-group" data-ids="{esc(ids)}"><tr><th>metric</th>'
                     f'<th>mean &plusmn; sd</th>{head}</tr>{"".join(rows)}</table>')
    return "".join(parts)


def group_comparison(groups: list[list[Run]]) -> str:
    """Each later seed group against the first, metric by metric: the difference of the means
    and how many standard errors of that difference it is (se = sqrt(sd1^2/n1 + sd2^2/n2), the
    groups independent)."""
    if len(groups) < 2:
        return ""
    rows = []
    first = groups[0]
    for g, group in enumerate(groups[1:], 2):
        keys = sorted(set.intersection(*(set(numeric_metrics(r.artifact.manifest.metrics))
                                         for r in first + group)))
        for k in keys:
            a = [float(r.artifact.manifest.metrics[k]) for r in first]
            b = [float(r.artifact.manifest.metrics[k]) for r in group]
            diff = statistics.fmean(b) - statistics.fmean(a)
            se = math.sqrt(statistics.variance(a) / len(a) + statistics.variance(b) / len(b))
            ratio = diff / se if se > 0 else None
            rows.append(f'<tr data-group="{g}" data-metric="{esc(k)}"><th>group {g} &minus; '
                        f"group 1</th><th>{esc(k)}</th>{cell(diff)}{cell(se)}{cell(ratio)}</tr>")
    if not rows:
        return ""
    return ("<h2>Groups compared</h2><p>The difference of the means against group 1, its "
            "standard error and the difference in standard errors.</p>"
            '<table class="group-comparison"><tr><th>groups</th><th>metric</th>'
            "<th>difference</th><th>se</th><th>difference / se</th></tr>" + "".join(rows)
            + "</table>")


def curve_keys(runs: list[Run]) -> list[tuple[str, str]]:
    found = {(r.get("split", "train"), k) for run in runs for r in run.history
             for k, v in r.items() if k not in NOT_CURVES and is_number(v)}
    order = {k: i for i, k in enumerate(FIRST)}
    return sorted(found, key=lambda sk: (sk[0] != "train", order.get(sk[1], len(order)), sk[1]))


def series(run: Run, split: str, key: str, x: str = "step") -> tuple[list[float], list[float]]:
    """The finite points of one curve (a NaN, e.g. a grad norm of skipped fp16 steps, is a
    gap rather than a point), against the step or (x="elapsed_s") the wall-clock time."""
    points = [(r[x], float(r[key])) for r in run.history
              if r.get("split", "train") == split and is_number(r.get(key))
              and math.isfinite(r[key]) and is_number(r.get(x))]
    return [p[0] for p in points], [p[1] for p in points]


def _lines(runs: list[Run], split: str, key: str, x: str, prefix: str) -> list[plots.Line]:
    """One line per run that has points of this curve (against `x`); a run that logged a
    point or two (shorter than a logging interval) says so in its label."""
    lines = []
    for run in runs:
        xs, ys = series(run, split, key, x)
        if xs:
            few = f" ({len(xs)} point{'s' if len(xs) > 1 else ''})" if len(xs) < 3 else ""
            lines.append(plots.Line(f"{prefix}-{split}-{key}-{run.index}", run.label + few,
                                    xs, ys))
    return lines


def curves(runs: list[Run], groups: list[list[Run]]) -> str:
    """Per kind of run (pretraining, fine-tuning, ...) its own plots: a pretraining loss near 6
    and a fine-tuning loss near 0.3 on one axis would show neither."""
    with_history = [r for r in runs if r.history]
    if not with_history:
        return ""
    parts = ["<h2>Training curves</h2>"]
    kinds = list(dict.fromkeys(run_kind(r) for r in with_history))
    for kind in kinds:
        of_kind = [r for r in with_history if run_kind(r) == kind]
        figures = []
        for split, key in curve_keys(of_kind):
            lines = _lines(of_kind, split, key, "step", "line")
            figures.append(_figure(f"curve-{kind}-{split}-{key}", f"{kind}, {split}: {key}",
                                   lines))
            # The loss and validation against wall-clock time too: runs of different speed
            # compare by what they reached in the same time, not in the same number of steps.
            if key == "loss" or split != "train":
                timed = _lines(of_kind, split, key, "elapsed_s", "time")
                if timed:
                    figures.append(_figure(f"curve-time-{kind}-{split}-{key}",
                                           f"{kind}, {split}: {key} by time", timed, "seconds"))
        parts += [f'<h3 class="run-kind">{esc(kind.capitalize())} '
                  f"({len(of_kind)} run{'s' if len(of_kind) > 1 else ''})</h3>",
                  '<div class="plots">', *figures, "</div>"]
    means = []
    for g, group in enumerate(groups, 1):
        members = [r for r in group if r.history]
        if len(members) < 2:
            continue
        for split, key in curve_keys(members):
            x, mean, sd = group_curve(members, split, key)
            if x:
                line = plots.Line(f"mean-{split}-{key}-{g}", f"group {g} mean", x, mean, sd)
                means.append(_figure(f"seed-curve-{g}-{split}-{key}",
                                     f"group {g}, {split}: {key} (mean ± sd, "
                                     f"{len(members)} seeds)", [line]))
    if means:
        parts += ['<h3>Mean &plusmn; sd over seeds</h3><div class="plots">', *means, "</div>"]
    return "".join(parts)


def group_curve(members: list[Run], split: str, key: str):
    """Mean and sample sd at the steps every run of the group logged."""
    per_run = [dict(zip(*series(r, split, key))) for r in members]
    steps = sorted(set.intersection(*(set(p) for p in per_run)))
    mean = [statistics.fmean(p[s] for p in per_run) for s in steps]
    sd = [statistics.stdev([p[s] for p in per_run]) for s in steps]
    return steps, mean, sd


def _figure(plot_id: str, title: str, lines: list[plots.Line], xlabel: str = "step") -> str:
    svg = plots.line_plot(title, xlabel, lines)
    return f'<figure class="plot" id="{esc(plot_id)}">{svg}</figure>'


def confusion(run: Run) -> str:
    matrix = run.artifact.manifest.metrics.get("confusion_matrix")
    if not isinstance(matrix, dict):
        return ""
    labels = [str(x) for x in matrix["labels"]]
    head = "".join(f"<th>{esc(x)}</th>" for x in labels)
    rows = "".join(f"<tr><th>{esc(t)}</th>" + "".join(cell(v) for v in row) + "</tr>"
                   for t, row in zip(labels, matrix["matrix"]))
    return ("<h3>Confusion matrix</h3><p>Rows: the true label; columns: the prediction.</p>"
            f'<table class="confusion"><tr><th>true \\ predicted</th>{head}</tr>{rows}</table>')


def audit(run: Run, listed: int = 20) -> str:
    """An audit artifact's findings: per task file the share of its examples found in the
    corpus, and the first overlapping examples with the n-gram found."""
    tasks = run.artifact.manifest.stats.get("tasks") if run.artifact.kind == "audit" else None
    if not isinstance(tasks, dict):
        return ""
    head = ("<tr><th>task file</th><th>examples</th><th>audited</th><th>too short</th>"
            "<th>overlapping</th><th>share of audited</th></tr>")
    rows = "".join(f'<tr data-file="{esc(path)}"><th>{esc(path)}</th>'
                   + "".join(cell(t.get(k)) for k in ("examples", "audited", "too_short",
                                                      "overlapping", "share")) + "</tr>"
                   for path, t in tasks.items())
    found = []
    path = run.artifact.path / "overlaps.jsonl"
    if path.is_file():
        with open(path, encoding="utf-8") as f:
            for line, _ in zip(f, range(listed)):
                o = json.loads(line)
                found.append(f"<tr><td>{esc(o['file'])}</td>{cell(o['row'])}"
                             f"<td>{esc(o['text'])}</td><td>{esc(o['ngram'])}</td></tr>")
    shown = ("<h3>Overlapping examples (the first " + str(len(found)) + ")</h3>"
             '<table class="overlaps"><tr><th>task file</th><th>row</th><th>text</th>'
             "<th>n-gram found in the corpus</th></tr>" + "".join(found) + "</table>"
             if found else "")
    return ('<h3>Task examples found in the corpus</h3><table class="audit">' + head + rows
            + "</table>" + shown)


def lineage_tree(inputs: list[InputRef]) -> str:
    if not inputs:
        return ""
    items = []
    for ref in inputs:
        if ref.kind in CONTENT_KINDS:
            size = f", {ref.size:,} bytes" if ref.size is not None else ""
            text = f"{ref.role}: {ref.kind} {ref.path} (sha256 {ref.id[:12]}{size})"
        else:
            text = f"{ref.role}: {ref.kind} {ref.id} at {ref.path}"
        settings = ""
        if ref.config:
            settings = ('<div class="settings">' + esc(", ".join(
                f"{k}={json.dumps(v)}" for k, v in ref.config.items())) + "</div>")
        items.append(f'<li data-role="{esc(ref.role)}" data-kind="{esc(ref.kind)}" '
                     f'data-id="{esc(ref.id)}">{esc(text)}{settings}'
                     f"{lineage_tree(ref.inputs)}</li>")
    return f'<ul class="lineage">{"".join(items)}</ul>'


def artifact_section(run: Run) -> str:
    m = run.artifact.manifest
    parts = [f'<section class="artifact" id="artifact-{run.index}" data-id="{esc(m.id)}">',
             f"<h2>{esc(m.kind)} {esc(m.id)}</h2>",
             f"<p>{esc(run.artifact.path)} &middot; made {esc(m.created_at)} by bertctl "
             f"{esc(m.bertctl_version)}</p>"]
    metrics = {k: v for k, v in m.metrics.items() if k != "confusion_matrix"}
    if metrics:
        parts += ["<h3>Metrics</h3>", key_table("metrics", flatten(metrics), run)]
    parts += [confusion(run), audit(run)]
    # Everything else behind a fold: the reader came for the metrics and the curves.
    parts += ['<details class="all"><summary>All settings, stats, lineage and environment'
              '</summary>', "<h3>Settings</h3>", key_table("settings", m.config, run)]
    if m.stats:
        parts += ["<h3>Stats</h3>", key_table("stats", flatten(m.stats), run)]
    parts += ["<h3>Lineage</h3>", lineage_tree(m.inputs) or "<p>no inputs</p>"]
    if m.environment:
        parts += ["<h3>Environment</h3>", key_table("environment", m.environment, run)]
    parts.append("</details></section>")
    return "".join(parts)


def render(runs: list[Run], title: str) -> str:
    groups = seed_groups(runs)
    body = [f"<h1>{esc(title)}</h1>", gains.table(runs, esc), choices.table(runs, esc),
            overview(runs), seed_table(groups),
            group_comparison(groups), curves(runs, groups),
            differences(runs), *(artifact_section(r) for r in runs)]
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>{esc(title)}</title><style>{CSS}</style></head><body>"
            + "\n".join(b for b in body if b) + "</body></html>\n")


def read_history(path: Path) -> list[dict[str, Any]]:
    file = path / "metrics.jsonl"
    if not file.is_file():
        return []
    return [json.loads(line) for line in file.read_text(encoding="utf-8").splitlines()
            if line.strip()]

"""A choice among evals of one dev set, by the paired nDCG@10 of their per-query files (the
report's gains: gains.py), and the page's table of the choices a recipe made.

Each candidate is an eval's first-stage run, or its reordered (`rerank`) or fused run. Rules:
- best: the candidate of the highest mean whose gain over the first (the baseline: what is
  shipped when nothing gains) exceeds `min_gain`; else the baseline;
- chain: the candidates are successive steps (rounds of mining); each is taken while it gains
  over the step taken before it, and the first that does not ends the chain.
So a step that loses on dev, or only ties, is never taken."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

from bertctl.report import gains

SCORINGS = {"first": "per_query.tsv", "rerank": "rerank_per_query.tsv",
            "fused": "rerank_fused_per_query.tsv"}
CHOICE, CHOSEN, MODEL = "choice.json", "chosen.txt", "model.txt"


@dataclass(frozen=True)
class Candidate:
    name: str
    path: Path        # the eval artifact
    scoring: str      # first, rerank or fused
    scores: dict[str, float]


def parse(text: str) -> tuple[str, Path, str]:
    """NAME=EVAL[:rerank|:fused] as (name, path, scoring); ValueError saying the form."""
    name, eq, rest = text.partition("=")
    if not eq or not name or not rest or any(c.isspace() for c in name):
        raise ValueError(f"{text!r}: a candidate is NAME=EVAL, NAME=EVAL:rerank or "
                         f"NAME=EVAL:fused")
    path, colon, scoring = rest.rpartition(":")
    if not colon or scoring not in SCORINGS:
        path, scoring = rest, "first"
    return name, Path(path), scoring


def decide(candidates: list[Candidate], rule: str, min_gain: float) -> tuple[int, list[dict]]:
    """(the index chosen, a row per candidate: its mean, the candidate it is compared with,
    the paired gain over it with its standard error, and whether it was taken)."""
    rows: list[dict] = []
    chosen, stopped = 0, False
    for i, c in enumerate(candidates):
        mean = math.fsum(c.scores.values()) / len(c.scores)
        row = {"name": c.name, "eval": str(Path(c.path).resolve()), "scoring": c.scoring, "mean": mean,
               "queries": len(c.scores), "versus": None, "gain": None, "se": None}
        if i:
            versus = 0 if rule == "best" else chosen
            d, se = gains.gain(candidates[versus].scores, c.scores) or (0.0, 0.0)
            row.update(versus=candidates[versus].name, gain=d, se=se)
            if rule == "chain":
                row["reached"] = not stopped
                if not stopped and d > min_gain:
                    chosen = i
                else:
                    stopped = True
        rows.append(row)
    if rule == "best":
        eligible = [i for i, r in enumerate(rows) if i and r["gain"] > min_gain]
        if eligible:
            chosen = max(eligible, key=lambda i: (rows[i]["mean"], -i))
    for i, r in enumerate(rows):
        r["chosen"] = i == chosen
    return chosen, rows


def table(runs, esc) -> str:
    """The page's table of the choices among `runs` (choice artifacts): each candidate's dev
    nDCG@10, its gain over what it was compared with, and which was taken."""
    found = [r for r in runs if r.artifact.kind == "choice"]
    if not found:
        return ""
    rows = []
    for run in found:
        choice = json.loads((run.artifact.path / CHOICE).read_text(encoding="utf-8"))
        for r in choice["candidates"]:
            shown = "" if r["gain"] is None else (
                f"{r['gain']:+.4f} ± {r['se']:.4f}"
                + (f" ({r['gain'] / r['se']:+.1f} se)" if r["se"] else "")
                + f" over {esc(r['versus'])}")
            mark = "chosen" if r["chosen"] else ("not reached" if r.get("reached") is False
                                                 else "")
            rows.append(f"<tr><td>{esc(run.artifact.path.name)}</td><td>{esc(r['name'])}</td>"
                        f"<td>{r['mean']:.4f}</td><td>{r['queries']}</td><td>{shown}</td>"
                        f"<td>{mark}</td></tr>")
    return ('<h2>Choices made on the dev set</h2><table id="choices"><tr><th>choice</th>'
            '<th>candidate</th><th>dev nDCG@10</th><th>queries</th>'
            '<th>gain (± se over the queries)</th><th></th></tr>' + "".join(rows) + "</table>")

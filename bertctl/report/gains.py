"""The steps of a search recipe, each one's gain: for the eval artifacts of one BEIR set given
in order (the original model, fine-tuned, on mined negatives, distilled, exported), each
one's nDCG@10 and its difference from the model before with that difference's standard error
over the queries (paired: the sample standard deviation of the per-query differences over the
square root of their number, from per_query.tsv). An eval with --rerank adds its reranked run
and the fused one as rows of their own (rerank_per_query.tsv, rerank_fused_per_query.tsv),
whose gains are over their own first stage; an eval of the same model as the eval before it
(the same search reranked another way: by a cross-encoder, then by its own token vectors),
or a reranked eval of a model whose search scored every query the same, adds only those rows,
beside the first stage's row already shown. A reordered row is labelled
by its scorer: a cross-encoder, the model's own token vectors, or its late-interaction head;
a head's reordering is also compared with the own-vector reordering of the same search, when
the report has one (what the head adds over the states it maps)."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

METRIC = "ndcg@10"


def per_query(path: Path) -> dict[str, float]:
    with open(path, encoding="utf-8", newline="") as f:
        return {row["query"]: float(row[METRIC])
                for row in csv.DictReader(f, delimiter="\t")}


def steps(runs) -> list[tuple[str, dict[str, float], int | None, int | None]]:
    """(label, per-query nDCG@10, the row its gain is over, a second row it is compared with
    or None) of every search eval among `runs`, in order: a first stage's over the first stage
    before it, a reranked run's over its own first stage (and a late head's, also over the
    same search reordered by the model's own token vectors)."""
    found: list[tuple[str, dict[str, float], int | None, int | None]] = []
    own: dict[tuple[int | None, str], int] = {}   # (first stage, kind) -> own-vector row
    last, last_model = None, None
    for run in runs:
        path = run.artifact.path
        if run.artifact.kind != "eval" or not (path / "per_query.tsv").is_file():
            continue
        inputs = run.artifact.manifest.inputs
        model = inputs[0].id if inputs else None
        scores = per_query(path / "per_query.tsv")
        # Another model reordering a search that scores every query as the one before did (a
        # late-interaction head fitted to that model, its search left as it was) reorders that
        # search again; a plain eval (an export's, say) keeps its row, level or not.
        same = last is not None and scores == found[last][1] and \
            (path / "rerank_per_query.tsv").is_file()
        if (model is None or model != last_model) and not same:
            found.append((path.name, scores, last, None))
            last = len(found) - 1
        last_model = model
        metrics = path / "metrics.json"
        given = json.loads(metrics.read_text(encoding="utf-8")) if metrics.is_file() else {}
        maxsim, head = given.get("rerank/scoring") == "maxsim", given.get("rerank/late_dim")
        how = ("reranked" if not maxsim else "reordered by its own token vectors" if not head
               else "reordered by its late-interaction head")
        for kind, label in (("rerank", how), ("rerank_fused", f"{how} and fused")):
            if (path / f"{kind}_per_query.tsv").is_file():
                if maxsim and not head:
                    own[last, kind] = len(found)
                found.append((f"{path.name}, {label}", per_query(path / f"{kind}_per_query.tsv"),
                              last, own.get((last, kind)) if head else None))
    return found


def gain(before: dict[str, float], after: dict[str, float]) -> tuple[float, float] | None:
    """(mean difference, its standard error) over the queries both scored; None when they
    scored different queries (another set) or fewer than two."""
    if set(before) != set(after) or len(after) < 2:
        return None
    d = [after[q] - before[q] for q in after]
    mean = math.fsum(d) / len(d)
    sd = math.sqrt(math.fsum((x - mean) ** 2 for x in d) / (len(d) - 1))
    return mean, sd / math.sqrt(len(d))


def table(runs, esc) -> str:
    """The page's first table (empty without two search evals)."""
    found = steps(runs)
    if len(found) < 2:
        return ""
    rows = []
    for label, scores, base, versus in found:
        mean = math.fsum(scores.values()) / len(scores)
        parts = []
        for other in (base, versus):
            g = gain(found[other][1], scores) if other is not None else None
            if g is not None:
                d, se = g
                parts.append(f"{d:+.4f} ± {se:.4f}" + (f" ({d / se:+.1f} se)" if se > 0 else "")
                             + f" over {esc(found[other][0])}")
        shown = "; ".join(parts)
        rows.append(f"<tr><td>{esc(label)}</td><td>{mean:.4f}</td><td>{len(scores)}</td>"
                    f"<td>{shown}</td></tr>")
    return ('<h2>Each step\'s gain</h2><table id="gains"><tr><th>step</th><th>nDCG@10</th>'
            '<th>queries</th><th>gain (± se over the queries)</th></tr>'
            + "".join(rows) + "</table>")

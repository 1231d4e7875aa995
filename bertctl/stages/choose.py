"""`bertctl choose NAME=EVAL... --out DIR`: one of several evals of the same dev set, by their
paired nDCG@10 (bertctl/report/choices.py), into a choice artifact: choice.json (every
candidate's dev figures and the one taken, with the model it evaluated and, for a reordered
run, the reranker and its depth), chosen.txt (the name taken) and model.txt (the model its
eval read), which a pipeline reads."""

from __future__ import annotations

import json
from pathlib import Path

from bertctl import console
from bertctl.contract import artifacts
from bertctl.errors import BertctlError
from bertctl.report import choices, gains
from bertctl.stages.settings.choose import ChooseSettings


def run(settings: ChooseSettings, target: artifacts.Target, given: list[str]):
    if len(given) < 2:
        raise BertctlError("choose: give two or more candidates (NAME=EVAL), the baseline "
                           "first")
    parsed = []
    for text in given:
        try:
            parsed.append(choices.parse(text))
        except ValueError as exc:
            raise BertctlError(f"choose: {exc}") from None
    names = [n for n, _, _ in parsed]
    twice = next((n for n in names if names.count(n) > 1), None)
    if twice is not None:
        raise BertctlError(f"choose: candidate {twice!r} is named twice")
    candidates, evals, data = [], {}, None
    for name, path, scoring in parsed:
        art = evals.get(path) or artifacts.read_artifact(path, "eval")
        evals[path] = art
        measured = sorted((i.role, i.id, i.path) for i in art.manifest.inputs
                          if i.role.startswith("data"))
        if data is None:
            data = measured
        elif [m[:2] for m in measured] != [d[:2] for d in data]:
            raise BertctlError(f"{path}: evaluated on other data than {parsed[0][1]} "
                               f"({', '.join(m[2] for m in measured) or 'none'} against "
                               f"{', '.join(d[2] for d in data)}): a choice compares evals "
                               f"of one dev set")
        scores_file = art.path / choices.SCORINGS[scoring]
        if not scores_file.is_file():
            raise BertctlError(f"{path}: no {scores_file.name} (" + (
                "an eval of a search writes per_query.tsv" if scoring == "first" else
                f"{name}=EVAL:{scoring} reads a run reordered by eval --rerank") + ")")
        scores = gains.per_query(scores_file)
        if candidates and set(scores) != set(candidates[0].scores):
            raise BertctlError(f"{scores_file}: scores other queries than "
                               f"{candidates[0].path / choices.SCORINGS[candidates[0].scoring]}")
        if len(scores) < 2:
            raise BertctlError(f"{scores_file}: {len(scores)} query: too few to compare")
        candidates.append(choices.Candidate(name, Path(path), scoring, scores))
    # One input a candidate, its place, name and run in the role: another order, name or run
    # of the same evals is another choice.
    inputs = [evals[c.path].as_input(f"candidate {i}: {c.name}:{c.scoring}")
              for i, c in enumerate(candidates)]

    def build(tmp: Path) -> dict:
        chosen, rows = choices.decide(candidates, settings.rule, settings.min_gain)
        pick = candidates[chosen]
        art = evals[pick.path]
        model = next((i for i in art.manifest.inputs if i.role == "model"), None)
        reranker = next((i for i in art.manifest.inputs if i.role == "reranker"), None)
        taken = {"name": pick.name, "eval": str(Path(pick.path).resolve()), "scoring": pick.scoring,
                 "model": model.path if model else None}
        if pick.scoring != "first" and reranker is not None:
            taken.update(reranker=reranker.path,
                         rerank_depth=art.manifest.config.get("rerank_depth"),
                         rerank_scoring=art.manifest.config.get("rerank_scoring"))
        (tmp / choices.CHOICE).write_text(json.dumps(
            {"rule": settings.rule, "metric": gains.METRIC, "dev": data[0][2] if data else None,
             "chosen": taken, "candidates": rows}, indent=2) + "\n", encoding="utf-8")
        (tmp / choices.CHOSEN).write_text(pick.name + "\n", encoding="utf-8")
        (tmp / choices.MODEL).write_text(f"{taken['model']}\n", encoding="utf-8")
        for r in rows:
            gain = "" if r["gain"] is None else f", {r['gain']:+.4f} ± {r['se']:.4f} over " \
                                                f"{r['versus']}"
            console.log(f"{r['name']}: dev nDCG@10 {r['mean']:.4f}{gain}"
                        + (" (chosen)" if r["chosen"] else ""))
        return {"chosen": pick.name, "rule": settings.rule, "candidates": names,
                "metrics": {f"dev/{r['name']}/{gains.METRIC}": r["mean"] for r in rows}}

    return artifacts.produce("choice", settings, inputs, target, build)

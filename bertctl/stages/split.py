"""`bertctl split TRAIN --out DIR`: a retrieval training table split by query into the rows
trained on and a dev set (a share of its queries held out, or `--dev`, the user's own BEIR
directory, checked), into a split artifact: what the search pipeline measures its choices on
(the rules: bertctl/tasks/retrieval/split.py)."""

from __future__ import annotations

from pathlib import Path

from bertctl import console
from bertctl.contract import artifacts
from bertctl.errors import BertctlError
from bertctl.stages.settings.split import SplitSettings
from bertctl.stages.common import models
from bertctl.tasks.retrieval import split


def run(settings: SplitSettings, target: artifacts.Target, train: Path, dev: Path | None = None,
        corpus: Path | None = None):
    if dev is not None and corpus is not None:
        raise BertctlError("--corpus adds documents to a dev set held out of TRAIN; a --dev "
                           "set searches its own corpus.jsonl")
    rows = split.read_rows(train, settings.text_column)
    held = (split.read_given(dev, rows, settings.min_dev_queries) if dev is not None else
            split.held_out(rows.queries, settings.dev_share, settings.min_dev_queries, settings.seed,
                           train))
    inputs = [models.data_input(train, "train")]
    if dev is not None:
        inputs += models.data_inputs(dev, "dev")
    if corpus is not None:
        inputs.append(models.data_input(corpus, "corpus"))

    def build(tmp: Path) -> dict:
        counts = split.write(tmp, rows, held, corpus)
        console.log(f"{counts['dev_queries']:,} dev queries ({counts['dev_source']}) over "
                    f"{counts['documents']:,} documents; {counts['train_queries']:,} queries "
                    f"({counts['train_rows']:,} rows) to train on")
        return counts

    return artifacts.produce("split", settings, inputs, target, build)

"""`bertctl build-pretrain-data`: tokenizer + corpus -> pretrain-data artifact (MLM + NSP
instances in memory-mappable shards), or slices built apart -> one combined artifact."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from bertctl import console
from bertctl.contract import artifacts
from bertctl.stages.settings.build_pretrain_data import BuildPretrainDataSettings
from bertctl.data.settings import PretrainingDataSettings
from bertctl.data import corpus
from bertctl.data.pretraining.build import build_pretraining_data
from bertctl.data.pretraining.dataset import describe, read_pretraining_info
from bertctl.data.tokenizer.files import load as load_tokenizer
from bertctl.errors import BertctlError
from bertctl.stages.common import models
from bertctl.stages.common.task_texts import Exclusion



def _tokenizer_stats(tok_art: artifacts.Artifact) -> dict:
    return {"id": tok_art.id, **tok_art.manifest.stats.get("tokenizer", {})}


def run(settings: BuildPretrainDataSettings, target: artifacts.Target, tokenizer_dir: Path | None,
        sources: list[str], combine: list[Path] | None = None,
        exclude: list[Path] | None = None) -> artifacts.Outcome:
    if combine:
        if tokenizer_dir or sources or exclude:
            raise BertctlError("--combine takes only the slice artifacts, no tokenizer, corpus "
                               "or --exclude")
        return _combine(combine, target)
    if not tokenizer_dir:
        raise BertctlError("missing the tokenizer artifact (first argument)")
    tok_art = artifacts.read_artifact(tokenizer_dir, "tokenizer")
    models.tokenizer_files(tok_art.path)   # copied into the data at the end: checked first
    tok = load_tokenizer(tok_art.file("tokenizer.json"))
    if not sources:
        raise BertctlError("no corpus files given")
    files = corpus.expand_sources(sources)
    inputs = [tok_art.as_input("tokenizer")] + [artifacts.file_input(f, "corpus") for f in files]
    if exclude:   # one file given twice, or in another order, is the same exclusion (one id)
        exclude = sorted({os.path.realpath(p): Path(p) for p in exclude}.items())
        exclude = [p for _, p in exclude]
    excluded = Exclusion.of(exclude) if exclude else None
    if excluded is not None:
        inputs += excluded.inputs
    core = PretrainingDataSettings(
        **settings.model_dump(include=set(PretrainingDataSettings.model_fields)))

    def build(tmp: Path) -> dict:
        capped = core.capped_far_under_rate()
        if capped:
            console.log(capped)
        stats = corpus.CorpusStats()
        documents = corpus.iter_documents(files, settings.text_column, stats)
        if excluded is not None:
            documents = excluded.filter(documents)
        with console.progress("building instances", unit="chunks") as bar:
            summary = build_pretraining_data(
                documents, tok, tmp, core,
                workers=settings.workers, num_shards=settings.num_shards,
                shard_index=settings.shard_index,
                progress=lambda p: bar.update(1, documents=p.documents, instances=p.instances))
        models.copy_tokenizer(tok_art.path, tmp)
        splits = {k: v["stats"] for k, v in summary["splits"].items()}
        extra = {"excluded": excluded.write(tmp)} if excluded is not None else {}
        for warning in stats.warnings():
            console.log(warning)
        return _stats(summary["settings"], splits, _tokenizer_stats(tok_art),
                      corpus=stats.as_dict(), slice=summary["slice"], **extra)

    outcome = artifacts.produce("pretrain-data", settings, inputs, target, build)
    _show_sample(outcome)
    return outcome


def _stats(settings: dict, splits: dict, tokenizer: dict, **extra) -> dict:
    return {"tokenizer": tokenizer, **extra, "max_seq_length": settings["max_seq_length"],
            "nsp": not settings["no_nsp"], "masking": settings["masking"], "splits": splits}


def _show_sample(outcome: artifacts.Outcome) -> None:
    """One decoded instance, so a person sees what the model will see."""
    if outcome.up_to_date:
        return
    for line in describe(Path(outcome.path), count=1):
        console.log(line)


def _combine(slices: list[Path], target: artifacts.Target) -> artifacts.Outcome:
    """One artifact from slices built separately with --num-shards/--shard-index."""
    arts = [artifacts.read_artifact(s, "pretrain-data") for s in slices]
    first = arts[0].manifest
    common = {k: v for k, v in first.config.items() if k not in ("shard_index", "workers")}
    tokenizer_id = first.stats.get("tokenizer", {}).get("id")
    seen = {}
    for art in arts:
        m = art.manifest
        mine = {k: v for k, v in m.config.items() if k not in ("shard_index", "workers")}
        if mine != common:
            diff = sorted(k for k in set(mine) | set(common) if mine.get(k) != common.get(k))
            raise BertctlError(f"{art.path}: built with other settings than {arts[0].path} "
                               f"({', '.join(diff)})")
        if m.stats.get("tokenizer", {}).get("id") != tokenizer_id:
            raise BertctlError(f"{art.path}: built with another tokenizer than {arts[0].path}")
        index = m.config["shard_index"]
        if index in seen:
            raise BertctlError(f"{art.path}: slice {index} given twice (also {seen[index]})")
        seen[index] = art.path
    missing = sorted(set(range(common["num_shards"])) - set(seen))
    if missing:
        raise BertctlError(f"--combine: missing slice(s) {missing} of {common['num_shards']}")
    inputs = [a.as_input("slice") for a in arts]
    settings = {**common, "combined": True}

    def build(tmp: Path) -> dict:
        for art in arts:
            for name in art.manifest.files:
                target = tmp / name
                if target.exists():  # the tokenizer files, identical in every slice
                    continue
                target.parent.mkdir(parents=True, exist_ok=True)
                source = artifacts.checked_file(art.path, name)
                try:  # shards can be large: link rather than copy where the file system allows
                    os.link(source, target)
                except OSError:
                    shutil.copyfile(source, target)
        corpus_stats = {}
        for art in arts:
            for k, v in art.manifest.stats.get("corpus", {}).items():
                corpus_stats[k] = (v if isinstance(v, list)   # (names of files: the same in each)
                                   else max(corpus_stats.get(k, 0), v))  # every slice read it all
        info = read_pretraining_info(tmp)  # checks that the slices form a whole
        return _stats(info.settings, info.stats, first.stats.get("tokenizer", {}),
                      corpus=corpus_stats, slice={"index": None, "count": common["num_shards"]})

    return artifacts.produce("pretrain-data", settings, inputs, target, build)

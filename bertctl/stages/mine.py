"""`bertctl mine MODEL TRAIN --out DIR`: hard negatives for a retrieval training file, mined
with the model itself (the selection and its guards: bertctl/tasks/retrieval/mining.py), into
a mined artifact whose pairs.jsonl `finetune --task retrieval` trains on."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
from bertctl import console, tasks
from bertctl.contract import artifacts
from bertctl.stages.settings.mine import MineSettings
from bertctl.errors import BertctlError
from bertctl.model import sentence_layout
from bertctl.data.npy import NpyAppender
from bertctl.stages.common import cross, models, runtime, vectors
from bertctl.tasks.retrieval import mining
from bertctl.search import late, ranking

def run(settings: MineSettings, target: artifacts.Target, model_dir: Path, train: Path,
        corpus: Path | None = None, teacher: Path | None = None):
    settings = runtime.applied(settings)
    if teacher is None and settings.teacher_scoring != "cross":
        raise BertctlError(f"--teacher-scoring {settings.teacher_scoring}: give --teacher MODEL, "
                           f"the model that scores (the miner itself, say)")
    source = models.open_model(model_dir, "model", exports=True)
    family = tasks.get(mining.FAMILY)
    spec = family.for_model(tasks.make_task_spec(mining.FAMILY), source.hf_config)
    family.check_head(source.hf_config, spec, None, str(source.path))
    record = sentence_layout.record_of(source.hf_config)   # a layout it cannot compute: refused
    if record is None:
        # A pretraining checkpoint scores every sentence nearly alike: the relative margin
        # then drops many rows, and its negatives taught less than in-batch ones did (a
        # ModernBERT of bertctl's, docs/benchmarks.md); the same model fine-tuned mines well.
        console.log(f"warning: {source.path} was not trained for search (it has no sentence "
                    f"embedding layout): mine with it fine-tuned on {train.name} "
                    f"(finetune --task retrieval) for better negatives")
    tok, _ = source.tokenizer()
    max_len = settings.max_seq_length or models.model_length(source)
    models.check_reads_task(source, tok, max_len)
    guards = mining.Guards(**{k: getattr(settings, k) for k in mining.Guards.__dataclass_fields__})
    pairs = mining.read_pairs(train, settings.text_column, corpus)
    mining.check_corpus(pairs, guards, str(corpus or train))
    scorer = (cross.open_reranker(teacher, family, "--teacher", "teacher",
                                  settings.teacher_scoring) if teacher is not None else None)
    settings = source.applied(settings)
    device, precision, recorded = source.runtime(settings.device, settings.precision)
    inputs = [source.ref, models.data_input(train, "train")]
    if corpus is not None:
        inputs.append(models.data_input(corpus, "corpus"))
    if scorer is not None:
        inputs.append(scorer.source.ref)

    def embed(model, texts: list[str], prompt: str, what: str) -> np.ndarray:
        return vectors.embed_texts(model, family, tok, texts, prompt, max_len,
                                   settings.batch_size, device, precision,
                                   f"{source.path} on {train}", what)

    def build(tmp: Path) -> dict:
        model = models.load_task_model(source, family.head)
        model.to(device)
        started = time.monotonic()
        distinct = list(dict.fromkeys(pairs.queries))
        q = embed(model, distinct, sentence_layout.prompt_for(record, "query"), "queries")
        where = {t: i for i, t in enumerate(distinct)}
        q = q[np.fromiter((where[t] for t in pairs.queries), np.int64, len(pairs.queries))]
        # The corpus's vectors go to a file inside the output's temporary directory, a
        # chunk at a time, and are searched memory-mapped: a corpus of any size.
        store = tmp / ".corpus-vectors.npy"
        vectors, done = None, 0
        for texts in pairs.documents():
            done += len(texts)
            part = embed(model, texts, sentence_layout.prompt_for(record, "document"),
                         f"corpus (to {done:,} of {pairs.size:,})")
            vectors = vectors or NpyAppender(store, part.shape[1], np.float32)
            vectors.append(part)
        vectors.close()
        d = np.load(store, mmap_mode="r")
        positive = (ranking.unit(q) * ranking.unit(d[pairs.positive_index])).sum(-1)
        # Deep enough that range_max candidates remain after the query's own positives.
        most = max(np.unique(pairs.queries, return_counts=True)[1]) + 1
        scores, candidates = ranking.search(q, [d], min(len(d), settings.range_max + most))
        banned = mining.excluded(pairs, candidates)
        copied = mining.copies(pairs, candidates, banned, _normalizer(tok))
        chosen, kept, counts = mining.select(scores, candidates, positive, banned, guards,
                                             copied)
        if not kept.any():
            raise BertctlError(f"{train}: no row kept {guards.negatives} negatives "
                                      f"after the guards ({counts['removed_by']}): loosen "
                                      f"them or mine from a larger --corpus")
        del d
        store.unlink()
        rows = np.flatnonzero(kept)
        docs = np.concatenate([pairs.positive_index[rows, None], chosen[rows]], axis=1)
        texts = pairs.texts_of(docs)
        teacher_scores = None
        if scorer is not None:   # the reranker's score of each kept row's candidates
            # The miner teaching by its own token vectors is the model already loaded.
            same = scorer.scoring == "maxsim" and \
                Path(scorer.source.path).resolve() == Path(source.path).resolve()
            teacher_scores = cross.score_pairs(
                scorer, [pairs.queries[r] for r in rows for _ in range(docs.shape[1])],
                [texts[j] for j in docs.reshape(-1).tolist()], settings.batch_size, device,
                precision, model=model if same else None).reshape(docs.shape)
            if scorer.scoring == "maxsim":   # as a cross-encoder's scores are read
                teacher_scores = late.teacher_scores(teacher_scores)
        mining.write(tmp / mining.OUTPUT, pairs, chosen, kept, texts, teacher_scores)
        seconds = time.monotonic() - started
        console.log(f"{counts['kept']:,} of {counts['rows']:,} rows kept {guards.negatives} "
                    f"hard negatives from {pairs.size:,} documents ({counts['dropped']:,}"
                    f" dropped; removed by each guard: {counts['removed_by']}); {seconds:.1f}s")
        return {**counts, "documents": pairs.size, "queries": len(distinct),
                "model": str(source.path), "precision": recorded, "device": str(device),
                "seconds": round(seconds, 3), "output": mining.OUTPUT,
                **({"teacher": str(scorer.source.path)} if scorer is not None else {})}

    return artifacts.produce("mined", settings, inputs, target, build)


def _normalizer(tok):
    """A text as the model reads it: its tokenizer's normaliser (an uncased BERT's lowercasing
    and accent stripping), white space collapsed."""
    norm = getattr(tok, "normalizer", None)
    return (lambda t: " ".join(norm.normalize_str(t).split())) if norm is not None else \
        (lambda t: " ".join(t.split()))

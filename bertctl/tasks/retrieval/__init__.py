"""Retrieval: a model that embeds text for search, trained by contrast and scored by search.

Training files (reader.py): (query, positive[, negatives...]) pairs, trained with in-batch
negatives (InfoNCE over scaled cosine similarities, or its symmetric form); pairs with graded
scores (CoSENT); a teacher's scores of each row's candidates (MarginMSE); or texts alone, each
its own positive under dropout (SimCSE). The losses are a registry (loss.py); the job trains
the model inside contrastive.ContrastiveLoss (`training_module`). The head (`embedding`,
head.py, the family's own, paired with any architecture's encoder) only embeds: it pools the
last hidden states into one vector per sequence; its model directory is a sentence-transformers
model too.

Evaluation: a BEIR directory is searched exactly (ranking.py) and scored with trec_eval's
nDCG@10, MRR@10, Recall@10/100 and MAP; a file of pairs the same way, each query against every
text of the file's other columns; scored pairs by the Spearman and Pearson correlations of
their cosine similarities with the scores (sentence-transformers' EmbeddingSimilarityEvaluator).
`eval` writes the run (TREC format) and each query's figures.

A search scores one vector a text by cosine; late interaction (a vector a piece, MaxSim:
late.py) reorders its candidates as a second stage (stages/common/cross.py's `maxsim`), over
the model's own states or, once fitted (`--late-dim`), its late-interaction head's map of
them: a value of the scoring, not a second family.
"""

from __future__ import annotations

import dataclasses
import itertools
from pathlib import Path
from typing import Any

import numpy as np

from bertctl.data.tokenizer.specials import PAD, special_id
from bertctl.errors import BertctlError
from bertctl.metrics import pearson, spearman
from bertctl.model import architectures, sentence_layout as sentence
from bertctl.tasks.base import Family, check_options, model_roles
from bertctl.tasks.registry import register
from bertctl.tasks.retrieval import reader
from bertctl.search import lexical, ranking
from bertctl.tasks.retrieval.loss import LOSSES, default_loss
from bertctl.tasks.retrieval.options import RetrievalOptions, options, sizes
from bertctl.tasks.retrieval.reader import RetrievalExamples
from bertctl.tasks.sequence import TaskFeatures, _bert_tokenizer


# The family's own head, for every architecture (imported when a model is built: declaring it
# imports no torch).
architectures.register_head(architectures.HeadSpec(
    "embedding", "ForEmbedding", "bertctl.tasks.retrieval.head:SentenceEmbedding"))


@dataclasses.dataclass(frozen=True)
class Search:
    """A search's result (the family's `results` of a BEIR set or a file of pairs): the
    vectors it was made from, each query's documents best first with their scores, the
    judgements, and how many documents were searched."""

    vectors: Any
    run: dict[str, list[str]]
    scores: dict[str, list[float]]
    qrels: dict[str, dict[str, int]]
    documents: int


class Retrieval(Family):
    name = "retrieval"
    title = "Retrieval"
    options_model = RetrievalOptions
    default_metric = "ndcg@10"
    default_label_column = None
    head = "embedding"
    targets = ("labels",)
    reranked_by = "reranking"

    # -- the spec

    def check_spec(self, spec) -> None:
        if len(spec.text_columns) > 64:
            raise ValueError("at most 64 text columns (a query, its positive, negatives)")
        check_options(RetrievalOptions, spec)
        for name in ("matryoshka_dims", "dims"):
            sizes(getattr(options(spec), name), name)
        loss = options(spec).loss
        if spec.label_column is not None and loss and LOSSES[loss].labels == "none":
            raise ValueError(f"loss {loss} takes (query, positive) pairs; "
                             f"scores (label column '{spec.label_column}') train CoSENT")

    def check_metric(self, spec) -> None:
        if spec.metric not in ("ndcg@10", "spearman"):
            raise ValueError(f"a retrieval task is scored by ndcg@10 (search) or spearman "
                             f"(scored pairs), not '{spec.metric}'")

    def main_metric(self, spec) -> str:
        return "spearman" if spec.label_column is not None else "ndcg@10"

    # -- data

    def recognises(self, path: Path) -> bool:
        return reader.is_beir(Path(path))

    def read(self, spec, path, label_list=None, require_labels=False) -> RetrievalExamples:
        parts = list(self.read_chunks(spec, path, rows=None))
        if len(parts) != 1:
            raise BertctlError(f"{path}: a BEIR directory is searched by bertctl eval; training "
                               f"and --dev take a table of (query, positive[, negative...]) "
                               f"pairs, each query searched among the file's texts")
        return parts[0]

    def read_chunks(self, spec, path, label_list=None, require_labels=False,
                    rows: int | None = 10_000):
        path = Path(path)
        if reader.is_beir(path):
            parts = reader.read_beir_chunks(path, rows)
        elif path.suffix == ".txt":
            parts = reader.read_text_chunks(path, rows)
        else:
            parts = reader.read_table_chunks(spec, path, rows)
        o = options(spec)
        for part in parts:
            if part.teacher is not None and o.loss and LOSSES[o.loss].labels != "teacher":
                part = dataclasses.replace(part, teacher=None)   # another loss: not read
            if o.bm25:   # BM25 reads the texts without the model's prompts
                part = dataclasses.replace(part, raw=[row[0] for row in part.texts])
            yield reader.with_prompts(part, o.query_prompt or "", o.document_prompt or "",
                                      o.text_prompt or "")

    def encode(self, examples: RetrievalExamples, tokenizer, max_seq_length: int,
               training: bool = False) -> TaskFeatures:
        """Each text its own sequence ([CLS] text [SEP], truncated); K texts an example. A
        training example of one text (SimCSE) is that text twice: dropout makes the pair."""
        if max_seq_length < 4:
            raise BertctlError(f"max_seq_length {max_seq_length} is too short (at least 4)")
        k = len(examples.texts[0]) if len(examples) else 1
        tok = _bert_tokenizer(tokenizer, max_seq_length)
        encodings = tok.encode_batch(list(itertools.chain.from_iterable(examples.texts)))
        if training and k < 2 and examples.kind == "pairs":   # tokenized once, used twice
            encodings, k = [e for e in encodings for _ in (0, 1)], 2
        seq_lens = np.fromiter((len(e.ids) for e in encodings), np.int64, len(encodings))
        offsets = np.zeros(len(encodings) + 1, np.int64)
        np.cumsum(seq_lens, out=offsets[1:])
        ids = np.fromiter(itertools.chain.from_iterable(e.ids for e in encodings), np.int32,
                          int(offsets[-1]))
        pad = special_id(tok, PAD)
        return TaskFeatures(input_ids=ids, token_type_ids=np.zeros_like(ids, dtype=np.int8),
                            offsets=offsets, lengths=seq_lens.reshape(-1, k).max(axis=1),
                            labels=(examples.teacher if examples.teacher is not None
                                    else examples.scores) if training else None,
                            num_choices=k if k > 1 else None, pad_id=pad or 0,
                            family=self.name, label_list=None)

    def check_training(self, spec, examples: RetrievalExamples, settings,
                       dev: RetrievalExamples | None = None) -> list[str]:
        """Refused: CoSENT without scores, --late-dim on other than queries' rows, a batch of
        one where its loss compares rows, a dev file of texts alone (nothing to score: found
        before training, not after it).
        Warned: a training set the loss cannot learn from (see the checks below)."""
        where, o = examples.path, options(spec)
        if dev is not None and dev.kind == "pairs" and dev.keys is None:
            raise BertctlError(f"{dev.path}: texts alone (SimCSE) score nothing: --dev takes "
                               f"a table of (query, positive) pairs or of scored pairs")
        scored = examples.kind == "scored"
        k = len(examples.texts[0]) if len(examples) else 0
        wants = LOSSES[o.loss].labels if o.loss else None
        if wants == "teacher" and examples.teacher is None:
            raise BertctlError(f"{where}: --loss {o.loss} imitates a teacher's scores of each "
                               f"row's candidates and the file has none (bertctl mine "
                               f"--teacher RERANKER writes them)")
        taught = LOSSES[o.loss or default_loss(scored, examples.teacher is not None)]
        if examples.teacher is not None and taught.probabilities and (
                (examples.teacher < 0) | (examples.teacher > 1)).any():
            bad = int(((examples.teacher < 0) | (examples.teacher > 1)).sum())
            raise BertctlError(f"{where}: {bad:,} teacher scores outside [0, 1] (from "
                               f"{float(examples.teacher.min()):g} to "
                               f"{float(examples.teacher.max()):g}): --loss {taught.name} reads "
                               f"a sigmoid's probabilities; a teacher scoring logits trains "
                               f"--loss margin_mse")
        if wants == "scores" and not scored:
            raise BertctlError(f"{where}: --loss {o.loss} ranks pairs by their graded scores "
                               f"and the file gives none: name its score column with "
                               f"--label-column")
        if o.late_dim is not None and (scored or k < 2 or o.loss is not None
                                       or o.cache_negatives):
            raise BertctlError(f"{where}: --late-dim fits the late-interaction head on "
                               f"(query, positive[, negatives]) rows by in-batch MaxSim alone, "
                               f"the encoder frozen" + (
                                   f"; drop --loss {o.loss}" if o.loss is not None else
                                   "; drop --cache-negatives (no graph to cache)"
                                   if o.cache_negatives else
                                   ": the file has " + ("scored pairs" if scored else
                                                        "texts alone")))
        if settings.batch_size < 2 and (scored or k <= 2):
            raise BertctlError("--batch-size 1: a contrastive loss compares the examples of a "
                               "batch (a query's negatives are the others' positives; CoSENT "
                               "ranks pairs against each other): use 2 or more")
        rows = examples.keys or [[t] for t, *_ in examples.texts]
        n = len(rows)
        if n < 2:
            return []
        if scored:
            if len(set(examples.scores.tolist())) == 1:
                return [f"{where}: every pair is scored {examples.scores[0]:g}: CoSENT learns "
                        f"from pairs scored differently, and there are none"]
            return []
        if k == 1:
            if len({r[0] for r in rows}) == 1:
                return [f"{where}: every text is the same: SimCSE tells a text from the "
                        f"batch's other texts, and there are none"]
            return []
        warnings = []
        if len({tuple(r) for r in rows}) == 1:
            warnings.append(f"{where}: all {n:,} rows are the same: every in-batch negative is "
                            f"a copy of the positive, and the loss cannot tell them apart")
        elif all(r[0] == r[1] for r in rows):
            warnings.append(f"{where}: every query is its own positive: the loss learns only "
                            f"to match a text with itself")
        same = sum(r[1] in r[2:] for r in rows)
        if same:
            warnings.append(f"{where}: {same:,} of {n:,} rows have a hard negative equal to "
                            f"their positive: the loss pushes the positive away from itself "
                            f"there")
        return warnings

    # -- the head

    def head_kwargs(self, spec, label_list) -> dict[str, Any]:
        o = options(spec)
        kwargs: dict[str, Any] = {}
        kwargs.update({k: v for k, v in (("pooling", o.pooling), ("normalize", o.normalize),
                                         ("dropout", o.dropout)) if v is not None})
        if o.matryoshka_dims is not None:
            kwargs["matryoshka_dims"] = list(sizes(o.matryoshka_dims, "matryoshka_dims"))
        if o.late_dim is not None:
            kwargs["late_dim"] = o.late_dim
        return kwargs

    def training_module(self, model, spec):
        """The model inside its training loss (loss.py): --loss (unset: the labels of the
        training file choose), --scale, --cache-negatives; with --late-dim, the late-interaction
        head alone (every other weight frozen)."""
        from bertctl.tasks.retrieval.contrastive import ContrastiveLoss

        o = options(spec)
        if o.late_dim is not None:
            model.requires_grad_(False)
            model.own_head.late.requires_grad_(True)
        return ContrastiveLoss(model, LOSSES[o.loss] if o.loss else None, o.scale,
                               o.cache_negatives, late_only=o.late_dim is not None)

    def check_head(self, hf_config: dict[str, Any], spec, label_list, where: str) -> None:
        """Any encoder embeds: an embedding model, a sentence-transformers model, a bare or a
        pretrained encoder (pooled as the family's default, said so); a task head's model was
        trained for its task, and is refused."""
        roles = model_roles(hf_config.get("architectures") or [])
        if roles and not roles & {"embedding", "encoder", "pretraining", "masked_lm",
                                  "electra"}:
            hint = (" (a cross-encoder reranks a search: eval FIRST_STAGE DATA --rerank "
                    "MODEL)" if roles == {"sequence_classification"} else "")
            raise BertctlError(f"{where}: is a {'/'.join(sorted(roles))} model; retrieval "
                               f"reads an embedding model or an encoder (fine-tune one with "
                               f"bertctl finetune --task retrieval){hint}")

    def for_model(self, spec, hf_config: dict[str, Any]):
        """The prompts left unset are the model's own (sentence-transformers' encode_query,
        encode_document and encode), so a search runs as the model was trained to."""
        record = sentence.record_of(hf_config)
        o = options(spec)
        given = {f"{role}_prompt": sentence.prompt_for(record, role)
                 for role in ("query", "document", "text")
                 if getattr(o, f"{role}_prompt") is None}
        given = {k: v for k, v in given.items() if v}
        if not given:
            return spec
        return spec.model_copy(update={"options": {**spec.options, **given}})

    def head_note(self, hf_config: dict[str, Any], spec, where: str) -> str | None:
        if sentence.record_of(hf_config) is not None or options(spec).pooling is not None:
            return None
        return (f"{where}: no pooling config: mean pooling of the last layer, normalised (the "
                f"retrieval family's default; --pooling and --normalize to choose)")

    # -- predictions

    def predictions(self, outputs, features, examples, spec, calibration=None) -> np.ndarray:
        """The vectors (B, D), or (B, K, D) for pairs; scored pairs: their cosine (B,)."""
        if "embeddings" not in outputs:
            raise ValueError("the model returned no 'embeddings'")
        e = outputs["embeddings"].astype(np.float32)
        if examples.kind == "scored":
            a, b = ranking.unit(e[:, 0]), ranking.unit(e[:, 1])
            return (a * b).sum(-1)
        return e

    def keep(self, predictions, examples: RetrievalExamples):
        # scoring needs the vectors and ids, not the texts
        return predictions, dataclasses.replace(examples, texts=[])

    def join(self, parts: list):
        """Scored pairs or pairs: one file; BEIR: the queries, then the corpus parts."""
        first = parts[0][1]
        if first.kind == "queries":
            raw = (first.raw, [t for _, e in parts[1:] for t in e.raw]) \
                if first.raw is not None else None
            return ([p for p, _ in parts],
                    RetrievalExamples(first.path, "beir", [], ids=first.ids, qrels=first.qrels,
                                      keys=[e.ids for _, e in parts[1:]], raw=raw))
        scores = (np.concatenate([e.scores for _, e in parts]) if first.scores is not None
                  else None)
        keys = (list(itertools.chain.from_iterable(e.keys for _, e in parts))
                if first.keys is not None else None)
        return (np.concatenate([p for p, _ in parts]),
                RetrievalExamples(first.path, first.kind, [], scores, keys=keys))

    def results(self, predictions, examples: RetrievalExamples, spec):
        """A BEIR set's or a file of pairs' `Search` (made once, read by score, the reranker's
        candidates and the run file); scored pairs' cosines and texts alone as they are."""
        if examples.kind == "scored" or (examples.kind == "pairs" and examples.keys is None):
            return predictions
        return Search(predictions, *search_run(predictions, examples, options(spec).top_k))

    def score(self, predictions, examples: RetrievalExamples, spec, label_list) -> dict:
        if examples.kind == "scored":
            if options(spec).dims:
                raise BertctlError("--dims scores a search (a BEIR set or pairs), not scored "
                                   "pairs")
            return {"spearman": spearman(predictions, examples.scores),
                    "pearson": pearson(predictions, examples.scores), "pairs": len(predictions)}
        if examples.kind == "pairs" and examples.keys is None:
            return {}   # texts alone (SimCSE): nothing to score
        found: Search = predictions
        means, _ = ranking.evaluate(found.run, found.qrels)
        return {**means, "queries": len(found.qrels), "documents": found.documents,
                **self._truncated(found.vectors, examples, spec),
                **self._lexical(found.run, found.qrels, examples, spec)}

    def _lexical(self, run, qrels, examples: RetrievalExamples, spec) -> dict:
        """BM25's metrics and the hybrid's (bertctl/search/lexical.py)."""
        if not options(spec).bm25:
            return {}
        if examples.kind != "beir" or examples.raw is None:
            raise BertctlError(f"{examples.path}: --bm25 scores a BEIR set's search")
        queries, documents = examples.raw
        doc_ids = list(itertools.chain.from_iterable(examples.keys))
        k = options(spec).top_k
        top_s, top_i = lexical.bm25(queries, documents, k)
        sparse = {}
        for q, s, i in zip(examples.ids, top_s, top_i):
            sparse[q] = [d for d, _ in ranking.rank([doc_ids[j] for j in i], s.tolist())]
        hybrid, _ = lexical.fuse([run, sparse], k)
        out = {}
        for name, r in (("bm25", sparse), ("hybrid", hybrid)):
            means, _ = ranking.evaluate(r, qrels)
            out.update({f"{name}/{m}": v for m, v in means.items()})
        return out

    def _truncated(self, predictions, examples: RetrievalExamples, spec) -> dict:
        """The search's metrics with every vector cut to each of --dims (and made unit length
        again: the search is by cosine), as dimN/METRIC."""
        out: dict[str, float] = {}
        parts = predictions if isinstance(predictions, list) else [predictions]
        width = parts[0].shape[-1]
        for d in sizes(options(spec).dims, "dims"):
            if d > width:
                raise BertctlError(f"--dims {d}: the model's vectors have {width} values")
            cut = [p[..., :d] for p in parts]
            run, _, qrels, _ = search_run(cut if isinstance(predictions, list) else cut[0],
                                          examples, options(spec).top_k)
            means, _ = ranking.evaluate(run, qrels)
            out.update({f"dim{d}/{k}": v for k, v in means.items()})
        return out

    def check_rerank(self, spec, data: Path, depth: int) -> None:
        if not reader.is_beir(Path(data)):
            raise BertctlError(f"{data}: --rerank reorders the search of a BEIR directory")
        if depth > options(spec).top_k:
            raise BertctlError(f"--rerank-depth {depth}: the search keeps {options(spec).top_k} "
                               f"documents a query (--top-k)")

    def candidates(self, predictions: Search, examples: RetrievalExamples, spec, data: Path,
                   depth: int) -> reader.Candidates:
        """A BEIR set's run, cut to `depth` for a reranker, with its texts read again from
        the directory (without the model's prompts): only the candidates' are held."""
        return reader.candidates(Path(data), predictions.run, predictions.qrels, depth)

    def write_predictions(self, directory: Path, predictions, examples, spec, label_list,
                          start: int = 0) -> list[str]:
        if examples.kind != "scored":
            return []   # the run is written once every document is in (write_results)
        name = "predictions.tsv"
        with open(Path(directory) / name, "a" if start else "w", encoding="utf-8") as f:
            if not start:
                f.write("index\tcosine\n")
            f.writelines(f"{i}\t{v:.6f}\n" for i, v in enumerate(predictions, start))
        return [name]

    def write_results(self, directory: Path, predictions, examples, spec) -> list[str]:
        if not isinstance(predictions, Search):
            return []
        run, scores, qrels = predictions.run, predictions.scores, predictions.qrels
        with open(Path(directory) / "run.trec", "w", encoding="utf-8") as f:
            for q, docs in run.items():
                f.writelines(f"{q} Q0 {d} {r} {s:.6f} bertctl\n"
                             for r, (d, s) in enumerate(zip(docs, scores[q]), 1))
        _, per_query = ranking.evaluate(run, qrels)
        ranking.write_per_query(Path(directory) / "per_query.tsv", per_query)
        return ["run.trec", "per_query.tsv"]


def search_run(predictions, examples: RetrievalExamples, k: int):
    """(run, its scores, qrels, documents) for a BEIR set (`predictions` its parts' vectors,
    queries first) or a file of pairs (each row's query against the distinct texts of the
    other columns; its own positive relevant, its negatives judged 0)."""
    if examples.kind == "beir":
        queries, blocks = predictions[0], predictions[1:]
        doc_ids = list(itertools.chain.from_iterable(examples.keys))
        query_ids, qrels = examples.ids, examples.qrels
    else:
        queries = predictions[:, 0]
        index: dict[str, int] = {}
        rows = []
        for r, keys in enumerate(examples.keys):
            for j, key in enumerate(keys[1:], 1):
                if key not in index:
                    index[key] = len(index)
                    rows.append((r, j))
        vectors = np.stack([predictions[r, j] for r, j in rows])
        blocks, doc_ids = [vectors], [f"d{i}" for i in range(len(index))]
        query_ids = [f"q{r}" for r in range(len(queries))]
        qrels = {}
        for r, keys in enumerate(examples.keys):
            judged = {f"d{index[key]}": 0 for key in keys[2:]}
            judged[f"d{index[keys[1]]}"] = 1
            qrels[query_ids[r]] = judged
    top_s, top_i = ranking.search(queries, blocks, k)
    run, scores = {}, {}
    for q, s, i in zip(query_ids, top_s, top_i):
        ranked = ranking.rank([doc_ids[j] for j in i], s.astype(np.float64).tolist())
        run[q] = [d for d, _ in ranked]
        scores[q] = [v for _, v in ranked]
    return run, scores, qrels, len(doc_ids)


register(Retrieval())

"""Pretraining data: sentence-pair instances for masked LM + next-sentence prediction.

The instance builder follows Google's `create_pretraining_data.py` (google-research/bert):
- per document, sentences are packed into a chunk until it reaches a target length
  (max_seq_length - 3, or with probability short_seq_prob a random target in [2, that]); as in
  Google's code the target is drawn once per document and pass;
- the chunk is split at a random sentence boundary into A and B; B is the real continuation, or
  (half the time, and always when the chunk is a single sentence) a span of a random other
  document starting at a random sentence, long enough to fill the target; the chunk's sentences
  not used as A are then put back and start the next instance;
- the longer of A and B loses one token at a time, from the front or the back at random, until
  the pair fits; `[CLS] A [SEP] B [SEP]`, token_type 0 for `[CLS] A [SEP]`, 1 for `B [SEP]`;
- masking per `masking` (static: drawn here, `dupe_factor` passes over the corpus
  give different packings and masks; dynamic: drawn by the loader per epoch).

Where we differ, and why:
- Streaming. Google reads the whole corpus into memory, shuffles all documents and all instances.
  We stream: documents are grouped into chunks of about `chunk_chars` characters (the boundaries
  depend only on the document stream), each chunk is built independently with random generators
  seeded from (seed, chunk index), and its instances are shuffled within the chunk. The "random
  other document" of a NotNext pair is therefore drawn from the documents of the same chunk and
  split (a bounded window, like NVIDIA's sharded BERT data preparation), not the whole corpus;
  with a single-document window it falls back to the same document as Google does when its
  10 draws all hit the current document (counted in the stats as random_next_same_document).
  The default window (256 KiB of text) holds about a hundred Wikipedia-sized documents; for
  book-length documents raise chunk_chars so a window holds many (memory per worker grows with
  it), and watch random_next_same_document. It is also the unit of parallel work, so it is kept
  small enough that the workers finish together on small corpora (with 1 MiB a 5 MB corpus gave
  5 chunks to 2 workers: one idled through the last).
  Global order does not matter: the training loop samples indices at random.
- Truncation draws its front/back choices as a binomial count per side instead of one coin per
  token (same distribution, no per-token loop). The random replacement token is drawn from the
  vocabulary minus the special tokens (Google draws from the whole vocabulary).
- no_nsp (the paper's ablation): B is always the real continuation, or there is no B when the
  chunk is a single sentence (`[CLS] A [SEP]`); no next_sentence_label is stored.
- packing "full-sentences" (RoBERTa) and "concatenated" (run_mlm.py), both with no_nsp, replace
  Google's per-document instances: continuous text fills each instance to max_seq_length - 2
  across document boundaries (`pairs.pack_full`), so a corpus of short documents
  (books with a blank line between paragraphs) no longer trains on half-empty sequences.
- validation_fraction holds out whole documents (chosen by a hash of (seed, document number)),
  whose instances go to the "validation" split and draw their random B only from other held-out
  documents of the same chunk.

Scale. `workers` processes (forked on Linux, spawned elsewhere) build chunks in parallel; results
are written in chunk order, so the output is byte-identical for any worker count. With spawn, a
script calling the builder needs the usual `if __name__ == "__main__":` guard. Beyond one machine, run the build K times with
`num_shards=K, shard_index=i` (i = 0..K-1, same corpus, settings and tokenizer): slice i builds the
chunks whose index is i modulo K (every slice still reads the whole stream to find the chunk
boundaries, but only tokenizes its own chunks) and names its files with `<i>of<K>`. Copy all
slices' files into one directory and `PretrainingDataset` reads them as one dataset (it checks that
all K slices are there and were built with the same settings and tokenizer); the combined instances
are exactly those of a single build with num_shards=1, in a different file order.

Reading what was built (the dataset over the shards, decoding) is `dataset`.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from itertools import chain
from pathlib import Path
from typing import Any

import numpy as np
from tokenizers import Tokenizer

from bertctl.data.tokenizer.specials import check_special_tokens, special_ids

from bertctl.data.tokenizer.words import word_marks
from bertctl.data.pretraining.pairs import pack_full, pack_pairs, truncation
from bertctl.data.pretraining.masking import (
    KEPT, MASKED, RANDOM, MaskingRules, apply_masking, generator_uniform_at, hashed_uniform,
    num_to_predict, ranges)
from bertctl.data.pretraining.shards import (
    FORMAT, FORMAT_VERSION, ShardWriter, slice_tag, token_dtype, write_json)
from bertctl.data.workers import OrderedWorkers
from bertctl.data.settings import PretrainingDataSettings
from bertctl.errors import BertctlError
from bertctl.hardware import usable_cpus

SPLITS = ("train", "validation")
_WHERE = "build-pretrain-data"
_BLOCK = 4096  # instances masked at once (bounds the (instances x length) work arrays)



# ---- tokenizer facts -------------------------------------------------------------------------

@dataclass(frozen=True)
class VocabInfo:
    vocab_size: int
    special_ids: dict[str, int]
    sha256: str  # of the tokenizer's JSON: slices must agree on it

    @classmethod
    def of(cls, tokenizer: Tokenizer) -> VocabInfo:
        check_special_tokens(tokenizer, "tokenizer")
        special = {role: int(i) for role, i in special_ids(tokenizer).items()}
        digest = hashlib.sha256(tokenizer.to_str().encode("utf-8")).hexdigest()
        return cls(int(tokenizer.get_vocab_size(with_added_tokens=True)), special, digest)


def masking_rules(tokenizer: Tokenizer, config: PretrainingDataSettings) -> MaskingRules:
    vocab = VocabInfo.of(tokenizer)
    specials = np.array(sorted(vocab.special_ids.values()))
    replacement = np.setdiff1d(np.arange(vocab.vocab_size), specials)
    return MaskingRules(config.masked_lm_prob, config.max_predictions_per_seq,
                        config.whole_word_mask, vocab.special_ids["[MASK]"], word_marks(tokenizer),
                        replacement)


# ---- building one chunk (runs in a worker process, or in-process) --------------------------

class _ChunkBuilder:
    """Everything a worker needs, built once per process."""

    def __init__(self, tokenizer_json: str, config: PretrainingDataSettings):
        self.tokenizer = Tokenizer.from_str(tokenizer_json)
        # Sentences are encoded whole: no truncation/padding that a tokenizer.json may carry.
        self.tokenizer.no_truncation()
        self.tokenizer.no_padding()
        self.config = config
        self.vocab = VocabInfo.of(self.tokenizer)
        self.tok_dtype = token_dtype(self.vocab.vocab_size)
        self.rules = masking_rules(self.tokenizer, config)
        self.encode = getattr(self.tokenizer, "encode_batch_fast", self.tokenizer.encode_batch)

    def build(self, chunk_index: int, first_doc: int, docs: list[Sequence[str]]) -> dict:
        cfg = self.config
        sents = [s for d in docs for s in d]
        n_per_doc = np.fromiter((len(d) for d in docs), dtype=np.int64, count=len(docs))
        encodings = self.encode(sents, add_special_tokens=False)
        ids = [e.ids for e in encodings]
        del encodings
        sent_len = np.fromiter(map(len, ids), dtype=np.int64, count=len(ids))
        # In the storage dtype from the start: every copy of the tokens below (instances
        # gathered, dupe_factor passes) moves a quarter of int64's bytes.
        flat = np.fromiter(chain.from_iterable(ids), dtype=self.tok_dtype,
                           count=int(sent_len.sum()))
        del ids
        # Google drops sentences that tokenize to nothing, then documents left empty.
        kept = sent_len > 0
        doc_of_sent = np.repeat(np.arange(len(docs)), n_per_doc)
        kept_per_doc = np.bincount(doc_of_sent[kept], minlength=len(docs))
        cum = np.concatenate([[0], np.cumsum(sent_len[kept])])
        doc_hi = np.cumsum(kept_per_doc)
        doc_lo = doc_hi - kept_per_doc
        tokens_per_doc = cum[doc_hi] - cum[doc_lo]
        nonempty = kept_per_doc > 0
        held_out = np.zeros(len(docs), dtype=bool)
        if cfg.validation_fraction > 0:
            held_out = validation_documents(cfg.seed, first_doc, len(docs), cfg.validation_fraction)
        out = {}
        for split_id, split in enumerate(SPLITS):
            sel = nonempty & (held_out if split == "validation" else ~held_out)
            stats = _zero_stats()
            stats["documents"] = int(sel.sum())
            stats["sentences"] = int(kept_per_doc[sel].sum())
            stats["source_tokens"] = int(tokens_per_doc[sel].sum())
            stats["sentences_dropped"] = int(((~kept) & np.repeat(
                (held_out if split == "validation" else ~held_out), n_per_doc)).sum())
            arrays = None
            if stats["documents"]:
                ss = np.random.SeedSequence(cfg.seed, spawn_key=(chunk_index, split_id))
                arrays = self._instances(flat, cum, doc_lo[sel], doc_hi[sel], ss, stats)
            out[split] = (arrays, stats)
        return out

    def _instances(self, flat: np.ndarray, cum: np.ndarray, lo: np.ndarray, hi: np.ndarray,
                   ss: np.random.SeedSequence, stats: dict) -> dict[str, np.ndarray]:
        cfg = self.config
        max_num = cfg.max_seq_length - 3
        g = np.random.default_rng(ss)
        if cfg.packing != "documents":
            a0a, a1a = pack_full(g, cum, lo, hi, cfg.passes, cfg.max_seq_length - 2,
                                 whole_sentences=cfg.packing == "full-sentences",
                                 short_seq_prob=cfg.short_share)
            b0a, b1a, nspa = a1a.copy(), a1a.copy(), np.zeros(len(a0a), np.uint8)
        else:
            a0a, a1a, b0a, b1a, nspa = pack_pairs(g, cum, lo, hi, cfg.passes, max_num,
                                                  cfg.short_share, cfg.no_nsp, stats)
        # Truncate the longer side, front or back at random (closed form: pairs.truncation).
        la, lb = a1a - a0a, b1a - b0a
        budget = np.where(lb > 0, max_num, cfg.max_seq_length - 2)
        ra, rb = truncation(la, lb, budget)
        fa, fb = g.binomial(ra, 0.5), g.binomial(rb, 0.5)
        a0a += fa
        a1a -= ra - fa
        b0a += fb
        b1a -= rb - fb
        stats["truncated"] += int(((ra + rb) > 0).sum())
        stats["truncated_tokens"] += int((ra + rb).sum())
        # Instances of all passes in a random order (Google shuffles all its instances).
        perm = g.permutation(len(a0a))
        a0a, a1a, b0a, b1a, nspa = a0a[perm], a1a[perm], b0a[perm], b1a[perm], nspa[perm]
        ext = np.concatenate([flat, np.array([self.vocab.special_ids["[CLS]"],
                                              self.vocab.special_ids["[SEP]"]], flat.dtype)])
        parts = [self._assemble(ext, len(flat), a0a[i:i + _BLOCK], a1a[i:i + _BLOCK],
                                b0a[i:i + _BLOCK], b1a[i:i + _BLOCK], g, stats)
                 for i in range(0, len(a0a), _BLOCK)]
        # In their storage dtypes: half the bytes to send back and no conversion in the writer.
        store = {"tokens": self.tok_dtype, "lengths": np.int32, "b_start": np.uint16,
                 "n_masked": np.int32, "mask_positions": np.uint16, "mask_labels": self.tok_dtype}
        arrays = {k: np.concatenate([q[k] for q in parts]).astype(store[k], copy=False)
                  for k in parts[0]}
        if not cfg.no_nsp:
            arrays["nsp"] = nspa
            stats["not_next"] += int(nspa.sum())
        stats["instances"] += len(nspa)
        stats["single_segment"] += int(((b1a - b0a) == 0).sum())
        return arrays

    def _assemble(self, ext: np.ndarray, n_flat: int, a0, a1, b0, b1, g: np.random.Generator,
                  stats: dict) -> dict[str, np.ndarray]:
        """`[CLS] A [SEP] B [SEP]` for a block of instances, masked if static."""
        la, lb = a1 - a0, b1 - b0
        n = len(a0)
        cls_at, sep_at = np.full(n, n_flat), np.full(n, n_flat + 1)
        starts = np.stack([cls_at, a0, sep_at, b0, sep_at], axis=1).ravel()
        lens = np.stack([np.ones(n, np.int64), la, np.ones(n, np.int64), lb,
                         (lb > 0).astype(np.int64)], axis=1).ravel()
        tokens = ext[ranges(starts, lens)]
        lengths = la + lb + 2 + (lb > 0)
        b_start = la + 2
        stats["tokens"] += int(lengths.sum())
        out = {"tokens": tokens, "lengths": lengths, "b_start": b_start}
        stats["mask_budget"] += int(num_to_predict(lengths, self.config.masked_lm_prob,
                                                   self.config.max_predictions_per_seq).sum())
        if self.config.masking == "static":
            res = apply_masking(tokens, lengths, b_start, self.rules, generator_uniform_at(g),
                                row_base=np.cumsum(lengths) - lengths)
            out["n_masked"] = np.bincount(res.rows, minlength=n)
            out["mask_positions"] = res.cols
            out["mask_labels"] = res.labels
        else:
            # The loader draws the masks; a draw of its own (on a copy, from a generator of
            # its own so the instances stay the same) measures what share they will cover.
            res = apply_masking(tokens.copy(), lengths, b_start, self.rules,
                                generator_uniform_at(np.random.default_rng([n_flat, n])),
                                row_base=np.cumsum(lengths) - lengths)
        stats["masked"] += len(res.cols)
        if self.config.masking == "static":
            stats["masked_as_mask"] += int((res.action == MASKED).sum())
            stats["masked_as_random"] += int((res.action == RANDOM).sum())
            stats["masked_as_kept"] += int((res.action == KEPT).sum())
        return out


def validation_documents(seed: int, first_doc: int, n: int, fraction: float) -> np.ndarray:
    """Which of documents first_doc..first_doc+n-1 are held out: a hash of (seed, document
    number), so the choice does not depend on chunking, workers or slices."""
    u = hashed_uniform(seed, 0x76616C6964, np.arange(first_doc, first_doc + n), np.zeros(n), 0)
    return u < fraction


_COUNTS = ("documents", "sentences", "sentences_dropped", "source_tokens", "instances", "tokens",
           "truncated", "truncated_tokens", "single_segment", "not_next",
           "random_next_same_document", "short_targets", "single_sentence_chunks", "masked",
           "mask_budget", "masked_as_mask", "masked_as_random", "masked_as_kept")


def _zero_stats() -> dict[str, int]:
    return dict.fromkeys(_COUNTS, 0)


def finish_stats(counts: dict[str, int], nsp: bool, static: bool) -> dict[str, Any]:
    """Counts plus the derived shares (rounded, so the JSON is stable)."""
    s: dict[str, Any] = {k: int(counts.get(k, 0)) for k in _COUNTS}
    n = s["instances"]
    s["mean_length"] = round(s["tokens"] / n, 4) if n else 0.0
    if nsp:
        s["is_next"] = n - s["not_next"]
        s["is_next_share"] = round(s["is_next"] / n, 6) if n else 0.0
    else:
        for k in ("not_next", "random_next_same_document"):
            s.pop(k)
    m = s["masked"]
    # Dynamic masks are the loader's: their share is measured on one draw, their split is
    # the loader's to make.
    s["masked_share"] = round(m / s["tokens"], 6) if s["tokens"] else 0.0
    if static:
        s["mask_split"] = {k: round(s[f"masked_as_{k}"] / m, 6) if m else 0.0
                           for k in ("mask", "random", "kept")}
    else:
        for k in ("masked_as_mask", "masked_as_random", "masked_as_kept"):
            s.pop(k)
    return s


# Data whose masks cover under this share of the predictions its rate and cap allow trains
# on (almost) nothing: refused, where Google's builder would write it silently.
MIN_MASK_COVERAGE = 0.25


def check_mask_coverage(stats: dict[str, Any], config: PretrainingDataSettings,
                        where: str = _WHERE) -> None:
    """Refuse masks that cover (almost) nothing. Data built before the budget was counted
    has static masks' count alone: at least one prediction per instance was due."""
    budget, masked = stats.get("mask_budget", 0), stats.get("masked", 0)
    if not budget and config.masking == "static":
        budget = stats.get("instances", 0)
    if budget and masked < MIN_MASK_COVERAGE * budget:
        how = ("whole-word masking found too few words that fit the "
               f"{config.max_predictions_per_seq} predictions per instance"
               if config.whole_word_mask else "too few positions can be masked")
        raise BertctlError(
            f"{where}: masks cover {masked / max(stats['tokens'], 1):.2%} of the tokens, "
            f"{masked / budget:.0%} of the {budget} predictions the rate "
            f"{config.masked_lm_prob} allows: {how}")


# ---- the build -------------------------------------------------------------------------------

@dataclass
class BuildProgress:
    """Passed to the `progress` callback after each chunk is written."""
    chunks: int = 0
    documents: int = 0
    instances: int = 0


def _chunked(documents: Iterable[Sequence[str]], chunk_chars: int):
    """(chunk index, number of its first document, documents): consecutive non-empty documents
    until they hold at least chunk_chars characters. Depends only on the stream."""
    buf: list[Sequence[str]] = []
    size = index = first = n_docs = 0
    for doc in documents:
        if isinstance(doc, str):
            raise TypeError("documents must be sequences of sentence strings, got a str")
        if not doc:
            continue
        buf.append(doc)
        n_docs += 1
        size += sum(map(len, doc))
        if size >= chunk_chars:
            yield index, first, buf
            index, first, buf, size = index + 1, n_docs, [], 0
    if buf:
        yield index, first, buf


@contextlib.contextmanager
def _tokenizers_single_threaded():
    """While the workers start (forked ones inherit the variable; spawned ones copy the
    environment): parallelism comes from the worker processes, so none starts a thread pool of
    its own (this also silences tokenizers' fork warning). The parent's setting comes back after."""
    saved = os.environ.get("TOKENIZERS_PARALLELISM")
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop("TOKENIZERS_PARALLELISM", None)
        else:
            os.environ["TOKENIZERS_PARALLELISM"] = saved


def default_workers() -> int:
    return usable_cpus()


def build_pretraining_data(documents: Iterable[Sequence[str]], tokenizer: Tokenizer,
                           out_dir: str | Path, config: PretrainingDataSettings | None = None, *,
                           workers: int | None = None, num_shards: int = 1, shard_index: int = 0,
                           progress: Callable[[BuildProgress], None] | None = None
                           ) -> dict[str, Any]:
    """Build pretraining instances from `documents` (each a list of sentence strings, in corpus
    order) into `out_dir`, streaming: memory is bounded by a few chunks per worker.

    Writes the shard files, a copy of the tokenizer (`tokenizer.json`) and, last, the slice
    summary `build-<i>of<K>.json`, whose content is returned: settings, vocabulary facts, and per
    split the shard names and stats. `workers` (default: all cores) does not change the output.
    Raises BertctlError when the corpus has no documents or yields no training instance.
    """
    config = config or PretrainingDataSettings()
    if num_shards < 1 or not 0 <= shard_index < num_shards:
        raise BertctlError(f"{_WHERE}: shard_index must be in [0, num_shards), got "
                           f"shard_index={shard_index} num_shards={num_shards}")
    workers = default_workers() if workers is None else workers
    if workers < 1:
        raise BertctlError(f"{_WHERE}: workers must be >= 1, got {workers}")
    vocab = VocabInfo.of(tokenizer)
    tokenizer_json = tokenizer.to_str()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tag = slice_tag(shard_index, num_shards)
    tok_dt = token_dtype(vocab.vocab_size)
    static = config.masking == "static"
    writers = {s: ShardWriter(out, s, tag, tok_dt, not config.no_nsp, static,
                              config.shard_max_tokens) for s in SPLITS}
    totals = {s: _zero_stats() for s in SPLITS}
    prog = BuildProgress()
    chunks_seen = [0, 0]  # chunks in the corpus, documents in the corpus

    def tasks():
        for index, first, docs in _chunked(documents, config.chunk_chars):
            chunks_seen[0] = index + 1
            chunks_seen[1] = first + len(docs)
            if index % num_shards == shard_index:
                yield index, first, docs

    def consume(result: dict) -> None:
        for split, (arrays, stats) in result.items():
            for k, v in stats.items():
                totals[split][k] += v
            if arrays is not None:
                writers[split].append(arrays)
        prog.chunks += 1
        prog.documents += sum(r[1]["documents"] for r in result.values())
        prog.instances += sum(r[1]["instances"] for r in result.values())
        if progress is not None:
            progress(prog)

    try:
        if workers == 1:
            builder = _ChunkBuilder(tokenizer_json, config)
            for task in tasks():
                consume(builder.build(*task))
        else:
            with _tokenizers_single_threaded():
                pool = OrderedWorkers(workers, _ChunkBuilder, (tokenizer_json, config), _WHERE)
            with pool:
                for result in pool.map(tasks(), label=lambda t: f"chunk {t[0]}"):
                    consume(result)
        shards = {s: w.close() for s, w in writers.items()}
        if chunks_seen[1] == 0:
            raise BertctlError("corpus: no documents (the input is empty or whitespace only)")
        if totals["train"]["instances"] == 0:
            raise BertctlError(_no_instances_message(totals, chunks_seen, num_shards,
                                                     shard_index, config))
        check_mask_coverage(totals["train"], config)
    except BaseException:
        for w in writers.values():
            w.close()
            for name in w.shards:
                for p in out.glob(f"{name}.*"):
                    p.unlink()
        raise

    (out / "tokenizer.json").write_text(tokenizer_json, encoding="utf-8")
    summary = {
        "format": FORMAT, "format_version": FORMAT_VERSION,
        "slice": {"index": shard_index, "count": num_shards},
        "settings": config.to_dict(),
        "vocab": {"size": vocab.vocab_size, "special_ids": vocab.special_ids,
                  "token_dtype": tok_dt.str, "tokenizer_sha256": vocab.sha256},
        "corpus": {"chunks": chunks_seen[0], "documents": chunks_seen[1]},
        "chunks_built": prog.chunks,
        "splits": {s: {"shards": shards[s],
                       "stats": finish_stats(totals[s], not config.no_nsp, static)}
                   for s in SPLITS},
    }
    write_json(out / f"build-{tag}.json", summary)
    return summary


def _no_instances_message(totals, chunks_seen, num_shards, shard_index, config) -> str:
    tr, va = totals["train"], totals["validation"]
    if num_shards > 1 and chunks_seen[0] <= shard_index:
        return (f"{_WHERE}: slice {shard_index} of {num_shards} is empty: the corpus has only "
                f"{chunks_seen[0]} chunk(s) of {config.chunk_chars} characters")
    if tr["documents"] == 0 and va["documents"] > 0:
        return (f"{_WHERE}: no training instances: all {va['documents']} document(s) went to "
                f"validation (validation_fraction={config.validation_fraction})")
    return (f"corpus: no document yields a training instance ({chunks_seen[1]} document(s), "
            "every sentence tokenizes to nothing)")

"""Feature-based use of BERT: a frozen encoder's hidden states as vectors, streamed to disk.

The input is read in chunks of rows (a plain text file line by line, a table through Arrow in
record batches), each chunk is tokenized, run through the encoder in length-sorted batches padded
to their longest sequence, pooled and appended to the output, so memory stays bounded by the
chunk whatever the input's size.

- Layers: hidden states are numbered as transformers' `output_hidden_states` (0 the embeddings
  layer's output, L the last layer); negative indices count from the end (-1 the last layer).
  Several layers are combined by concatenation, sum or mean.
- Long single texts are split into windows of `max_seq_length` overlapping by `stride` pieces;
  each piece's vector comes from the window where it has the most context, so a row's pieces are
  exactly its tokenization, `[CLS]` taken from the first window and `[SEP]` from the last. Pairs
  are truncated longest-first instead (counted).
- Pooling: `cls` (the [CLS] vector), `mean` (over the row's pieces, [CLS] and [SEP] included, as
  sentence-transformers' mean pooling over the attention mask), `tokens` (every piece), `words`
  (the mean of each word's pieces; words as the tokenizer's pre-tokenizer splits them, a word
  without pieces dropped).
- An embedding model's own vectors (`own`: its sentence head, every sentence-transformers
  module bertctl computes, bertctl.model.sentence): each text (after the prompt) truncated at
  `max_seq_length` as sentence-transformers' encode truncates it (counted), not windowed: the
  vectors are `SentenceTransformer(model).encode`'s.
- Nothing non-finite is written: the pieces and the vectors written (a sum of finite pieces can
  overflow) are checked.

- Pieces stored (`store_pieces`, an embedding model's own vectors only): beside each text's
  vector, its pieces as late interaction compares them (search/late.py: the last
  hidden states, mapped by the model's late-interaction head where it has one, each of unit
  length), from the same forward pass, so that `bertctl search` reorders its hits by them
  without embedding the documents again.

Output layout (`write`): `vectors-NNNNN.npy` shards (float32 or float16, shape (n, dim), opened
with `np.load(path, mmap_mode="r")`), and `index.parquet` with one record per input row: `row`
(0-based), `shard`, `start` and `count` (its vectors are `shard[start:start + count]`), and for
word pooling `words` (the word strings). Stored pieces: `pieces-NNNNN.npy` shards beside the
vectors' (the same numbering and dtype, shape (pieces, width)), a row's pieces
`pieces shard[piece_start:piece_start + piece_count]`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from bertctl.data.columns import column_sentences
from bertctl.data.collate import length_grouped_batches, max_context_window, pad_to_tensor
from bertctl.errors import BertctlError
from bertctl.evaluation import non_finite_rows, refuse_non_finite
from bertctl.model.features import combine_layers
from bertctl.data.npy import NpyAppender
from bertctl.data.tables import BY_NAME, read_table
from bertctl.data.tokenizer.specials import PAD, UNK, special_id, special_tokens
import pyarrow as pa
import pyarrow.parquet as pq
from tokenizers import Tokenizer

VECTORS = "vectors-{:05d}.npy"
PIECES = "pieces-{:05d}.npy"
INDEX = "index.parquet"
FP16_MAX = float(np.finfo(np.float16).max)
TABLE_SUFFIXES = (".tsv", ".csv", ".jsonl", ".json", ".parquet", ".arrow")


# --- input ---------------------------------------------------------------------------------------

@dataclass
class Chunk:
    first_row: int
    texts: list[str] | list[list[str]]   # a token file's rows are their lists of words
    pairs: list[str] | None = None
    pretokenized: bool = False
    ids: list[str] | None = None          # the table's id column, when given


def is_table(path: Path) -> bool:
    return path.is_dir() or path.suffix.lower() in TABLE_SUFFIXES


# A chunk is sorted by length into batches, so it should hold many rows; its vectors are held
# until written, so its text is bounded (100k characters: about 25k pieces, 300 MB of vectors
# at most, for every piece of four concatenated 768-wide layers in fp32).
CHUNK_ROWS, CHUNK_CHARS = 8192, 100_000


def read_chunks(path: Path, text_columns: list[str] | None, rows: int = CHUNK_ROWS,
                chars: int = CHUNK_CHARS, token_column: str | None = None,
                id_column: str | None = None) -> Iterator[Chunk]:
    """The input in chunks of at most `rows` rows and about `chars` characters: a plain text
    file one item per line (streamed), a table's one or two text columns, or (`token_column`)
    the sentences of a CoNLL-style token file, streamed, each row a sentence's words."""
    if not path.exists():
        raise BertctlError(f"{path}: file not found")
    if token_column is not None:
        yield from _token_file_chunks(path, token_column, rows, chars)
        return
    if is_table(path):
        yield from _table_chunks(path, text_columns, min(rows, 1024), id_column)
        return
    if id_column is not None:
        raise BertctlError(f"{path}: --id-column names a column of a table; a plain text "
                           f"file's rows are numbered")
    if text_columns:
        raise BertctlError(f"{path}: a plain text file has one item per line and no columns; "
                           "--text-column is for tables (.tsv, .csv, .jsonl, .parquet)")
    texts: list[str] = []
    first = size = 0
    with open(path, "rb") as f:
        for lineno, raw in enumerate(f, 1):
            try:
                texts.append(raw.decode("utf-8-sig" if lineno == 1 else "utf-8").rstrip("\r\n"))
            except UnicodeDecodeError as exc:
                raise BertctlError(f"{path}:{lineno}: not UTF-8 text ({exc.reason})") from None
            size += len(raw)
            if len(texts) == rows or size >= chars:
                yield Chunk(first, texts)
                first, texts, size = first + len(texts), [], 0
    if texts:
        yield Chunk(first, texts)


def _token_file_chunks(path: Path, token_column: str, rows: int, chars: int) -> Iterator[Chunk]:
    if is_table(path):
        raise BertctlError(f"{path}: --token-column reads CoNLL-style token files (one word per "
                           "line, a blank line between sentences), not tables")
    sentences: list[list[str]] = []
    first = size = 0
    for _, _, words, _ in column_sentences(path, token_column):
        sentences.append(words)
        size += sum(map(len, words)) + len(words)
        if len(sentences) == rows or size >= chars:
            yield Chunk(first, sentences, pretokenized=True)
            first, sentences, size = first + len(sentences), [], 0
    if sentences:
        yield Chunk(first, sentences, pretokenized=True)


def _table_chunks(path: Path, text_columns: list[str] | None, rows: int,
                  id_column: str | None = None) -> Iterator[Chunk]:
    if not text_columns or len(text_columns) > 2:
        raise BertctlError(f"{path}: give the text column of the table with --text-column "
                           "(twice for sentence pairs)")
    table = read_table(BY_NAME, path)
    missing = [c for c in [*text_columns, *([id_column] if id_column else [])]
               if c not in table.column_names]
    if missing:
        raise BertctlError(f"{path}: no column '{missing[0]}' (columns: "
                           f"{', '.join(table.column_names)})")
    first = 0
    for batch in table.select(text_columns).to_batches(max_chunksize=rows):
        cols = []
        for name, column in zip(text_columns, batch.columns):
            values = column.to_pylist()
            bad = next((i for i, v in enumerate(values) if not isinstance(v, str)), None)
            if bad is not None:
                raise BertctlError(f"{path}: row {first + bad + 1}, column '{name}': not a text "
                                   f"({values[bad]!r})")
            cols.append(values)
        ids = ([str(v) for v in table.column(id_column).slice(first, len(cols[0])).to_pylist()]
               if id_column else None)
        yield Chunk(first, cols[0], cols[1] if len(cols) > 1 else None, ids=ids)
        first += len(cols[0])


# --- the encoder ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class EmbedOptions:
    layers: tuple[int, ...]
    combine: str = "concat"
    pool: str = "mean"
    normalize: bool = False
    dtype: str = "fp32"
    max_seq_length: int = 512
    stride: int | None = None        # overlap of windows in pieces; None: half the window
    batch_size: int = 64
    # The model's own vectors (an embedding model's sentence head, as sentence-transformers
    # encodes): each text truncated at max_seq_length, the model's `embeddings` output.
    own: bool = False
    prompt: str = ""                 # put before every text (the first of a pair)
    store_text: bool = False         # each row's text (a pair's first) in the index
    store_pieces: bool = False       # (own vectors) each row's late-interaction pieces too


@dataclass
class _Encoded:
    """A chunk's rows as pieces (row_offsets into the flat arrays) and as model windows."""

    row_offsets: np.ndarray
    word_ids: np.ndarray            # per piece, -1 for special pieces
    windows: list[np.ndarray]       # input ids per window
    types: list[np.ndarray]         # token type ids per window
    src: list[np.ndarray]           # positions in the window whose vectors the row keeps
    dst: list[np.ndarray]           # their indices in the flat piece arrays
    windowed_rows: int = 0
    truncated_pairs: int = 0
    truncated_rows: int = 0


def _encode(tok, chunk: Chunk, max_len: int, stride: int | None,
            truncate: bool = False) -> tuple[_Encoded, list]:
    budget = max_len - 2
    overlap = budget // 2 if stride is None else stride
    if not 0 <= overlap < budget:
        raise BertctlError(f"--doc-stride {overlap}: windows must share fewer pieces than "
                           f"max_seq_length - 2 ({budget})")
    if chunk.pairs is not None:
        tok.enable_truncation(max_len, strategy="longest_first")
        encodings = tok.encode_batch(list(zip(chunk.texts, chunk.pairs)))
    elif chunk.pretokenized:
        tok.no_truncation()
        encodings = _encode_words(tok, chunk.texts)
    elif truncate:
        tok.enable_truncation(max_len)
        encodings = tok.encode_batch(chunk.texts)
    else:
        tok.no_truncation()
        encodings = tok.encode_batch(chunk.texts)
    lengths = np.fromiter((len(e.ids) for e in encodings), np.int64, len(encodings))
    row_offsets = np.zeros(len(encodings) + 1, np.int64)
    np.cumsum(lengths, out=row_offsets[1:])
    enc = _Encoded(row_offsets, np.full(int(row_offsets[-1]), -1, np.int64), [], [], [], [])
    for r, e in enumerate(encodings):
        ids = np.asarray(e.ids, np.int64)
        types = np.asarray(e.type_ids, np.int64)
        base = int(row_offsets[r])
        words = np.array([-1 if w is None else w for w in e.word_ids], np.int64)
        enc.word_ids[base:base + len(ids)] = words
        enc.truncated_pairs += bool(e.overflowing) and chunk.pairs is not None
        enc.truncated_rows += bool(e.overflowing) and chunk.pairs is None
        if len(ids) <= max_len:
            enc.windows.append(ids)
            enc.types.append(types)
            enc.src.append(np.arange(len(ids)))
            enc.dst.append(base + np.arange(len(ids)))
            continue
        # One long text: [CLS] content [SEP] -> windows over the content.
        enc.windowed_rows += 1
        m = len(ids) - 2
        step = budget - overlap
        starts = list(range(0, max(m - budget, 0) + step, step))
        spans = [(s, min(s + budget, m)) for s in starts if s < m]
        owner = max_context_window(spans, np.arange(m))
        for k, (a, b) in enumerate(spans):
            enc.windows.append(np.concatenate([ids[:1], ids[1 + a:1 + b], ids[-1:]]))
            enc.types.append(np.zeros(b - a + 2, np.int64))
            mine = np.flatnonzero(owner[a:b] == k)          # content pieces kept from here
            src, dst = mine + 1, base + 1 + a + mine
            if k == 0:
                src, dst = np.r_[0, src], np.r_[base, dst]
            if k == len(spans) - 1:
                src, dst = np.r_[src, b - a + 1], np.r_[dst, base + len(ids) - 1]
            enc.src.append(src)
            enc.dst.append(dst)
    return enc, encodings


def _encode_words(tok, sentences: list[list[str]]) -> list:
    """Encodings of pre-split words in which every word has at least one piece: a word the
    tokenizer turns into nothing (a control character, an odd space) becomes the unknown token,
    so that each of the file's words gets a vector, as in tagging."""
    encodings = tok.encode_batch(sentences, is_pretokenized=True)
    unk = special_tokens(tok)[UNK]
    for r, (words, e) in enumerate(zip(sentences, encodings)):
        seen = {w for w in e.word_ids if w is not None}
        if len(seen) < len(words):
            fixed = [w if i in seen else unk for i, w in enumerate(words)]
            encodings[r] = tok.encode(fixed, is_pretokenized=True)
    return encodings


def _batches(enc: _Encoded, opts: EmbedOptions, device, pad_id: int):
    """(window indices, input ids, token types, mask) of length-sorted batches, on `device`."""
    lengths = np.array([len(w) for w in enc.windows])
    for idx in length_grouped_batches(lengths, opts.batch_size, seed=None):
        input_ids = pad_to_tensor([enc.windows[i] for i in idx], pad_value=pad_id)
        types = pad_to_tensor([enc.types[i] for i in idx], pad_value=0)
        mask = (torch.arange(input_ids.shape[1])[None, :]
                < torch.from_numpy(lengths[idx])[:, None]).long()
        yield idx, input_ids.to(device), types.to(device), mask.to(device)


def _piece_vectors(model, enc: _Encoded, opts: EmbedOptions, device, pad_id: int) -> torch.Tensor:
    """(pieces, dim) float32: every piece's combined hidden state, from its best window."""
    out = None
    for idx, input_ids, types, mask in _batches(enc, opts, device, pad_id):
        states = model(input_ids, types, mask, output_hidden_states=True,
                       num_layers=max(opts.layers))["hidden_states"]
        h = combine_layers(states, opts.layers, opts.combine)
        T = h.shape[1]
        flat_src = np.concatenate([j * T + enc.src[i] for j, i in enumerate(idx)])
        flat_dst = np.concatenate([enc.dst[i] for i in idx])
        if out is None:
            out = torch.empty(int(enc.row_offsets[-1]), h.shape[-1], dtype=torch.float32)
        out[torch.from_numpy(flat_dst)] = h.reshape(-1, h.shape[-1])[
            torch.from_numpy(flat_src).to(h.device)].cpu()
    return out


def _sentence_vectors(model, enc: _Encoded, opts: EmbedOptions, device,
                      pad_id: int) -> tuple[torch.Tensor, list[torch.Tensor] | None]:
    """(rows, dim) float32: each row's vector as the model gives it (its `embeddings` output:
    pooling, Dense layers, normalisation), from its one window; and with `store_pieces` each
    row's late-interaction pieces ((n, width) float32, unit length) from the same pass."""
    out, pieces = None, [None] * len(enc.windows) if opts.store_pieces else None
    for idx, input_ids, types, mask in _batches(enc, opts, device, pad_id):
        if pieces is None:
            vectors = model(input_ids, types, mask)["embeddings"]
        else:
            vectors, rows = model.own_head.embed_with_pieces(model, input_ids, types, mask)
            for i, row in zip(idx, rows):
                pieces[i] = row.cpu()
        vectors = vectors.float().cpu()
        if out is None:
            out = torch.empty(len(enc.windows), vectors.shape[-1], dtype=torch.float32)
        out[torch.from_numpy(np.asarray(idx))] = vectors
    return out, pieces


def _segment_mean(values: torch.Tensor, segment: np.ndarray, n: int) -> torch.Tensor:
    seg = torch.from_numpy(segment)
    sums = torch.zeros(n, values.shape[1], dtype=values.dtype).index_add_(0, seg, values)
    counts = torch.bincount(seg, minlength=n).clamp_min(1).to(values.dtype)
    return sums / counts[:, None]


def _pool(pieces: torch.Tensor, enc: _Encoded, encodings, chunk: Chunk, pool: str):
    """(vectors, per-row counts, per-row word strings or None)."""
    n_rows = len(enc.row_offsets) - 1
    row_lengths = np.diff(enc.row_offsets)
    if pool == "tokens":
        return pieces, row_lengths, None
    if pool == "cls":
        return pieces[torch.from_numpy(enc.row_offsets[:-1])], np.ones(n_rows, np.int64), None
    row_of_piece = np.repeat(np.arange(n_rows), row_lengths)
    if pool == "mean":
        return _segment_mean(pieces, row_of_piece, n_rows), np.ones(n_rows, np.int64), None
    # words: consecutive pieces with one word id form a word (ids renumbered per row so a word
    # without pieces leaves no gap)
    real = enc.word_ids >= 0
    key = row_of_piece[real] * (int(enc.word_ids.max(initial=0)) + 1) + enc.word_ids[real]
    new_word = np.r_[True, key[1:] != key[:-1]]
    word_of_piece = np.cumsum(new_word) - 1
    n_words = int(word_of_piece[-1]) + 1 if word_of_piece.size else 0
    vectors = _segment_mean(pieces[torch.from_numpy(np.flatnonzero(real))], word_of_piece,
                            n_words)
    counts = np.bincount(row_of_piece[real][new_word], minlength=n_rows)
    if chunk.pretokenized:       # the file's own words, one vector each (see _encode_words)
        return vectors, counts, [list(w) for w in chunk.texts]
    words = []
    for r, e in enumerate(encodings):
        text = chunk.texts[r]
        w = enc.word_ids[enc.row_offsets[r]:enc.row_offsets[r + 1]]
        keep = w >= 0
        w, offs = w[keep], np.asarray(e.offsets, np.int64)[keep]
        firsts = np.flatnonzero(np.r_[True, w[1:] != w[:-1]]) if w.size else w
        lasts = np.r_[firsts[1:] - 1, len(w) - 1] if w.size else w
        words.append([text[int(offs[a, 0]):int(offs[b, 1])] for a, b in zip(firsts, lasts)])
    return vectors, counts, words


# --- output --------------------------------------------------------------------------------------

def _refuse_non_finite(values: torch.Tensor, counts: np.ndarray, chunk: Chunk,
                       where: str) -> None:
    """NonFiniteOutputs naming the first row of the chunk with a NaN or infinite value among
    its `counts` consecutive vectors (pieces, or what is written: a sum over finite pieces can
    still overflow): a vector of NaN would be written as if it were one."""
    bad = non_finite_rows(values)
    if bool(bad.any()):
        row_of = np.repeat(np.arange(len(counts)), counts)
        rows = np.zeros(len(counts), bool)
        rows[row_of[bad.numpy()]] = True
        refuse_non_finite(torch.from_numpy(rows),
                          np.arange(chunk.first_row, chunk.first_row + len(rows)), where, "row")


def write(model, tokenizer, chunks: Iterator[Chunk], opts: EmbedOptions, out: Path, device,
          shard_rows: int, progress: Callable[[int], None] | None = None,
          where: str = "the model", ids: bool = False) -> dict:
    """Embed every row of `chunks` into `out` (see the module doc); returns the stats."""

    tok = Tokenizer.from_str(tokenizer.to_str())   # a copy: truncation is set per chunk
    tok.no_padding()
    pad_id = special_id(tok, PAD) or 0
    dtype = np.float16 if opts.dtype == "fp16" else np.float32
    fields = [("row", pa.int64()), ("shard", pa.int32()), ("start", pa.int64()),
              ("count", pa.int32())]
    if opts.pool == "words":
        fields.append(("words", pa.list_(pa.string())))
    if ids:
        fields.append(("id", pa.string()))
    if opts.store_text:
        fields.append(("text", pa.string()))
    if opts.store_pieces:
        fields += [("piece_start", pa.int64()), ("piece_count", pa.int32())]
    schema = pa.schema(fields)
    index = pq.ParquetWriter(out / INDEX, schema)
    shard, writer, piece_writer = -1, None, None
    stats = {"rows": 0, "vectors": 0, "pieces": 0, "windowed_rows": 0, "truncated_pairs": 0,
             "truncated_rows": 0}
    dim = None
    try:
        for chunk in chunks:
            if opts.pool == "words" and chunk.pairs is not None:
                raise BertctlError("--pool words takes single texts: sentence pairs have two "
                                   "word sequences")
            texts = [t if isinstance(t, str) else " ".join(t) for t in chunk.texts]
            if opts.prompt:
                chunk = dataclasses.replace(chunk, texts=[opts.prompt + t for t in chunk.texts])
            enc, encodings = _encode(tok, chunk, opts.max_seq_length, opts.stride,
                                     truncate=opts.own)
            row_pieces = None
            if opts.own:
                vectors, row_pieces = _sentence_vectors(model, enc, opts, device, pad_id)
                counts, words = np.ones(len(vectors), np.int64), None
            else:
                pieces = _piece_vectors(model, enc, opts, device, pad_id)
                _refuse_non_finite(pieces, np.diff(enc.row_offsets), chunk, where)
                vectors, counts, words = _pool(pieces, enc, encodings, chunk, opts.pool)
            if opts.normalize and len(vectors):
                vectors = F.normalize(vectors, dim=-1)
            _refuse_non_finite(vectors, counts, chunk, where)
            if row_pieces is not None:
                piece_counts = np.fromiter((len(p) for p in row_pieces), np.int64,
                                           len(row_pieces))
                pieces = torch.cat(row_pieces)
                _refuse_non_finite(pieces, piece_counts, chunk, where)
            if dtype == np.float16 and len(vectors) and float(vectors.abs().max()) > FP16_MAX:
                raise BertctlError(f"{where}: a vector value exceeds fp16's range "
                                   f"({float(vectors.abs().max()):.4g} > {FP16_MAX:g}); write "
                                   f"them with --dtype fp32 or --normalize")
            dim = vectors.shape[1]
            if writer is None or writer.rows >= shard_rows:
                if writer is not None:
                    writer.close()
                if piece_writer is not None:
                    piece_writer.close()
                shard += 1
                writer = NpyAppender(out / VECTORS.format(shard), dim, dtype)
                if row_pieces is not None:
                    piece_writer = NpyAppender(out / PIECES.format(shard), pieces.shape[1],
                                               dtype)
            starts = writer.rows + np.r_[0, np.cumsum(counts)[:-1]]
            writer.append(vectors.numpy())
            n = len(chunk.texts)
            columns = {"row": pa.array(np.arange(chunk.first_row, chunk.first_row + n)),
                       "shard": pa.array(np.full(n, shard, np.int32)),
                       "start": pa.array(starts.astype(np.int64)),
                       "count": pa.array(counts.astype(np.int32))}
            if words is not None:
                columns["words"] = pa.array(words, type=pa.list_(pa.string()))
            if ids:
                columns["id"] = pa.array(chunk.ids, type=pa.string())
            if opts.store_text:
                columns["text"] = pa.array(texts, type=pa.string())
            if row_pieces is not None:
                columns["piece_start"] = pa.array(
                    piece_writer.rows + np.r_[0, np.cumsum(piece_counts)[:-1]])
                columns["piece_count"] = pa.array(piece_counts.astype(np.int32))
                piece_writer.append(pieces.numpy())   # unit length: within fp16's range
                stats["pieces_stored"] = stats.get("pieces_stored", 0) + len(pieces)
                stats["piece_dim"] = int(pieces.shape[1])
            index.write_table(pa.table(columns, schema=schema))
            stats["rows"] += n
            stats["vectors"] += int(counts.sum())
            stats["pieces"] += int(enc.row_offsets[-1])
            stats["windowed_rows"] += enc.windowed_rows
            stats["truncated_pairs"] += int(enc.truncated_pairs)
            stats["truncated_rows"] += int(enc.truncated_rows)
            if progress is not None:
                progress(n)
    finally:
        for opened in (writer, piece_writer):
            if opened is not None:
                opened.close()
        index.close()
    if stats["rows"] == 0:
        raise BertctlError("no rows to embed: the input is empty")
    return {**stats, "dim": dim, "shards": shard + 1, "dtype": opts.dtype}

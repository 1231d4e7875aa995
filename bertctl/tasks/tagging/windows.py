"""Words to model inputs: word pieces, first-piece labels, windows over long sentences.

- Each sentence's words are tokenized as given (`is_pretokenized`), so a word's pieces are known.
  A word that yields no piece (a control character, a lone zero-width or odd space) gets an [UNK]
  piece of its own: every word has at least one piece and no label ever shifts to a neighbour.
- A word's label sits on its first piece; its other pieces carry no loss (-100), and its
  prediction is read from that first piece.
- A sentence longer than the window (`max_seq_length` minus [CLS] and [SEP]) is split into
  overlapping windows that start and end on word boundaries, each starting `doc_stride` pieces
  (rounded up to the next word) after the previous one, as BERT's run_squad strides over long
  documents. Every word is labelled and predicted in exactly one window: the one where it has the
  most context (run_squad's rule: the larger of min(left, right) pieces + 0.01 x window length,
  the earlier window on ties). Nothing is truncated; only a single word longer than a whole
  window loses its trailing pieces (its first piece, which carries the label, is kept).
- With `document_context` (the BERT paper's CoNLL setting) a sentence that fits is centred in a
  window filled with the neighbouring sentences of its document (as far as they go, about as much
  on each side); only the sentence's own words are labelled and predicted.

`TaggingFeatures` stores the windows flat, as `bertctl.tasks.sequence.TaskFeatures` stores sequences,
with a per-token `predict_word` array that maps each labelled/predicted token to its word.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

import numpy as np
import torch

from bertctl.data.collate import max_context_window, pad_to_tensor
from bertctl.data.tokenizer.specials import CLS, PAD, SEP, UNK, special_id
from bertctl.errors import BertctlError
from bertctl.tasks.base import IMITATED
from bertctl.labels import IGNORE_INDEX
from bertctl.tasks.tagging.schemes import concat_ranges
from tokenizers import Tokenizer


@dataclass
class TaggingFeatures:
    """Windows stored flat: window w is `input_ids[offsets[w]:offsets[w + 1]]` ([CLS] pieces [SEP]).

    `predict_word[t]` is the (file-wide) index of the word whose label and prediction sit on token
    t, -1 on every other token; each word appears there exactly once over all windows.
    `word_labels` holds each word's label index (None when encoding for prediction only).
    `imitated`: training on untagged words (a distillation teacher labels them): batches mark
    the predicting tokens under `IMITATED`, the only ones the teacher's outputs are read at.
    """

    input_ids: np.ndarray          # int32, all windows concatenated
    token_type_ids: np.ndarray     # int8, same layout (all 0: one segment)
    offsets: np.ndarray            # int64, num_windows + 1
    predict_word: np.ndarray       # int64, same layout as input_ids
    window_sentence: np.ndarray    # int64 per window: the sentence it labels / predicts
    word_labels: np.ndarray | None  # int64 per word
    num_words: int
    pad_id: int
    stats: dict[str, int] = field(default_factory=dict)
    imitated: bool = False

    @property
    def lengths(self) -> np.ndarray:
        return np.diff(self.offsets)

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def batch(self, indices, epoch: int = 0) -> dict[str, torch.Tensor]:
        return make_batch(self, indices)


def _word_pieces(tok, words: list[str], offsets: np.ndarray, unk_id: int):
    """Piece ids, the word of each piece (pieces of a word consecutive, words in order), the
    first piece of each word (num_words + 1 entries) and how many words had no piece."""
    num_words = len(words)
    sentences = [words[a:b] for a, b in zip(offsets[:-1].tolist(), offsets[1:].tolist())]
    encodings = tok.encode_batch(sentences, is_pretokenized=True, add_special_tokens=False)
    per_sentence = np.fromiter((len(e.ids) for e in encodings), dtype=np.int64, count=len(encodings))
    total = int(per_sentence.sum())
    ids = np.fromiter(itertools.chain.from_iterable(e.ids for e in encodings), dtype=np.int32,
                      count=total)
    word = np.fromiter(itertools.chain.from_iterable(e.word_ids for e in encodings),
                       dtype=np.int64, count=total) + np.repeat(offsets[:-1], per_sentence)
    per_word = np.bincount(word, minlength=num_words)
    missing = np.flatnonzero(per_word == 0)
    ids = np.concatenate([ids, np.full(missing.size, unk_id, dtype=np.int32)])
    word = np.concatenate([word, missing])
    order = np.argsort(word, kind="stable")     # each [UNK] lands where its word is
    per_word[missing] = 1
    word_start = np.zeros(num_words + 1, dtype=np.int64)
    np.cumsum(per_word, out=word_start[1:])
    return ids[order], word[order], word_start, int(missing.size)


def _split(starts: np.ndarray, n: int, budget: int, stride: int) -> list[tuple[int, int]]:
    """Windows [a, b) over a sentence of n pieces whose words start at `starts` (0 first)."""
    spans = []
    a = 0
    while True:
        if n - a <= budget:
            spans.append((a, n))
            return spans
        last = starts[np.searchsorted(starts, a + budget, side="right") - 1]
        whole = last > a                       # else one word fills the window: cut its tail
        b = int(last) if whole else a + budget
        spans.append((a, b))
        later = starts[starts > a]
        if not later.size:                     # the rest is that word's tail
            return spans
        step = later[later >= a + stride]
        a = int(min(step[0] if step.size else n, b if whole else later[0]))


def _document_bounds(doc_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per sentence, the first and last sentence of its document (documents are contiguous)."""
    n = len(doc_ids)
    idx = np.arange(n)
    new = np.ones(n, dtype=bool)
    new[1:] = doc_ids[1:] != doc_ids[:-1]
    first = np.maximum.accumulate(np.where(new, idx, 0))
    last_flag = np.ones(n, dtype=bool)
    last_flag[:-1] = new[1:]
    last = np.minimum.accumulate(np.where(last_flag, idx, n - 1)[::-1])[::-1]
    return first, last


def encode_tagged(examples, tokenizer, max_seq_length: int, doc_stride: int,
                  document_context: bool = False, word_labels: np.ndarray | None = None
                  ) -> TaggingFeatures:
    """Windows over the sentences of `examples` (a `TaggedExamples`: words, offsets, doc_ids),
    tokenized with a `tokenizers.Tokenizer` (bertctl's tokenizer artifact). `word_labels` (int,
    one per word) are the label indices to train on."""

    budget = max_seq_length - 2
    if budget < 1:
        raise BertctlError(f"max_seq_length {max_seq_length} is too short (at least 3)")
    if not 1 <= doc_stride <= budget:
        raise BertctlError(f"doc_stride {doc_stride} must be between 1 and max_seq_length - 2 "
                           f"({budget})")
    tok = Tokenizer.from_str(tokenizer.to_str())   # a copy: the caller's settings stay
    tok.no_truncation()
    tok.no_padding()
    special = {t: special_id(tok, t) for t in (CLS, SEP, UNK, PAD)}
    offsets = np.asarray(examples.offsets, dtype=np.int64)
    num_words, num_sentences = int(offsets[-1]), len(offsets) - 1
    ids, piece_word, word_start, unk_words = _word_pieces(tok, examples.words, offsets, special[UNK])
    sp = word_start[offsets]                          # first piece of each sentence (+ total)
    n = np.diff(sp)
    fits = n <= budget

    # One window per sentence that fits, widened by its document's neighbours if asked.
    fit = np.flatnonzero(fits)
    a, b = sp[fit].copy(), sp[fit + 1].copy()
    if document_context and fit.size:
        first, last = _document_bounds(np.asarray(examples.doc_ids))
        room = budget - (b - a)
        left_avail, right_avail = a - sp[first[fit]], sp[last[fit] + 1] - b
        left = np.minimum(left_avail, room // 2)
        right = np.minimum(right_avail, room - left)
        left = np.minimum(left_avail, room - right)
        a, b = a - left, b + right
    win_s, win_a, win_b, win_k = [fit], [a], [b], [np.zeros(fit.size, dtype=np.int64)]
    local_window = np.zeros(num_words, dtype=np.int64)   # a word's window, counted in its sentence
    cut_words = 0
    for s in np.flatnonzero(~fits):
        w0, w1 = offsets[s], offsets[s + 1]
        starts = word_start[w0:w1] - sp[s]
        spans = _split(starts, int(n[s]), budget, doc_stride)
        local_window[w0:w1] = max_context_window(spans, starts)
        cut_words += int(np.sum(np.diff(word_start[w0:w1 + 1]) > budget))
        win_s.append(np.full(len(spans), s))
        win_a.append(sp[s] + np.array([x for x, _ in spans]))
        win_b.append(sp[s] + np.array([y for _, y in spans]))
        win_k.append(np.arange(len(spans)))
    win_s, win_a, win_b, win_k = (np.concatenate(x).astype(np.int64)
                                  for x in (win_s, win_a, win_b, win_k))
    order = np.lexsort((win_k, win_s))
    win_s, win_a, win_b = win_s[order], win_a[order], win_b[order]
    first_window = np.searchsorted(win_s, np.arange(num_sentences))
    word_sentence = np.repeat(np.arange(num_sentences), np.diff(offsets))
    word_window = first_window[word_sentence] + local_window

    # Flat token layout: [CLS] pieces [SEP] per window.
    lengths = win_b - win_a + 2
    woff = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=woff[1:])
    body = concat_ranges(woff[:-1] + 1, woff[1:] - 1)
    pieces = concat_ranges(win_a, win_b)
    input_ids = np.empty(int(woff[-1]), dtype=np.int32)
    input_ids[woff[:-1]] = special[CLS]
    input_ids[woff[1:] - 1] = special[SEP]
    input_ids[body] = ids[pieces]
    token_window = np.repeat(np.arange(len(lengths)), win_b - win_a)
    words = piece_word[pieces]
    own = (word_start[words] == pieces) & (word_window[words] == token_window)
    predict_word = np.full(len(input_ids), -1, dtype=np.int64)
    predict_word[body[own]] = words[own]
    if not np.array_equal(np.bincount(predict_word[predict_word >= 0], minlength=num_words),
                          np.ones(num_words, dtype=np.int64)):
        raise RuntimeError("window layout: a word is not predicted exactly once")  # a bug here
    if word_labels is not None:
        word_labels = np.asarray(word_labels, dtype=np.int64)
        if word_labels.shape != (num_words,):
            raise ValueError(f"{word_labels.size} labels for {num_words} words")
    stats = {"sentences": num_sentences, "words": num_words, "windows": len(lengths),
             "windowed_sentences": int(np.sum(~fits)), "unk_words": unk_words,
             "cut_words": cut_words}
    return TaggingFeatures(input_ids=input_ids, token_type_ids=np.zeros(len(input_ids), np.int8),
                           offsets=woff, predict_word=predict_word, window_sentence=win_s,
                           word_labels=word_labels, num_words=num_words,
                           pad_id=special[PAD] or 0, stats=stats)


def _rows(array: np.ndarray, features: TaggingFeatures, idx: np.ndarray) -> list[np.ndarray]:
    return [array[s:e] for s, e in zip(features.offsets[idx], features.offsets[idx + 1])]


def word_index(features: TaggingFeatures, indices, width: int | None = None) -> np.ndarray:
    """(B, width) `predict_word` of windows `indices`, padded with -1."""
    idx = np.asarray(indices, dtype=np.int64).reshape(-1)
    return pad_to_tensor(_rows(features.predict_word, features, idx), pad_value=-1,
                         length=width).numpy()


def make_batch(features: TaggingFeatures, indices) -> dict[str, torch.Tensor]:
    """Model inputs for windows `indices`, padded to the batch's longest: `input_ids`,
    `token_type_ids`, `attention_mask` ((B, T) long) and, with word labels, `labels` ((B, T),
    the word's label on its predicting token, IGNORE_INDEX elsewhere and on padding)."""
    idx = np.asarray(indices, dtype=np.int64).reshape(-1)
    input_ids = pad_to_tensor(_rows(features.input_ids, features, idx), pad_value=features.pad_id)
    token_type_ids = pad_to_tensor(_rows(features.token_type_ids, features, idx), pad_value=0)
    width = input_ids.shape[1]
    lengths = features.offsets[idx + 1] - features.offsets[idx]
    attention_mask = torch.from_numpy((np.arange(width)[None, :] < lengths[:, None]).astype(np.int64))
    batch = {"input_ids": input_ids, "token_type_ids": token_type_ids,
             "attention_mask": attention_mask}
    if features.word_labels is not None:
        words = word_index(features, idx, width)
        labels = np.where(words >= 0, features.word_labels[np.maximum(words, 0)], IGNORE_INDEX)
        batch["labels"] = torch.from_numpy(labels.astype(np.int64))
    elif features.imitated:
        batch[IMITATED] = torch.from_numpy((word_index(features, idx, width) >= 0)
                                           .astype(np.int64))
    return batch
